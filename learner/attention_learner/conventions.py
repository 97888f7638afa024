"""The NumPy exercises' conventions: every output float64, every input array left unmodified.

Chapters 1 to 3 ask for NumPy functions. :func:`numpy_case` wraps such a case so that its call
adapter returns, beside the learner's outputs in the dtypes the learner gave them, each input
array as it is after the call (``after_<name>``). Whoever judges, the learner's kernel or the
grader's parent, then derives both conventions itself (:func:`convention_facts`): "float64"
from the dtypes of the arrays it received, "unchanged" by comparing the inputs after the call
with its own copy of the inputs. Under the grader the child states no fact at all: what the
parent reads is the bytes of the arrays, and the inputs it compares with are its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_learner.spec import Arrays, Case, Inputs
from attention_learner.tolerance import all_close

CONVENTION_LABELS = {
    "float64": "whether every output is float64",
    "unchanged": "whether the input arrays were left unmodified",
}
AFTER = "after_"  # prefix of an input array as the learner's call left it


def numpy_conventions(adapter: Callable[[Any, Inputs], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A NumPy exercise's call adapter that also returns each input array after the call.

    ``inputs`` are the copies the learner's function receives (``run_learner`` makes them), so
    an in-place update such as ``z -= z.max()`` shows in ``after_z``.
    """

    def call(fn: Any, inputs: Inputs) -> dict[str, Any]:
        outputs = dict(adapter(fn, inputs))
        after = {AFTER + k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
        return {**outputs, **after}

    call.__doc__ = adapter.__doc__
    return call


#: how far (relative) a float input may come back from the judge's copy and still count as
#: unchanged: a few units in the last place of float64 (2.2e-16), far below any real update
SAME_INPUT_RTOL = 1e-12


def _same_input(back: np.ndarray, given: np.ndarray) -> bool:
    """Whether an input array came back as the judge's copy of it (see :func:`convention_facts`)."""
    if back.shape != given.shape:
        return False
    if given.dtype.kind == "f":  # NaN against NaN counts as the same (close_entries)
        return all_close(back, given, np.finfo(given.dtype).tiny, SAME_INPUT_RTOL)
    return bool(np.array_equal(back, given))


def convention_facts(inputs: Inputs, raw: Arrays) -> Arrays:
    """The learner's outputs (as float64 for comparing) and the two conventions, decided here
    from ``raw`` (what arrived) and ``inputs`` (the judge's own copy of the case's inputs):
    "float64" when every non-bool output arrived as float64, "unchanged" when every input
    array came back as it was given: of the same shape, each float within
    :data:`SAME_INPUT_RTOL` of the judge's own copy (:mod:`attention_learner.tolerance`), every
    other entry equal.

    The judge draws its copy in another process than the learner's: the same draw, but a
    ``tanh`` or a small matrix product may round the last bit differently there (NumPy's SIMD
    loops take another path at another memory alignment), so bit for bit would call a row of
    states "modified in place" on some draws when nothing touched it. An in-place update
    (``z -= z.max()``, ``np.exp(z, out=z)``) moves entries by far more than a few units in the
    last place."""
    outputs = {k: v for k, v in raw.items() if not k.startswith(AFTER)}
    float64 = all(v.dtype == np.float64 for v in outputs.values() if v.dtype.kind != "b")
    unchanged = True
    for name, given in inputs.items():
        if isinstance(given, np.ndarray):
            back = raw.get(AFTER + name)
            unchanged = unchanged and back is not None and _same_input(back, given)
    compared = {k: v if v.dtype.kind == "b" else v.astype(np.float64) for k, v in outputs.items()}
    return {**compared, "float64": np.array(float64), "unchanged": np.array(unchanged)}


def convention_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    """Plain sentences for a broken convention (only when the reported fact shows it)."""
    hints = []
    if "float64" in got and not bool(got["float64"]):
        hints.append(
            "An output is not float64 (float32 or an integer type?): NumPy exercises return "
            "float64 arrays, so compute in float64 (no np.float32, no float32 tensors)."
        )
    if "unchanged" in got and not bool(got["unchanged"]):
        hints.append(
            "Your function modified one of its input arrays in place (e.g. z -= ..., z[...] = "
            "..., np.exp(z, out=z)): the caller's arrays must stay as they were; write "
            "z = z - ... or work on a copy."
        )
    return hints


def numpy_case(case: Case) -> Case:
    """``case`` with the NumPy conventions checked: float64 outputs, inputs left unmodified."""
    hints, derive = case.hints, case.derive

    def all_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
        own = hints(inputs, expected, got) if hints is not None else []
        return own + convention_hints(inputs, expected, got)

    def facts_then_derive(inputs: Inputs, raw: Arrays) -> Arrays:
        facts = convention_facts(inputs, raw)
        if derive is None:
            return facts
        outputs = {k: v for k, v in facts.items() if k not in CONVENTION_LABELS}
        return {**derive(inputs, outputs), **{k: facts[k] for k in CONVENTION_LABELS}}

    return dataclasses.replace(
        case,
        call=numpy_conventions(case.call),
        hints=all_hints,
        derive=facts_then_derive,
        labels={**case.labels, **CONVENTION_LABELS},
    )


def reports_conventions(case: Case) -> bool:
    """Whether ``case`` is a NumPy case made by :func:`numpy_case` (its call reports both facts)."""
    return CONVENTION_LABELS.keys() <= case.labels.keys()
