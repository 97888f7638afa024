"""Hypothesis strategies shared by the reference tests: shapes, arrays and masks."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

sizes = st.integers(min_value=1, max_value=6)


@st.composite
def attention_inputs(draw, with_mask: bool = True):
    """(Q, K, V, mask) with independent sizes, a batch dimension, and finite entries."""
    b, n_q, n_k, d_k, d_v = (draw(sizes) for _ in range(5))
    seed = draw(st.integers(0, 2**32 - 1))
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0]))
    rng = np.random.default_rng(seed)
    Q = rng.normal(0, scale, (b, n_q, d_k))
    K = rng.normal(0, scale, (b, n_k, d_k))
    V = rng.normal(0, 1, (b, n_k, d_v))
    mask = rng.random((b, n_q, n_k)) > draw(st.sampled_from([0.0, 0.5, 1.0])) if with_mask else None
    return Q, K, V, mask
