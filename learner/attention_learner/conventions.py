"""The NumPy exercises' conventions: every output float64, every input array left unmodified.

Chapters 1 to 3 ask for NumPy functions. :func:`numpy_case` wraps such a case so that its call
adapter also reports both conventions as raw facts (``"float64"`` and ``"unchanged"``, two
bool arrays), labels them for messages and adds a hint when one is broken. The grader's side
expects both facts True for every case that reports them (``grader.exercises.spec``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_learner.spec import Arrays, Case, Inputs

CONVENTION_LABELS = {
    "float64": "whether every output is float64",
    "unchanged": "whether the input arrays were left unmodified",
}


def is_float64(value: Any) -> bool:
    """True for a float64 array or tensor, a Python float, or a tuple or list of those."""
    if isinstance(value, tuple | list) and any(hasattr(v, "dtype") for v in value):
        return all(is_float64(v) for v in value)
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        dtype = np.asarray(value).dtype
    return str(dtype) in ("float64", "torch.float64")


def numpy_conventions(adapter: Callable[[Any, Inputs], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A NumPy exercise's call adapter that also reports two conventions as raw facts.

    "float64": whether everything the learner's function returned is float64 (a float32
    result loses precision the later chapters rely on); "unchanged": whether every input
    array is bit-for-bit what it was before the call (an in-place update such as
    ``z -= z.max()`` corrupts the caller's data).
    """

    def call(fn: Any, inputs: Inputs) -> dict[str, Any]:
        before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
        returned: list[Any] = []

        def spy(*args: Any, **kwargs: Any) -> Any:  # sees the return value before conversion
            result = fn(*args, **kwargs)
            returned.append(result)
            return result

        outputs = dict(adapter(spy, inputs))
        unchanged = all(np.array_equal(inputs[k], v, equal_nan=True) for k, v in before.items())
        float64 = all(is_float64(r) for r in returned)
        return {**outputs, "float64": np.array(float64), "unchanged": np.array(unchanged)}

    call.__doc__ = adapter.__doc__
    return call


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
    hints = case.hints

    def all_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
        own = hints(inputs, expected, got) if hints is not None else []
        return own + convention_hints(inputs, expected, got)

    return dataclasses.replace(
        case,
        call=numpy_conventions(case.call),
        hints=all_hints,
        labels={**case.labels, **CONVENTION_LABELS},
    )


def reports_conventions(case: Case) -> bool:
    """Whether ``case`` is a NumPy case made by :func:`numpy_case` (its call reports both facts)."""
    return CONVENTION_LABELS.keys() <= case.labels.keys()
