"""Scaled dot-product attention, in NumPy and in PyTorch (chapter 3).

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Shapes: Q (..., n_q, d_k), K (..., n_k, d_k), V (..., n_k, d_v); leading batch dimensions
broadcast. ``mask`` is boolean, True = "this query may attend to this key", broadcastable to
the scores' shape (..., n_q, n_k). A query whose keys are all masked gets zero weights and a
zero output. Both functions return ``(output (..., n_q, d_v), weights (..., n_q, n_k))``.

These are written from the formula and never call torch's own attention, so that comparing
them with ``F.scaled_dot_product_attention`` in the tests means something.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from grader.reference.softmax import masked_softmax


def scaled_dot_product_attention(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    mask: np.ndarray | None = None,
    scale: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """NumPy attention; ``scale`` defaults to 1/sqrt(d_k) (other values model classic bugs)."""
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    d_k = Q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    scores = (Q @ np.swapaxes(K, -1, -2)) * scale  # (..., n_q, n_k)
    weights = masked_softmax(scores, mask)  # (..., n_q, n_k), rows sum to 1 or 0
    return weights @ V, weights  # (..., n_q, d_v), (..., n_q, n_k)


def scaled_dot_product_attention_torch(
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    mask: torch.Tensor | None = None,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Differentiable PyTorch attention with the same conventions as the NumPy version.

    Fully masked rows are zero in value and in gradient: their scores are replaced by zeros
    before the softmax (so no -inf - -inf = NaN appears, even in the backward pass) and their
    weights are then multiplied by zero.
    """
    d_k = Q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_k)
    scores = (Q @ K.transpose(-2, -1)) * scale  # (..., n_q, n_k)
    if mask is None:
        weights = torch.softmax(scores, dim=-1)
        return weights @ V, weights
    mask = mask.to(torch.bool).expand(scores.shape)  # (..., n_q, n_k)
    has_key = mask.any(dim=-1, keepdim=True)  # (..., n_q, 1)
    safe = torch.where(has_key, scores, torch.zeros_like(scores))
    safe = safe.masked_fill(~mask & has_key, float("-inf"))
    weights = torch.softmax(safe, dim=-1) * has_key  # fully masked rows -> 0
    return weights @ V, weights  # (..., n_q, d_v), (..., n_q, n_k)
