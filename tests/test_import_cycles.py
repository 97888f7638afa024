"""No import cycles among the project's modules (``grader``, ``attention_learner``, ``book_figures``).

The graph is read from the source (AST), not from ``sys.modules``, so every code path counts:

- an edge ``a -> b`` for every ``import b`` / ``from b import x`` in ``a`` that names one of the
  project's modules (``from pkg import name`` is an edge to ``pkg.name`` when that is a module,
  to ``pkg`` otherwise; relative imports are resolved);
- imports inside functions count too. A lazy import only moves the cycle from import time to
  call time: the two modules still cannot be understood, tested or split apart one without the
  other, which is the design cycle this test is about;
- imports under ``if TYPE_CHECKING:`` do not count (the issue's rule): they are never run;
- importing ``a.b.c`` is an edge to ``a.b.c`` only, not to the packages ``a`` and ``a.b`` Python
  also runs on the way: otherwise every package whose ``__init__`` names a submodule would sit
  in a cycle with each of that submodule's siblings.

``ALLOWED`` lists the edges that close a cycle left on purpose, each with its reason; the
graph less those edges must be acyclic, so a new cycle (one that does not run through an
allowed edge) fails and is named.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {
    "grader": ROOT / "grader",
    "attention_learner": ROOT / "learner" / "attention_learner",
    "book_figures": ROOT / "book_figures",
}

# edge -> why it stays (none now: translator and seq2seq, the two reference modules of the
# encoder-decoder, share one greedy loop, in translator, which no longer imports seq2seq)
ALLOWED: dict[tuple[str, str], str] = {}


def project_modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the project's packages."""
    modules = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported(name: str, source: str, is_package: bool, modules: set[str]) -> set[str]:
    """The project's modules that ``source`` (module ``name``) imports, wherever the import sits."""
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                for statement in child.orelse:
                    visit_one(statement)
            else:
                visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                origin = ".".join([*base, *([node.module] if node.module else [])])
            else:
                origin = node.module or ""
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                found.add(full if full in modules else origin)
        visit(node)

    visit(ast.parse(source))
    return {m for m in found if m in modules and m != name}


def import_graph() -> dict[str, set[str]]:
    modules = project_modules()
    names = set(modules)
    return {
        name: imported(name, path.read_text(), path.name == "__init__.py", names)
        for name, path in modules.items()
    }


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return sorted(found)


def test_the_graph_is_read_from_every_module():
    graph = import_graph()
    assert len(graph) > 100 and {"grader.cli", "attention_learner.cell_rules", "book_figures"} <= set(graph)
    assert "grader.autograde.results" in graph["grader.autograde.pipeline"]  # a module-level import
    assert "grader.course_cli" in graph["grader.cli"]  # a lazy one, inside a function
    assert "grader.autograde.pipeline" not in graph["grader.autograde.sources"]  # under TYPE_CHECKING only


def test_no_import_cycle_among_the_projects_modules():
    graph = import_graph()
    for (a, b), why in ALLOWED.items():
        assert b in graph[a], f"{a} -> {b} is allowed ({why}) but no longer imported: drop it from ALLOWED"
    kept = {a: {b for b in targets if (a, b) not in ALLOWED} for a, targets in graph.items()}
    found = cycles(kept)
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_check_finds_a_cycle_and_its_members():
    source_a = (
        "from __future__ import annotations\nfrom typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from p.c import C\ndef f():\n    from p import b\n"
    )
    modules = {"p", "p.a", "p.b", "p.c"}
    graph = {
        "p.a": imported("p.a", source_a, False, modules),
        "p.b": imported("p.b", "from .c import x\n", False, modules),
        "p.c": imported("p.c", "import p.a\n", False, modules),
    }
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.c"}, "p.c": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b", "p.c"]]
    assert cycles({"p.a": {"p.b"}, "p.b": set(), "p.c": {"p.a"}}) == []
