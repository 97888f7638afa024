"""A cell's code as a stream of tokens that the usual disguises do not change.

The cell is parsed with :mod:`ast` (IPython's ``%`` and ``!`` lines blanked first, so line
numbers stay those of the cell) and walked in source order. What a learner can change
without changing what the code does is left out or made uniform:

- every name the cell binds (parameters, variables, functions, classes, loop and
  comprehension targets) is one token, ``V``: renaming cannot show (numbering names by
  first use would be undone by reordering);
- a name the cell uses but does not bind keeps its meaning: an import alias becomes the
  module's dotted path (``np.exp``, ``numpy.exp`` and ``from numpy import exp; exp`` are all
  ``numpy.exp``), the source's own imports (its setup cell) count as the cell's; builtins
  and given building blocks keep their names;
- dead expressions are dropped: an expression statement whose value nobody uses and that
  changes nothing, that is, one that holds no call other than to a known pure function
  (:data:`PURE_FUNCTIONS`, :data:`PURE_METHODS`; ``print`` and ``display`` among them,
  whose output changes no computation) and no ``yield``, ``await`` or ``:=``: docstrings,
  bare names, ``Q.shape``, ``np.shape(Q)``, ``len(x)``, ``print(...)``; so are ``pass``
  and imports; comments, blank lines and layout never reach the AST;
- numbers become ``NUM`` and strings (f-strings too) ``STR``; ``True``, ``False`` and
  ``None`` stay (they choose behaviour);
- ``x += y`` reads as ``x = x + y``, keyword arguments are sorted by name, annotations
  are dropped;
- order that does not matter does not show: consecutive assignments are read in a
  canonical order (each after those it depends on, otherwise by its tokens; ``ordering``,
  linear in their size), and
  definitions (functions, classes, methods) after the other statements of their block, in
  the order of their tokens;
- a helper (a function defined at the top of the cell and called by another of its
  functions or classes) is read where it is first called, as if it had been inlined there:
  its non-name arguments as assignments, its body, then the calling statement with the
  call standing for the helper's final ``return`` expression; so extracting or inlining a
  helper, or moving it above or below its caller, changes only a few tokens. Its own
  definition is not read.

Operators, attributes (``.shape``, ``.sum``) and keyword names stay: they are what the code
does; only an attribute the cell itself assigns (``self.W_q = ...``) or a method it defines is
the cell's own name, and ``V`` like the others. Each token carries the cell line it came
from, so that matches can be shown.

Reading is linear in the cell's size (each node is visited once, each assignment's names
are filed once), and it counts its steps on a :class:`~grader.similarity.guards.Budget`, so
that one submission cannot hold the report for longer than the budget allows.
"""

from __future__ import annotations

import ast
from collections.abc import Set
from dataclasses import dataclass

from grader.similarity.guards import Budget
from grader.similarity.ordering import canonical_order
from grader.similarity.scope import (
    assignment_effects,
    bound_names,
    helpers,
    import_aliases,
    own_attributes,
    own_calls,
)

LOCAL = "V"
# calls an unused value of which changes nothing a grader checks (builtins and NumPy's
# introspection and reductions; print and display only show): dropped as dead expressions
PURE_FUNCTIONS = frozenset(
    {
        "print",
        "display",
        "len",
        "type",
        "id",
        "repr",
        "str",
        "format",
        "isinstance",
        "abs",
        "min",
        "max",
        "sum",
        "round",
        "sorted",
        "list",
        "tuple",
        "dict",
        "set",
        "int",
        "float",
        "bool",
        "numpy.shape",
        "numpy.ndim",
        "numpy.size",
        "numpy.sum",
        "numpy.mean",
        "numpy.max",
        "numpy.min",
        "numpy.abs",
        "numpy.isclose",
        "numpy.allclose",
        "numpy.array_equal",
        "numpy.isfinite",
        "math.sqrt",
        "math.exp",
        "math.log",
        "math.isclose",
        "torch.numel",
        "torch.is_tensor",
    }
)
# methods likewise, on any value (unless the cell defines a method or attribute of that name)
PURE_METHODS = frozenset(
    {
        "sum",
        "mean",
        "max",
        "min",
        "std",
        "var",
        "item",
        "tolist",
        "size",
        "dim",
        "numel",
        "any",
        "all",
        "copy",
        "clone",
        "detach",
        "numpy",
        "cpu",
        "reshape",
        "view",
        "transpose",
        "astype",
        "argmax",
        "argmin",
        "round",
        "abs",
        "isclose",
        "allclose",
        "equal",
        "format",
        "keys",
        "values",
        "items",
        "get",
    }
)
_EFFECTS = (ast.Yield, ast.YieldFrom, ast.Await, ast.NamedExpr)


def without_magics(source: str) -> str:
    """Cell source with IPython's ``%`` and ``!`` lines blanked (not Python; line numbers kept)."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


@dataclass(frozen=True)
class Tokens:
    """A normalised cell: its tokens and, for each, the line of the cell it came from (1-based)."""

    tokens: list[str]
    lines: list[int]


def parse_cell(source: str) -> ast.Module:
    """The cell's AST; raises SyntaxError (with the cell line) when it is not Python."""
    return ast.parse(without_magics(source))


class _Emitter:
    def __init__(
        self,
        local: set[str],
        attributes: set[str],
        aliases: dict[str, str],
        inline: dict[str, ast.FunctionDef],
        budget: Budget | None = None,
    ) -> None:
        self.local, self.attributes, self.aliases, self.inline = local, attributes, aliases, inline
        self.budget = budget
        self.tokens: list[str] = []
        self.lines: list[int] = []
        self.line = 1
        self.expanded: set[str] = set()  # helpers already read at a call
        self.stands_for: dict[int, ast.expr] = {}  # id of a helper call -> its return value

    def emit(self, token: str) -> None:
        self.tokens.append(token)
        self.lines.append(self.line)

    def name(self, identifier: str) -> str:
        if identifier in self.local:
            return LOCAL
        return self.aliases.get(identifier, identifier)

    def attribute(self, name: str) -> str:
        return LOCAL if name in self.attributes else name

    def dotted(self, node: ast.expr) -> str | None:
        """``a.b.c`` as one token when the chain ends in a name, else None."""
        attributes = []
        while isinstance(node, ast.Attribute):
            attributes.append(self.attribute(node.attr))
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        return ".".join([self.name(node.id), *reversed(attributes)])

    def is_noise(self, statement: ast.stmt) -> bool:
        """A statement that does nothing a grader or a reader of the algorithm cares about:
        ``pass``, an import, ``global``, or a dead expression."""
        if isinstance(statement, ast.Pass | ast.Import | ast.ImportFrom | ast.Global | ast.Nonlocal):
            return True
        return isinstance(statement, ast.Expr) and self.is_pure(statement.value)

    def is_pure(self, value: ast.expr) -> bool:
        """Whether evaluating ``value`` and dropping it changes nothing: no call but to
        :data:`PURE_FUNCTIONS` or :data:`PURE_METHODS`, no yield, await or assignment."""
        for node in ast.walk(value):
            if isinstance(node, _EFFECTS):
                return False
            if isinstance(node, ast.Call) and not self.pure_callee(node.func):
                return False
        return True

    def pure_callee(self, func: ast.expr) -> bool:
        if isinstance(func, ast.Name):
            return func.id not in self.local and self.aliases.get(func.id, func.id) in PURE_FUNCTIONS
        if not isinstance(func, ast.Attribute):
            return False
        if func.attr in self.attributes:  # the cell's own method
            return False
        if func.attr in PURE_METHODS:
            return True
        dotted = self.dotted(func)  # a module's function: numpy.shape
        return dotted is not None and not dotted.startswith(LOCAL + ".") and dotted in PURE_FUNCTIONS

    def body(self, statements: list[ast.stmt]) -> None:
        definitions = []
        # consecutive assignments, read in their canonical order
        run: list[ast.Assign | ast.AugAssign | ast.AnnAssign] = []
        for statement in statements:
            if self.is_noise(statement):
                continue
            if isinstance(statement, ast.FunctionDef) and self.inline.get(statement.name) is statement:
                continue  # read where it is called
            if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                definitions.append(self.captured(statement))
            elif isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
                run.append(statement)
            else:
                self.assignments(run)
                run = []
                self.statement(statement)
        self.assignments(run)
        # the order of definitions does not matter: read them last, in the order of their tokens
        for tokens, lines in sorted(definitions):
            self.tokens += tokens
            self.lines += lines

    def assignments(self, run: list[ast.Assign | ast.AugAssign | ast.AnnAssign]) -> None:
        """Consecutive assignments in a canonical order: each after every assignment it
        depends on (or that depends on it) that came before it, and otherwise the one whose
        tokens sort first; any order the learner could have written them in reads the same."""
        read = [self.captured(statement) for statement in run]
        for j in canonical_order([assignment_effects(statement) for statement in run], read, self.budget):
            self.tokens += read[j][0]
            self.lines += read[j][1]

    def statement(self, statement: ast.stmt) -> None:
        if self.inline:
            for call in own_calls(statement, self.inline):
                self.expand(call)
        self.visit(statement)

    def captured(self, statement: ast.stmt) -> tuple[list[str], list[int]]:
        """The tokens and lines of ``statement``, read aside."""
        outer = self.tokens, self.lines
        self.tokens, self.lines = [], []
        try:
            self.statement(statement)
            return self.tokens, self.lines
        finally:
            self.tokens, self.lines = outer

    def expand(self, call: ast.Call) -> None:
        """Read the helper called by ``call`` as if inlined before the calling statement."""
        name = call.func.id  # type: ignore[attr-defined]
        if name in self.expanded:
            return
        self.expanded.add(name)
        helper = self.inline[name]
        for arg in call.args:
            if not isinstance(arg, ast.Name | ast.Constant):  # a parameter bound to an expression
                outer = self.line
                self.line = getattr(arg, "lineno", outer)
                self.emit("Assign")
                self.emit(LOCAL)
                self.visit(arg)
                self.line = outer
        statements = [s for s in helper.body if not self.is_noise(s)]
        last = statements[-1] if statements else None
        returns = [n for n in ast.walk(helper) if isinstance(n, ast.Return)]
        if isinstance(last, ast.Return) and last.value is not None and returns == [last]:
            self.body(statements[:-1])
            self.stands_for[id(call)] = last.value
        else:
            self.body(statements)

    def visit(self, node: ast.AST) -> None:
        if self.budget is not None:
            self.budget.step()
        line = getattr(node, "lineno", None)
        outer = self.line
        if line is not None:
            self.line = line
        try:
            self._visit(node)
        finally:
            self.line = outer

    def _visit(self, node: ast.AST) -> None:  # one case per kind of node
        kind = type(node).__name__
        match node:
            case ast.Name(id=identifier):
                self.emit(self.name(identifier))
            case ast.Attribute():
                dotted = self.dotted(node)
                if dotted is not None:
                    self.emit(dotted)
                else:
                    self.emit("." + self.attribute(node.attr))
                    self.visit(node.value)
            case ast.Constant(value=value):
                if isinstance(value, bool) or value is None or value is Ellipsis:
                    self.emit(repr(value))
                elif isinstance(value, str | bytes):
                    self.emit("STR")
                else:
                    self.emit("NUM")
            case ast.JoinedStr():
                self.emit("STR")
            case ast.BinOp(op=op):
                self.emit(f"BinOp:{type(op).__name__}")
                self.visit(node.left)
                self.visit(node.right)
            case ast.UnaryOp(op=op):
                self.emit(f"UnaryOp:{type(op).__name__}")
                self.visit(node.operand)
            case ast.BoolOp(op=op):
                self.emit(f"BoolOp:{type(op).__name__}")
                for operand in node.values:
                    self.visit(operand)
            case ast.Compare():
                self.emit("Compare:" + ",".join(type(op).__name__ for op in node.ops))
                self.visit(node.left)
                for comparator in node.comparators:
                    self.visit(comparator)
            case ast.AugAssign(op=op):  # x += y reads as x = x + y
                self.emit("Assign")
                self.visit(node.target)
                self.emit(f"BinOp:{type(op).__name__}")
                self.visit(node.target)
                self.visit(node.value)
            case ast.AnnAssign():
                if node.value is not None:
                    self.emit("Assign")
                    self.visit(node.target)
                    self.visit(node.value)
            case ast.Call() if id(node) in self.stands_for:
                self.visit(self.stands_for.pop(id(node)))
            case ast.Call():
                self.emit("Call")
                self.visit(node.func)
                for arg in node.args:
                    self.visit(arg)
                for keyword in sorted(node.keywords, key=lambda k: k.arg or ""):
                    self.emit(f"kw:{keyword.arg}" if keyword.arg else "kw:**")
                    self.visit(keyword.value)
            case ast.FunctionDef() | ast.AsyncFunctionDef() | ast.Lambda():
                self.emit(kind)
                for decorator in getattr(node, "decorator_list", []):
                    self.visit(decorator)
                self.arguments(node.args)
                if isinstance(node, ast.Lambda):
                    self.visit(node.body)
                else:
                    self.body(node.body)
            case ast.ClassDef():
                self.emit(kind)
                for decorator in node.decorator_list:
                    self.visit(decorator)
                for base in node.bases:
                    self.visit(base)
                self.body(node.body)
            case ast.keyword():
                self.emit(f"kw:{node.arg}" if node.arg else "kw:**")
                self.visit(node.value)
            case _:
                self.emit(kind)
                self.children(node)

    def arguments(self, args: ast.arguments) -> None:
        every = [
            *args.posonlyargs,
            *args.args,
            *([args.vararg] if args.vararg else []),
            *args.kwonlyargs,
            *([args.kwarg] if args.kwarg else []),
        ]
        for _ in every:
            self.emit("arg")
        for default in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
            self.visit(default)

    def children(self, node: ast.AST) -> None:
        for name, value in ast.iter_fields(node):
            if name in ("ctx", "type_comment", "annotation", "returns"):
                continue
            if isinstance(value, list):
                if value and all(isinstance(v, ast.stmt) for v in value):
                    self.body(value)
                else:
                    for item in value:
                        if isinstance(item, ast.AST):
                            self.visit(item)
            elif isinstance(value, ast.AST) and not isinstance(value, ast.expr_context):
                self.visit(value)


def normalise(
    tree: ast.Module,
    given_aliases: dict[str, str] | None = None,
    also_local: Set[str] = frozenset(),
    budget: Budget | None = None,
) -> Tokens:
    """``tree`` (a cell, see :func:`parse_cell`) as normalised tokens.

    ``given_aliases`` are the imports the learner was given (the source's setup cell): the
    cell may use them without importing them. The cell's own imports take precedence, and a
    name the cell binds is always ``V``, as is every name in ``also_local``. ``budget`` counts
    the steps and raises :class:`~grader.similarity.guards.OverTime` past its deadline.
    """
    nodes = list(ast.walk(tree))
    local = bound_names(nodes) | also_local
    aliases = {**(given_aliases or {}), **import_aliases(nodes)}
    emitter = _Emitter(
        local,
        own_attributes(nodes),
        {k: v for k, v in aliases.items() if k not in local},
        helpers(tree),
        budget,
    )
    emitter.body(tree.body)
    return Tokens(emitter.tokens, emitter.lines)
