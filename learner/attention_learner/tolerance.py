"""Whether a number is within tolerance of another: the one comparison every judge and hint makes.

An entry ``g`` of a result is close to the entry ``e`` it is compared with where

    |g - e| <= atol + rtol * |e|

(the tolerance is relative to the *expected* side only, so the test is not symmetric), with a
NaN close to a NaN and an infinity close to the same infinity only. ``atol`` may be an array,
one absolute tolerance per entry: that is how a case's magnitude rule enters
(:meth:`attention_learner.spec.Case.entry_atol` widens ``atol`` to ``atol + rtol * m`` where the
entry is a sum of terms of size ``m``). Which ``atol`` and ``rtol`` a case grades at is the
case's (:meth:`Case.tolerance`); how they are compared is decided here and nowhere else, so a
hint can never call right what the grade calls wrong.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def allowed(expected: npt.ArrayLike, atol: float | np.ndarray, rtol: float) -> np.ndarray:
    """How far each entry may be from ``expected``: atol + rtol |expected| (the shape of both)."""
    return np.asarray(atol + rtol * np.abs(expected))


def close_entries(
    got: npt.ArrayLike, expected: npt.ArrayLike, atol: float | np.ndarray, rtol: float
) -> np.ndarray:
    """Bool, the broadcast shape of the two: True where both are finite and
    |got - expected| <= atol + rtol |expected| (:func:`allowed`), where both are NaN, or where
    they are equal (an infinity against the same infinity). Bool and int entries compare as
    floats."""
    g = np.asarray(got, dtype=np.result_type(got, 1.0))
    e = np.asarray(expected, dtype=np.result_type(expected, 1.0))
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf, rtol * inf
        within = np.abs(g - e) <= allowed(e, atol, rtol)
        finite = np.isfinite(g) & np.isfinite(e)
        return np.asarray((within & finite) | (np.isnan(g) & np.isnan(e)) | (g == e))


def all_close(got: npt.ArrayLike, expected: npt.ArrayLike, atol: float | np.ndarray, rtol: float) -> bool:
    """Whether every entry of ``got`` is close to ``expected`` (:func:`close_entries`); the two
    broadcast, so ``expected`` may be a number (a row sum against 1.0)."""
    return bool(close_entries(got, expected, atol, rtol).all())


def matches(
    got: np.ndarray | None, expected: np.ndarray | None, atol: float | np.ndarray, rtol: float
) -> bool:
    """Whether ``got`` is ``expected`` at this tolerance: both given, of one shape, and every
    entry close (:func:`close_entries`)."""
    if got is None or expected is None or np.shape(got) != np.shape(expected):
        return False
    return all_close(got, expected, atol, rtol)
