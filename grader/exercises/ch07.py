"""Chapter 7 exercises, the judging half: references and classic bugs of
online_softmax_attention, KVCache and CachedSelfAttention (the cases are in
``attention_learner.cases.ch07``).

- ``online_softmax_attention`` is judged against the reference online softmax, itself tested
  against chapter 3's attention and PyTorch's;
- ``KVCache`` against the reference cache;
- ``CachedSelfAttention``, chunk by chunk, against the full causal pass of chapter 4's
  multi-head attention with the same weights, and (``__torch``) against
  ``nn.MultiheadAttention``'s.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, cast

import numpy as np
import torch

from attention_learner.cases.ch07 import CACHED_CONTRACT, MEMORY_CASE_BUDGET, chunk_bounds
from attention_learner.torch_cases import build_module, tensor
from grader.exercises.ch07_bugs import online_softmax_with_mistake
from grader.exercises.spec import Arrays, exercise
from grader.reference import MultiHeadAttention, causal_mask
from grader.reference.at_scale import (
    KVCache,
    chunk_causal_mask,
    online_softmax_attention,
)
from grader.reference.multi_head import (
    merge_heads,
    split_heads,
    to_torch_multihead,
    torch_attn_mask,
)
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch


def online_reference(inputs: dict[str, Any]) -> Arrays:
    Q, K, V, block, mask = (inputs[n] for n in ("Q", "K", "V", "block_size", "mask"))
    return {"output": online_softmax_attention(Q, K, V, block, mask)}


def memory_reference(inputs: dict[str, Any]) -> Arrays:
    """The memory case's exact answer from its distinct keys: repeating a key c times adds
    log(c) to its score, so softmax over all keys = softmax over the rows with those offsets."""
    Q, K_rows, V_rows, counts = (inputs[n] for n in ("Q", "K_rows", "V_rows", "counts"))
    scores = Q @ K_rows.T / np.sqrt(Q.shape[-1]) + np.log(counts)  # (n_q, m)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return {"output": weights @ V_rows}  # (n_q, d_v)


def _online_mistake(mistake: str):
    def bug(inputs: dict[str, Any]) -> Arrays:
        Q, K, V, block, mask = (inputs[n] for n in ("Q", "K", "V", "block_size", "mask"))
        return {"output": online_softmax_with_mistake(Q, K, V, block, mistake, mask)}

    return bug


def _online_no_scaling(inputs: dict[str, Any]) -> Arrays:
    d_k = inputs["Q"].shape[-1]
    scaled = {**inputs, "Q": inputs["Q"] * np.sqrt(d_k)}  # undo the 1/sqrt(d_k)
    return online_reference(scaled)


ONLINE_BUGS = {
    "the accumulator was not rescaled when the running max grew (multiply acc by "
    "exp(m_old - m_new) before adding the new block)": _online_mistake("no_accumulator_rescale"),
    "the running sum was not rescaled when the running max grew (multiply l by "
    "exp(m_old - m_new) before adding the new block)": _online_mistake("no_sum_rescale"),
    "each block was shifted by its own max instead of the running max (the correction "
    "exp(m_old - m_block) then overflows when a block's max falls far below an earlier "
    "one)": _online_mistake("block_max"),
    "the loop dropped the last, partial block of keys (when block_size does not divide "
    "n_k, the last block is shorter, not absent)": _online_mistake("drop_last_block"),
    "exp of the raw scores, with no max subtracted (exp overflows to inf above about 709)": (
        _online_mistake("no_max")
    ),
    "the scores were not divided by sqrt(d_k)": _online_no_scaling,
    "a rescale forgotten altogether: neither the running sum l nor the accumulator acc was "
    "multiplied by exp(m_old - m_new) when the running max grew, so each block's terms stay "
    "relative to the max of their own step": _online_mistake("never_rescaled"),
    "a correction the wrong way round: exp(m_new - m_old) (>= 1) instead of exp(m_old - m_new) "
    "(<= 1); the old terms must shrink when the max grows": _online_mistake("rescaled_upwards"),
    "a loop in which only the first block of keys counts: it returned (or stopped) after its "
    "first block; return acc / l after the loop, once every block was added": _online_mistake(
        "first_block_only"
    ),
    "a loop in which only the last block of keys counts: acc and l were overwritten at each "
    "block (acc = ...) instead of accumulated (acc = c * acc + ...)": _online_mistake("last_block_only"),
}


# ---------------------------------------------------------------- the KV cache


def _cache_steps(inputs: dict[str, Any], join) -> Arrays:
    """What append returns after each step for a cache that combines (old, new) with ``join``."""
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: Arrays = {}
    k_all = v_all = None
    for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
        k_new, v_new = k[:, :, a:b], v[:, :, a:b]
        k_all = k_new if k_all is None else join(k_all, k_new)
        v_all = v_new if v_all is None else join(v_all, v_new)
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = k_all.numpy(), v_all.numpy()
    return outputs


def _cache_chunks(inputs: dict[str, Any], order, kept: list[int]) -> Arrays:
    """A cache bug's outputs, for keys and values alike: append's result at step s is the
    chunks numbered ``order(s)`` joined along the sequence axis (-2), and the cache holds the
    chunks ``kept`` at the end (the right cache: ``order(s) = 0 .. s``, every chunk kept)."""
    outputs: Arrays = {}
    for name in ("k", "v"):
        pieces = [inputs[name][:, :, a:b] for a, b in chunk_bounds(inputs["chunks"])]  # (B, h, t, d)
        for s in range(len(pieces)):
            outputs[f"{name}_step{s}"] = np.concatenate([pieces[c] for c in order(s)], axis=-2)
        outputs[f"cache_{name}"] = np.concatenate([pieces[c] for c in kept], axis=-2)
    return outputs


def cache_reference(inputs: dict[str, Any]) -> Arrays:
    cache = KVCache()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: Arrays = {"length_before": np.array([0.0])}  # a 1-element array: 0-d ones are not sent
    lengths = []
    for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
        k_all, v_all = cache.append(k[:, :, a:b], v[:, :, a:b])
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = k_all.numpy(), v_all.numpy()
        lengths.append(len(cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    assert cache.k is not None and cache.v is not None  # a case has at least one chunk
    outputs["cache_k"], outputs["cache_v"] = cache.k.numpy(), cache.v.numpy()
    return outputs


CACHE_BUGS = {
    "the cache prepends: new positions must go after the cached ones (torch.cat([old, new]))": (
        lambda i: _cache_steps(i, lambda old, new: torch.cat([new, old], dim=-2))
    ),
    "the cache appends along the head axis (dim=1) instead of the sequence axis (dim=-2)": (
        lambda i: _cache_steps(i, lambda old, new: torch.cat([old, new], dim=1))
    ),
    "the cache appends along the feature axis (dim=-1) instead of the sequence axis (dim=-2)": (
        lambda i: _cache_steps(i, lambda old, new: torch.cat([old, new], dim=-1))
    ),
    "the cache appends along the batch axis (dim=0) instead of the sequence axis (dim=-2)": (
        lambda i: _cache_steps(i, lambda old, new: torch.cat([old, new], dim=0))
    ),
    "the cache keeps only the newest chunk instead of all positions so far": (
        lambda i: _cache_steps(i, lambda old, new: new)
    ),
    "append's result never stored: the cache was not updated (append returned "
    "torch.cat([self.k, k_new], dim=-2) but did not store it in self.k and self.v, so the cache "
    "keeps its first chunk)": lambda i: _cache_chunks(i, lambda s: [0] if s == 0 else [0, s], [0]),
    "a cache updated twice on the first append: when it is empty it stored k_new and then "
    "concatenated k_new again (an if without an else), so the first chunk is in it twice": (
        lambda i: _cache_chunks(i, lambda s: [0, *range(s + 1)], [0, *range(len(i["chunks"]))])
    ),
}


# ---------------------------------------------------------------- cached self-attention


def _layer(inputs: dict[str, Any]) -> MultiHeadAttention:
    return cast(
        MultiHeadAttention, build_module(MultiHeadAttention, inputs["args"], inputs["state"], CACHED_CONTRACT)
    )


def _per_step(full: torch.Tensor, inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Cut a full pass (B, n, d_model) into the chunks' outputs."""
    return {f"out_step{s}": full[:, a:b] for s, (a, b) in enumerate(chunk_bounds(inputs["chunks"]))}


def _projected(inputs: dict[str, Any], name: str) -> torch.Tensor:
    layer = _layer(inputs)
    with torch.no_grad():
        return split_heads(getattr(layer, name)(tensor(inputs["x"])), layer.num_heads)  # (B, h, n, d_head)


def cached_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor | np.ndarray]:
    """The full causal pass of chapter 4's multi-head attention, cut into the chunks."""
    layer = _layer(inputs)
    x = tensor(inputs["x"])  # (B, n, d_model)
    n = x.shape[1]
    with torch.no_grad():
        full, _ = layer(x, x, x, causal_mask(n))  # (B, n, d_model)
    lengths = np.cumsum(inputs["chunks"]).astype(np.float64)
    return {
        **_per_step(full, inputs),
        "lengths": lengths,
        "cache_k": _projected(inputs, "W_k"),
        "cache_v": _projected(inputs, "W_v"),
    }


def cached_torch_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The full causal pass of torch's nn.MultiheadAttention with the same weights."""
    theirs = to_torch_multihead(_layer(inputs))
    x = tensor(inputs["x"])
    B, n, _ = x.shape
    blocked = torch_attn_mask(causal_mask(n), B, inputs["args"][1], n, n)  # (B*h, n, n), True = ignore
    with torch.no_grad():
        full, _ = theirs(x, x, x, attn_mask=blocked, need_weights=False)
    return _per_step(full, inputs)


def cached_variant(inputs: dict[str, Any], mistake: str) -> dict[str, torch.Tensor]:
    """Chunk-by-chunk decoding with one classic mistake (outputs only): "no_causal" (the
    chunk sees all of itself), "cache_queries" (W_q's output cached as keys), "prepend",
    "no_cache" (each chunk alone), "swap_kv" (keys x W_v, values x W_k), "restart" (positions
    counted from 0 in every chunk: new token i sees keys j <= i), "scale_d_model" (scores
    over sqrt(d_model), not sqrt(d_head)), "no_transpose" (heads (B, h, t, d_head) reshaped
    to (B, t, d_model) directly), "no_output_projection" (W_o not applied)."""
    layer = _layer(inputs)
    h = layer.num_heads
    x = tensor(inputs["x"])
    outputs: dict[str, torch.Tensor] = {}
    k_all: torch.Tensor | None = None
    v_all: torch.Tensor | None = None
    with torch.no_grad():
        for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
            x_new = x[:, a:b]  # (B, t_new, d_model)
            q = split_heads(layer.W_q(x_new), h)  # (B, h, t_new, d_head)
            k_new = q if mistake == "cache_queries" else split_heads(layer.W_k(x_new), h)
            v_new = split_heads(layer.W_v(x_new), h)
            if mistake == "swap_kv":
                k_new, v_new = v_new, k_new
            if k_all is None or v_all is None or mistake == "no_cache":  # None together: the first chunk
                k_all, v_all = k_new, v_new
            elif mistake == "prepend":
                k_all, v_all = torch.cat([k_new, k_all], dim=-2), torch.cat([v_new, v_all], dim=-2)
            else:
                k_all, v_all = torch.cat([k_all, k_new], dim=-2), torch.cat([v_all, v_new], dim=-2)
            start = 0 if mistake == "no_cache" else a
            mask = None if mistake == "no_causal" else chunk_causal_mask(start, b - a)
            if mistake == "restart":  # (t_new, b): new token i sees the keys j <= i
                mask = torch.arange(b)[None, :] <= torch.arange(b - a)[:, None]
            # scores q k^T / sqrt(d_model) = (q sqrt(d_head / d_model)) k^T / sqrt(d_head)
            if mistake == "scale_d_model":
                q = q * math.sqrt(q.shape[-1] / x.shape[-1])
            heads, _ = scaled_dot_product_attention_torch(q, k_all, v_all, mask)  # (B, h, t_new, d_head)
            B, _, t_new, _ = heads.shape
            merged = heads.reshape(B, t_new, -1) if mistake == "no_transpose" else merge_heads(heads)
            out = merged if mistake == "no_output_projection" else layer.W_o(merged)
            outputs[f"out_step{step}"] = out  # (B, t_new, d_model)
    return outputs


CACHED_BUGS = {
    "the new tokens attend to the whole chunk, including positions after their own (no "
    "causal limit within the chunk: token i of a chunk starting at position p may see "
    "positions <= p + i only)": lambda i: cached_variant(i, "no_causal"),
    "the cache stores the projected queries instead of the keys (append W_k's output, not W_q's)": lambda i: (
        cached_variant(i, "cache_queries")
    ),
    "the cache prepends: new keys and values must go after the cached ones, so that "
    "position j of the cache is token j": lambda i: cached_variant(i, "prepend"),
    "each chunk attends only to itself: the cached keys and values of earlier chunks were "
    "not used": lambda i: cached_variant(i, "no_cache"),
    "keys and values swapped in the cache: the keys and values are swapped (keys are x W_k, "
    "values x W_v)": lambda i: cached_variant(i, "swap_kv"),
    "a mask whose positions restart at 0 in every chunk: token i of a chunk starting at "
    "position p sits at position p + i, so it may see the cached positions and the new ones up "
    "to p + i (build the mask from start = len(self.cache) before the append)": (
        lambda i: cached_variant(i, "restart")
    ),
    "a missing output projection: the output projection W_o is missing (merge the heads, then "
    "apply self.W_o)": lambda i: cached_variant(i, "no_output_projection"),
    "heads merged without the transpose: (B, h, t, d_head) must become (B, t, h, d_head) "
    "(transpose(1, 2)) before the reshape to (B, t, d_model)": lambda i: cached_variant(i, "no_transpose"),
    "scores divided by sqrt(d_model) instead of sqrt(d_head): each head attends with keys of "
    "size d_head": lambda i: cached_variant(i, "scale_d_model"),
}


EXERCISES = [
    exercise("online_softmax_attention", online_reference, ONLINE_BUGS),
    # no classic bugs on this one: its point is the memory limit, and they would cost seconds
    dataclasses.replace(
        exercise("online_softmax_attention__memory", memory_reference), memory_budget=MEMORY_CASE_BUDGET
    ),
    exercise("KVCache", cache_reference, CACHE_BUGS),
    exercise("CachedSelfAttention", cached_reference, CACHED_BUGS),
    exercise("CachedSelfAttention__torch", cached_torch_reference, CACHED_BUGS),
]
