"""Delegation: a solution that hands its exercise to an implementation it was not written for.

An exercise earns points only for the learner's own implementation. The course gives some
answers away on purpose (``attention_learner.blocks`` holds working attention for the
chapters that build on it) and torch has its own implementation of several exercises
(``F.scaled_dot_product_attention``, ``nn.MultiheadAttention``, ``nn.Transformer*``). A
solution cell that reaches one of the implementations of *its own* exercise delegates: its
tests score 0, with a message naming the rule, and the submission is flagged. A block given
for a later chapter stays usable there: the list is per exercise, not per notebook.

The parent decides from the submitted cell sources it already holds, by static analysis, so
the child has no say: each solution cell is parsed (never run), import aliases and simple
assignments are followed (``import torch.nn.functional as F``, ``sdpa = F.scaled_dot_product_
attention``, ``class M(GivenMultiHeadAttention)``, ``getattr(F, "scaled_dot_...")``), and a
cell is charged with what it reaches and with what the other solution cells it uses reach.

What static analysis cannot see is flagged for review instead of scored: a name computed at
run time (``getattr`` with a non-constant name, ``__import__``, ``importlib``, ``eval``,
``exec``, ``compile``, ``globals()``, ``vars()``, ``sys.modules``, ``__dict__``,
``__getattribute__``). Such a submission keeps the points its numbers earn and gets a flag,
so an instructor can look; SECURITY.md says so.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

_ATTENTION = ("torch.nn.functional.scaled_dot_product_attention", "attention_learner.blocks.given_attention")
_MULTI_HEAD = ("torch.nn.MultiheadAttention", "torch.nn.functional.multi_head_attention_forward",
               "attention_learner.blocks.GivenMultiHeadAttention")
_LAYERS = ("torch.nn.Transformer", "torch.nn.TransformerEncoder", "torch.nn.TransformerDecoder",
           "torch.nn.TransformerEncoderLayer", "torch.nn.TransformerDecoderLayer")
_SOFTMAX = ("torch.softmax", "torch.nn.functional.softmax", "torch.nn.Softmax", "torch.special.softmax",
            "scipy.special.softmax", ".softmax")
_JACOBIAN = ("torch.autograd.functional.jacobian", "torch.func.jacrev", "torch.func.jacfwd",
             "torch.autograd.grad")

#: exercise -> the implementations of that exercise that its solution may not reach. A name
#: that starts with "." is a method name: any call of ``<something>.<name>`` counts.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "softmax": _SOFTMAX,
    "attend": _ATTENTION + _MULTI_HEAD,
    "dot_product_attention": _ATTENTION + _MULTI_HEAD,
    "scaled_dot_product_attention": _ATTENTION + _MULTI_HEAD,
    "scaled_dot_product_attention_torch": _ATTENTION + _MULTI_HEAD,
    "softmax_jacobian": _JACOBIAN,
    "MultiHeadAttention": _MULTI_HEAD + _LAYERS,
    "causal_mask": ("torch.nn.Transformer.generate_square_subsequent_mask",),
    "EncoderLayer": _MULTI_HEAD[:2] + _LAYERS + ("attention_learner.blocks.GivenEncoderLayer",),
    "DecoderLayer": _MULTI_HEAD[:2] + _LAYERS + ("attention_learner.blocks.GivenDecoderLayer",),
    "online_softmax_attention": _ATTENTION + _MULTI_HEAD + _LAYERS,
    # the cache is the exercise: attention itself (F.scaled_dot_product_attention) is a piece
    "CachedSelfAttention": _MULTI_HEAD + _LAYERS,
    "positional_encoding": ("attention_learner.blocks.given_positional_encoding",),
    # chapter 8 assembles the given layers (or the learner's own): torch's assembly is the answer
    "translation_loss": ("torch.nn.functional.cross_entropy", "torch.nn.CrossEntropyLoss",
                         "torch.nn.functional.nll_loss", "torch.nn.NLLLoss"),
    "TinyTranslator": _LAYERS,
    "greedy_decode_cached": _LAYERS,
}

# Names whose use hides what a cell reaches from a static reader.
_DYNAMIC_CALLS = {"__import__", "eval", "exec", "compile", "globals", "vars", "locals"}
_DYNAMIC_ATTRS = {"__dict__", "__getattribute__", "modules", "import_module"}
_DYNAMIC_MODULES = ("importlib", "sys.modules", "builtins")


@dataclass
class Delegation:
    """What the analysis found in one notebook's solution cells."""

    delegated: dict[str, list[str]] = field(default_factory=dict)  # exercise -> what it reached
    review: list[str] = field(default_factory=list)  # sentences: what could not be read

    def message(self, exercise: str) -> str:
        """Why the tests of ``exercise`` score 0, in words."""
        reached = ", ".join(self.delegated[exercise])
        return (f"{exercise} hands its work to {reached}, which implements this exercise; an "
                "exercise earns points only for your own implementation (a given block or torch's "
                "own implementation of it earns nothing here).")

    def flags(self) -> list[str]:
        """results.json flags: one per delegated exercise, one per unreadable construct."""
        return ([f"delegation: {ex} uses {', '.join(via)}" for ex, via in sorted(self.delegated.items())]
                + [f"review: {why}" for why in self.review])


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
        if isinstance(node, ast.Call) and _is_getattr(node) and _constant_name(node) is not None:
            base = self.qualified(node.args[0])
            return f"{base or '?'}.{_constant_name(node)}"
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
        if node.id in _DYNAMIC_CALLS:
            self.cell.dynamic.append(f"{node.id}()")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self.qualified(node)
        if path:
            self.cell.reaches.add(path)
        self.cell.reaches.add(f".{node.attr}")
        if node.attr in _DYNAMIC_ATTRS or (path and path.startswith(_DYNAMIC_MODULES)):
            self.cell.dynamic.append(path or node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _is_getattr(node):
            name = _constant_name(node)
            if name is None:
                self.cell.dynamic.append("getattr with a computed name")
            else:
                base = self.qualified(node.args[0])
                self.cell.reaches.update({f"{base or '?'}.{name}", f".{name}"})
        self.generic_visit(node)


def _is_getattr(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(node.args) >= 2


def _constant_name(node: ast.Call) -> str | None:
    arg = node.args[1]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def _matches(reached: Iterable[str], forbidden: tuple[str, ...]) -> list[str]:
    """The forbidden names among ``reached`` (a path equal to one, or inside it)."""
    found = []
    for name in forbidden:
        if name.startswith("."):
            hit = name in reached
        else:
            hit = any(path == name or path.startswith(name + ".") for path in reached)
        if hit:
            found.append(name.lstrip("."))
    return found


def analyse(solutions: Mapping[str, str], given: Iterable[str] = (),
            forbidden: Mapping[str, tuple[str, ...]] = FORBIDDEN) -> Delegation:
    """Read the solution cells ``solutions`` (grade id -> source) of one notebook, in order.

    ``given`` are the sources of the notebook's locked cells (its setup cells, as the source
    has them): their imports define aliases, and what they import is given, not delegated.
    """
    aliases: dict[str, str] = {}
    for source in given:
        try:
            _Reader(aliases, _Cell("given")).visit(ast.parse(_without_magics(source)))
        except SyntaxError:
            continue
    cells: dict[str, _Cell] = {}
    result = Delegation()
    for grade_id, source in solutions.items():
        cell = _Cell(grade_id)
        try:
            _Reader(aliases, cell).visit(ast.parse(_without_magics(source)))
        except SyntaxError:
            continue  # the cell fails when it runs; nothing to read here
        cells[grade_id] = cell
        result.review += [f"{grade_id} uses {why}, which static analysis cannot follow"
                          for why in dict.fromkeys(cell.dynamic)]
    for exercise, cell in cells.items():
        if exercise not in forbidden:
            continue
        reached: set[str] = set()
        for other in _used_cells(cell, cells):
            reached |= other.reaches
        found = _matches(reached, forbidden[exercise])
        if found:
            result.delegated[exercise] = found
    return result


def _used_cells(start: _Cell, cells: dict[str, _Cell]) -> list[_Cell]:
    """``start`` and every solution cell whose top-level names it uses, transitively."""
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
