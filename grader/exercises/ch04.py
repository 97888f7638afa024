"""Chapter 4 exercises, the judging half: references and classic bugs of split_heads,
merge_heads and MultiHeadAttention (the cases are in ``attention_learner.cases.ch04``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import torch

from attention_learner.cases.ch04 import build_mha, call_mha, mha_d_model
from attention_learner.torch_cases import backward, tensor
from grader.exercises.spec import exercise
from grader.reference.multi_head import (
    MultiHeadAttention,
    merge_heads,
    split_heads,
    to_torch_multihead,
    torch_attn_mask,
)
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch


def _split_no_transpose(x: torch.Tensor, h: int) -> torch.Tensor:
    B, n, d_model = x.shape
    return x.reshape(B, h, n, d_model // h)  # (B, h, n, d_head) with tokens mixed


def _split_interleaved(x: torch.Tensor, h: int) -> torch.Tensor:
    B, n, d_model = x.shape
    return x.reshape(B, n, d_model // h, h).permute(0, 3, 1, 2)  # (B, h, n, d_head)


def _merge_no_transpose(x: torch.Tensor) -> torch.Tensor:
    B, h, n, d_head = x.shape
    return x.reshape(B, n, h * d_head)  # (B, n, d_model) with tokens mixed


def _merge_interleaved(x: torch.Tensor) -> torch.Tensor:
    B, h, n, d_head = x.shape
    return x.permute(0, 2, 3, 1).reshape(B, n, h * d_head)  # (B, n, d_model)


NO_TRANSPOSE = (
    "heads reshaped without moving the head axis: reshape to (B, n, h, d_head) first, then "
    "transpose(1, 2); a direct reshape to (B, h, n, d_head) mixes different tokens into one row"
)
INTERLEAVED = (
    "features dealt out to the heads one by one (a reshape to (..., d_head, h)): head i must "
    "get the contiguous block of columns i*d_head .. (i+1)*d_head - 1"
)
MERGE_NO_TRANSPOSE = (
    "heads merged without moving the head axis back: transpose(1, 2) to (B, n, h, d_head) "
    "before the reshape to (B, n, d_model)"
)


def _on_X(fn: Callable[..., torch.Tensor], key: str) -> Callable[[dict[str, Any]], dict[str, torch.Tensor]]:
    def bug(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
        args = [torch.from_numpy(inputs["X"])]
        if "num_heads" in inputs:
            args.append(inputs["num_heads"])
        return {key: fn(*args)}

    return bug


def mha_variant(
    inputs: dict[str, Any],
    split: Callable[[torch.Tensor, int], torch.Tensor] = split_heads,
    merge: Callable[[torch.Tensor], torch.Tensor] = merge_heads,
    scale: float | None = None,
    project_out: bool = True,
    kv_from: tuple[str, str] = ("key", "value"),
    invert_mask: bool = False,
) -> dict[str, torch.Tensor]:
    """Multi-head attention with one classic bug switched on (outputs and weights only)."""
    m = cast(MultiHeadAttention, build_mha(MultiHeadAttention, inputs))
    h = inputs["num_heads"]
    mask = tensor(inputs["mask"])
    if invert_mask:
        if mask is None:
            return {}
        mask = ~mask
    with torch.no_grad():
        q = split(m.W_q(tensor(inputs["query"])), h)  # (B, h, n_q, d_head)
        k = split(m.W_k(tensor(inputs[kv_from[0]])), h)  # (B, h, n_k, d_head)
        v = split(m.W_v(tensor(inputs[kv_from[1]])), h)  # (B, h, n_k, d_head)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask, scale=scale)
        out = merge(heads)  # (B, n_q, d_model)
        if project_out:
            out = m.W_o(out)
    return {"output": out, "weights": weights}


MHA_BUGS = {
    NO_TRANSPOSE: lambda i: mha_variant(i, split=_split_no_transpose, merge=_merge_no_transpose),
    MERGE_NO_TRANSPOSE: lambda i: mha_variant(i, merge=_merge_no_transpose),
    INTERLEAVED: lambda i: mha_variant(i, split=_split_interleaved, merge=_merge_interleaved),
    "the heads merged in another order than they were split (merge_heads must undo "
    "split_heads: transpose(1, 2) back to (B, n, h, d_head), then reshape to (B, n, d_model))": (
        lambda i: mha_variant(i, merge=_merge_interleaved)
    ),
    "the scores were scaled by 1/sqrt(d_model) instead of 1/sqrt(d_head) (each head compares "
    "vectors of size d_head)": lambda i: mha_variant(i, scale=1.0 / math.sqrt(mha_d_model(i))),
    "the scores were not divided by sqrt(d_head)": lambda i: mha_variant(i, scale=1.0),
    "no output projection: W_o was not applied to the merged heads": lambda i: mha_variant(
        i, project_out=False
    ),
    "the keys and values were computed from the query (use W_k(key) and W_v(value))": (
        lambda i: mha_variant(i, kv_from=("query", "query"))
    ),
    "the keys were computed from the query (use W_k(key))": lambda i: mha_variant(
        i, kv_from=("query", "value")
    ),
    "the values were computed from the key tensor (use W_v(value))": lambda i: mha_variant(
        i, kv_from=("key", "key")
    ),
    "the mask is inverted (True must mean 'may attend')": lambda i: mha_variant(i, invert_mask=True),
}


def torch_mha_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Outputs and gradients of torch's nn.MultiheadAttention with the same weights."""
    ours = cast(MultiHeadAttention, build_mha(MultiHeadAttention, inputs))
    theirs = to_torch_multihead(ours)
    tensors = {name: tensor(inputs[name], grad=True) for name in ("query", "key", "value")}
    B, n_q, _ = inputs["query"].shape
    n_k = inputs["key"].shape[1]
    mask = tensor(inputs["mask"])
    attn_mask = None if mask is None else torch_attn_mask(mask, B, inputs["num_heads"], n_q, n_k)
    out, weights = theirs(
        *tensors.values(), attn_mask=attn_mask, need_weights=True, average_attn_weights=False
    )
    grads = backward(out, inputs["G"], tensors, "nn.MultiheadAttention")
    return {"output": out, "weights": weights, **grads}


EXERCISES = [
    exercise(
        "split_heads",
        lambda i: {"heads": split_heads(torch.from_numpy(i["X"]), i["num_heads"])},
        {NO_TRANSPOSE: _on_X(_split_no_transpose, "heads"), INTERLEAVED: _on_X(_split_interleaved, "heads")},
    ),
    exercise(
        "merge_heads",
        lambda i: {"merged": merge_heads(torch.from_numpy(i["X"]))},
        {
            MERGE_NO_TRANSPOSE: _on_X(_merge_no_transpose, "merged"),
            INTERLEAVED: _on_X(_merge_interleaved, "merged"),
        },
    ),
    exercise("MultiHeadAttention", lambda i: call_mha(MultiHeadAttention, i), MHA_BUGS),
    exercise("MultiHeadAttention__torch", torch_mha_reference, MHA_BUGS),
]
