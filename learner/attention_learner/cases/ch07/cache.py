"""The case of KVCache: what each append returns, the length after it, k and v at the end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, reproduces, wrong_along, wrong_entries
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, unpack

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
        f"batch {params['batch']}, num_heads={params['num_heads']}, "
        f"d_k={params['d_k']}, d_v={params['d_v']}, appending chunks of "
        f"{list(params['chunks'])} positions"
    )


def chunk_bounds(chunks: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(chunks)
    return [(int(e - c), int(e)) for c, e in zip(chunks, ends, strict=True)]


def cache_length(cache: Any) -> int:
    try:
        return len(cache)
    except TypeError as exc:
        raise TypeError("KVCache should define __len__: the number of cached positions") from exc


def call_cache(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Append the chunks one by one; return what each append returned, len(cache) after each
    step, and the cache's k and v at the end."""
    cache = cls()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: dict[str, Any] = {"length_before": np.array([cache_length(cache)], dtype=np.float64)}
    lengths = []
    for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
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
        lengths.append(cache_length(cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    for name in ("k", "v"):
        if not hasattr(cache, name):
            raise AttributeError(f"KVCache has no attribute {name!r}: {CACHE_CONTRACT}")
        outputs[f"cache_{name}"] = getattr(cache, name)
    return outputs


def cache_where_wrong(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    """The first append whose result is wrong, and along which positions."""
    for s, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
        for name in ("k", "v"):
            want, mine = expected[f"{name}_step{s}"], got.get(f"{name}_step{s}")
            if mine is None or reproduces(want, mine, 0.0, 0.0):
                continue
            where = (
                f"it has shape {mine.shape}, expected {want.shape}"
                if mine.shape != want.shape
                else f"positions {index_ranges(wrong_along(wrong_entries(mine, want, 0.0, 0.0), -2))} of "
                f"0-{b - 1} are wrong"
            )
            return [
                f"The first wrong result of append is at step {s} (adding positions "
                f"{index_ranges(range(a, b))} to {a} cached ones), in its {name}: {where}."
            ]
    return []


def cache_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    if got.get("length_before") is not None and np.any(got["length_before"] != 0):
        hints.append("A new KVCache should be empty: len(cache) == 0 before the first append.")
    lengths = got.get("lengths")
    if (
        lengths is not None
        and lengths.shape == expected["lengths"].shape
        and not np.array_equal(lengths, expected["lengths"])
    ):
        hints.append(
            f"len(cache) after each append was {lengths.astype(int).tolist()}, expected "
            f"{expected['lengths'].astype(int).tolist()} (the number of cached positions)."
        )
    # the classic bugs are named by the judge from their outputs (grader.exercises.ch07): a
    # model of a cache held here would be a cache
    return hints + cache_where_wrong(inputs, expected, got)


# ---------------------------------------------------------------- cached self-attention
