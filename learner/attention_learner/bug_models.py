"""Where a learner's output is wrong, in words, and whether one output reproduces another at
a case's tolerance: the pieces the hints of chapters 6 and 7 say where a failure is with.

The hints compute no bug's output from the case's inputs: such a model is one change from
the answer (the right positions, a cache that keeps every chunk), and the package would hold
that answer (greedy decoding's hints decide from the returned ids, never by decoding). Each
classic bug is the grader's (``grader.exercises.ch06``, ``ch06_bugs`` and ``ch07``), which
computes its outputs on a case's inputs in the parent, and the package ships those outputs
for the visible cases only; the judge names the bug an output matches. What is left here
only compares and locates.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import SupportsInt

import numpy as np

from attention_learner.tolerance import close_entries, matches


def reproduces(modelled: np.ndarray | None, got: np.ndarray | None, atol: float, rtol: float) -> bool:
    """Whether ``got`` is ``modelled``: the same shape and |got - modelled| <= atol + rtol |modelled|
    entry by entry (NaN where the model has NaN)."""
    return matches(got, modelled, atol, rtol)


def index_ranges(indices: Iterable[SupportsInt]) -> str:
    """Sorted indices as runs: [0, 1, 2, 5, 7, 8] -> "0-2, 5, 7-8"."""
    runs: list[list[int]] = []
    for i in sorted(int(i) for i in indices):
        if runs and i == runs[-1][-1] + 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return ", ".join(str(r[0]) if len(r) == 1 else f"{r[0]}-{r[-1]}" for r in runs)


def wrong_entries(got: np.ndarray, expected: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    """Bool, the shape of both: True where |got - expected| > atol + rtol |expected| (or got is
    NaN or infinite where expected is finite)."""
    return ~close_entries(got, expected, atol, rtol)


def wrong_along(wrong: np.ndarray, axis: int) -> np.ndarray:
    """The indices along ``axis`` of the slices that hold at least one wrong entry."""
    other = tuple(a for a in range(wrong.ndim) if a != axis % wrong.ndim)
    return np.flatnonzero(wrong.any(axis=other))
