"""Attention in today's language models (chapter 9): rotary positions, grouped-query
attention, sliding windows with sinks and a rolling cache, and FlashAttention's backward.

Rotary position embeddings (RoPE). Split the d features of a query or key into d/2 pairs
and rotate pair i of the vector at position m by the angle m * theta_i, with
theta_i = base^(-2i/d). A rotation R(a) satisfies R(a)^T R(b) = R(b - a), so

    rope(q, m) . rope(k, p) = q^T R(m theta)^T R(p theta) k = q^T R((p - m) theta) k,

which depends on the positions only through the offset p - m, and every norm is kept.
Which features form a pair is a convention, and the two in use do not mix: Llama and
GPT-NeoX pair feature i with feature i + d/2 (the "halves", :func:`apply_rope`); the
RoFormer paper and GPT-J pair features 2i and 2i + 1 (:func:`apply_rope_interleaved`).
The two are the same rotation after permuting the features, so weights trained with one
convention need their projection columns permuted to work with the other.

Grouped-query attention (GQA). h query heads share g key/value heads (g divides h): query
head i reads key/value head i // (h / g), so consecutive query heads form a group. g = h is
multi-head attention, g = 1 multi-query attention; the KV cache shrinks by h / g.

Sliding windows and sinks. A query at position p sees key j when j <= p and p - j < window,
or when j < sinks (the first tokens, kept as "attention sinks", StreamingLLM). A rolling
cache stores only those keys: the first ``sinks`` positions and the last ``window`` ones.

FlashAttention. The forward pass computes exact attention tile by tile with the online
softmax of chapter 7 and keeps, per query row, only its output O and its logsumexp
L = m + log(l) = log sum_j exp(s_j). The backward pass, given dO, never stores the weights:
with S = Q K^T / sqrt(d) and P = exp(S - L) (recomputed tile by tile from L),

    dV = P^T dO,    dP = dO V^T,    dS = P * (dP - D),    D = rowsum(dO * O) = rowsum(P * dP),
    dQ = dS K / sqrt(d),    dK = dS^T Q / sqrt(d).

(dS is the softmax's Jacobian applied row by row: dS_ij = P_ij (dP_ij - sum_k P_ik dP_ik),
and sum_k P_ik dP_ik = sum_k P_ik (dO_i . v_k) = dO_i . O_i.) Each term is a sum over tiles,
so the largest temporary is one (block, block) tile. Causal attention aligns the queries
with the last n_q of the n_k positions (bottom-right, as decoding with a cache does and as
FlashAttention-2 does since 2.1); a query with no visible key gets a zero output and zero
gradients.
"""

from __future__ import annotations

import math

import torch

# --------------------------------------------------------------------------- rotary positions


def rope_angles(positions: torch.Tensor, d: int, base: float = 10000.0) -> torch.Tensor:
    """The rotation angles m * theta_i, theta_i = base^(-2i/d): (..., n) -> (..., n, d/2), float64."""
    if d % 2:
        raise ValueError(f"RoPE needs an even number of features, got d = {d}")
    i = torch.arange(d // 2, dtype=torch.float64)  # (d/2,)
    theta = float(base) ** (-2.0 * i / d)  # (d/2,)
    return torch.as_tensor(positions).to(torch.float64)[..., None] * theta  # (..., n, d/2)


def _rotate(x1: torch.Tensor, x2: torch.Tensor, angles: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate each pair (x1, x2) by its angle: (x1 cos - x2 sin, x1 sin + x2 cos)."""
    cos, sin = angles.cos().to(x1.dtype), angles.sin().to(x1.dtype)  # (..., n, d/2)
    return x1 * cos - x2 * sin, x1 * sin + x2 * cos


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding, halves convention (Llama, GPT-NeoX).

    x (..., n, d) with d even, positions (n,) int64 (any integers: a cache offset is just
    larger positions). Feature i is paired with feature i + d/2 and the pair is rotated by
    positions[m] * base^(-2i/d). Returns the same shape and dtype; ``rope(q, m) . rope(k, p)``
    depends only on p - m.
    """
    d = x.shape[-1]
    angles = rope_angles(positions, d, base)  # (n, d/2)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]  # (..., n, d/2) each
    r1, r2 = _rotate(x1, x2, angles)
    return torch.cat([r1, r2], dim=-1)  # (..., n, d)


def apply_rope_interleaved(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotary position embedding, interleaved convention (the RoFormer paper, GPT-J).

    As :func:`apply_rope` but feature 2i is paired with feature 2i + 1.
    """
    d = x.shape[-1]
    angles = rope_angles(positions, d, base)  # (n, d/2)
    r1, r2 = _rotate(x[..., 0::2], x[..., 1::2], angles)  # (..., n, d/2) each
    return torch.stack([r1, r2], dim=-1).flatten(-2)  # (..., n, d): r1_0, r2_0, r1_1, ...


def halves_to_interleaved(x: torch.Tensor) -> torch.Tensor:
    """The feature permutation between the conventions: features laid out as halves
    (x_0..x_{d/2-1}, y_0..y_{d/2-1}) reordered as pairs (x_0, y_0, x_1, y_1, ...).
    ``apply_rope_interleaved(halves_to_interleaved(x), m) == halves_to_interleaved(apply_rope(x, m))``."""
    d = x.shape[-1]
    return torch.stack([x[..., : d // 2], x[..., d // 2 :]], dim=-1).flatten(-2)  # (..., d)


# --------------------------------------------------------------------------- grouped-query attention


def _masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Softmax over the last axis with masked entries (False) at zero weight; a row with no
    visible entry gets all-zero weights (and zero gradients), never NaN."""
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    m = scores.detach().amax(dim=-1, keepdim=True)  # (..., 1); softmax is shift-invariant
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(scores - m)  # (..., n_k); exp(-inf) = 0
    total = e.sum(dim=-1, keepdim=True)  # (..., 1)
    return e / torch.where(total > 0, total, torch.ones_like(total))


def gqa_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Grouped-query scaled dot-product attention.

    q (B, h, n_q, d), k (B, g, n_k, d), v (B, g, n_k, d_v) with g dividing h; query head i
    uses key/value head i // (h / g). mask bool, True = may attend, broadcastable to
    (B, h, n_q, n_k). Returns (out (B, h, n_q, d_v), weights (B, h, n_q, n_k)), equal to
    ``F.scaled_dot_product_attention(q, k, v, mask, enable_gqa=True)`` and its weights. A
    query with no visible key gets zero weights and a zero output. The keys are never copied
    h / g times: the query heads are viewed as (g, h / g) groups instead.
    """
    *batch, h, n_q, d = q.shape
    g, n_k, d_v = k.shape[-3], k.shape[-2], v.shape[-1]
    if g < 1 or h % g:
        raise ValueError(f"the number of query heads ({h}) must be a multiple of the key/value heads ({g})")
    r = h // g
    qg = q.reshape(*batch, g, r, n_q, d)  # (B, g, r, n_q, d): head i = group i // r, member i % r
    scores = qg @ k.unsqueeze(-3).transpose(-1, -2) / math.sqrt(d)  # (B, g, r, n_q, n_k)
    if mask is not None:
        mask = torch.as_tensor(mask, dtype=torch.bool)
        mask = mask.broadcast_to((*batch, h, n_q, n_k)).reshape(*batch, g, r, n_q, n_k)
    weights = _masked_softmax(scores, mask)  # (B, g, r, n_q, n_k)
    out = weights @ v.unsqueeze(-3)  # (B, g, r, n_q, d_v)
    return out.reshape(*batch, h, n_q, d_v), weights.reshape(*batch, h, n_q, n_k)


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, d_head: int, seq_len: int, batch: int = 1, bytes_per_value: int = 2
) -> int:
    """Bytes of a KV cache: keys and values (2) per layer, key/value head, feature and position."""
    return 2 * n_layers * n_kv_heads * d_head * seq_len * batch * bytes_per_value


# --------------------------------------------------------------------------- windows, sinks, rolling cache


def window_visible(
    query_pos: torch.Tensor, key_pos: torch.Tensor, window: int, sinks: int = 0
) -> torch.Tensor:
    """Bool (n_q, n_k): key j visible to query p when j <= p and (p - j < window or j < sinks)."""
    p, j = query_pos[:, None], key_pos[None, :]  # (n_q, 1), (1, n_k)
    return (j <= p) & ((p - j < window) | (j < sinks))


def sliding_window_mask(n_q: int, n_k: int, window: int, sinks: int = 0) -> torch.Tensor:
    """Bool (n_q, n_k) for queries at the last n_q of n_k positions (query i at n_k - n_q + i):
    key j visible when j <= position and (position - j < window or j < sinks)."""
    if not 0 <= n_q <= n_k:
        raise ValueError(f"need 0 <= n_q <= n_k, got n_q = {n_q}, n_k = {n_k}")
    if window < 1 or sinks < 0:
        raise ValueError(f"need window >= 1 and sinks >= 0, got window = {window}, sinks = {sinks}")
    query_pos = torch.arange(n_k - n_q, n_k)  # (n_q,)
    return window_visible(query_pos, torch.arange(n_k), window, sinks)


class RollingKVCache:
    """A KV cache of bounded size: the first ``sinks`` positions and the last ``window`` ones.

    ``append(k, v)`` takes a chunk k (B, g, t, d), v (B, g, t, d_v) at the next t positions,
    adds it after what the cache holds, evicts every position j with sinks <= j < total - window,
    and returns what it keeps: (keys (B, g, kept, d), values (B, g, kept, d_v), positions
    (kept,) int64, ascending absolute positions), kept <= sinks + window whatever the length.
    ``len(cache)`` is the number of positions seen. Decoding one token at a time, the new
    query at position p attends over exactly what append returns (every key it may see under
    :func:`sliding_window_mask` is kept), so the outputs equal full attention under that mask.
    """

    def __init__(self, window: int, sinks: int = 0) -> None:
        if window < 1 or sinks < 0:
            raise ValueError(f"need window >= 1 and sinks >= 0, got window = {window}, sinks = {sinks}")
        self.window, self.sinks = int(window), int(sinks)
        self.k: torch.Tensor | None = None  # (B, g, kept, d)
        self.v: torch.Tensor | None = None  # (B, g, kept, d_v)
        self.positions = torch.zeros(0, dtype=torch.int64)  # (kept,)
        self.seen = 0

    def __len__(self) -> int:
        return self.seen

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        t = k.shape[-2]
        new_pos = torch.arange(self.seen, self.seen + t, dtype=torch.int64)  # (t,)
        keys = k if self.k is None else torch.cat([self.k, k], dim=-2)  # (B, g, kept + t, d)
        values = v if self.v is None else torch.cat([self.v, v], dim=-2)  # (B, g, kept + t, d_v)
        positions = torch.cat([self.positions, new_pos])  # (kept + t,)
        self.seen += t
        keep = (positions < self.sinks) | (positions >= self.seen - self.window)  # (kept + t,)
        self.k, self.v, self.positions = keys[..., keep, :], values[..., keep, :], positions[keep]
        return self.k, self.v, self.positions


def decode_with_rolling_cache(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, sinks: int = 0
) -> torch.Tensor:
    """Decode q (B, h, n, d), k (B, g, n, d), v (B, g, n, d_v) one token at a time through a
    :class:`RollingKVCache`; returns (B, h, n, d_v), equal to
    ``gqa_attention(q, k, v, sliding_window_mask(n, n, window, sinks))[0]``."""
    cache, outs = RollingKVCache(window, sinks), []
    for p in range(q.shape[-2]):
        keys, values, positions = cache.append(k[..., p : p + 1, :], v[..., p : p + 1, :])
        mask = window_visible(torch.tensor([p]), positions, window, sinks)  # (1, kept)
        outs.append(gqa_attention(q[..., p : p + 1, :], keys, values, mask)[0])  # (B, h, 1, d_v)
    return torch.cat(outs, dim=-2)  # (B, h, n, d_v)


# --------------------------------------------------------------------------- FlashAttention


def _tile_visible(q_start: int, q_end: int, k_start: int, k_end: int, offset: int) -> torch.Tensor:
    """Bool (q_end - q_start, k_end - k_start): causal visibility inside one tile, query i at
    position offset + i (offset = n_k - n_q, bottom-right alignment)."""
    query_pos = torch.arange(q_start, q_end) + offset  # (bq,)
    return torch.arange(k_start, k_end)[None, :] <= query_pos[:, None]  # (bq, bk)


def _blocks(n: int, block_size: int) -> list[tuple[int, int]]:
    return [(s, min(s + block_size, n)) for s in range(0, n, block_size)]


def flash_forward(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, block_size: int, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Tiled exact attention: out (..., n_q, d_v) and the row logsumexp L (..., n_q) (-inf for a
    query that sees no key, whose output is zero). The largest temporary is one tile."""
    n_q, d = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    scale, offset = 1.0 / math.sqrt(d), n_k - n_q
    out = Q.new_zeros((*Q.shape[:-1], d_v))  # (..., n_q, d_v)
    L = Q.new_full(Q.shape[:-1], float("-inf"))  # (..., n_q)
    for qs, qe in _blocks(n_q, block_size):
        m = Q.new_full((*Q.shape[:-2], qe - qs, 1), float("-inf"))  # running max (..., bq, 1)
        total = Q.new_zeros((*Q.shape[:-2], qe - qs, 1))  # running sum of exp(s - m)
        acc = Q.new_zeros((*Q.shape[:-2], qe - qs, d_v))  # running sum of exp(s - m) v
        for ks, ke in _blocks(n_k, block_size):
            if causal and ks > qe - 1 + offset:
                break  # this tile and every later one lie above the diagonal
            s = Q[..., qs:qe, :] @ K[..., ks:ke, :].transpose(-1, -2) * scale  # (..., bq, bk)
            if causal:
                s = s.masked_fill(~_tile_visible(qs, qe, ks, ke, offset), float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))  # (..., bq, 1)
            shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            p = torch.exp(s - shift)  # (..., bq, bk)
            correction = torch.exp(m - shift)  # (..., bq, 1); 0 while m = -inf
            total = total * correction + p.sum(dim=-1, keepdim=True)
            acc = acc * correction + p @ V[..., ks:ke, :]
            m = m_new
        seen = total > 0  # (..., bq, 1)
        out[..., qs:qe, :] = torch.where(seen, acc / torch.where(seen, total, torch.ones_like(total)), 0.0)
        L[..., qs:qe] = torch.where(
            seen, m + torch.log(torch.where(seen, total, torch.ones_like(total))), -math.inf
        )[..., 0]
    return out, L


def flash_backward(
    dO: torch.Tensor,
    Q: torch.Tensor,
    K: torch.Tensor,
    V: torch.Tensor,
    out: torch.Tensor,
    L: torch.Tensor,
    block_size: int,
    causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV tile by tile from the saved out and L (see the module's docstring)."""
    n_q, d = Q.shape[-2:]
    n_k = K.shape[-2]
    scale, offset = 1.0 / math.sqrt(d), n_k - n_q
    D = (dO * out).sum(dim=-1, keepdim=True)  # (..., n_q, 1)
    # A query with no visible key has L = -inf; exp(s - (+inf)) = 0 gives it P = 0.
    L_safe = torch.where(torch.isfinite(L), L, torch.full_like(L, math.inf))[..., None]  # (..., n_q, 1)
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    for ks, ke in _blocks(n_k, block_size):
        K_b, V_b = K[..., ks:ke, :], V[..., ks:ke, :]  # (..., bk, d), (..., bk, d_v)
        for qs, qe in _blocks(n_q, block_size):
            if causal and ks > qe - 1 + offset:
                continue  # no query of this block sees these keys
            s = Q[..., qs:qe, :] @ K_b.transpose(-1, -2) * scale  # (..., bq, bk)
            if causal:
                s = s.masked_fill(~_tile_visible(qs, qe, ks, ke, offset), float("-inf"))
            p = torch.exp(s - L_safe[..., qs:qe, :])  # (..., bq, bk), the weights recomputed
            dO_b = dO[..., qs:qe, :]  # (..., bq, d_v)
            dV[..., ks:ke, :] += p.transpose(-1, -2) @ dO_b  # (..., bk, d_v)
            dP = dO_b @ V_b.transpose(-1, -2)  # (..., bq, bk)
            dS = p * (dP - D[..., qs:qe, :])  # (..., bq, bk)
            dQ[..., qs:qe, :] += dS @ K_b * scale  # (..., bq, d)
            dK[..., ks:ke, :] += dS.transpose(-1, -2) @ Q[..., qs:qe, :] * scale  # (..., bk, d)
    return dQ, dK, dV


class FlashAttention(torch.autograd.Function):
    """Exact scaled dot-product attention whose forward and backward never form an (n_q, n_k)
    matrix. ``FlashAttention.apply(Q, K, V, block_size, causal)`` with Q (..., n_q, d),
    K (..., n_k, d), V (..., n_k, d_v) (the same leading axes) returns out (..., n_q, d_v).

    forward saves only Q, K, V, out and the row logsumexp L; backward(dO) recomputes each
    tile's weights P = exp(S - L) and returns dQ, dK, dV (None for block_size and causal),
    equal to autograd through plain attention. ``causal`` puts query i at position
    n_k - n_q + i; a query that sees no key gets a zero output and zero gradients.
    """

    @staticmethod
    def forward(ctx, Q, K, V, block_size, causal=False):  # noqa: ANN001, ANN205 (autograd's signature)
        if int(block_size) < 1:
            raise ValueError(f"block_size must be a positive integer, got {block_size}")
        out, L = flash_forward(Q, K, V, int(block_size), bool(causal))
        ctx.save_for_backward(Q, K, V, out, L)
        ctx.block_size, ctx.causal = int(block_size), bool(causal)
        return out

    @staticmethod
    def backward(ctx, dO):  # noqa: ANN001, ANN205
        Q, K, V, out, L = ctx.saved_tensors
        dQ, dK, dV = flash_backward(dO, Q, K, V, out, L, ctx.block_size, ctx.causal)
        return dQ, dK, dV, None, None


def flash_attention(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, block_size: int = 64, causal: bool = False
) -> torch.Tensor:
    """``FlashAttention.apply`` with keyword arguments."""
    return FlashAttention.apply(Q, K, V, block_size, causal)


def plain_attention(Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, causal: bool = False) -> torch.Tensor:
    """The naive attention FlashAttention must equal: the whole (n_q, n_k) matrix, autograd's
    backward. Causal with the same bottom-right alignment; unseen rows zero."""
    n_q, n_k = Q.shape[-2], K.shape[-2]
    mask = _tile_visible(0, n_q, 0, n_k, n_k - n_q) if causal else None
    scores = Q @ K.transpose(-1, -2) / math.sqrt(Q.shape[-1])  # (..., n_q, n_k)
    return _masked_softmax(scores, mask) @ V  # (..., n_q, d_v)
