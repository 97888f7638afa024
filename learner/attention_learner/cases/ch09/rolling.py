"""Chapter 9's case of the rolling KV cache: ``RollingKVCache(window, sinks)``, chunks appended
one by one; what each append returns (keys, values, positions) and ``len(cache)`` after it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.inputs import normal
from attention_learner.spec import Arrays, unpack


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


def call_rolling(cls: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """Append the chunks in turn; what each append returned, concatenated along the kept axis
    (``kept``: how many positions each step returned), and ``len(cache)`` after each step."""
    cache = cls(inputs["window"], inputs["sinks"])
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    keys: list[torch.Tensor] = []
    values: list[torch.Tensor] = []
    positions: list[torch.Tensor] = []
    kept: list[int] = []
    lengths: list[int] = []
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
        keys.append(step_k)
        values.append(step_v)
        positions.append(step_p)
        kept.append(len(step_p))
        lengths.append(len(cache))
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
