"""What a failing attention's weights say, in sentences: shared by every exercise that returns
masked attention weights (scaled dot-product attention, NumPy and PyTorch; multi-head
attention)."""

from __future__ import annotations

import numpy as np

from attention_learner.spec import Arrays, Case, Inputs
from attention_learner.tolerance import all_close


def attention_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    """Extra sentences: NaN on fully masked rows, underflowed rows, rows that do not sum to 1.

    ``inputs["mask"]`` (True = may attend, or None) must broadcast to the weights' shape
    (..., n_q, n_k).
    """
    hints: list[str] = []
    mask = inputs.get("mask")
    weights = got.get("weights")
    if weights is None or weights.shape != expected["weights"].shape:
        return hints
    if mask is None:
        mask = np.ones(weights.shape, dtype=bool)
    empty = ~np.broadcast_to(mask, weights.shape).any(axis=-1)  # (..., n_q)
    lost = ~empty & (np.isnan(weights).any(axis=-1) | (np.nansum(np.abs(weights), axis=-1) == 0))
    if lost.any():
        hints.append(
            f"{int(lost.sum())} queries that may see some key got NaN or all-zero weights, so "
            "every exp() of their row underflowed to 0: subtract from each query's scores the "
            "maximum of that query's own visible scores (after masking, axis=-1, keepdims)."
        )
    if empty.any() and np.isnan(weights[empty]).any():
        hints.append(
            "Rows whose keys are all masked came out NaN (a softmax of all -inf is 0/0): "
            "give those rows zero weights and a zero output."
        )
    row_sums = np.nansum(weights, axis=-1)[~empty]
    if row_sums.size and not all_close(row_sums, 1.0, Case.atol, Case.rtol):  # the cases' tolerance
        hints.append("The weights of each query should sum to 1 over the keys (last axis).")
    return hints
