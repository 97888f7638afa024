"""What a check's call into the learner's code reaches, judged by the object called, not its name.

Delegation is a solution that hands its exercise to an implementation it was not written for
(a given block, torch's own implementation, a model in this package). Names can be spelled in
many ways (``torch._C._nn.scaled_dot_product_attention``, ``torch.ops.aten._scaled_dot_product_
attention_math``, a block received as a parameter), so while a check calls the learner's code
(:func:`call_traced`) two traces watch what is really run:

- torch's dispatcher (the legacy CPU profiler's record functions): every operator that runs,
  including composite ones (``aten::scaled_dot_product_attention``, ``aten::log_softmax``) and
  the autograd engine (``autograd::engine::evaluate_function: ...``), whatever Python name
  reached it. Only the names are kept; nothing is timed.
- Python calls (``sys.setprofile``): a function whose code object *is* one of the forbidden
  objects (resolved at the start of the call from the modules already imported), called
  while a frame of the learner's own code is on the stack between it and the check.

:mod:`attention_learner.forbidden` says, per exercise (the case's function name), what its
solution may not reach (the grader's static reading uses the same table); every function of
``attention_learner.cases`` (the cases and their hint models, some of which compute an answer)
is forbidden to every exercise.
The trace runs in the learner's process, so code that subverts it can hide a call; the
grader's static reading flags such code for review (``grader/autograde/delegation_static.py``).
"""

from __future__ import annotations

import os
import sys
import sysconfig
import types
from collections.abc import Callable, Iterator
from typing import Any

from attention_learner.forbidden import objects_of, ops_of

#: modules none of whose functions a solution may call: the cases and their hint models
ANSWER_MODULES = ("attention_learner.cases",)

_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_BLOCKS = os.path.join(os.path.realpath(_PACKAGE), "blocks.py")  # the given blocks: torch inside is theirs
_LIBRARY_ROOTS = tuple(
    dict.fromkeys(  # torch, NumPy, the standard library: never the learner's code
        os.path.realpath(p) + os.sep
        for p in (
            sysconfig.get_paths()["stdlib"],
            sysconfig.get_paths()["purelib"],
            sysconfig.get_paths()["platlib"],
            os.path.dirname(os.__file__),
        )
    )
)


def call_traced(exercise: str, call: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``call()`` under both traces; (its result, what it reached that ``exercise`` forbids).

    An exception of ``call`` propagates (the traces are switched off first); what was reached
    until then is lost with it, as the check then fails anyway.
    """
    codes = _forbidden_codes(exercise)
    ops = ops_of(exercise)
    reached: dict[str, None] = {}
    base = sys._getframe()
    previous = sys.getprofile()

    def profile(frame: types.FrameType, event: str, arg: Any) -> None:
        if event == "call":
            entry = codes.get(id(frame.f_code))
            if (
                entry is not None
                and entry[0] is frame.f_code
                and _called_by_learner(frame.f_back, base, handed_in=not entry[1].startswith(ANSWER_MODULES))
            ):
                reached.setdefault(entry[1])

    profiler = _OpProfiler() if ops and "torch" in sys.modules else None
    if profiler is not None and not profiler.start():
        reached.setdefault("a torch profiler already running (it hides the operators called)")
        profiler = None
    sys.setprofile(profile)
    try:
        result = call()
    finally:
        switched_off = sys.getprofile() is not profile
        sys.setprofile(previous)
        names = profiler.stop() if profiler is not None else set()
    if switched_off:
        reached.setdefault("sys.setprofile (the call switched the grader's trace off)")
    for op in sorted(names):
        if _op_matches(op, ops):
            reached.setdefault("autograd's engine (a backward pass)" if op.startswith(_ENGINE) else op)
    return result, list(reached)


def delegation_message(exercise: str, reached: list[str] | tuple[str, ...]) -> str:
    """Why the tests of ``exercise`` earn nothing: the one sentence the local check and the
    grader both give."""
    return (
        f"{exercise} hands its work to {', '.join(reached)}, which implements this exercise; an "
        "exercise earns points only for your own implementation (a given block or torch's "
        "own implementation of it earns nothing here)."
    )


_ENGINE = "autograd::engine::"


def _op_matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def _called_by_learner(frame: types.FrameType | None, base: types.FrameType, handed_in: bool = False) -> bool:
    """Whether the nearest caller of a forbidden function, past the frames of torch, NumPy and
    the standard library (``Module.__call__``, ``functools`` wrappers), is the learner's own
    code: a given block that calls torch from this package is the block's business, and only
    where the block itself is forbidden is it charged (its own frame is then the hit).

    ``handed_in``: the function is one of the exercise's forbidden objects (not a case's own
    function). Called straight from the check's code (this package, outside the given blocks),
    it is what the learner handed in as the answer: a class that subclasses a given block and
    adds nothing, or the block bound to the exercise's name."""
    while frame is not None and frame is not base:
        name = frame.f_code.co_filename
        path = os.path.realpath(name) if name[:1] == os.sep else ""
        if path.startswith(_PACKAGE + os.sep):
            return handed_in and path != _BLOCKS
        if not (path.startswith(_LIBRARY_ROOTS) or name.startswith("<frozen ")):
            return True
        frame = frame.f_back
    return False


class _OpProfiler:
    """The names of the dispatcher operators run between start and stop (torch's legacy CPU
    profiler: no shapes, no stacks, no memory, no Kineto and so nothing on stderr)."""

    def start(self) -> bool:
        import torch

        if torch.autograd._profiler_enabled():
            return False
        from torch.autograd import ProfilerConfig, ProfilerState, _enable_profiler_legacy

        config = ProfilerConfig(
            ProfilerState.CPU, False, False, False, False, False, torch._C._profiler._ExperimentalConfig()
        )
        _enable_profiler_legacy(config)
        return True

    def stop(self) -> set[str]:
        from torch.autograd import _disable_profiler_legacy

        return {event.name() for thread in _disable_profiler_legacy() for event in thread}


def _forbidden_codes(exercise: str) -> dict[int, tuple[types.CodeType, str]]:
    """id(code object) -> (that code object, the dotted name it belongs to), for ``exercise``'s
    forbidden objects and every function of :data:`ANSWER_MODULES`, among the modules already imported."""
    codes: dict[int, tuple[types.CodeType, str]] = {}
    for path in objects_of(exercise):
        target = _resolve(path)
        if target is not None:
            for code in _codes_of(target):
                codes.setdefault(id(code), (code, path))
    for name, module in list(sys.modules.items()):
        if module is not None and name.startswith(ANSWER_MODULES):
            for value in list(vars(module).values()):
                # functions only (a class there is a toy model the case hands to the learner),
                # and their own code only: a closure they make wraps what the case hands over
                if isinstance(value, types.FunctionType) and value.__module__ == name:
                    codes.setdefault(id(value.__code__), (value.__code__, f"{name}.{value.__qualname__}"))
    return codes  # each entry holds its code object, so no id is reused while it is in use


def _resolve(path: str) -> Any:
    """The object at ``path`` if its module is already imported (nothing is imported here)."""
    parts = path.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module = sys.modules.get(".".join(parts[:cut]))
        if module is not None:
            target: Any = module
            for attr in parts[cut:]:
                target = getattr(target, attr, None)
                if target is None:
                    return None
            return target
    return None


def _codes_of(target: Any) -> Iterator[types.CodeType]:
    """The code objects of a function (with its nested functions and lambdas) or of every
    function a class defines itself (its methods, properties and static methods)."""
    if isinstance(target, type):
        for value in vars(target).values():
            for member in (value, getattr(value, "__func__", None), getattr(value, "fget", None)):
                if isinstance(member, types.FunctionType):
                    yield from _nested(member.__code__)
        return
    function = getattr(target, "__wrapped__", target)
    for candidate in (target, function):
        if isinstance(candidate, types.FunctionType):
            yield from _nested(candidate.__code__)


def _nested(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _nested(const)
