"""Hypothesis strategies shared by the reference tests: they draw arrays, not seeds.

A strategy that draws a seed and then fills arrays with ``np.random.default_rng(seed)`` hides
the arrays from Hypothesis: when a test fails, Hypothesis can only shrink the seed, and a
smaller seed is just another random array. These strategies draw every entry through
``hypothesis.extra.numpy.arrays``, so that a failure shrinks to the smallest shapes and to
few, simple entries (zeros and ones), which is a counterexample a person can read.

Entries are bounded, finite float64 numbers. The bound of the query and key entries is drawn
from ``LOGIT_SCALES``, so that every run meets nearly uniform attention (bound 1e-3), ordinary
scores, and scores in the thousands, where ``exp`` overflows unless the maximum is subtracted
first (bound 40: with ``d_k = 6`` a score reaches 40 * 40 * 6 / sqrt(6), about 3900, and
``exp`` overflows above about 709). Masks are boolean arrays: Hypothesis's ``arrays`` fills an
array with one drawn value and then overwrites a few entries, so masks that hide everything,
hide nothing, or hide whole query rows all turn up.

``examples(n)`` gives an expensive test its number of examples: ``n`` under the default
``course`` profile (registered in ``tests/conftest.py``), scaled up or down with the profile
that ``HYPOTHESIS_PROFILE`` picks.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

sizes = st.integers(min_value=1, max_value=6)

# Bounds of query and key entries: nearly uniform weights, ordinary scores, scores that overflow exp.
LOGIT_SCALES = (1e-3, 1.0, 10.0, 40.0)
# Bound of value entries (values are averaged, never exponentiated).
VALUE_SCALE = 3.0
# Bounds of the inputs fed to a layer with learned weights (chapters 4, 5 and 7).
INPUT_SCALES = (0.1, 1.0, 3.0)


def bounded(scale: float) -> st.SearchStrategy[float]:
    """Finite float64 numbers in [-scale, scale]: no NaN, no infinity."""
    return st.floats(-scale, scale, allow_nan=False, allow_infinity=False, width=64)


Shape = int | tuple[int, ...] | st.SearchStrategy[int] | st.SearchStrategy[tuple[int, ...]]


def float_arrays(shape: Shape, scale: float) -> st.SearchStrategy[np.ndarray]:
    """float64 arrays of the given shape (or shape strategy) with entries in [-scale, scale]."""
    return arrays(np.float64, shape, elements=bounded(scale))


def masks(shape: Shape) -> st.SearchStrategy[np.ndarray]:
    """Boolean arrays of the given shape (True = may attend)."""
    return arrays(np.bool_, shape, elements=st.booleans())


def permutations(n: int) -> st.SearchStrategy[np.ndarray]:
    """A permutation of range(n) as an integer array; it shrinks towards the identity."""
    return st.permutations(range(n)).map(lambda p: np.array(p, dtype=np.int64))


@st.composite
def layer_inputs(draw: st.DrawFn, shape: tuple[int, ...]) -> torch.Tensor:
    """A float64 tensor of the given shape, entries bounded by one of ``INPUT_SCALES``."""
    scale = draw(st.sampled_from(INPUT_SCALES))
    return torch.from_numpy(draw(float_arrays(shape, scale)))


@st.composite
def attention_inputs(
    draw: st.DrawFn, with_mask: bool = True, batched: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """(Q, K, V, mask) with independent sizes and bounded finite entries.

    Shapes: Q (b, n_q, d_k), K (b, n_k, d_k), V (b, n_k, d_v), mask (b, n_q, n_k) boolean or
    None; without ``batched`` the leading b axis is left out. Q and K share a bound drawn from
    ``LOGIT_SCALES``, V's bound is ``VALUE_SCALE``.
    """
    b, n_q, n_k, d_k, d_v = (draw(sizes) for _ in range(5))
    lead = (b,) if batched else ()
    scale = draw(st.sampled_from(LOGIT_SCALES))
    Q = draw(float_arrays((*lead, n_q, d_k), scale))
    K = draw(float_arrays((*lead, n_k, d_k), scale))
    V = draw(float_arrays((*lead, n_k, d_v), VALUE_SCALE))
    mask = draw(masks((*lead, n_q, n_k))) if with_mask else None
    return Q, K, V, mask


def examples(n: int) -> int:
    """``n`` examples under the ``course`` profile, scaled with the profile loaded now.

    For tests whose examples are expensive: the profile's ``max_examples`` would be too many
    for them, but ``HYPOTHESIS_PROFILE=thorough`` should still run them ten times as often.
    Evaluated when the test module is imported, after ``tests/conftest.py`` loaded the profile.
    """
    try:
        course = settings.get_profile("course").max_examples
    except Exception:  # the course profile is not registered (this module used outside pytest)
        return n
    return max(1, round(n * settings.default.max_examples / course))


@contextmanager
def seeded_torch(seed: int) -> Iterator[None]:
    """Run the block with torch's global generator seeded, and restore the generator after.

    For building modules, whose ``__init__`` draws weights from the global generator: the
    weights are the same whatever ran before, and the tests that run after see the generator
    as it was, so the order of the tests does not matter.
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
