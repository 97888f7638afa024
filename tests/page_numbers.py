"""The numbers a page states in words, as a reader reads them (used by test_page_numbers.py).

``narrative(page)`` is the prose of an executed page: its Markdown cells and, from the code
cells' metadata, every figure caption and alt text, with what is not prose taken out first:
fenced code, inline code, link targets, the directive lines of ``:::`` blocks, and the roles
(``{glue:text}`` values come from the computation; ``{numref}`` and friends are numbered by
Sphinx). Math stays in, without the digits of its subscripts and exponents (``h_3``,
``x^2``, ``10^{-9}``), which name things rather than state measurements.

``stated_numbers(text)`` finds every number left in it (``20 000``, ``0.75``, ``1,024``)
with its position, so that a test can ask, for each one, whether it is allowed.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

from tests.test_pages import read_page

FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.M | re.S)
DIRECTIVE_LINE = re.compile(r"^\s*(:{3,}\s*\{[^}]*\}.*|:{3,}\s*|:[a-z-]+:.*)$", re.M)
ROLE = re.compile(r"\{[a-z][a-z0-9:-]*\}`[^`]*`")  # {glue:text}`key:.2f`, {numref}`fig-x`, ...
INLINE_CODE = re.compile(r"(`+)(?!`).+?(?<!`)\1", re.S)
LINK_TARGET = re.compile(r"\]\(([^)]*)\)")
HTML_COMMENT = re.compile(r"<!--.*?-->", re.S)
HEADING_LABEL = re.compile(r"^\(\S+\)=\s*$", re.M)  # (my-label)=
LIST_MARKER = re.compile(r"^(\s*)\d+\.(?=\s)", re.M)  # "1. " of an ordered list
MATH = re.compile(r"\$\$.+?\$\$|\$[^$]+?\$", re.S)
SUB_SUPER = re.compile(r"[_^](\\[A-Za-z]+\s*\{[^{}]*\}|\{[^{}]*(\{[^{}]*\}[^{}]*)*\}|\\?[A-Za-z]+|\d)")
# a number as written in prose: 20 000 (thin or plain space between groups of three), 1,024, 0.75,
# 4e-6; not a digit inside a name (float64, q0, 2i, 10t)
NUMBER = re.compile(r"(?<![\w.])\d+(?:(?:\\,|,|\u202f| )\d{3}(?!\d))*(?:\.\d+)?(?:e[+-]?\d+)?(?![A-Za-z_])")


@dataclass(frozen=True)
class Stated:
    """A number found in the prose: its text, its value as written, where it is."""

    text: str
    value: float
    start: int
    end: int


def _without_math_indices(math: str) -> str:
    """Math with the digits of subscripts and exponents removed (h_3 -> h, 10^{-9} -> 10)."""
    return SUB_SUPER.sub("", math)


def clean(markdown: str) -> str:
    """What a reader reads as text in a piece of MyST Markdown (see the module docstring)."""
    text = FENCE.sub(" ", markdown)
    text = HTML_COMMENT.sub(" ", text)
    text = HEADING_LABEL.sub(" ", text)
    text = DIRECTIVE_LINE.sub(" ", text)
    text = ROLE.sub(" ", text)
    text = INLINE_CODE.sub(" ", text)
    text = LINK_TARGET.sub("]", text)
    text = LIST_MARKER.sub(r"\1", text)
    text = MATH.sub(lambda m: _without_math_indices(m.group(0)), text)
    return re.sub(r"\s+", " ", text).strip()


def narrative(page: Path) -> str:
    """The prose of ``page``: Markdown cells, then every caption and alt text, cleaned."""
    parts = []
    for cell in read_page(page).cells:
        if cell.cell_type == "markdown":
            parts.append(cell.source)
        elif cell.cell_type == "code":
            mystnb = cell.metadata.get("mystnb") or {}
            parts.append(str((mystnb.get("figure") or {}).get("caption", "")))
            parts.append(str((mystnb.get("image") or {}).get("alt", "")))
    return clean("\n\n".join(parts))


def stated_numbers(text: str) -> list[Stated]:
    found = []
    for match in NUMBER.finditer(text):
        digits = re.sub(r"\\,|,|\u202f| ", "", match.group(0))
        found.append(Stated(match.group(0), float(digits), match.start(), match.end()))
    return found


def code_literals(page: Path) -> set[float]:
    """Every number written as a literal in the page's code cells (``20_000`` is 20000)."""
    values: set[float] = set()
    for cell in read_page(page).cells:
        if cell.cell_type != "code":
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
                if not isinstance(node.value, bool):
                    values.add(float(node.value))
    return values
