"""Chapter 9's cases of rotary positions: ``apply_rope(x, positions, base)`` and
``apply_rope_interleaved``, x (*batch, n, d) with positions that may start anywhere (a cache
offset) or come in any order; float32 inputs must stay float32 (``same_dtype``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, wrong_along, wrong_entries
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case


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


def call_rope(fn: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    dtype = getattr(torch, inputs["dtype"])
    x = torch.tensor(inputs["x"], dtype=dtype)
    out = fn(x, torch.from_numpy(inputs["positions"].copy()), inputs["base"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"apply_rope should return a tensor, got {type(out).__name__}")
    return {"output": out, "same_dtype": np.array([out.dtype == dtype])}


def rope_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints: list[str] = []
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


def rope_case(name: str) -> Case:
    """The case of ``name`` (either pairing of rotary positions)."""
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
