"""Classic bugs recognised from a learner's output by a model of each bug: a note is given only
where the bug's model, computed on the case's own inputs, reproduces the output at the case's
tolerance; where no model does, the hints say where the output is wrong instead.

A model is a function of nothing (its inputs are bound by the case's hint) returning the
array that bug produces, or None where the bug cannot show on the case (an even d_model for
a bug of the odd last column). Used by the hints of chapters 6 and 7.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import numpy as np

Model = Callable[[], np.ndarray | None]
Arrays = dict[str, np.ndarray]


def reproduces(modelled: np.ndarray | None, got: np.ndarray | None, atol: float, rtol: float) -> bool:
    """Whether ``got`` is ``modelled``: the same shape and |got - modelled| <= atol + rtol |modelled|
    entry by entry (NaN where the model has NaN)."""
    if modelled is None or got is None or np.shape(modelled) != np.shape(got):
        return False
    return bool(np.allclose(got, modelled, atol=atol, rtol=rtol, equal_nan=True))


def explained_notes(
    models: Iterable[tuple[str, Model]],
    got: np.ndarray | None,
    expected: np.ndarray,
    atol: float,
    rtol: float,
) -> list[str]:
    """The note of every (note, model) whose model reproduces ``got`` and differs from
    ``expected`` (a bug that does not show on this case explains nothing). A model that raises
    does not apply to the case."""
    notes = []
    for note, model in models:
        with np.errstate(all="ignore"):
            try:
                modelled = model()
            except (ValueError, IndexError, RuntimeError, ZeroDivisionError):
                continue
        if reproduces(modelled, got, atol, rtol) and not reproduces(modelled, expected, atol, rtol):
            notes.append(note)
    return notes


def explains_outputs(
    modelled: Arrays | None, got: Arrays, expected: Arrays, atol: float, rtol: float
) -> bool:
    """Whether a bug whose outputs are ``modelled`` (name -> array) explains ``got``: every
    modelled output is reproduced and at least one of them differs from ``expected``."""
    if not modelled:
        return False
    return all(reproduces(v, got.get(k), atol, rtol) for k, v in modelled.items()) and not all(
        reproduces(v, expected.get(k), atol, rtol) for k, v in modelled.items()
    )


def index_ranges(indices: Sequence[int]) -> str:
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
    with np.errstate(all="ignore"):
        close = np.isclose(got, expected, atol=atol, rtol=rtol, equal_nan=True)
    return ~close


def wrong_along(wrong: np.ndarray, axis: int) -> np.ndarray:
    """The indices along ``axis`` of the slices that hold at least one wrong entry."""
    other = tuple(a for a in range(wrong.ndim) if a != axis % wrong.ndim)
    return np.flatnonzero(wrong.any(axis=other))
