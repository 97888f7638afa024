"""Chapter 7's classic mistakes of the online softmax, each one change to the blockwise update.

The right update (``grader.reference.at_scale``) keeps, after block t of the keys,

    m_t   = max(m_{t-1}, max_{j in B_t} s_j)
    l_t   = l_{t-1} c_t + sum_{j in B_t} exp(s_j - m_t)        c_t = exp(m_{t-1} - m_t)
    acc_t = acc_{t-1} c_t + sum_{j in B_t} exp(s_j - m_t) v_j

and returns acc_T / l_T. Each name of :data:`MISTAKES` changes one part of it. They lived in
the reference itself (a ``mistake`` switch on its loop) until issue 33: ``grader.reference``
holds correct implementations only, and the bugs live here, next to the other chapters'
``chNN_bugs``, for the grader's named bugs (``grader.exercises.ch07``) and the chapter's
table of what each costs. This loop is no reference: it always runs one mistake.
"""

from __future__ import annotations

import math

import numpy as np

MISTAKES = (
    "no_accumulator_rescale",  # acc_t = acc_{t-1} + ...  (l is rescaled)
    "no_sum_rescale",  # l_t = l_{t-1} + ...  (acc is rescaled)
    "block_max",  # m_t = max over block t only, instead of the running max
    "drop_last_block",  # the loop stops before a last, partial block
    "no_max",  # exp(s) with no max subtracted at all: overflows above s ~ 709
    "never_rescaled",  # neither l nor acc is rescaled when the running max grows
    "rescaled_upwards",  # the correction exp(m_new - m_old) >= 1 instead of exp(m_old - m_new)
    "first_block_only",  # the loop returns after its first block
    "last_block_only",  # l and acc overwritten by each block instead of accumulated
)


def online_softmax_with_mistake(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    block_size: int,
    mistake: str,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """The blockwise attention of chapter 7 with one mistake of :data:`MISTAKES`: Q (..., n_q, d_k),
    K (..., n_k, d_k), V (..., n_k, d_v), ``mask`` True = may attend; returns (..., n_q, d_v)."""
    if mistake not in MISTAKES:
        raise ValueError(f"unknown mistake {mistake!r}; known: {', '.join(MISTAKES)}")
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    block_size = int(block_size)
    n_q, d_k = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        batch = np.broadcast_shapes(batch, mask.shape[:-2])

    m = np.full((*batch, n_q, 1), -np.inf)  # running max
    total = np.zeros((*batch, n_q, 1))  # running sum l
    acc = np.zeros((*batch, n_q, d_v))  # running sum of exp(s - m) v
    stop = n_k - n_k % block_size if mistake == "drop_last_block" else n_k
    stop = min(stop, block_size) if mistake == "first_block_only" else stop
    keep_l = mistake in ("no_sum_rescale", "never_rescaled")
    keep_acc = mistake in ("no_accumulator_rescale", "never_rescaled")
    for start in range(0, stop, block_size):
        end = min(start + block_size, n_k)
        s = (Q @ np.swapaxes(K[..., start:end, :], -1, -2)) / math.sqrt(d_k)  # (..., n_q, b)
        if mask is not None:
            s = np.where(np.broadcast_to(mask, (*mask.shape[:-1], n_k))[..., start:end], s, -np.inf)
        block_max = s.max(axis=-1, keepdims=True)  # (..., n_q, 1)
        m_new = block_max if mistake == "block_max" else np.maximum(m, block_max)
        m_new = np.zeros_like(m) if mistake == "no_max" else m_new
        shift = np.where(np.isfinite(m_new), m_new, 0.0)  # (..., n_q, 1); no -inf - -inf
        p = np.exp(s - shift)  # (..., n_q, b)
        with np.errstate(over="ignore", invalid="ignore"):
            exponent = shift - m if mistake == "rescaled_upwards" else m - shift
            correction = np.where(np.isfinite(m), np.exp(exponent), 0.0)  # (..., n_q, 1)
        correction = np.zeros_like(correction) if mistake == "last_block_only" else correction
        total = (total if keep_l else total * correction) + p.sum(-1, keepdims=True)
        acc = (acc if keep_acc else acc * correction) + p @ V[..., start:end, :]  # (..., n_q, d_v)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, acc / np.where(total > 0, total, 1.0), 0.0)  # (..., n_q, d_v)
