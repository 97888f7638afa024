"""Dynamic binding in a learner's cells: code whose target a static reader cannot name, and
code that could tamper with the run-time trace of what a check reaches.

Delegation is decided by what a check's call really runs (``attention_learner.op_trace``, in
the learner's process). That trace is only as good as the interpreter it runs in, so the
constructs that can hide a call from it, or rebind a name to an object chosen at run time,
are flagged ``review:`` wherever they appear in a cell the learner can edit, for an
instructor to look at. They are flagged, not scored down: each has honest uses (a constant
``getattr``, ``copy`` of a module, ``inspect`` to print a signature), and whatever they reach
is still traced. The table is what is flagged, by qualified name after import aliases:

- names resolved at run time: ``getattr``/``setattr``/``delattr`` with a computed name,
  ``operator.attrgetter``/``methodcaller``, ``__import__``, ``importlib``, ``sys.modules``,
  ``eval``/``exec``/``compile``, ``globals()``/``vars()``/``locals()``;
- objects rebuilt from bytes: ``pickle``, ``marshal``, ``copyreg``, ``shelve``, ``dill``;
- the interpreter's own machinery: ``__globals__``, ``__builtins__``, ``__code__``,
  ``__dict__``, frames (``sys._getframe``, ``f_back``, ``inspect``), ``gc``, ``ctypes``,
  ``types.FunctionType``/``CodeType``;
- the tracer's switches: ``sys.setprofile``/``settrace``, ``threading`` (a thread is not
  traced), torch's dispatch and function modes (``torch.utils._python_dispatch``,
  ``torch.overrides``), its profiler and operator registry (``torch.library``,
  ``torch.profiler``), and the learner package's recorder and tracer;
- assignment to an attribute of a module (``torch.softmax = ...``): monkeypatching.
"""

from __future__ import annotations

import ast

#: qualified names (and everything under them) whose use is flagged for review
DYNAMIC_PATHS = (
    "importlib",
    "builtins",
    "sys.modules",
    "sys.setprofile",
    "sys.settrace",
    "sys._getframe",
    "sys.call_tracing",
    "sys.monitoring",
    "operator.attrgetter",
    "operator.methodcaller",
    "pickle",
    "_pickle",
    "marshal",
    "copyreg",
    "shelve",
    "dill",
    "cloudpickle",
    "joblib",
    "gc",
    "ctypes",
    "cffi",
    "inspect",
    "types.FunctionType",
    "types.CodeType",
    "types.LambdaType",
    "types.ModuleType",
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "subprocess",
    "os.fork",
    "os.system",
    "os.exec*",
    "os.spawn*",
    "os.popen",
    "os.posix_spawn*",
    "torch.utils._python_dispatch",
    "torch.overrides",
    "torch.library",
    "torch.profiler",
    "torch.autograd.profiler",
    "torch.autograd.profiler_legacy",
    "torch._C._set*",
    "torch._C._enter*",
    "torch._C._push*",
    "torch._C._pop*",
    "torch._C._disable*",
    "torch._C._enable*",
    "torch._C._autograd",
    "torch._C._profiler",
    "torch._dynamo",
    "torch.compile",
    "attention_learner.op_trace",
    "attention_learner.recording",
)
#: builtins whose call names its target at run time
DYNAMIC_CALLS = {"__import__", "eval", "exec", "compile", "globals", "vars", "locals", "breakpoint"}
#: attributes that reach the interpreter's machinery (whatever object they are read from)
DYNAMIC_ATTRS = {
    "__dict__",
    "__getattribute__",
    "__globals__",
    "__builtins__",
    "__code__",
    "__closure__",
    "__subclasses__",
    "__reduce__",
    "__reduce_ex__",
    "__setstate__",
    "__torch_function__",
    "__torch_dispatch__",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "gi_frame",
    "tb_frame",
    "cr_frame",
    "modules",
    "import_module",
    "setprofile",
    "settrace",
    "_getframe",
}
#: roots of module paths: an attribute assigned under one of these is monkeypatching
MODULE_ROOTS = ("torch", "numpy", "scipy", "attention_learner", "sys", "builtins", "operator", "math")
_NAMED_ACCESS = {"getattr", "setattr", "delattr", "hasattr"}


def dynamic_paths(reached: set[str]) -> list[str]:
    """The qualified names among ``reached`` that :data:`DYNAMIC_PATHS` flags, in order
    (a pattern matches itself and what lies under it; one ending in "*" is a prefix)."""
    return sorted(p for p in reached if any(_flagged(p, d) for d in DYNAMIC_PATHS))


def _flagged(path: str, pattern: str) -> bool:
    if pattern.endswith("*"):
        return path.startswith(pattern[:-1])
    return path == pattern or path.startswith(pattern + ".")


def getattr_name(node: ast.AST) -> str | None:
    """The name ``getattr(obj, "name", ...)`` reads, when ``node`` is such a call with a
    constant string; None for anything else."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "getattr"
        and len(node.args) >= 2
    ):
        return None
    arg = node.args[1]
    return arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else None


def named_access(node: ast.Call) -> str | None:
    """``getattr(obj, name)``-like calls whose name is computed: their description, else None."""
    func = node.func
    if isinstance(func, ast.Name) and func.id in _NAMED_ACCESS and len(node.args) >= 2:
        arg = node.args[1]
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
            return f"{func.id} with a computed name"
    return None


def monkeypatch(target: ast.expr, qualified: str | None) -> str | None:
    """An assignment to ``target`` that rebinds an attribute of a module: its description."""
    if isinstance(target, ast.Attribute) and qualified and qualified.split(".")[0] in MODULE_ROOTS:
        return f"an assignment to {qualified} (monkeypatching)"
    return None
