"""Input generators shared by the cases: random arrays and masks.

Every generator takes an explicit ``numpy.random.Generator`` so that a case is fully
determined by (seed, params), wherever it is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normal(rng: np.random.Generator, *shape: int, scale: float = 1.0) -> np.ndarray:
    """Independent N(0, scale^2) entries, float64."""
    return rng.normal(0.0, scale, size=shape)


def attention_mask(
    rng: np.random.Generator,
    kind: str | None,
    batch: Sequence[int],
    n_q: int,
    n_k: int,
) -> np.ndarray | None:
    """A boolean mask (True = may attend) of one of the kinds the chapters use.

    None: no mask. "random": (*batch, n_q, n_k), about a third of the entries masked.
    "causal": (n_q, n_k), key j visible to query i when j <= i. "padding": (*batch, 1, n_k),
    a key padding mask broadcast over queries (the last key of each sequence is padding).
    "fully_masked": like "random", but query row 0 sees no key at all. "per_query":
    (*batch, n_q, 1), one answer per query for all of its keys (a last axis of 1 broadcasts);
    query 0 sees every key and about a third of the others see none.
    """
    batch = tuple(batch)
    if kind is None:
        return None
    if kind == "causal":
        return np.tril(np.ones((n_q, n_k), dtype=bool))
    if kind == "padding":
        lengths = rng.integers(1, n_k + 1, size=batch or (1,))
        lengths.flat[0] = n_k - 1 if n_k > 1 else 1
        keep = np.arange(n_k) < lengths.reshape(*(batch or (1,)), 1, 1)  # (*batch, 1, n_k)
        return keep if batch else keep[0]
    if kind in ("random", "fully_masked"):
        mask = rng.random((*batch, n_q, n_k)) > 0.35
        mask[..., :, 0] |= ~mask.any(axis=-1)  # every row keeps at least one key ...
        if kind == "fully_masked":
            mask[..., 0, :] = False  # ... except row 0, which keeps none
        return mask
    if kind == "per_query":
        mask = rng.random((*batch, n_q, 1)) > 0.35
        mask[..., 0, :] = True
        return mask
    raise ValueError(f"unknown mask kind {kind!r}")


def describe_mask(kind: str | None) -> str:
    """The mask kind of :func:`attention_mask` in words."""
    return {
        None: "no mask",
        "random": "a random mask",
        "causal": "a causal mask",
        "padding": "a key padding mask of shape (..., 1, n_k)",
        "fully_masked": "a mask that blocks every key of query 0",
        "per_query": "a mask of shape (..., n_q, 1): some queries see every key, others none",
    }[kind]
