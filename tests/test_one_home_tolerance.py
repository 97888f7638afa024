"""One home for "within tolerance": ``attention_learner/tolerance.py``.

Every judge, hint and bug model of the learner package and of the grader's exercises decides
that a number is close to another with ``tolerance.close_entries`` (or ``all_close`` and
``matches``, built on it). Anything else that compares (``np.allclose``, ``np.isclose``,
``torch.allclose``, ``math.isclose``, ``torch.testing.assert_close``, or the formula
``atol + rtol * |x|`` written out) is a second definition, which can disagree with the grade:
this test names it by file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from attention_learner import tolerance
from attention_learner.checks import close_message

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "learner" / "attention_learner" / "tolerance.py"
TREES = (ROOT / "learner" / "attention_learner", ROOT / "grader" / "exercises")
#: chapter 8's hints still compare on their own; their owner moves them to the case tolerance
NOT_YET = (ROOT / "learner" / "attention_learner" / "cases" / "ch08",)
COMPARATORS = {"allclose", "isclose", "assert_close"}


def _names(node: ast.AST) -> set[str]:
    """Every variable and attribute name inside ``node``."""
    found = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def second_definitions(source: str) -> list[int]:
    """Line numbers of ``source`` that compare with a tolerance by themselves: a call of a
    library comparator, or a sum of an ``atol`` and a product holding an ``rtol``."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in COMPARATORS:
                lines.append(node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            sides = (node.left, node.right)
            atol = any(any("atol" in n for n in _names(s)) for s in sides)
            scaled = any(
                isinstance(s, ast.BinOp)
                and isinstance(s.op, ast.Mult)
                and any("rtol" in n for n in _names(s))
                for s in sides
            )
            if atol and scaled:
                lines.append(node.lineno)
    return sorted(lines)


def _sources():
    for tree in TREES:
        for path in sorted(tree.rglob("*.py")):
            if path != HOME and not any(path.is_relative_to(p) for p in NOT_YET):
                yield path


def test_only_tolerance_compares_with_a_tolerance():
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in _sources()
        for line in second_definitions(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "a second definition of the tolerance comparison:\n" + "\n".join(found)
    assert second_definitions(HOME.read_text(encoding="utf-8"))  # the scan still finds the home


def test_the_scan_finds_the_old_copies():
    copies = [
        "ok = np.allclose(a, b, atol=1e-6)",
        "ok = torch.allclose(a, b)",
        "ok = math.isclose(a, 1.0)",
        "ok = np.abs(g - e) <= atol + rtol * np.abs(e)",
        "limit = self.atol + self.rtol * m",
        "torch.testing.assert_close(a, b)",
    ]
    assert all(second_definitions(line) for line in copies)
    assert not any(
        second_definitions(line) for line in ["x = self.atol * factor", "y = atol + 1", '"allclose"']
    )


@pytest.mark.parametrize(
    ("got", "expected", "atol", "rtol", "close"),
    [
        ([1.0 + 1e-6], [1.0], 1e-6, 0.0, [True]),  # on the boundary: <=
        ([1.0 + 3e-6], [1.0], 1e-6, 1e-6, [False]),
        ([101.0], [100.0], 0.0, 0.01, [True]),  # relative to the expected side
        ([100.0], [101.0], 0.0, 0.0099, [False]),
        (
            [np.nan, np.inf, -np.inf, np.inf],
            [np.nan, np.inf, np.inf, 1.0],
            1e-6,
            1e-5,
            [True, True, False, False],
        ),
        ([1.0], [np.inf], 0.0, 0.0, [False]),  # rtol * inf is no licence
        ([1.0, 1.0], [1.0, 1.0 + 5e-3], np.array([0.0, 1e-2]), 0.0, [True, True]),  # one atol per entry
    ],
)
def test_close_entries(got, expected, atol, rtol, close):
    assert tolerance.close_entries(np.array(got), np.array(expected), atol, rtol).tolist() == close
    # the same decision as NumPy's, whose semantics these are
    assert (
        tolerance.close_entries(np.array(got), np.array(expected), atol, rtol).tolist()
        == np.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=True).tolist()
    )


def test_matches_needs_one_shape():
    assert tolerance.matches(np.zeros(3), np.zeros(3), 0.0, 0.0)
    assert not tolerance.matches(np.zeros(3), np.zeros((3, 1)), 1.0, 1.0)
    assert not tolerance.matches(None, np.zeros(3), 1.0, 1.0)


def test_close_message_decides_at_the_tolerance_it_is_given():
    """``check_close`` used to judge at rtol 1e-5 whatever it was called with."""
    got, expected = np.array([1000.001]), np.array([1000.0])  # 1e-6 relative
    assert close_message(got, expected, "x", atol=0.0, rtol=1e-5) == ""
    assert close_message(got, expected, "x", atol=0.0, rtol=1e-7) != ""
