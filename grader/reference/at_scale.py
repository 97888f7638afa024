"""Attention at scale (chapter 7): exact attention block by block, and a key-value cache.

Online softmax. For one query with scores s_1 .. s_n over the keys, attention is

    out = sum_j exp(s_j - m) v_j / sum_j exp(s_j - m),        m = max_j s_j.

The keys are read in blocks B_1, B_2, ... of ``block_size`` keys. After block t we keep

    m_t   = max(m_{t-1}, max_{j in B_t} s_j)                         the running max
    l_t   = l_{t-1} exp(m_{t-1} - m_t) + sum_{j in B_t} exp(s_j - m_t)   the running sum
    acc_t = acc_{t-1} exp(m_{t-1} - m_t) + sum_{j in B_t} exp(s_j - m_t) v_j

and out = acc_T / l_T. Whenever the max grows, everything summed so far was computed
relative to the old max and is multiplied by exp(m_{t-1} - m_t) <= 1 to be expressed
relative to the new one. No (n_q, n_k) matrix is ever built: the largest temporary is
(..., n_q, block_size). Masked keys (mask False) get score -inf and contribute nothing; a
query with no visible key ends with l = 0 and gets a zero output, as in chapter 3.

KV cache. A decoder that generates one token at a time recomputes, at step t, the keys and
values of all t earlier tokens if it runs the full causal pass again. They never change
(position i only sees positions <= i), so a cache keeps them: each step projects only the
new tokens and appends their keys and values, and the new queries attend to everything
cached. The outputs are exactly those of the full causal pass.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from grader.reference.multi_head import AttentionProjections, merge_heads, split_heads
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch


def _online_softmax(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    block_size: int,
    mask: np.ndarray | None,
) -> np.ndarray:
    Q, K, V = (np.asarray(a, dtype=np.float64) for a in (Q, K, V))
    if int(block_size) < 1:
        raise ValueError(f"block_size must be a positive integer, got {block_size}")
    block_size = int(block_size)
    n_q, d_k = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        batch = np.broadcast_shapes(batch, mask.shape[:-2])
    scale = 1.0 / math.sqrt(d_k)

    m = np.full((*batch, n_q, 1), -np.inf)  # running max of the scores seen so far
    total = np.zeros((*batch, n_q, 1))  # running sum l of exp(s - m)
    acc = np.zeros((*batch, n_q, d_v))  # running sum of exp(s - m) v
    for start in range(0, n_k, block_size):
        end = min(start + block_size, n_k)
        K_b, V_b = K[..., start:end, :], V[..., start:end, :]  # (..., b, d_k), (..., b, d_v)
        s = (Q @ np.swapaxes(K_b, -1, -2)) * scale  # (..., n_q, b)
        if mask is not None:
            visible = np.broadcast_to(mask, (*mask.shape[:-1], n_k))[..., start:end]
            s = np.where(visible, s, -np.inf)  # (..., n_q, b)
        block_max = s.max(axis=-1, keepdims=True)  # (..., n_q, 1)
        m_new = np.maximum(m, block_max)  # (..., n_q, 1)
        # Rows that have seen no visible key yet keep m = -inf: shift them by 0 instead,
        # so that exp(-inf - shift) = 0 and no -inf - (-inf) = NaN appears.
        shift = np.where(np.isfinite(m_new), m_new, 0.0)  # (..., n_q, 1)
        p = np.exp(s - shift)  # (..., n_q, b), entries in [0, 1]
        with np.errstate(invalid="ignore"):
            correction = np.where(np.isfinite(m), np.exp(m - shift), 0.0)  # (..., n_q, 1), <= 1
        total = total * correction + p.sum(-1, keepdims=True)  # (..., n_q, 1)
        acc = acc * correction + p @ V_b  # (..., n_q, d_v)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, acc / np.where(total > 0, total, 1.0), 0.0)  # (..., n_q, d_v)


def online_softmax_attention(
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    block_size: int,
    mask: np.ndarray | None = None,
) -> np.ndarray:
    """Exact scaled dot-product attention computed over blocks of ``block_size`` keys.

    Q (..., n_q, d_k), K (..., n_k, d_k), V (..., n_k, d_v); ``mask`` boolean, True = may
    attend, broadcastable to (..., n_q, n_k). Returns out (..., n_q, d_v), equal to
    ``scaled_dot_product_attention(Q, K, V, mask)[0]`` for every ``block_size`` >= 1
    (including sizes that do not divide n_k, 1, and sizes >= n_k), without ever holding more
    than (..., n_q, block_size) scores.
    """
    return _online_softmax(Q, K, V, block_size, mask)


# ---------------------------------------------------------------- the key-value cache


class KVCache:
    """The keys and values of every position decoded so far, per batch element and head.

    ``append(k_new, v_new)`` takes k_new (B, h, t_new, d_k) and v_new (B, h, t_new, d_v),
    appends them after the cached positions (along the sequence axis, -2) and returns the
    whole cache (k (B, h, t, d_k), v (B, h, t, d_v)). ``k`` and ``v`` are None before the
    first append; ``len(cache)`` is the number of cached positions t.
    """

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k_new: torch.Tensor, v_new: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.k is None or self.v is None:  # both or neither: they are set together
            self.k, self.v = k_new, v_new  # (B, h, t_new, d_k), (B, h, t_new, d_v)
        else:
            self.k = torch.cat([self.k, k_new], dim=-2)  # (B, h, t + t_new, d_k)
            self.v = torch.cat([self.v, v_new], dim=-2)  # (B, h, t + t_new, d_v)
        return self.k, self.v

    def nbytes(self) -> int:
        """Memory held by the cached keys and values, in bytes."""
        if self.k is None or self.v is None:
            return 0
        return self.k.element_size() * self.k.nelement() + self.v.element_size() * self.v.nelement()


def chunk_causal_mask(start: int, t_new: int) -> torch.Tensor:
    """Bool (t_new, start + t_new): new token i sits at position start + i and may attend to
    positions j <= start + i, that is to every cached position and to the new ones up to itself."""
    positions = torch.arange(start + t_new)  # (t,)
    return positions[None, :] <= (start + torch.arange(t_new))[:, None]  # (t_new, t)


class CachedSelfAttention(AttentionProjections):
    """Causal multi-head self-attention that decodes chunk by chunk with a :class:`KVCache`.

    Same parameters as chapter 4's ``MultiHeadAttention`` (nn.Linear ``W_q``, ``W_k``,
    ``W_v``, ``W_o``) and ``self.cache``, a KVCache. ``forward(x_new (B, t_new, d_model))``
    projects only the new tokens, appends their keys and values to the cache, lets the new
    queries attend to all cached positions up to their own (causal), and returns
    (B, t_new, d_model). Feeding a sequence in any chunks gives, chunk for chunk, the output
    of the full causal pass ``MultiHeadAttention(x, x, x, causal_mask(n))``. ``reset()``
    empties the cache for a new sequence.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__(d_model, num_heads, bias)
        self.cache = KVCache()

    def reset(self) -> None:
        self.cache = KVCache()

    def forward(self, x_new: torch.Tensor) -> torch.Tensor:
        h = self.num_heads
        start = len(self.cache)  # positions already decoded
        t_new = x_new.shape[1]
        q = split_heads(self.W_q(x_new), h)  # (B, h, t_new, d_head)
        k_new = split_heads(self.W_k(x_new), h)  # (B, h, t_new, d_head)
        v_new = split_heads(self.W_v(x_new), h)  # (B, h, t_new, d_head)
        k, v = self.cache.append(k_new, v_new)  # (B, h, start + t_new, d_head) each
        mask = chunk_causal_mask(start, t_new).to(x_new.device)  # (t_new, start + t_new)
        heads, _ = scaled_dot_product_attention_torch(q, k, v, mask)  # (B, h, t_new, d_head)
        return self.W_o(merge_heads(heads))  # (B, t_new, d_model)


def decode_in_chunks(layer: nn.Module, x: torch.Tensor, chunks: list[int]) -> torch.Tensor:
    """Feed x (B, n, d_model) to a cached layer in consecutive chunks of the given sizes
    (summing to n) and concatenate the outputs: (B, n, d_model)."""
    if sum(chunks) != x.shape[1]:
        raise ValueError(f"chunks {chunks} do not add up to n={x.shape[1]}")
    outs, start = [], 0
    for size in chunks:
        outs.append(layer(x[:, start : start + size]))  # (B, size, d_model)
        start += size
    return torch.cat(outs, dim=1)  # (B, n, d_model)
