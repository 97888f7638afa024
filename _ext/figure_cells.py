"""Which cells of an executed page draw a figure, and whether each one shows its image.

A figure that does not render fails quietly: the cell runs, its caption vanishes with the
missing image, and the page reads on without it. The rule here turns that into an error.
``figure_problems(notebook)`` takes a page as executed by the build (an nbformat notebook
with outputs, as myst-nb writes it to ``_build/jupyter_execute``) and lists, one line per
cell, every cell that

- draws (calls a ``book_figures`` helper that returns a ``Figure``, calls into pyplot, makes a
  ``matplotlib.figure.Figure``, or calls a function of the page that does one of these) but
  shows no image, or more than one;
- draws without declaring its figure (``mystnb.figure`` with a caption and a name);
- declares a figure and shows no image (or several).

Used by the book's Sphinx extension (``book_pages.py``: a warning, so ``-W`` fails the build)
and by ``tests/test_book.py`` (the same rule on the built book's executed pages), and kept
free of Sphinx so that the tests can import it alone.
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Iterable, Mapping
from typing import Any

# pyplot names that draw nothing: state, styles, colour maps, closing figures.
PYPLOT_NOT_DRAWING = frozenset(
    {
        "close",
        "rcParams",
        "rc",
        "rc_context",
        "rcdefaults",
        "style",
        "cm",
        "get_cmap",
        "colormaps",
        "ion",
        "ioff",
        "isinteractive",
        "switch_backend",
        "get_backend",
    }
)


def book_figure_helpers() -> frozenset[str]:
    """Names of the ``book_figures`` functions that return a new ``Figure``."""
    import book_figures

    helpers = set()
    for name in getattr(book_figures, "__all__", ()):
        function = getattr(book_figures, name)
        if callable(function) and not inspect.isclass(function):
            returns = inspect.get_annotations(function).get("return")
            if getattr(returns, "__name__", returns) in ("Figure", "matplotlib.figure.Figure"):
                helpers.add(name)
    return frozenset(helpers)


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except SyntaxError:  # IPython syntax (magics): not a figure cell of this book
        return None


class _PageNames:
    """What a page calls its drawing tools: pyplot aliases, helpers, its own drawing functions."""

    def __init__(self, trees: Iterable[ast.Module], helpers: frozenset[str]) -> None:
        self.pyplot: set[str] = set()
        self.drawing: set[str] = set()  # callables whose call draws a figure
        trees = list(trees)
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name == "matplotlib.pyplot" and alias.asname:
                            self.pyplot.add(alias.asname)
                elif isinstance(node, ast.ImportFrom):
                    for alias in node.names:
                        local = alias.asname or alias.name
                        if node.module == "matplotlib" and alias.name == "pyplot":
                            self.pyplot.add(local)
                        elif node.module == "book_figures" and alias.name in helpers:
                            self.drawing.add(local)
                        elif node.module == "matplotlib.figure" and alias.name == "Figure":
                            self.drawing.add(local)
        changed = True
        while changed:  # functions of the page that draw (directly or through each other)
            changed = False
            for tree in trees:
                for node in ast.walk(tree):
                    if isinstance(node, ast.FunctionDef) and node.name not in self.drawing:
                        if any(self.draws(call) for call in ast.walk(node) if isinstance(call, ast.Call)):
                            self.drawing.add(node.name)
                            changed = True

    def draws(self, call: ast.Call) -> bool:
        func = call.func
        if isinstance(func, ast.Name):
            return func.id in self.drawing
        if isinstance(func, ast.Attribute):
            base = func.value
            while isinstance(base, ast.Attribute):  # plt.cm.viridis(...) -> plt
                base = base.value
            if isinstance(base, ast.Name) and base.id in self.pyplot:
                outermost = func
                while isinstance(outermost.value, ast.Attribute):
                    outermost = outermost.value
                return outermost.attr not in PYPLOT_NOT_DRAWING
        return False

    def cell_draws(self, tree: ast.Module | None) -> bool:
        """Whether the cell's own statements (not the functions it defines) draw."""
        if tree is None:
            return False
        for statement in tree.body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if any(self.draws(node) for node in ast.walk(statement) if isinstance(node, ast.Call)):
                return True
        return False


def _source(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def image_outputs(cell: Mapping[str, Any]) -> int:
    """How many outputs of ``cell`` carry an image."""
    return sum(
        1
        for output in cell.get("outputs", [])
        if output.get("output_type") in ("display_data", "execute_result")
        and any(mime.startswith("image/") for mime in output.get("data", {}))
    )


def declared_figure(cell: Mapping[str, Any]) -> dict | None:
    """The cell's ``mystnb.figure`` options, or None."""
    figure = (cell.get("metadata", {}).get("mystnb") or {}).get("figure")
    return figure if isinstance(figure, dict) else None


def figure_problems(notebook: Mapping[str, Any], helpers: frozenset[str] | None = None) -> list[str]:
    """One line per figure cell of the executed ``notebook`` that does not show its one image."""
    helpers = book_figure_helpers() if helpers is None else helpers
    cells = [c for c in notebook.get("cells", []) if c.get("cell_type") == "code"]
    trees = [_parse(_source(c)) for c in cells]
    names = _PageNames([t for t in trees if t is not None], helpers)
    problems = []
    for index, (cell, tree) in enumerate(zip(cells, trees, strict=True)):
        figure = declared_figure(cell)
        draws = names.cell_draws(tree)
        if not (draws or figure):
            continue
        name = (figure or {}).get("name")
        label = f"code cell {index + 1}" + (f" ({name})" if name else "")
        images = image_outputs(cell)
        if draws and figure is None:
            problems.append(f"{label} draws a figure but declares no mystnb.figure (caption, name)")
        elif figure is not None and not (figure.get("caption") and figure.get("name")):
            problems.append(f"{label}: its mystnb.figure needs a caption and a name")
        if images == 0:
            problems.append(
                f"{label} shows no image: a book_figures helper's figure must be the cell's last "
                "value (not assigned, no ';'), and a pyplot figure needs plt.show()"
            )
        elif images > 1:
            problems.append(f"{label} shows {images} images instead of one")
    return problems


def hidden_figures(sources: list[str], helpers: frozenset[str] | None = None) -> list[str]:
    """Cells (by source, before running them) whose last statement does not show their figure.

    A cell that draws through pyplot ends with ``plt.show()``; a cell that only calls the
    book's helpers ends with the figure as its value (the helper call itself, or the name it
    was assigned to), without a trailing ``;``, which would hide it.
    """
    helpers = book_figure_helpers() if helpers is None else helpers
    trees = [_parse(source) for source in sources]
    names = _PageNames([t for t in trees if t is not None], helpers)
    problems = []
    for index, (source, tree) in enumerate(zip(sources, trees, strict=True)):
        if not names.cell_draws(tree):
            continue
        calls = [
            node
            for statement in tree.body
            if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            for node in ast.walk(statement)
            if isinstance(node, ast.Call) and names.draws(node)
        ]
        uses_pyplot = any(isinstance(call.func, ast.Attribute) for call in calls)
        if uses_pyplot and any(isinstance(call.func, ast.Name) for call in calls):
            problems.append(
                f"code cell {index + 1} mixes pyplot with a figure helper: a helper's figure is not "
                "shown by plt.show(); give each figure its own cell"
            )
            continue
        last = tree.body[-1]
        value = last.value if isinstance(last, ast.Expr) else None
        if uses_pyplot:
            shown = (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Attribute)
                and value.func.attr == "show"
                and isinstance(value.func.value, ast.Name)
                and value.func.value.id in names.pyplot
            )
            if not shown:
                problems.append(f"code cell {index + 1} draws with pyplot but does not end with plt.show()")
            continue
        shows_value = isinstance(value, (ast.Name, ast.Attribute)) or (
            isinstance(value, ast.Call) and names.draws(value)
        )
        if not shows_value or source.rstrip().endswith(";"):
            problems.append(
                f"code cell {index + 1} calls a book_figures helper but does not end with the figure "
                "as its value (not assigned, no ';')"
            )
    return problems
