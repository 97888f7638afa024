"""Chapter 9's cases of grouped-query attention: ``gqa_attention(q, k, v, mask)``, h query heads
over g key/value heads, every axis of its own size, masks of several shapes (one with a fully
masked row)."""

from __future__ import annotations

from typing import Any

import numpy as np

from attention_learner.bug_models import index_ranges, wrong_along, wrong_entries
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays, unpack
from attention_learner.torch_cases import tensor


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


def call_gqa(fn: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    result = fn(tensor(inputs["q"]), tensor(inputs["k"]), tensor(inputs["v"]), tensor(inputs["mask"]))
    out, weights = unpack(result, ("out", "weights"), "gqa_attention")
    return {"output": out, "weights": weights}


def gqa_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    out, want = got.get("output"), expected["output"]
    hints: list[str] = []
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
