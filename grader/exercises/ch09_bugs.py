"""Chapter 9's classic bugs as models: RoPE's pairing, sign, positions and frequencies; the
grouped-query head mapping; the window's off-by-ones and sinks; the rolling cache's evictions
and positions; FlashAttention's forward and backward mistakes. Each model computes, on a case's
inputs, what the mistaken code outputs, so that a failing output that matches is named."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attention_learner.cases.ch09 import rolling_bounds
from grader.reference.modern_attention import (
    _masked_softmax,
    _rotate,
    apply_rope,
    apply_rope_interleaved,
    gqa_attention,
)

# ---------------------------------------------------------------- RoPE


def rope_model(inputs: dict[str, Any], mistake: str, interleaved: bool) -> dict[str, Any]:
    """apply_rope (halves, or interleaved) with one mistake: "pairing" (the other convention),
    "sign" (rotated by -angle), "restart" (positions 0..n-1 instead of those given),
    "frequencies" (theta_i = base^(-i/d) instead of base^(-2i/d))."""
    dtype = getattr(torch, inputs["dtype"])
    x = torch.tensor(inputs["x"], dtype=dtype)
    positions = torch.from_numpy(inputs["positions"].copy())
    base = inputs["base"]
    rope = apply_rope_interleaved if interleaved else apply_rope
    if mistake == "pairing":
        rope = apply_rope if interleaved else apply_rope_interleaved
    elif mistake == "sign":
        positions = -positions
    elif mistake == "restart":
        if torch.equal(positions, torch.arange(x.shape[-2])):
            return {}  # positions 0..n-1 given: the mistake changes nothing here
        positions = torch.arange(x.shape[-2])
    elif mistake == "frequencies":
        d = x.shape[-1]
        angles = positions.double()[:, None] * base ** (-torch.arange(d // 2, dtype=torch.float64) / d)
        if interleaved:
            r1, r2 = _rotate(x[..., 0::2], x[..., 1::2], angles)
            return {"output": torch.stack([r1, r2], -1).flatten(-2), "same_dtype": np.array([True])}
        r1, r2 = _rotate(x[..., : d // 2], x[..., d // 2 :], angles)
        return {"output": torch.cat([r1, r2], -1), "same_dtype": np.array([True])}
    return {"output": rope(x, positions, base), "same_dtype": np.array([True])}


def rope_bugs(interleaved: bool) -> dict[str, Any]:
    other = (
        "halves, feature i with feature i + d/2 (the Llama / GPT-NeoX convention), instead of the "
        "interleaved pairs 2i, 2i + 1 (RoFormer / GPT-J)"
        if interleaved
        else "interleaved pairs 2i, 2i + 1 (the RoFormer / GPT-J convention) instead of halves, feature i "
        "with feature i + d/2 (Llama / GPT-NeoX): weights trained with one do not work with the other"
    )
    return {
        other: lambda i: rope_model(i, "pairing", interleaved),
        "the rotation angle's sign flipped: each pair was rotated by -m theta_i (x1 cos + x2 sin, "
        "-x1 sin + x2 cos) instead of (x1 cos - x2 sin, x1 sin + x2 cos)": lambda i: rope_model(
            i, "sign", interleaved
        ),
        "positions restarting at 0: row m was rotated by m instead of by positions[m] (after a cache, "
        "the new tokens sit at the cache's offset)": lambda i: rope_model(i, "restart", interleaved),
        "frequencies base^(-i/d) instead of base^(-2i/d) (i counts pairs, 0 .. d/2 - 1)": (
            lambda i: rope_model(i, "frequencies", interleaved)
        ),
    }


# ---------------------------------------------------------------- grouped-query attention


def gqa_tensors(
    inputs: dict[str, Any],
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The case's q, k, v and mask (None: no mask) as tensors, for the reference and the bug models."""
    q, k, v = (torch.from_numpy(inputs[n].copy()) for n in ("q", "k", "v"))
    mask = None if inputs["mask"] is None else torch.from_numpy(inputs["mask"].copy())
    return q, k, v, mask


def gqa_model(inputs: dict[str, Any], mistake: str) -> dict[str, Any]:
    q, k, v, mask = gqa_tensors(inputs)
    h, g = q.shape[-3], k.shape[-3]
    if mistake == "repeat":  # k.repeat(1, h // g, 1, 1): query head i reads head i % g
        if g in (1, h):
            return {}
        idx = torch.arange(h) % g
        k, v = k[:, idx], v[:, idx]
    elif mistake == "no_scale":
        q = q * math.sqrt(q.shape[-1])
    elif mistake == "inverted":
        if mask is None:
            return {}
        mask = ~mask
    out, weights = gqa_attention(q, k, v, mask)
    return {"output": out, "weights": weights}


def gqa_query_axis(inputs: dict[str, Any]) -> dict[str, Any]:
    """Weights normalised over the queries (dim=-2) instead of the keys."""
    q, k, v, mask = gqa_tensors(inputs)
    r = q.shape[-3] // k.shape[-3]
    k_full, v_full = k.repeat_interleave(r, dim=-3), v.repeat_interleave(r, dim=-3)
    scores = q @ k_full.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, h, n_q, n_k)
    if mask is not None:
        mask = mask.broadcast_to(scores.shape)
    weights = _masked_softmax(scores.transpose(-1, -2), None if mask is None else mask.transpose(-1, -2))
    weights = weights.transpose(-1, -2)
    return {"output": weights @ v_full, "weights": weights}


GQA_BUGS = {
    "the repeat head mapping: query head i used key/value head i % g (k.repeat(1, h // g, 1, 1) tiles "
    "the heads); query head i reads key/value head i // (h / g), consecutive query heads share one "
    "(k.repeat_interleave(h // g, dim=1))": lambda i: gqa_model(i, "repeat"),
    "the scores were not divided by sqrt(d)": lambda i: gqa_model(i, "no_scale"),
    "the mask looks inverted (True = may attend)": lambda i: gqa_model(i, "inverted"),
    "the weights sum to 1 along the wrong axis (over the queries, not the keys)": gqa_query_axis,
}


# ---------------------------------------------------------------- the sliding window


def window_model(inputs: dict[str, Any], mistake: str) -> dict[str, Any]:
    n_q, n_k, w, sinks = (inputs[n] for n in ("n_q", "n_k", "window", "sinks"))
    p = torch.arange(n_k - n_q, n_k)[:, None] if mistake != "top_left" else torch.arange(n_q)[:, None]
    j = torch.arange(n_k)[None, :]
    recent = {"over": p - j <= w, "under": p - j < w - 1, "inside": p - j < w - sinks}.get(mistake, p - j < w)
    if mistake == "future_sinks":
        return {"mask": ((j <= p) & (p - j < w)) | (j < sinks)}
    return {"mask": (j <= p) & (recent | (j < sinks))}


WINDOW_BUGS = {
    "a window that is off by one: position - j <= window lets window + 1 keys through (the query "
    "itself and the window - 1 before it make window keys)": lambda i: window_model(i, "over"),
    "a window that is off by one: only window - 1 keys are visible (position - j < window - 1); the "
    "query itself and the window - 1 keys before it make window keys": lambda i: window_model(i, "under"),
    "sinks counted inside the window: the sinks come on top of the window's last `window` keys, they "
    "do not take its place (position - j < window, or j < sinks)": lambda i: window_model(i, "inside"),
    "the queries placed at the first n_q positions instead of the last n_q (query i sits at position "
    "n_k - n_q + i)": lambda i: window_model(i, "top_left"),
    "sinks visible to queries that come before them: a sink j is seen only when j <= position, like "
    "every key": lambda i: window_model(i, "future_sinks"),
}


# ---------------------------------------------------------------- the rolling cache


def rolling_model(inputs: dict[str, Any], mistake: str | None) -> dict[str, Any]:
    """What append returns at each step (concatenated, as the case reports it) for a cache with
    one mistake, simulated as the mistaken code runs: positions labelled and evicted by its rule."""
    w, sinks = inputs["window"], inputs["sinks"]
    k, v = inputs["k"], inputs["v"]
    labels, rows = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)  # what the cache holds
    keys, values, positions, kept = [], [], [], []
    for a, b in rolling_bounds(inputs["chunks"]):
        new = np.arange(b - a) if mistake == "restart" else np.arange(a, b)
        labels, rows = np.concatenate([labels, new]), np.concatenate([rows, np.arange(a, b)])
        recent_by_mistake: dict[str | None, int] = {
            "inside": b - max(w - sinks, 0),
            "over": b - w - 1,
            "under": b - w + 1,
        }
        recent = recent_by_mistake.get(mistake, b - w)
        keep = labels >= recent if mistake == "no_sinks" else (labels < sinks) | (labels >= recent)
        labels, rows = labels[keep], rows[keep]
        keys.append(k[:, :, rows])
        values.append(v[:, :, rows])
        shown = np.arange(len(labels)) if mistake == "relative" else labels
        positions.append(shown.astype(np.float64))
        kept.append(float(len(labels)))
    return {
        "keys": np.concatenate(keys, axis=-2),
        "values": np.concatenate(values, axis=-2),
        "positions": np.concatenate(positions),
        "kept": np.array(kept),
        "lengths": np.cumsum(inputs["chunks"]).astype(np.float64),
    }


ROLLING_BUGS = {
    "a cache that drops the sinks: the first `sinks` positions must stay whatever the length, beside "
    "the last `window`": lambda i: rolling_model(i, "no_sinks") if i["sinks"] else {},
    "sinks counted inside the window: the cache keeps the sinks and the last `window` positions, not "
    "the last window - sinks": lambda i: rolling_model(i, "inside") if i["sinks"] else {},
    "a window that is off by one: the cache kept the last window + 1 positions": (
        lambda i: rolling_model(i, "over")
    ),
    "a window that is off by one: the cache kept the last window - 1 positions": (
        lambda i: rolling_model(i, "under")
    ),
    "positions restarting at 0 in every chunk: a chunk appended after t positions sits at positions "
    "t, t + 1, ... (count every position seen)": lambda i: rolling_model(i, "restart"),
    "positions counted inside the cache (0 .. kept - 1) instead of absolute positions": (
        lambda i: rolling_model(i, "relative")
    ),
}


# ---------------------------------------------------------------- FlashAttention


def flash_model(inputs: dict[str, Any], mistake: str, gradients: bool) -> dict[str, Any]:
    """Tiled attention and its backward with one mistake (see :data:`FLASH_BUGS`)."""
    Q, K, V, dO = (
        torch.from_numpy(np.asarray(inputs[n], dtype=np.float64).copy()) for n in ("Q", "K", "V", "dO")
    )
    block, causal = inputs["block_size"], inputs["causal"]
    if mistake in ("wrong_side", "top_left") and not causal:
        return {}
    n_q, d = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    scale = 1.0 / math.sqrt(d)
    offset = 0 if mistake == "top_left" else n_k - n_q
    qpos = torch.arange(n_q) + offset

    def skipped(qs: int, qe: int, ks: int, ke: int) -> bool:
        if not causal:
            return False
        if mistake == "wrong_side":
            return ke - 1 <= qs + offset  # skips the tiles wholly visible instead of those wholly hidden
        return ks > qe - 1 + offset

    def tile(qs: int, qe: int, ks: int, ke: int) -> torch.Tensor:
        s = Q[..., qs:qe, :] @ K[..., ks:ke, :].transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(~(torch.arange(ks, ke)[None, :] <= qpos[qs:qe, None]), float("-inf"))
        return s

    blocks_q = [(s, min(s + block, n_q)) for s in range(0, n_q, block)]
    blocks_k = [(s, min(s + block, n_k)) for s in range(0, n_k, block)]
    out = Q.new_zeros((*Q.shape[:-1], d_v))
    L = Q.new_full(Q.shape[:-1], float("-inf"))
    for qs, qe in blocks_q:
        m = Q.new_full((*Q.shape[:-2], qe - qs, 1), float("-inf"))
        total = Q.new_zeros((*Q.shape[:-2], qe - qs, 1))
        acc = Q.new_zeros((*Q.shape[:-2], qe - qs, d_v))
        L_before = torch.full_like(total, float("-inf"))
        for ks, ke in blocks_k:
            if skipped(qs, qe, ks, ke):
                continue
            s = tile(qs, qe, ks, ke)
            L_before = torch.where(total > 0, m + torch.log(torch.where(total > 0, total, 1.0)), -math.inf)
            m_new = torch.maximum(m, s.amax(-1, keepdim=True))
            shift = torch.where(torch.isfinite(m_new), m_new, 0.0)
            p = torch.exp(s - shift)
            c = torch.exp(m - shift)
            total = total * c + p.sum(-1, keepdim=True)
            acc = (acc if mistake == "no_acc_rescale" else acc * c) + p @ V[..., ks:ke, :]
            m = m_new
        seen = total > 0
        out[..., qs:qe, :] = torch.where(seen, acc / torch.where(seen, total, 1.0), 0.0)
        L_row = torch.where(seen, m + torch.log(torch.where(seen, total, 1.0)), -math.inf)
        L[..., qs:qe] = (L_before if mistake == "stale_L" else L_row)[..., 0]
    if not gradients:
        return {"output": out}
    D = (dO * out).sum(-1, keepdim=True)
    L_safe = torch.where(torch.isfinite(L), L, math.inf)[..., None]
    dQ, dK, dV = torch.zeros_like(Q), torch.zeros_like(K), torch.zeros_like(V)
    g_scale = 1.0 if mistake == "unscaled_grads" else scale
    for ks, ke in blocks_k:
        for qs, qe in blocks_q:
            if skipped(qs, qe, ks, ke):
                continue
            p = torch.exp(tile(qs, qe, ks, ke) - L_safe[..., qs:qe, :])
            dV[..., ks:ke, :] += p.transpose(-1, -2) @ dO[..., qs:qe, :]
            dP = dO[..., qs:qe, :] @ V[..., ks:ke, :].transpose(-1, -2)
            dS = p * dP if mistake == "no_D" else p * (dP - D[..., qs:qe, :])
            dQ[..., qs:qe, :] += dS @ K[..., ks:ke, :] * g_scale
            dK[..., ks:ke, :] += dS.transpose(-1, -2) @ Q[..., qs:qe, :] * g_scale
    if mistake == "swap_kv":
        if dK.shape != dV.shape:
            return {}
        dK, dV = dV, dK
    return {"output": out, "dQ": dQ, "dK": dK, "dV": dV}


FORWARD_MISTAKES = {
    "causal blocks skipped on the wrong side: the tiles wholly above the diagonal (every key after "
    "every query of the block) are the ones to skip, not those wholly below it": "wrong_side",
    "a causal mask aligned top-left (query i sees keys j <= i): with n_q != n_k, query i sits at "
    "position n_k - n_q + i (the last n_q positions)": "top_left",
    "the accumulator was not rescaled when the running max grew (multiply it by exp(m_old - m_new) "
    "before adding the new block)": "no_acc_rescale",
}
BACKWARD_MISTAKES = {
    "dS without the D term: dS = P * (dP - D) with D = rowsum(dO * O); P * dP alone forgets that "
    "the weights of a row sum to 1": "no_D",
    "L saved before the last block's rescale: the logsumexp L = m + log(l) must be taken after "
    "every block of keys was added (the last block included)": "stale_L",
    "gradients of K and V swapped: backward returns dQ, dK, dV in the order of forward's "
    "arguments": "swap_kv",
    "the 1/sqrt(d) forgotten in dQ and dK (S = Q K^T / sqrt(d), so dQ = dS K / sqrt(d))": "unscaled_grads",
}


def flash_bugs(gradients: bool) -> dict[str, Any]:
    mistakes = {**FORWARD_MISTAKES, **(BACKWARD_MISTAKES if gradients else {})}
    return {words: (lambda i, m=m: flash_model(i, m, gradients)) for words, m in mistakes.items()}
