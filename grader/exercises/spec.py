"""What an exercise is, for the checks: how to make inputs, call the learner, and judge.

An :class:`Exercise` is data, not a test: the same spec serves the check helpers that run in
a notebook (kernel mode) and the grader's parent process, which re-creates the inputs and
the expected outputs itself and judges the raw arrays a submission sent back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class Exercise:
    """One graded function or class of the contract.

    name:        the contract name, which is also the solution cell's grade_id.
    make_inputs: (rng, **params) -> inputs; trusted, recreated wherever judging happens.
    call:        (learner object, inputs) -> outputs as NumPy arrays; runs the learner's code.
    reference:   inputs -> the expected outputs (same keys as ``call``).
    bugs:        classic bug, in words -> inputs -> the outputs that bug produces; a failing
                 output that matches one is named in the message.
    hints:       (inputs, expected, got) -> extra sentences for the message (NaN rows, ...).
    describe:    params -> a short description of the case, shown to the learner.
    """

    name: str
    make_inputs: Callable[..., dict[str, Any]]
    call: Callable[[Any, dict[str, Any]], Arrays]
    reference: Callable[[dict[str, Any]], Arrays]
    bugs: Mapping[str, Callable[[dict[str, Any]], Arrays]] = field(default_factory=dict)
    hints: Callable[[dict[str, Any], Arrays, Arrays], list[str]] | None = None
    describe: Callable[[dict[str, Any]], str] | None = None
    atol: float = 1e-6
    rtol: float = 1e-5

    def case_description(self, params: dict[str, Any]) -> str:
        if self.describe is not None:
            return self.describe(params)
        return ", ".join(f"{k}={v}" for k, v in params.items()) or "the default case"


def unpack(result: Any, names: tuple[str, ...], function: str) -> tuple[Any, ...]:
    """Split a learner's return value into ``names``, with a clear error if it has the wrong arity."""
    if len(names) == 1:
        return (result,)
    if not isinstance(result, tuple | list) or len(result) != len(names):
        kind = type(result).__name__
        raise TypeError(
            f"{function} should return the tuple ({', '.join(names)}), got a {kind}"
            + (f" of length {len(result)}" if isinstance(result, tuple | list) else "")
        )
    return tuple(result)


def to_numpy(value: Any) -> np.ndarray:
    """A learner's output as a NumPy array: bool stays bool, everything else becomes float64.

    Tensors are detached first; keeping bool apart lets a check tell a float mask from a
    boolean one.
    """
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        value = value.numpy() if str(value.dtype) == "torch.bool" else value.double().numpy()
    array = np.asarray(value)
    if array.dtype == object:
        raise TypeError(f"expected an array of numbers, got {type(value).__name__}")
    if array.dtype.kind == "b":
        return array
    return array.astype(np.float64)
