"""Delegation: a solution that hands its exercise to an implementation it was not written for.

An exercise earns points only for the learner's own implementation. The course gives some
answers away on purpose (``attention_learner.blocks`` holds working attention for the
chapters that build on it) and torch has its own implementation of several exercises
(``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``, ``nn.Transformer*``). A
solution cell that reaches one of the implementations of *its own* exercise delegates: its
tests score 0, with a message naming the rule, and the submission is flagged. A block given
for a later chapter stays usable there: the list is per exercise, not per notebook.

Two readings decide, and either suffices:

- at run time, in the grading child, each check's call into the learner's code is traced
  (``attention_learner.op_trace``): the torch operators it runs at the dispatcher and the
  Python functions it calls, by identity, so that ``torch._C._nn.scaled_dot_product_attention``,
  ``torch.ops.aten...``, ``log_softmax(...).exp()``, ``backward()`` or a given block received
  as a parameter are seen whatever their spelling. The child reports what each check reached
  (``Record.reached``); :meth:`Delegation.add_trace` charges the exercise of a test cell whose
  check reached something;
- in the parent, from the submitted sources (parsed, never run): every cell the learner can
  edit (solution cells and any other cell that is not a locked or test cell as the source has
  it), with import aliases and simple assignments followed (``import torch.nn.functional as
  F``, ``sdpa = F.scaled_dot_product_attention``, ``class M(GivenMultiHeadAttention)``,
  ``getattr(F, "scaled_dot_...")``). An exercise is charged with what its solution cell
  reaches, what the editable cells it uses reach, and what any other editable cell that
  defines the exercise's name reaches.

The trace runs in the learner's process, so code that could tamper with it (``delegation_
static``: dynamic binding, ``pickle``, frames, ``sys.setprofile``, monkeypatching ...) is
flagged ``review: ...`` wherever it appears in an editable cell: it keeps the points its
numbers earn, and an instructor looks (SECURITY.md).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from attention_learner.cell_rules import exercise_of
from attention_learner.forbidden import FORBIDDEN, names_of
from attention_learner.op_trace import delegation_message
from grader.autograde import delegation_static as dynamic
from grader.autograde.child_report import CellReport

#: exercise -> every spelling of what implements it that its solution may not reach, as the
#: static reading matches them (the one table, for this reading and the run-time trace, is
#: ``attention_learner.forbidden``). A name that starts with "." is a method name: any call of
#: ``<something>.<name>`` counts; one ending in "*" is a prefix.
FORBIDDEN_NAMES: dict[str, tuple[str, ...]] = {exercise: names_of(exercise) for exercise in FORBIDDEN}


@dataclass
class Delegation:
    """What was found: by name in the editable cells, by object in the test cells' checks."""

    named: dict[str, list[str]] = field(default_factory=dict)  # exercise -> names it reaches
    review: list[str] = field(default_factory=list)  # sentences: what could not be read
    traced: dict[str, list[str]] = field(default_factory=dict)  # exercise -> what its calls ran

    @property
    def delegated(self) -> dict[str, list[str]]:
        """exercise -> everything either reading charged it with."""
        merged = {ex: list(via) for ex, via in self.named.items()}
        for ex, via in self.traced.items():
            merged.setdefault(ex, []).extend(v for v in via if v not in merged[ex])
        return merged

    def message(self, exercise: str) -> str:
        """Why the tests of ``exercise`` score 0, in words (the local check's sentence)."""
        return delegation_message(exercise, self.delegated[exercise])

    def add_trace(self, cells: Mapping[int, CellReport], grade_id_of: Mapping[int, str]) -> None:
        """Charge each test cell's exercise with what its checks' calls reached (the child's
        trace); ``grade_id_of``: index -> grade id of the notebook's test cells (a check the
        learner makes in a cell of their own charges nothing)."""
        for index, cell in cells.items():
            if index not in grade_id_of:
                continue
            exercise = exercise_of(grade_id_of[index])
            for record in cell.records:
                if record.reached:
                    found = self.traced.setdefault(exercise, [])
                    found += [r for r in record.reached if r not in found]

    def flags(self) -> list[str]:
        """results.json flags: one per reading that charged an exercise, one per review."""
        return (
            [f"delegation: {ex} uses {', '.join(via)}" for ex, via in sorted(self.named.items())]
            + [
                f"delegation: {ex} reached {', '.join(via)} when called"
                for ex, via in sorted(self.traced.items())
            ]
            + [f"review: {why}" for why in self.review]
        )


@dataclass
class _Cell:
    """One parsed cell: what it defines at its top level, what it uses, what it reaches."""

    name: str
    defines: set[str] = field(default_factory=set)
    uses: set[str] = field(default_factory=set)
    reaches: set[str] = field(default_factory=set)  # qualified names and ".method" names
    dynamic: list[str] = field(default_factory=list)


class _Reader(ast.NodeVisitor):
    """Resolves names to qualified paths through the aliases seen so far."""

    def __init__(self, aliases: dict[str, str], cell: _Cell) -> None:
        self.aliases, self.cell = aliases, cell
        self.depth = 0  # 0 at the cell's top level, where a name it defines is seen by others

    def define(self, name: str) -> None:
        if self.depth == 0:
            self.cell.defines.add(name)

    def qualified(self, node: ast.AST) -> str | None:
        if isinstance(node, ast.Name):
            return self.aliases.get(node.id, node.id)
        if isinstance(node, ast.Attribute):
            base = self.qualified(node.value)
            return f"{base}.{node.attr}" if base else f"?.{node.attr}"
        name = dynamic.getattr_name(node)
        if name is not None and isinstance(node, ast.Call):  # a name comes only from a call
            return f"{self.qualified(node.args[0]) or '?'}.{name}"
        if isinstance(node, ast.Call):  # e.g. nn.Transformer(...).encoder: the call's target
            return self.qualified(node.func)
        return None

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.asname:
                self.aliases[alias.asname] = alias.name
            else:
                root = alias.name.split(".")[0]
                self.aliases.setdefault(root, root)
            self.cell.reaches.add(alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        for alias in node.names:
            path = f"{module}.{alias.name}" if module else alias.name
            self.aliases[alias.asname or alias.name] = path
            self.cell.reaches.add(path)

    def visit_Assign(self, node: ast.Assign) -> None:
        self.generic_visit(node)
        target = self.qualified(node.value) if isinstance(node.value, ast.Name | ast.Attribute) else None
        for t in node.targets:
            if isinstance(t, ast.Name):
                if target and target != t.id:
                    self.aliases[t.id] = target
                self.define(t.id)
            patched = dynamic.monkeypatch(t, self.qualified(t))
            if patched:
                self.cell.dynamic.append(patched)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.define(node.name)
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_ClassDef = visit_FunctionDef

    def visit_Name(self, node: ast.Name) -> None:
        self.cell.uses.add(node.id)
        self.cell.reaches.add(self.aliases.get(node.id, node.id))
        if node.id in dynamic.DYNAMIC_CALLS:
            self.cell.dynamic.append(f"{node.id}()")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self.qualified(node)
        if path:
            self.cell.reaches.add(path)
        self.cell.reaches.add(f".{node.attr}")
        if node.attr in dynamic.DYNAMIC_ATTRS:
            self.cell.dynamic.append(path or node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        computed = dynamic.named_access(node)
        if computed:
            self.cell.dynamic.append(computed)
        elif (name := dynamic.getattr_name(node)) is not None:
            base = self.qualified(node.args[0])
            self.cell.reaches.update({f"{base or '?'}.{name}", f".{name}"})
        self.generic_visit(node)


def _matches(reached: Iterable[str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden names among ``reached`` (a path equal to one, or inside it)."""
    found = []
    for name in forbidden:
        if name.startswith("."):
            hit = name in reached
        elif name.endswith("*"):
            hit = any(path.startswith(name[:-1]) for path in reached)
        else:
            hit = any(path == name or path.startswith(name + ".") for path in reached)
        if hit:
            found.append(name.lstrip("."))
    return found


def analyse(
    solutions: Mapping[str, str],
    given: Iterable[str] = (),
    forbidden: Mapping[str, tuple[str, ...]] = FORBIDDEN_NAMES,
    editable: Mapping[str, str] | None = None,
) -> Delegation:
    """Read the solution cells ``solutions`` (grade id -> source) of one notebook, in order,
    and its other ``editable`` cells (a label such as "added cell 7" -> source).

    ``given`` are the sources of the notebook's locked cells (its setup cells, as the source
    has them): their imports define aliases, and what they import is given, not delegated.
    An exercise is charged with what its solution cell, and any editable cell that defines its
    name, reach, with the cells they use.
    """
    aliases: dict[str, str] = {}
    for source in given:
        try:
            _Reader(aliases, _Cell("given")).visit(ast.parse(_without_magics(source)))
        except (SyntaxError, RecursionError, ValueError):
            continue
    cells: dict[str, _Cell] = {}
    result = Delegation()
    for label, source in [*solutions.items(), *(editable or {}).items()]:
        cell = _Cell(label)
        try:
            _Reader(aliases, cell).visit(ast.parse(_without_magics(source)))
        except (SyntaxError, RecursionError, ValueError):
            continue  # the cell fails when it runs; nothing to read here
        cells[label] = cell
        cell.dynamic += dynamic.dynamic_paths(cell.reaches)
        result.review += [
            f"{label} uses {why}, which static analysis cannot follow" for why in dict.fromkeys(cell.dynamic)
        ]
    for exercise, names in forbidden.items():
        starts = [
            c for c in cells.values() if c.name == exercise and c.name in solutions or exercise in c.defines
        ]
        reached: set[str] = set()
        for start in starts:
            for other in _used_cells(start, cells):
                reached |= other.reaches
        found = _matches(reached, names)
        if found:
            result.named[exercise] = found
    return result


def _used_cells(start: _Cell, cells: dict[str, _Cell]) -> list[_Cell]:
    """``start`` and every editable cell whose top-level names it uses, transitively."""
    seen, todo = {start.name}, [start]
    order = []
    while todo:
        cell = todo.pop()
        order.append(cell)
        for other in cells.values():
            if other.name not in seen and other.defines & cell.uses:
                seen.add(other.name)
                todo.append(other)
    return order


def _without_magics(source: str) -> str:
    """Cell source with IPython's ``%`` and ``!`` lines blanked (they are not Python)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
