"""The softmax, its stable form, its masked form and its Jacobian (NumPy).

softmax(z)_i = exp(z_i) / sum_j exp(z_j). Subtracting max(z) first changes nothing
mathematically (the factor exp(-max z) cancels) but keeps every exponent <= 0, so nothing
overflows and at least one term of the sum is exactly 1.
"""

from __future__ import annotations

import numpy as np


def softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    """Numerically stable softmax of ``z`` along ``axis``; the result has the shape of ``z``."""
    z = np.asarray(z, dtype=np.float64)
    shifted = z - np.max(z, axis=axis, keepdims=True)  # every entry <= 0
    e = np.exp(shifted)
    return e / np.sum(e, axis=axis, keepdims=True)


def masked_softmax(scores: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """Softmax over the last axis where ``mask`` (True = may attend) allows it.

    Masked entries get weight exactly 0. A row whose entries are all masked has no
    distribution to normalise: it gets all-zero weights, never NaN (the convention of
    ``torch.nn.functional.scaled_dot_product_attention`` in torch 2.13).
    """
    scores = np.asarray(scores, dtype=np.float64)
    if mask is None:
        return softmax(scores, axis=-1)
    mask = np.broadcast_to(np.asarray(mask, dtype=bool), scores.shape)
    filled = np.where(mask, scores, -np.inf)
    row_max = np.max(filled, axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # fully masked rows: any shift
    e = np.where(mask, np.exp(filled - row_max), 0.0)
    total = np.sum(e, axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def softmax_jacobian(p: np.ndarray) -> np.ndarray:
    """Jacobian of the softmax at the point where softmax(z) = p, shape (n, n).

    d p_i / d z_j = p_i (delta_ij - p_j), that is diag(p) - p p^T. It depends on z only
    through p; its rows (and columns) sum to zero because the outputs always sum to 1.
    """
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != 1:
        raise ValueError(f"softmax_jacobian expects a vector p of shape (n,), got {p.shape}")
    return np.diag(p) - np.outer(p, p)  # (n, n)
