"""What a test case is: how to build its inputs, call the learner's code on them, and describe it.

A :class:`Case` is data, not a test. The same case runs in a learner's kernel (where its
expected values come from the data shipped with this package) and in the grader's parent
process (which recomputes the expected values from its reference and judges the raw arrays a
submission sent back). Nothing here knows the right answer.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_learner.tolerance import all_close, allowed

Arrays = dict[str, np.ndarray]
Inputs = dict[str, Any]


def builder_defaults(make_inputs: Callable[..., Inputs]) -> dict[str, Any]:
    """The keyword defaults of an input builder ``make_inputs(rng, **params)``.

    Descriptions shown to learners are built from these, so that they can never disagree with
    the case that actually runs.
    """
    return {
        name: p.default
        for name, p in inspect.signature(make_inputs).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def describe_params(params: dict[str, Any], keys: Iterable[str] | None = None) -> str:
    """``"k1=v1, k2=v2"`` for ``keys`` of ``params`` (all of them, in order, when None)."""
    return ", ".join(f"{k}={params[k]}" for k in (params if keys is None else keys))


def describe_scale(scale: float, what: str) -> str:
    """``", <what> scaled by <scale>"``, or nothing when ``scale`` is 1 (no scaling)."""
    return f", {what} scaled by {scale:g}" if scale != 1.0 else ""


@dataclass(frozen=True)
class Case:
    """One graded function or class of the contract, or one aspect of it (``name__aspect``).

    name:        the contract name (the solution cell's grade_id), with ``__aspect`` if any.
    make_inputs: (rng, **params) -> inputs; deterministic given the generator's seed.
    call:        (learner object, inputs) -> the learner's RAW outputs, never a verdict; the
                 case returns them as NumPy arrays (bool stays bool, the rest float64).
    describe:    complete params (builder defaults filled in) -> the case in words.
    hints:       (inputs, expected, got) -> extra sentences for a failure message.
    derive:      (inputs, raw outputs) -> what is compared with the expected values, for
                 property checks (e.g. how far earlier outputs moved); None = the raw outputs.
                 Whoever judges applies it to the raw arrays itself.
    labels:      output key -> how to name it in a message ("the gradient with respect to Q").
    atol, rtol:  the tolerances of the comparison: an output passes where
                 |got - expected| <= atol + rtol * |expected|, entry by entry.
    conditioning: params -> how many times ``atol`` and ``rtol`` this case's outputs may be
                 off by between two correct implementations, where the inputs amplify float64
                 rounding (scores near -4e9); None = 1. See :meth:`tolerance`.
    magnitude:   (params, inputs, expected) -> output key -> the size of the terms each entry
                 of that output is a sum of (None, or a key left out: |expected| itself). Where
                 large terms cancel, an entry is small but carries their rounding, so ``rtol``
                 applies to that size as well: see :meth:`entry_atol`.

    Floating-point results differ in their last bits from one CPU, BLAS or thread count to
    another, by an amount that follows the case's conditioning (scores near -4e9 move float64
    weights by about 3e-7). Shipped expected values are therefore kept while they stay within
    :attr:`reproducible_tolerance`, a quarter of the grading tolerance: a correct result from
    another machine, itself within a quarter of the tolerance of the shipped machine's, is at
    most half the tolerance away from the shipped value and passes.
    """

    name: str
    make_inputs: Callable[..., Inputs]
    call: Callable[[Any, Inputs], Arrays]
    describe: Callable[[dict[str, Any]], str] | None = None
    hints: Callable[[Inputs, Arrays, Arrays], list[str]] | None = None
    derive: Callable[[Inputs, Arrays], Arrays] | None = None
    labels: dict[str, str] = field(default_factory=dict)
    atol: float = 1e-6
    rtol: float = 1e-5
    conditioning: Callable[[dict[str, Any]], float] | None = None
    magnitude: Callable[[dict[str, Any], Inputs, Arrays], Arrays] | None = None

    def tolerance(self, params: dict[str, Any]) -> tuple[float, float]:
        """(atol, rtol) of the comparison for the case with ``params``."""
        factor = 1.0 if self.conditioning is None else float(self.conditioning(self.full_params(params)))
        return self.atol * factor, self.rtol * factor

    def entry_atol(self, params: dict[str, Any], inputs: Inputs, expected: Arrays) -> dict[str, Any]:
        """Output key -> the absolute part of each entry's tolerance: ``atol`` where the case
        has no :attr:`magnitude` for that output, else ``atol + rtol * m`` entry by entry, so
        that an entry passes where |got - expected| <= atol + rtol (m + |expected|). That is
        the forward error bound of a sum (its rounding scales with the sum of its terms'
        sizes, not with the sum), loosened only where terms cancel."""
        atol, rtol = self.tolerance(params)
        sizes = {} if self.magnitude is None else self.magnitude(self.full_params(params), inputs, expected)
        return {key: allowed(sizes[key], atol, rtol) if key in sizes else atol for key in expected}

    def __post_init__(self) -> None:
        adapter = self.call

        def call(learner: Any, inputs: Inputs) -> Arrays:
            return {k: to_numpy(v) for k, v in adapter(learner, inputs).items()}

        call.__doc__ = adapter.__doc__
        object.__setattr__(self, "call", call)  # every output as a NumPy array, whoever calls

    #: the share of the grading tolerance that machine-to-machine rounding may use
    REPRODUCIBLE_SHARE = 0.25

    @property
    def reproducible_tolerance(self) -> tuple[float, float]:
        """(atol, rtol) within which two machines' values of this case count as the same."""
        return self.atol * self.REPRODUCIBLE_SHARE, self.rtol * self.REPRODUCIBLE_SHARE

    def same_values(self, a: np.ndarray, b: np.ndarray) -> bool:
        """Whether ``a`` and ``b`` are one output as two machines compute it: the same dtype
        and shape, equal where exact (bool, int), within :attr:`reproducible_tolerance` where
        floating point (NaN and infinities in the same places)."""
        if a.dtype != b.dtype or a.shape != b.shape:
            return False
        if a.dtype.kind != "f":
            return bool(np.array_equal(a, b))
        atol, rtol = self.reproducible_tolerance
        return all_close(a, b, atol, rtol)

    @property
    def function(self) -> str:
        """The learner's function or class this case calls ("X__torch" is an aspect of X)."""
        return self.name.split("__", 1)[0]

    def full_params(self, params: dict[str, Any]) -> dict[str, Any]:
        """``params`` with the builder's defaults filled in."""
        return {**builder_defaults(self.make_inputs), **params}

    def case_description(self, params: dict[str, Any]) -> str:
        full = self.full_params(params)
        if self.describe is not None:
            return self.describe(full)
        return describe_params(full) or "the default case"


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
    """A learner's output as a NumPy array, keeping what a judge needs to know of its type.

    Tensors are detached and become float64 (bool stays bool): torch exercises have no dtype
    rule. NumPy arrays and Python numbers keep their floating dtype (float16, float32 and
    float64; a longer float becomes float64), integers become int64 and bool stays bool, so
    that the NumPy exercises' float64 rule is read from the arrays themselves
    (:mod:`attention_learner.conventions`).
    """
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        value = value.numpy() if str(value.dtype) == "torch.bool" else value.double().numpy()
    array = np.asarray(value)
    if array.dtype == object:
        raise TypeError(f"expected an array of numbers, got {type(value).__name__}")
    if array.dtype.kind == "b":
        return array
    if array.dtype.kind in "iu":
        return array.astype(np.int64)
    if array.dtype.kind == "f" and array.dtype.itemsize <= 8:
        return array.astype(array.dtype.newbyteorder("="), copy=False)
    return array.astype(np.float64)
