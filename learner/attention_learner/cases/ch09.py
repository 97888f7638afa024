"""Chapter 9 cases: rotary positions (both pairings), grouped-query attention, the sliding
window mask with sinks, the rolling KV cache and FlashAttention's forward and backward.

- ``apply_rope(x, positions, base)`` and ``apply_rope_interleaved``: x (*batch, n, d), positions
  that may start anywhere (a cache offset) or come in any order; float32 inputs must stay
  float32 (``same_dtype``).
- ``gqa_attention(q, k, v, mask)``: h query heads over g key/value heads, every axis of its
  own size, masks of several shapes (one with a fully masked row).
- ``sliding_window_mask(n_q, n_k, window, sinks)``: the boolean mask itself.
- ``RollingKVCache(window, sinks)``: chunks appended one by one; what each append returns
  (keys, values, positions) and ``len(cache)`` after it.
- ``FlashAttention``: ``FlashAttention.apply(Q, K, V, block_size, causal)`` forward only
  (``FlashAttention``), then forward and the gradients of sum(out * dO) from the learner's
  own backward (``__gradients``), and a case too large for an (n_q, n_k) matrix (``__memory``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, wrong_along, wrong_entries
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays, Case, unpack
from attention_learner.torch_cases import tensor

# ---------------------------------------------------------------- rotary positions


def make_rope_inputs(
    rng: np.random.Generator,
    batch: Sequence[int] = (2,),
    n: int = 5,
    d: int = 6,
    start: int = 0,
    order: str = "ascending",
    base: float = 10000.0,
    dtype: str = "float64",
) -> dict[str, Any]:
    """x (*batch, n, d) and positions start .. start + n - 1 (``order="shuffled"``: the same
    positions in a random order, so that position m is not row m)."""
    positions = np.arange(start, start + n, dtype=np.int64)
    if order == "shuffled":
        positions = rng.permutation(positions)
    return {"x": normal(rng, *batch, n, d), "positions": positions, "base": base, "dtype": dtype}


def describe_rope(params: dict[str, Any]) -> str:
    start, n = params["start"], params["n"]
    order = ", shuffled" if params["order"] == "shuffled" else ""
    return (
        f"x of shape {(*params['batch'], n, params['d'])} ({params['dtype']}), positions "
        f"{start}..{start + n - 1}{order}, base={params['base']:g}"
    )


def call_rope(fn: Any, inputs: dict[str, Any]) -> Arrays:
    dtype = getattr(torch, inputs["dtype"])
    x = torch.tensor(inputs["x"], dtype=dtype)
    out = fn(x, torch.from_numpy(inputs["positions"].copy()), inputs["base"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"apply_rope should return a tensor, got {type(out).__name__}")
    return {"output": out, "same_dtype": np.array([out.dtype == dtype])}


def rope_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    if got.get("same_dtype") is not None and not got["same_dtype"].all():
        hints.append(
            f"The output's dtype is not the input's ({inputs['dtype']}): compute the angles in "
            "float64 if you like, then cast cos and sin to x.dtype."
        )
    out, want = got.get("output"), expected["output"]
    if out is not None and out.shape == want.shape:
        wrong = wrong_along(wrong_entries(out, want, 1e-5, 1e-5), -1)
        if len(wrong):
            hints.append(f"The wrong features are {index_ranges(wrong)} (of 0-{want.shape[-1] - 1}).")
    return hints


def _rope_case(name: str) -> Case:
    return Case(
        name=name,
        make_inputs=make_rope_inputs,
        call=call_rope,
        describe=describe_rope,
        hints=rope_hints,
        atol=1e-9,
        rtol=1e-7,
        conditioning=lambda p: 1e3 if p["dtype"] == "float32" else 1.0,
    )


# ---------------------------------------------------------------- grouped-query attention


def make_gqa_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    n_q: int = 3,
    n_k: int = 5,
    d: int = 4,
    d_v: int = 3,
    mask: str | None = None,
) -> dict[str, Any]:
    """q (B, h, n_q, d), k (B, g, n_k, d), v (B, g, n_k, d_v) and a mask of one of the kinds of
    :func:`attention_learner.inputs.attention_mask` ("head": one mask per query head, (B, h, n_q, n_k))."""
    kind = "fully_masked" if mask == "head" else mask
    shape = (batch, heads) if mask == "head" else (batch, 1)
    mask_array = attention_mask(rng, kind, shape, n_q, n_k)
    return {
        "q": normal(rng, batch, heads, n_q, d),
        "k": normal(rng, batch, kv_heads, n_k, d),
        "v": normal(rng, batch, kv_heads, n_k, d_v),
        "mask": mask_array,
    }


def describe_gqa(params: dict[str, Any]) -> str:
    mask = (
        "one random mask per query head, query 0 of each sees no key"
        if params["mask"] == "head"
        else (describe_mask(params["mask"]))
    )
    return (
        f"batch {params['batch']}, h={params['heads']} query heads, g={params['kv_heads']} key/value "
        f"heads, n_q={params['n_q']}, n_k={params['n_k']}, d={params['d']}, d_v={params['d_v']}, {mask}"
    )


def call_gqa(fn: Any, inputs: dict[str, Any]) -> Arrays:
    result = fn(tensor(inputs["q"]), tensor(inputs["k"]), tensor(inputs["v"]), tensor(inputs["mask"]))
    out, weights = unpack(result, ("out", "weights"), "gqa_attention")
    return {"output": out, "weights": weights}


def gqa_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    out, want = got.get("output"), expected["output"]
    hints = []
    if out is not None and out.shape == want.shape:
        if not np.isfinite(out).all():
            hints.append(
                "Some outputs are NaN: a query whose keys are all masked gets zero weights and a "
                "zero output (the softmax of a row of -inf is 0/0)."
            )
        wrong = wrong_along(wrong_entries(out, want, 1e-9, 1e-7), 1)
        if len(wrong) and len(wrong) < want.shape[1]:
            hints.append(
                f"Query heads {index_ranges(wrong)} are wrong and the others right (of 0-"
                f"{want.shape[1] - 1}): query head i reads key/value head i // (h / g)."
            )
    return hints


# ---------------------------------------------------------------- the sliding window


def make_window_inputs(
    rng: np.random.Generator, n_q: int = 4, n_k: int = 6, window: int = 3, sinks: int = 0
) -> dict[str, Any]:
    return {"n_q": n_q, "n_k": n_k, "window": window, "sinks": sinks}


def call_window(fn: Any, inputs: dict[str, Any]) -> Arrays:
    mask = fn(inputs["n_q"], inputs["n_k"], inputs["window"], inputs["sinks"])
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"sliding_window_mask should return a bool tensor, got "
            f"{getattr(mask, 'dtype', type(mask).__name__)}"
        )
    return {"mask": mask}


def window_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    mask, want = got.get("mask"), expected["mask"]
    if mask is None or mask.shape != want.shape:
        return []
    hints = []
    extra, missing = np.argwhere(mask & ~want), np.argwhere(~mask & want)
    offset = inputs["n_k"] - inputs["n_q"]
    for what, where in (("visible but should not be", extra), ("hidden but should be visible", missing)):
        if len(where):
            i, j = where[0]
            hints.append(
                f"{len(where)} entr{'y is' if len(where) == 1 else 'ies are'} {what}, e.g. query {i} "
                f"(at position {i + offset}) and key {j}."
            )
    return hints


# ---------------------------------------------------------------- the rolling cache


def make_rolling_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    kv_heads: int = 2,
    d: int = 3,
    d_v: int = 2,
    window: int = 3,
    sinks: int = 2,
    chunks: Sequence[int] = (2, 1, 1, 3, 1),
) -> dict[str, Any]:
    n = sum(chunks)
    return {
        "k": normal(rng, batch, kv_heads, n, d),
        "v": normal(rng, batch, kv_heads, n, d_v),
        "window": window,
        "sinks": sinks,
        "chunks": tuple(chunks),
    }


def describe_rolling(params: dict[str, Any]) -> str:
    return (
        f"window={params['window']}, sinks={params['sinks']}, batch {params['batch']}, "
        f"g={params['kv_heads']}, d={params['d']}, d_v={params['d_v']}, chunks of "
        f"{list(params['chunks'])} positions appended in turn"
    )


def rolling_bounds(chunks: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(chunks)
    return [(int(e - c), int(e)) for c, e in zip(chunks, ends, strict=True)]


def call_rolling(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Append the chunks in turn; what each append returned, concatenated along the kept axis
    (``kept``: how many positions each step returned), and ``len(cache)`` after each step."""
    cache = cls(inputs["window"], inputs["sinks"])
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    keys, values, positions, kept, lengths = [], [], [], [], []
    for a, b in rolling_bounds(inputs["chunks"]):
        result = cache.append(k[:, :, a:b].clone(), v[:, :, a:b].clone())
        step_k, step_v, step_p = unpack(result, ("keys", "values", "positions"), "RollingKVCache.append")
        step_p = torch.as_tensor(step_p).reshape(-1).to(torch.float64)
        if (
            step_k.shape[:2] != k.shape[:2]
            or step_v.shape[:2] != v.shape[:2]
            or step_k.shape[-2] != len(step_p)
        ):
            raise ValueError(
                f"after appending positions {a}..{b - 1}, append returned keys {tuple(step_k.shape)}, values "
                f"{tuple(step_v.shape)} and {len(step_p)} positions: expected (B, g, kept, d), (B, g, kept, "
                "d_v) and kept positions"
            )
        keys.append(step_k), values.append(step_v), positions.append(step_p)
        kept.append(len(step_p)), lengths.append(len(cache))
    return {
        "keys": torch.cat(keys, dim=-2),
        "values": torch.cat(values, dim=-2),
        "positions": torch.cat(positions),
        "kept": np.array(kept, dtype=np.float64),
        "lengths": np.array(lengths, dtype=np.float64),
    }


def rolling_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    want_kept, kept = expected["kept"], got.get("kept")
    if kept is not None and kept.shape == want_kept.shape:
        ends, want_ends = np.cumsum(kept).astype(int), np.cumsum(want_kept).astype(int)
        mine, want = got.get("positions"), expected["positions"]
        for s, (a, b) in enumerate(rolling_bounds(inputs["chunks"])):
            m = mine[ends[s] - int(kept[s]) : ends[s]] if mine is not None else None
            w = want[want_ends[s] - int(want_kept[s]) : want_ends[s]]
            if m is not None and (m.shape != w.shape or (m != w).any()):
                return [
                    f"After appending positions {a}..{b - 1}, the cache returned positions "
                    f"{m.astype(int).tolist()}, expected {w.astype(int).tolist()} (the first "
                    f"{inputs['sinks']} and the last {inputs['window']} of the {b} seen)."
                ]
    lengths = got.get("lengths")
    if (
        lengths is not None
        and lengths.shape == expected["lengths"].shape
        and (lengths != expected["lengths"]).any()
    ):
        return [
            f"len(cache) after each append was {lengths.astype(int).tolist()}, expected "
            f"{expected['lengths'].astype(int).tolist()} (the number of positions seen)."
        ]
    return []


# ---------------------------------------------------------------- FlashAttention


def make_flash_inputs(
    rng: np.random.Generator,
    batch: Sequence[int] = (2,),
    n_q: int = 5,
    n_k: int = 7,
    d: int = 4,
    d_v: int = 3,
    block_size: int = 3,
    causal: bool = False,
    logit_scale: float = 1.0,
) -> dict[str, Any]:
    """Q (*batch, n_q, d) (times ``logit_scale``), K (*batch, n_k, d), V (*batch, n_k, d_v) and
    an upstream gradient dO (*batch, n_q, d_v)."""
    batch = tuple(batch)
    return {
        "Q": normal(rng, *batch, n_q, d, scale=logit_scale),
        "K": normal(rng, *batch, n_k, d),
        "V": normal(rng, *batch, n_k, d_v),
        "dO": normal(rng, *batch, n_q, d_v),
        "block_size": block_size,
        "causal": causal,
    }


def describe_flash(params: dict[str, Any]) -> str:
    n_q, n_k, b = params["n_q"], params["n_k"], params["block_size"]
    last = f", the last of {n_k % b}" if n_k % b else ""
    text = (
        f"batch {tuple(params['batch'])}, n_q={n_q}, n_k={n_k}, d={params['d']}, d_v={params['d_v']}, "
        f"block_size={b} ({-(-n_k // b)} key block(s){last})"
    )
    if params["causal"]:
        text += ", causal (query i at position n_k - n_q + i)"
        if n_q > n_k:
            text += f", so queries 0-{n_q - n_k - 1} see no key"
    if params["logit_scale"] != 1.0:
        text += f", scores of order +-{params['logit_scale']:g}"
    return text


def _flash_output(cls: Any, inputs: dict[str, Any], grad: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    Q, K, V = (tensor(inputs[n], grad=grad) for n in ("Q", "K", "V"))
    out = cls.apply(Q, K, V, inputs["block_size"], inputs["causal"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"FlashAttention.apply should return the output tensor alone, got {type(out).__name__}"
        )
    if grad and getattr(out.grad_fn, "_forward_cls", None) is not cls:
        raise TypeError(
            "FlashAttention.apply's output does not come from FlashAttention's own backward: "
            "FlashAttention must be a torch.autograd.Function whose forward returns the output"
        )
    return out, [Q, K, V]


def call_flash(cls: Any, inputs: dict[str, Any]) -> Arrays:
    with torch.no_grad():
        out, _ = _flash_output(cls, inputs, grad=False)
    return {"output": out}


def call_flash_gradients(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """The output and the gradients of sum(out * dO), from the learner's backward alone: the
    engine runs FlashAttention's backward node and nothing else."""
    out, leaves = _flash_output(cls, inputs, grad=True)
    dO = torch.from_numpy(inputs["dO"].copy())
    if tuple(out.shape) != tuple(dO.shape):
        return {"output": out}
    try:
        # autograd's engine called directly (what torch.autograd.grad runs): torch.autograd.grad
        # itself is what FlashAttention's backward may not call, and is traced as such
        grads = torch.autograd.Variable._execution_engine.run_backward(
            (out,), (dO,), False, False, tuple(leaves), True, False
        )
    except RuntimeError as exc:
        if "invalid gradient at index" in str(exc):
            raise RuntimeError(
                f"{exc}\n(backward returns one gradient per argument of forward, in order: dQ, "
                "dK, dV, then None for block_size and causal; are dK and dV swapped?)"
            ) from exc
        raise
    named = dict(zip(("dQ", "dK", "dV"), grads, strict=True))
    return {
        "output": out,
        **{
            k: torch.zeros_like(t) if g is None else g
            for (k, g), t in zip(named.items(), leaves, strict=True)
        },
    }


def flash_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    for key, what in (("output", "output"), ("dQ", "dQ"), ("dK", "dK"), ("dV", "dV")):
        mine, want = got.get(key), expected.get(key)
        if mine is None or want is None or mine.shape != want.shape:
            continue
        if not np.isfinite(mine).all():
            hints.append(
                f"{what} has NaN or infinite entries: a query that sees no key (L = -inf) must get "
                "a zero output and zero gradients; rows not yet seeing a key shift by 0."
            )
            break
        wrong = wrong_along(wrong_entries(mine, want, 1e-8, 1e-6), -2)
        if len(wrong):
            axis = "query" if key in ("output", "dQ") else "key"
            hints.append(
                f"The first wrong result is {what}, in {axis} rows {index_ranges(wrong)} "
                f"(of 0-{want.shape[-2] - 1})."
            )
            break
    return hints


#: what the memory case's test cell may allocate on top of what the job had when it started
FLASH_MEMORY_BUDGET = 256 * 2**20


def make_flash_memory_inputs(
    rng: np.random.Generator,
    n_q: int = 3072,
    n_k: int = 12288,
    distinct: int = 53,
    block_size: int = 512,
) -> dict[str, Any]:
    """A case whose (n_q, n_k) float64 matrix (288 MiB) exceeds :data:`FLASH_MEMORY_BUDGET`:
    keys and values are ``distinct`` rows repeated and shuffled, so that whoever judges computes
    the exact answer and gradients over the distinct rows."""
    K_rows, V_rows = normal(rng, distinct, 2), normal(rng, distinct, 3)
    which = rng.permutation(np.arange(n_k) % distinct)  # (n_k,) the row each key repeats
    return {
        "Q": normal(rng, n_q, 2),
        "K": K_rows[which],
        "V": V_rows[which],
        "dO": normal(rng, n_q, 3),
        "block_size": block_size,
        "causal": False,
        "K_rows": K_rows,
        "V_rows": V_rows,
        "which": which,
    }


def describe_flash_memory(params: dict[str, Any]) -> str:
    full = params["n_q"] * params["n_k"] * 8
    return (
        f"forward and backward with {params['n_q']} queries and {params['n_k']} keys in blocks of "
        f"{params['block_size']}: one (n_q, n_k) float64 matrix would take {full / 2**20:.0f} MiB, more "
        f"than the {FLASH_MEMORY_BUDGET // 2**20} MiB this test may allocate when graded"
    )


CASES = [
    _rope_case("apply_rope"),
    _rope_case("apply_rope_interleaved"),
    Case(
        name="gqa_attention",
        make_inputs=make_gqa_inputs,
        call=call_gqa,
        describe=describe_gqa,
        hints=gqa_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="gqa_attention__torch",
        make_inputs=make_gqa_inputs,
        call=call_gqa,
        describe=lambda p: "against F.scaled_dot_product_attention(enable_gqa=True), " + describe_gqa(p),
        hints=gqa_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="sliding_window_mask",
        make_inputs=make_window_inputs,
        call=call_window,
        hints=window_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="RollingKVCache",
        make_inputs=make_rolling_inputs,
        call=call_rolling,
        describe=describe_rolling,
        hints=rolling_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="FlashAttention",
        make_inputs=make_flash_inputs,
        call=call_flash,
        describe=describe_flash,
        hints=flash_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="FlashAttention__gradients",
        make_inputs=make_flash_inputs,
        call=call_flash_gradients,
        describe=describe_flash,
        hints=flash_hints,
        atol=1e-9,
        rtol=1e-7,
        labels={
            "dQ": "the gradient with respect to Q",
            "dK": "the gradient with respect to K",
            "dV": "the gradient with respect to V",
        },
    ),
    Case(
        name="FlashAttention__memory",
        make_inputs=make_flash_memory_inputs,
        call=call_flash_gradients,
        describe=describe_flash_memory,
        atol=1e-8,
        rtol=1e-6,
    ),
]
