"""What a cell binds, imports and touches: the facts about names that ``normalise`` reads by.

Each function looks at a cell (its ``ast.walk`` nodes, or one statement) and answers one
question, in time linear in what it looks at:

- :func:`import_aliases`: name -> the dotted path it was imported as;
- :func:`bound_names`: every name the cell binds other than by importing it (these all read
  as one token, so renaming cannot show);
- :func:`own_attributes`: the attribute names the cell chose (assigned, or its methods);
- :func:`helpers` and :func:`own_calls`: the top-level functions another of the cell's
  definitions calls, and where a statement calls them (they are read as if inlined);
- :func:`assignment_effects`: what an assignment writes and reads, as names or dotted names,
  for :mod:`~grader.similarity.ordering`'s canonical order of a run of assignments.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable


def import_aliases(nodes: Iterable[ast.AST]) -> dict[str, str]:
    """name -> dotted path of what it was imported as, for every import among ``nodes``
    (``ast.walk`` of a cell)."""
    aliases: dict[str, str] = {}
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    aliases[alias.asname] = alias.name
                else:  # ``import a.b`` binds ``a``
                    top = alias.name.split(".")[0]
                    aliases[top] = top
        elif isinstance(node, ast.ImportFrom) and not node.level:
            for alias in node.names:
                if alias.name != "*":
                    aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return aliases


def bound_names(nodes: Iterable[ast.AST]) -> set[str]:
    """Every name ``nodes`` (``ast.walk`` of a cell) bind other than by importing it."""
    names: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            names.update(node.names)
        elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


def own_attributes(nodes: Iterable[ast.AST]) -> set[str]:
    """Attribute names the cell chose: those it assigns, and the methods of its classes."""
    names = set()
    for node in nodes:
        if isinstance(node, ast.Attribute) and not isinstance(node.ctx, ast.Load):
            names.add(node.attr)
        elif isinstance(node, ast.ClassDef):
            names.update(
                item.name for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
            )
    return names


def helpers(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    """The cell's helpers: top-level functions (defined once) that another of its top-level
    functions or classes calls. A call from top-level code (a test pasted into the cell, a
    demo) does not make one."""
    defined: dict[str, list[ast.FunctionDef]] = {}
    for statement in tree.body:
        if isinstance(statement, ast.FunctionDef):
            defined.setdefault(statement.name, []).append(statement)
    once = {name: defs[0] for name, defs in defined.items() if len(defs) == 1}
    definitions = [
        s for s in tree.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
    ]
    if not once or len(definitions) < 2:
        return {}
    called = set()
    for statement in tree.body:
        if not isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        for node in ast.walk(statement):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in once
                and once[node.func.id] is not statement
            ):
                called.add(node.func.id)
    return {name: once[name] for name in called}


def own_calls(statement: ast.stmt, names: dict[str, ast.FunctionDef]) -> list[ast.Call]:
    """Calls of ``names`` in the statement's own expressions (not in its nested statements or
    nested functions), in source order."""
    calls = []
    for field, value in ast.iter_fields(statement):
        if field in ("body", "orelse", "finalbody", "handlers", "cases"):
            continue
        for item in value if isinstance(value, list) else [value]:
            if not isinstance(item, ast.AST):
                continue
            for node in ast.walk(item):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in names:
                    calls.append(node)
    return sorted(calls, key=lambda c: (c.lineno, c.col_offset))


def dotted_name(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


def loads(node: ast.AST) -> set[str]:
    """The names and dotted names ``node`` reads, each chain whole (``self.W_q``, not ``self``)."""
    inner: set[int] = set()
    names = set()
    for n in ast.walk(node):  # breadth first: an attribute comes before the value it holds
        if isinstance(n, ast.Attribute):
            inner.add(id(n.value))
        if isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load) and id(n) not in inner:
            if (name := dotted_name(n)) is not None:
                names.add(name)
    return names


def assignment_effects(statement: ast.Assign | ast.AugAssign | ast.AnnAssign) -> tuple[set[str], set[str]]:
    """(what the assignment writes, what it reads), as names or dotted names (``self.W_q``)."""
    targets: list[ast.expr] = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
    writes: set[str] = set()
    reads = loads(statement.value) if statement.value is not None else set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name | ast.Attribute) and not isinstance(node.ctx, ast.Load):
                if (name := dotted_name(node)) is not None:
                    writes.add(name)
            elif isinstance(node, ast.Subscript):  # x[i] = ... changes x, and reads i
                if (name := dotted_name(node.value)) is not None:
                    writes.add(name)
                reads |= loads(node.slice)
    if isinstance(statement, ast.AugAssign):
        reads |= writes
    return writes, reads
