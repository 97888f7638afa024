"""Run every narrative page's code cells, without building the book.

Each MyST Markdown notebook (``chapters/*/*.md``, plus the top-level notation page) is parsed
for its ``{code-cell}`` blocks, which are executed in order in one fresh namespace with
matplotlib's non-interactive Agg backend. A page that raises fails here in seconds, long
before a full ``jupyter-book build`` would report it. Chapter pages carry their chapter's
marker (``pytest -m ch03``) when that marker is registered in pyproject.toml.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
CELL_OPTIONS = re.compile(r"\A(?:---\n.*?\n---\n|(?::[\w-]+:[^\n]*\n)+)", re.S)


def registered_markers() -> set[str]:
    """Marker names declared in pyproject.toml (``--strict-markers`` rejects any other)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = config.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("markers", [])
    return {line.split(":", 1)[0].strip() for line in declared}


def code_cells(page: Path) -> list[str]:
    """The source of each ``{code-cell}`` block of a MyST notebook, options stripped."""
    text = page.read_text(encoding="utf-8")
    return [CELL_OPTIONS.sub("", body, count=1) for body in CODE_CELL.findall(text)]


def is_myst_notebook(page: Path) -> bool:
    head = page.read_text(encoding="utf-8")[:400]
    return head.startswith("---\n") and "jupytext:" in head and "kernelspec:" in head


def narrative_pages() -> list:
    markers = registered_markers()
    pages = [p for p in sorted(ROOT.glob("*.md")) if p.name != "README.md"]
    pages += sorted(ROOT.glob("chapters/*/*.md"))
    params = []
    for page in pages:
        if not is_myst_notebook(page):
            continue
        marks = []
        match = re.match(r"(\d\d)_", page.parent.name)
        if page.parent.parent.name == "chapters" and match:
            marker = f"ch{match.group(1)}"
            if marker in markers:
                marks.append(getattr(pytest.mark, marker))
        params.append(pytest.param(page, marks=marks, id=str(page.relative_to(ROOT))))
    return params


def test_cell_parser_finds_options_and_bodies(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "---\njupytext: {}\nkernelspec: {}\n---\n\n# T\n\n"
        "```{code-cell} ipython3\n:tags: [hide-input]\n\nx = 1\n```\n\n"
        "```python\nnot = a cell\n```\n\n"
        "```{code-cell} ipython3\n---\ntags: [hide-input]\n---\ny = x + 1\n```\n",
        encoding="utf-8",
    )
    assert [c.strip() for c in code_cells(page)] == ["x = 1", "y = x + 1"]


@pytest.mark.parametrize("page", narrative_pages())
def test_page_code_cells_run(page: Path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cells = code_cells(page)
    assert cells, f"{page.name} is a MyST notebook without code cells"
    first_heading = re.search(r"^#\s+\S", page.read_text(encoding="utf-8"), re.M)
    assert first_heading, f"{page.name} has no '# Title' heading"

    monkeypatch.chdir(page.parent)  # jupyter-book runs each page in its own folder
    namespace: dict = {"__name__": "__page__"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            for index, source in enumerate(cells):
                code = compile(source, f"{page.name}[cell {index}]", "exec")
                exec(code, namespace)  # noqa: S102 - the page's own code, as the build runs it
    finally:
        plt.close("all")
