"""Chapter 7 exercises: online_softmax_attention (NumPy), KVCache and CachedSelfAttention (PyTorch).

The file has two halves. The first (input builders, call adapters, descriptions, hints)
imports no reference and is what a learner's process may run; the call adapters return the
learner's raw outputs only. The second (expected values and classic bugs) is the judging
half and imports ``grader.reference``.

- ``online_softmax_attention(Q, K, V, block_size, mask=None) -> out`` is judged against
  chapter 3's attention, with block sizes that do and do not divide n_k, 1 and >= n_k, masks
  with a fully masked row, scores of order +-1000 and batch axes.
- ``KVCache`` is judged by what ``append`` returns after every step and by ``k``, ``v`` and
  ``len(cache)``.
- ``CachedSelfAttention`` is fed a sequence in chunks (a prompt, then one token at a time)
  and judged, chunk by chunk, against the full causal pass of chapter 4's multi-head
  attention with the same weights (and against ``nn.MultiheadAttention`` for ``__torch``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from grader.exercises.cases import attention_mask, describe_mask, normal
from grader.exercises.ch04 import build_module, mha_state, tensor
from grader.exercises.spec import Arrays, unpack

try:  # the learner-package layout: an old-style spec becomes a Case plus its judging half
    from grader.exercises.spec import legacy_exercise as Exercise
except ImportError:  # the one-module layout
    from grader.exercises.spec import Exercise  # type: ignore[assignment]

# ================================================================ learner side (no reference)

# ---------------------------------------------------------------- online softmax


def make_online_inputs(
    rng: np.random.Generator,
    n_q: int = 3,
    n_k: int = 7,
    d_k: int = 5,
    d_v: int = 2,
    block_size: int = 3,
    batch: Sequence[int] = (),
    mask: str | None = None,
    logit_scale: float = 1.0,
) -> dict[str, Any]:
    """Q, K, V from independent draws; ``logit_scale`` multiplies Q, so that the scores have
    standard deviation ``logit_scale`` (1000 gives scores of order +-1000)."""
    batch = tuple(batch)
    return {
        "Q": normal(rng, *batch, n_q, d_k, scale=logit_scale),  # (*B, n_q, d_k)
        "K": normal(rng, *batch, n_k, d_k),  # (*B, n_k, d_k)
        "V": normal(rng, *batch, n_k, d_v),  # (*B, n_k, d_v)
        "mask": attention_mask(rng, mask, batch, n_q, n_k),
        "block_size": block_size,
    }


def describe_online(params: dict[str, Any]) -> str:
    n_k, block = params.get("n_k", 7), params.get("block_size", 3)
    blocks = f"{-(-n_k // block)} block(s)" + (f", the last of {n_k % block}" if n_k % block else "")
    text = (
        f"batch {tuple(params.get('batch', ()))}, n_q={params.get('n_q', 3)}, n_k={n_k}, "
        f"d_k={params.get('d_k', 5)}, d_v={params.get('d_v', 2)}, block_size={block} ({blocks}), "
        f"{describe_mask(params.get('mask'))}"
    )
    if params.get("logit_scale", 1.0) != 1.0:
        text += f", scores of order +-{params['logit_scale']:g}"
    return text


def call_online(fn: Any, inputs: dict[str, Any]) -> Arrays:
    out = fn(inputs["Q"], inputs["K"], inputs["V"], inputs["block_size"], inputs["mask"])
    if isinstance(out, tuple):
        raise TypeError(
            "online_softmax_attention should return the output array alone, not a tuple "
            "(there is no weights matrix to return: it is never built)"
        )
    return {"output": out}


def online_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    out = got.get("output")
    hints = []
    if out is None or out.shape != expected["output"].shape:
        return hints
    if not np.all(np.isfinite(out)):
        hints.append(
            "Some outputs are NaN or infinite. exp overflows above about 709: subtract the "
            "running max before exponentiating, and give a row that has seen no visible key "
            "yet (running max still -inf) a shift of 0 rather than computing -inf - (-inf)."
        )
    mask = inputs.get("mask")
    if mask is not None:
        empty = ~np.broadcast_to(mask, (*out.shape[:-1], mask.shape[-1])).any(axis=-1)  # (..., n_q)
        if empty.any() and np.abs(np.nan_to_num(out[empty], nan=1.0)).max() > 0:
            hints.append("A query whose keys are all masked must get an all-zero output.")
    return hints


# ---------------------------------------------------------------- the KV cache

CACHE_CONTRACT = (
    "KVCache() starts empty (k and v None, len 0); append(k_new, v_new) adds the new "
    "positions after the cached ones along axis -2 and returns (k, v)"
)


def make_cache_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    num_heads: int = 3,
    d_k: int = 4,
    d_v: int = 5,
    chunks: Sequence[int] = (3, 1, 2),
) -> dict[str, Any]:
    """Keys and values of a whole sequence, appended chunk by chunk."""
    n = sum(chunks)
    return {
        "k": normal(rng, batch, num_heads, n, d_k),  # (B, h, n, d_k)
        "v": normal(rng, batch, num_heads, n, d_v),  # (B, h, n, d_v)
        "chunks": tuple(chunks),
    }


def describe_cache(params: dict[str, Any]) -> str:
    return (
        f"batch {params.get('batch', 2)}, num_heads={params.get('num_heads', 3)}, "
        f"d_k={params.get('d_k', 4)}, d_v={params.get('d_v', 5)}, appending chunks of "
        f"{list(params.get('chunks', (3, 1, 2)))} positions"
    )


def _chunk_bounds(chunks: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(chunks)
    return [(int(e - c), int(e)) for c, e in zip(chunks, ends, strict=True)]


def _cache_length(cache: Any) -> int:
    try:
        return len(cache)
    except TypeError as exc:
        raise TypeError("KVCache should define __len__: the number of cached positions") from exc


def call_cache(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Append the chunks one by one; return what each append returned, len(cache) after each
    step, and the cache's k and v at the end."""
    cache = cls()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: dict[str, Any] = {"length_before": np.array(_cache_length(cache))}
    lengths = []
    for step, (a, b) in enumerate(_chunk_bounds(inputs["chunks"])):
        try:
            result = cache.append(k[:, :, a:b].clone(), v[:, :, a:b].clone())
        except RuntimeError as exc:
            if step == 0 or "Sizes of tensors must match" not in str(exc):
                raise
            raise RuntimeError(
                f"{exc}. Appending a chunk of {b - a} position(s) to {a} cached ones failed: the "
                "cache seems to append along an axis other than the sequence axis (-2)"
            ) from exc
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = unpack(result, ("k", "v"), "KVCache.append")
        lengths.append(_cache_length(cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    for name in ("k", "v"):
        if not hasattr(cache, name):
            raise AttributeError(f"KVCache has no attribute {name!r}: {CACHE_CONTRACT}")
        outputs[f"cache_{name}"] = getattr(cache, name)
    return outputs


def cache_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    if got.get("length_before") is not None and got["length_before"] != 0:
        hints.append("A new KVCache should be empty: len(cache) == 0 before the first append.")
    lengths = got.get("lengths")
    if lengths is not None and lengths.shape == expected["lengths"].shape and not np.array_equal(
        lengths, expected["lengths"]
    ):
        hints.append(
            f"len(cache) after each append was {lengths.astype(int).tolist()}, expected "
            f"{expected['lengths'].astype(int).tolist()} (the number of cached positions)."
        )
    return hints


# ---------------------------------------------------------------- cached self-attention

CACHED_CONTRACT = (
    "W_q, W_k, W_v, W_o (nn.Linear(d_model, d_model), as in chapter 4's MultiHeadAttention) "
    "and cache (a KVCache)"
)


def make_cached_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    num_heads: int = 3,
    d_head: int = 4,
    chunks: Sequence[int] = (3, 1, 1),
) -> dict[str, Any]:
    """A sequence x (B, n, d_model) decoded in ``chunks`` (a prompt, then new tokens) and
    explicit weights for the layer."""
    d_model = num_heads * d_head
    return {
        "x": normal(rng, batch, sum(chunks), d_model),  # (B, n, d_model)
        "chunks": tuple(chunks),
        "state": mha_state(rng, d_model),
        "args": (d_model, num_heads),
    }


def describe_cached(params: dict[str, Any]) -> str:
    h, d_head = params.get("num_heads", 3), params.get("d_head", 4)
    chunks = list(params.get("chunks", (3, 1, 1)))
    return (
        f"batch {params.get('batch', 2)}, num_heads={h}, d_head={d_head} (d_model={h * d_head}), "
        f"a sequence of {sum(chunks)} tokens fed in chunks of {chunks}"
    )


def call_cached(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Feed the chunks in order; return each chunk's output, the cache length after each
    chunk, and the cached keys and values at the end."""
    module = build_module(cls, inputs["args"], inputs["state"], CACHED_CONTRACT)
    if not hasattr(module, "cache"):
        raise AttributeError(f"CachedSelfAttention has no attribute 'cache'. It holds {CACHED_CONTRACT}.")
    x = tensor(inputs["x"])  # (B, n, d_model)
    outputs: dict[str, Any] = {}
    lengths = []
    with torch.no_grad():
        for step, (a, b) in enumerate(_chunk_bounds(inputs["chunks"])):
            out = module(x[:, a:b])
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"CachedSelfAttention.forward should return one tensor, got {type(out)}")
            outputs[f"out_step{step}"] = out  # (B, b - a, d_model)
            lengths.append(_cache_length(module.cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    for name in ("k", "v"):
        cached = getattr(module.cache, name, None)
        if cached is not None:  # an empty cache is reported by cached_hints
            outputs[f"cache_{name}"] = cached
    return outputs


def cached_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    steps = len(inputs["chunks"])
    ok = [
        (o := got.get(f"out_step{s}")) is not None
        and o.shape == expected[f"out_step{s}"].shape
        and np.allclose(o, expected[f"out_step{s}"], atol=1e-6)
        for s in range(steps)
    ]
    if ok[0] and not all(ok[1:]):
        hints.append(
            "The first chunk is right but later ones are not: the new queries must attend to "
            "every cached position (the keys and values of all earlier chunks), not only to "
            "the new chunk."
        )
    if not ok[0] and inputs["chunks"][0] > 1:
        hints.append(
            f"Even the first chunk ({inputs['chunks'][0]} tokens) is wrong: within a chunk, "
            "token i may attend to the cached positions and to the new tokens up to itself."
        )
    if "cache_k" in expected and "cache_k" not in got:
        hints.append(
            "self.cache is still empty after decoding: forward must append the new keys and "
            "values to self.cache and attend to everything it returns."
        )
    lengths = got.get("lengths")
    if (
        lengths is not None
        and "lengths" in expected
        and lengths.shape == expected["lengths"].shape
        and not np.array_equal(lengths, expected["lengths"])
    ):
        hints.append(
            f"len(self.cache) after each chunk was {lengths.astype(int).tolist()}, expected "
            f"{expected['lengths'].astype(int).tolist()}."
        )
    return hints


# ================================================================ judging side (reference, bugs)

from grader.reference import MultiHeadAttention, causal_mask  # noqa: E402
from grader.reference.at_scale import (  # noqa: E402
    KVCache,
    chunk_causal_mask,
    online_softmax_attention,
    online_softmax_with_mistake,
)
from grader.reference.multi_head import (  # noqa: E402
    merge_heads,
    split_heads,
    to_torch_multihead,
    torch_attn_mask,
)
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch  # noqa: E402


def online_reference(inputs: dict[str, Any]) -> Arrays:
    Q, K, V, block, mask = (inputs[n] for n in ("Q", "K", "V", "block_size", "mask"))
    return {"output": online_softmax_attention(Q, K, V, block, mask)}


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
}


# ---------------------------------------------------------------- the KV cache


def _cache_steps(inputs: dict[str, Any], join) -> Arrays:
    """What append returns after each step for a cache that combines (old, new) with ``join``."""
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: Arrays = {}
    k_all = v_all = None
    for step, (a, b) in enumerate(_chunk_bounds(inputs["chunks"])):
        k_new, v_new = k[:, :, a:b], v[:, :, a:b]
        k_all = k_new if k_all is None else join(k_all, k_new)
        v_all = v_new if v_all is None else join(v_all, v_new)
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = k_all.numpy(), v_all.numpy()
    return outputs


def cache_reference(inputs: dict[str, Any]) -> Arrays:
    cache = KVCache()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: Arrays = {"length_before": np.array(0.0)}
    lengths = []
    for step, (a, b) in enumerate(_chunk_bounds(inputs["chunks"])):
        k_all, v_all = cache.append(k[:, :, a:b], v[:, :, a:b])
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = k_all.numpy(), v_all.numpy()
        lengths.append(len(cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
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
}


# ---------------------------------------------------------------- cached self-attention


def _layer(inputs: dict[str, Any]) -> MultiHeadAttention:
    return build_module(MultiHeadAttention, inputs["args"], inputs["state"], CACHED_CONTRACT)


def _per_step(full: torch.Tensor, inputs: dict[str, Any]) -> Arrays:
    """Cut a full pass (B, n, d_model) into the chunks' outputs."""
    return {f"out_step{s}": full[:, a:b] for s, (a, b) in enumerate(_chunk_bounds(inputs["chunks"]))}


def _projected(inputs: dict[str, Any], name: str) -> torch.Tensor:
    layer = _layer(inputs)
    with torch.no_grad():
        return split_heads(getattr(layer, name)(tensor(inputs["x"])), layer.num_heads)  # (B, h, n, d_head)


def cached_reference(inputs: dict[str, Any]) -> Arrays:
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


def cached_torch_reference(inputs: dict[str, Any]) -> Arrays:
    """The full causal pass of torch's nn.MultiheadAttention with the same weights."""
    theirs = to_torch_multihead(_layer(inputs))
    x = tensor(inputs["x"])
    B, n, _ = x.shape
    blocked = torch_attn_mask(causal_mask(n), B, inputs["args"][1], n, n)  # (B*h, n, n), True = ignore
    with torch.no_grad():
        full, _ = theirs(x, x, x, attn_mask=blocked, need_weights=False)
    return _per_step(full, inputs)


def cached_variant(inputs: dict[str, Any], mistake: str) -> Arrays:
    """Chunk-by-chunk decoding with one classic mistake (outputs only)."""
    layer = _layer(inputs)
    h = layer.num_heads
    x = tensor(inputs["x"])
    outputs: Arrays = {}
    k_all = v_all = None
    with torch.no_grad():
        for step, (a, b) in enumerate(_chunk_bounds(inputs["chunks"])):
            x_new = x[:, a:b]  # (B, t_new, d_model)
            q = split_heads(layer.W_q(x_new), h)  # (B, h, t_new, d_head)
            k_new = q if mistake == "cache_queries" else split_heads(layer.W_k(x_new), h)
            v_new = split_heads(layer.W_v(x_new), h)
            if k_all is None or mistake == "no_cache":
                k_all, v_all = k_new, v_new
            elif mistake == "prepend":
                k_all, v_all = torch.cat([k_new, k_all], dim=-2), torch.cat([v_new, v_all], dim=-2)
            else:
                k_all, v_all = torch.cat([k_all, k_new], dim=-2), torch.cat([v_all, v_new], dim=-2)
            start = 0 if mistake == "no_cache" else a
            mask = None if mistake == "no_causal" else chunk_causal_mask(start, b - a)
            heads, _ = scaled_dot_product_attention_torch(q, k_all, v_all, mask)
            outputs[f"out_step{step}"] = layer.W_o(merge_heads(heads))  # (B, t_new, d_model)
    return outputs


CACHED_BUGS = {
    "the new tokens attend to the whole chunk, including positions after their own (no "
    "causal limit within the chunk: token i of a chunk starting at position p may see "
    "positions <= p + i only)": lambda i: cached_variant(i, "no_causal"),
    "the cache stores the projected queries instead of the keys (append W_k's output, "
    "not W_q's)": lambda i: cached_variant(i, "cache_queries"),
    "the cache prepends: new keys and values must go after the cached ones, so that "
    "position j of the cache is token j": lambda i: cached_variant(i, "prepend"),
    "each chunk attends only to itself: the cached keys and values of earlier chunks were "
    "not used": lambda i: cached_variant(i, "no_cache"),
}


EXERCISES = [
    Exercise(
        name="online_softmax_attention",
        make_inputs=make_online_inputs,
        call=call_online,
        reference=online_reference,
        bugs=ONLINE_BUGS,
        hints=online_hints,
        describe=describe_online,
        atol=1e-9,
        rtol=1e-7,
    ),
    Exercise(
        name="KVCache",
        make_inputs=make_cache_inputs,
        call=call_cache,
        reference=cache_reference,
        bugs=CACHE_BUGS,
        hints=cache_hints,
        describe=describe_cache,
        atol=0.0,
        rtol=0.0,
    ),
    Exercise(
        name="CachedSelfAttention",
        make_inputs=make_cached_inputs,
        call=call_cached,
        reference=cached_reference,
        bugs=CACHED_BUGS,
        hints=cached_hints,
        describe=describe_cached,
        atol=1e-9,
        rtol=1e-7,
    ),
    Exercise(
        name="CachedSelfAttention__torch",
        make_inputs=make_cached_inputs,
        call=call_cached,
        reference=cached_torch_reference,
        bugs=CACHED_BUGS,
        hints=cached_hints,
        describe=lambda p: (
            "against nn.MultiheadAttention's full causal pass with the same weights, " + describe_cached(p)
        ),
        atol=1e-9,
        rtol=1e-7,
    ),
]
