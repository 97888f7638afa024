"""Run every narrative page's code cells, without building the book.

Each MyST Markdown notebook (``chapters/*/*.md``, plus the top-level pages) is read into a
notebook by myst-nb's own reader, the one the book build uses, with the book's Markdown
settings from ``_config.yml``. Its code cells are executed in order in one fresh namespace
with matplotlib's non-interactive Agg backend, honouring the execution tags the build's
executor honours (``skip-execution``, ``raises-exception``). A page that raises fails here
in seconds, long before a full ``jupyter-book build`` would report it. Chapter pages carry
their chapter's marker (``pytest -m ch03``) when that marker is registered in pyproject.toml.

Before running anything, each page's figure cells are read for the one mistake that hides a
figure without an error: a cell that draws must end by showing it (``plt.show()`` for pyplot,
the figure itself as the cell's value for a ``book_figures`` helper; the rule is
``_ext/figure_cells.py``, which the build and ``tests/test_book.py`` apply to the executed
pages). One test runs a small notebook in a real Jupyter kernel to prove that rule.
Needs the ``book`` extra (myst-nb), like the build.
"""

from __future__ import annotations

import re
import sys
import tomllib
import warnings
from functools import cache
from pathlib import Path

import nbformat
import pytest
import yaml
from myst_nb.core.read import is_myst_markdown_notebook, read_myst_markdown_notebook
from myst_parser.config.main import MdParserConfig

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "_ext"))  # the book's Sphinx extensions and their rules

from figure_cells import figure_problems, hidden_figures  # noqa: E402 - needs _ext on the path

# Tags that change how nbclient (myst-nb's executor) runs a cell.
SKIP_TAG = "skip-execution"  # not executed at all
RAISES_TAG = "raises-exception"  # an error is the cell's expected output


def registered_markers() -> set[str]:
    """Marker names declared in pyproject.toml (``--strict-markers`` rejects any other)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared = config.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("markers", [])
    return {line.split(":", 1)[0].strip() for line in declared}


@cache
def book_markdown_config() -> MdParserConfig:
    """The MyST parser settings of the book build: ``_config.yml``'s ``myst_*`` options.

    jupyter-book passes ``parse: myst_enable_extensions`` (and any ``myst_*`` key under
    ``sphinx: config``) to myst-parser; with ``colon_fence`` a ``{code-cell}`` inside a
    ``:::`` block is not a cell, so the reader must see the same extensions as the build.
    """
    config = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))
    options = dict(config.get("parse") or {})
    options.update((config.get("sphinx") or {}).get("config") or {})
    myst = {key.removeprefix("myst_"): value for key, value in options.items() if key.startswith("myst_")}
    return MdParserConfig(**myst)


def is_myst_notebook(page: Path) -> bool:
    """Whether the build treats ``page`` as a notebook (myst-nb's top-matter test)."""
    return is_myst_markdown_notebook(page.read_text(encoding="utf-8"))


def read_page(page: Path) -> nbformat.NotebookNode:
    """``page`` as the notebook the build executes: cells, sources and cell metadata."""
    text = page.read_text(encoding="utf-8")
    return read_myst_markdown_notebook(text, config=book_markdown_config(), path=page)


def code_cells(page: Path) -> list[nbformat.NotebookNode]:
    """The code cells of a MyST notebook, in order; options (tags...) are their metadata."""
    return [cell for cell in read_page(page).cells if cell.cell_type == "code"]


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
        "---\njupytext:\n  text_representation:\n    format_name: myst\n"
        "kernelspec:\n  name: python3\n---\n\n# T\n\n"
        "```{code-cell} ipython3\n:tags: [hide-input]\n\nx = 1\n```\n\n"
        "```python\nnot = a cell\n```\n\n"
        ":::{note}\n```{code-cell} ipython3\nnested = 'not a cell with colon_fence'\n```\n:::\n\n"
        "```{code-cell} ipython3\n---\ntags: [hide-input, skip-execution]\n"
        "mystnb:\n  figure:\n    caption: A caption\n---\ny = x + 1\n```\n",
        encoding="utf-8",
    )
    assert is_myst_notebook(page)
    cells = code_cells(page)
    assert [c.source.strip() for c in cells] == ["x = 1", "y = x + 1"]
    assert cells[0].metadata["tags"] == ["hide-input"]
    assert cells[1].metadata["tags"] == ["hide-input", "skip-execution"]
    assert cells[1].metadata["mystnb"] == {"figure": {"caption": "A caption"}}
    assert read_page(page).cells[0].source.startswith("# T")


def test_plain_markdown_is_not_a_notebook(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("---\ntitle: x\n---\n\n# T\n\n```{code-cell} ipython3\nx = 1\n```\n", encoding="utf-8")
    assert not is_myst_notebook(page)


def run_cells(page: Path, cells: list[nbformat.NotebookNode]) -> None:
    """Execute ``cells`` in order in one namespace, as the build's kernel would."""
    namespace: dict = {"__name__": "__page__"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for index, cell in enumerate(cells):
            tags = cell.metadata.get("tags", [])
            if SKIP_TAG in tags:
                continue
            code = compile(cell.source, f"{page.name}[cell {index}]", "exec")
            try:
                exec(code, namespace)  # noqa: S102 - the page's own code, as the build runs it
            except Exception:
                if RAISES_TAG not in tags:
                    raise


def test_run_cells_honours_execution_tags(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "---\nfile_format: mystnb\n---\n\n# T\n\n"
        "```{code-cell} ipython3\nx = 1\n```\n\n"
        "```{code-cell} ipython3\n:tags: [skip-execution]\n\nraise RuntimeError('skipped')\n```\n\n"
        "```{code-cell} ipython3\n:tags: [raises-exception]\n\n1 / 0\n```\n\n"
        "```{code-cell} ipython3\nassert x == 1\nraise ValueError('not allowed')\n```\n",
        encoding="utf-8",
    )
    cells = code_cells(page)
    run_cells(page, cells[:3])
    with pytest.raises(ValueError, match="not allowed"):
        run_cells(page, cells)


@pytest.mark.parametrize("page", narrative_pages())
def test_page_code_cells_run(page: Path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    notebook = read_page(page)
    cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert cells, f"{page.name} is a MyST notebook without code cells"
    first = notebook.cells[0]
    assert first.cell_type == "markdown" and re.match(r"#\s+\S", first.source), (
        f"{page.name} does not start with a '# Title' heading"
    )

    monkeypatch.chdir(page.parent)  # jupyter-book runs each page in its own folder
    try:
        run_cells(page, cells)
    finally:
        plt.close("all")


@pytest.mark.parametrize("page", narrative_pages())
def test_figure_cells_end_by_showing_their_figure(page: Path):
    problems = hidden_figures([cell.source for cell in code_cells(page)])
    assert not problems, f"{page.name}:\n" + "\n".join(problems)


FIGURE_CELLS = [
    "import matplotlib.pyplot as plt\nimport numpy as np\n"
    "from book_figures import show_heatmaps, use_book_style\nuse_book_style()",
    "fig = show_heatmaps(np.eye(3))",  # assigned: never shown
    "show_heatmaps(np.eye(3));",  # ';' hides the value
    "show_heatmaps(np.eye(3))",  # shown once
    "fig, ax = plt.subplots()\nax.plot([1, 2])",  # pyplot without plt.show()
    "fig, ax = plt.subplots()\nax.plot([1, 2])\nplt.show()",  # shown once
    "def draw():\n    return show_heatmaps(np.eye(2))",  # a page's own drawing function
    "draw()",
    "x = 1",  # draws nothing
]


def figure_notebook(sources: list[str]) -> nbformat.NotebookNode:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    for index, cell in enumerate(notebook.cells):
        if index not in (0, 6, 8):
            cell.metadata["mystnb"] = {"figure": {"caption": "A caption.", "name": f"fig-{index + 1}"}}
    return notebook


def test_the_static_rule_sees_hidden_figures():
    assert hidden_figures(FIGURE_CELLS) == [
        "code cell 2 calls a book_figures helper but does not end with the figure as its value "
        "(not assigned, no ';')",
        "code cell 3 calls a book_figures helper but does not end with the figure as its value "
        "(not assigned, no ';')",
        "code cell 5 draws with pyplot but does not end with plt.show()",
    ]
    mixed = [
        "import matplotlib.pyplot as plt\nfrom book_figures import show_heatmaps",
        "show_heatmaps([[1.0]])\nplt.show()",
    ]
    assert "mixes pyplot with a figure helper" in hidden_figures(mixed)[0]


@pytest.mark.book
@pytest.mark.slow
def test_a_real_kernel_shows_exactly_the_figures_the_rule_expects(tmp_path):
    """Executed as the build executes pages (nbclient, a Jupyter kernel, the inline backend)."""
    from nbclient import NotebookClient

    notebook = figure_notebook(FIGURE_CELLS)
    NotebookClient(
        notebook, kernel_name="python3", timeout=120, resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    problems = figure_problems(notebook)
    assert [line.split(" ")[2] for line in problems] == ["2", "3"], problems
    assert all("shows no image" in line for line in problems)
    # every other figure is shown once, not twice; once use_book_style has loaded the inline
    # backend, a pyplot figure is shown even without plt.show() (the house style asks for it)
    shown = [sum("image/png" in output.get("data", {}) for output in cell.outputs) for cell in notebook.cells]
    assert shown == [0, 0, 0, 1, 1, 1, 0, 1, 0]


def test_the_executed_rule_sees_missing_and_undeclared_figures():
    notebook = figure_notebook(FIGURE_CELLS)
    png = {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"}
    image = nbformat.v4.new_output("display_data", data=png)
    for index in (3, 5, 7):
        notebook.cells[index].outputs = [image]
    notebook.cells[7].outputs = [image, image]
    del notebook.cells[5].metadata["mystnb"]
    assert figure_problems(notebook) == [
        "code cell 2 (fig-2) shows no image: a book_figures helper's figure must be the cell's last "
        "value (not assigned, no ';'), and a pyplot figure needs plt.show()",
        "code cell 3 (fig-3) shows no image: a book_figures helper's figure must be the cell's last "
        "value (not assigned, no ';'), and a pyplot figure needs plt.show()",
        "code cell 5 (fig-5) shows no image: a book_figures helper's figure must be the cell's last "
        "value (not assigned, no ';'), and a pyplot figure needs plt.show()",
        "code cell 6 draws a figure but declares no mystnb.figure (caption, name)",
        "code cell 8 (fig-8) shows 2 images instead of one",
    ]


def first_heading(page: Path) -> str:
    """The ``# Title`` a page starts with (the title the sidebar shows)."""
    cell = read_page(page).cells[0] if is_myst_notebook(page) else None
    text = cell.source if cell is not None else page.read_text(encoding="utf-8")
    match = re.search(r"^#\s+(.+?)\s*$", text, re.M)
    assert match, f"{page.name} has no '# Title'"
    return match.group(1)


def test_chapter_titles_agree_between_the_landing_page_and_the_chapters():
    """intro.md's road map names each chapter as its first page does (and so as the sidebar)."""
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    entries = re.findall(r"^\d+\. \*\*(.+?)\*\* \(\[start reading\]\(([^)]+)\)\)", intro, re.M)
    assert len(entries) >= 7, entries
    differ = [
        (title, first_heading(ROOT / target))
        for title, target in entries
        if title != first_heading(ROOT / target)
    ]
    assert not differ, f"landing page title vs chapter page title: {differ}"


def test_the_claims_audit_counts_itself_and_covers_every_page():
    """docs/claims.md: one table row per claim, counted by kind as its header says."""
    audit = (ROOT / "docs" / "claims.md").read_text(encoding="utf-8")
    rows = [line for line in audit.splitlines() if re.match(r"^\| (?!claim \||-)", line)]
    kinds: dict[str, int] = {}
    for row in rows:
        shown = row.rstrip(" |").rsplit(" | ", 1)[1]
        kind = re.match(r"[a-z]+", shown).group(0)
        kinds[kind] = kinds.get(kind, 0) + 1
    assert set(kinds) <= {"measured", "derived", "cited", "removed", "limit"}, kinds
    header = re.search(r"\*\*(.+?)\*\*, (\d+) claims", audit)
    stated = dict((kind, int(n)) for n_kind in header.group(1).split(", ") for kind, n in [n_kind.split(" ")])
    assert stated == kinds and int(header.group(2)) == len(rows), (stated, kinds, len(rows))
    pages = ["intro.md", "notation.md", "closing.md"]
    pages += [str(p.relative_to(ROOT)) for p in ROOT.glob("chapters/[0-9][0-9]_*/*.md")]
    missing = [page for page in pages if f"(`{page}`)" not in audit]
    assert not missing, f"docs/claims.md does not audit {missing}"
