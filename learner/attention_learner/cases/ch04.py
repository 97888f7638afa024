"""Chapter 4 cases: split_heads, merge_heads and the MultiHeadAttention module.

MultiHeadAttention is run with explicit weights (``attention_learner.torch_cases``): every case
draws its own parameters, loads them into the learner's module by the contract's submodule
names (W_q, W_k, W_v, W_o) and runs it in float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.attention_hints import attention_hints
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays, Case, describe_scale, unpack
from attention_learner.torch_cases import backward, build_module, mha_state, size_mismatch_note, tensor

# ---------------------------------------------------------------- split_heads and merge_heads


def make_split_inputs(
    rng: np.random.Generator, batch: int = 2, n: int = 5, num_heads: int = 3, d_head: int = 4
) -> dict[str, Any]:
    return {"X": normal(rng, batch, n, num_heads * d_head), "num_heads": num_heads}


def make_merge_inputs(
    rng: np.random.Generator, batch: int = 2, n: int = 5, num_heads: int = 3, d_head: int = 4
) -> dict[str, Any]:
    return {"X": normal(rng, batch, num_heads, n, d_head)}


def describe_heads(params: dict[str, Any]) -> str:
    return (
        f"batch {params['batch']}, n={params['n']}, "
        f"num_heads={params['num_heads']}, d_head={params['d_head']}"
    )


def split_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    B, n, d_model = inputs["X"].shape
    h = inputs["num_heads"]
    if got.get("heads") is not None and got["heads"].shape == (B, n, h, d_model // h):
        return ["That is the shape (B, n, h, d_head): the transpose(1, 2) is missing."]
    return []


def merge_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    B, h, n, d_head = inputs["X"].shape
    if got.get("merged") is not None and got["merged"].shape == (B, h, n * d_head):
        return ["Only the last two axes were flattened: move the head axis next to d_head first."]
    return []


# ---------------------------------------------------------------- MultiHeadAttention

MHA_CONTRACT = (
    "W_q, W_k, W_v (the input projections) and W_o (the output projection), each an "
    "nn.Linear(d_model, d_model)"
)


def mha_mask(
    rng: np.random.Generator, kind: str | None, batch: int, num_heads: int, n_q: int, n_k: int
) -> np.ndarray | None:
    """A mask broadcastable to (B, h, n_q, n_k): "random" differs per head, "padding" is
    (B, 1, 1, n_k), "fully_masked" is (B, 1, n_q, n_k) with query 0 blind, "causal" (n_q, n_k)."""
    dims = (batch, num_heads) if kind == "random" else (batch, 1)
    return attention_mask(rng, kind, dims, n_q, n_k)


def make_mha_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    n_q: int = 5,
    n_k: int = 7,
    num_heads: int = 3,
    d_head: int = 4,
    mask: str | None = None,
    logit_scale: float = 1.0,
    bias: bool = True,
) -> dict[str, Any]:
    """Query, key and value from three independent draws; keys and values are n_k long.

    ``bias=False`` builds the module as ``cls(d_model, num_heads, bias=False)``.
    """
    d_model = num_heads * d_head
    return {
        "query": normal(rng, batch, n_q, d_model, scale=logit_scale),  # (B, n_q, d_model)
        "key": normal(rng, batch, n_k, d_model),  # (B, n_k, d_model)
        "value": normal(rng, batch, n_k, d_model),  # (B, n_k, d_model)
        "mask": mha_mask(rng, mask, batch, num_heads, n_q, n_k),
        "state": mha_state(rng, d_model, bias=bias),
        "num_heads": num_heads,
        "G": normal(rng, batch, n_q, d_model),  # upstream gradient
        "bias": bias,
    }


def describe_mha(params: dict[str, Any]) -> str:
    h, d_head = params["num_heads"], params["d_head"]
    text = (
        f"batch {params['batch']}, n_q={params['n_q']}, n_k={params['n_k']}, "
        f"num_heads={h}, d_head={d_head} (d_model={h * d_head}), "
        f"{describe_mask(params['mask'])}"
    ) + describe_scale(params["logit_scale"], "queries")
    if not params["bias"]:
        text += ", built with bias=False"
    return text


def mha_d_model(inputs: dict[str, Any]) -> int:
    """The model width of a MultiHeadAttention case: num_heads * d_head."""
    return int(inputs["query"].shape[-1])


def build_mha(cls: Any, inputs: dict[str, Any]) -> nn.Module:
    """The module ``cls(d_model, num_heads)`` (``bias=False`` passed when the case says so)."""
    args = (mha_d_model(inputs), inputs["num_heads"])
    if inputs.get("bias", True):
        return build_module(cls, args, inputs["state"], MHA_CONTRACT)
    return build_module(cls, args, inputs["state"], MHA_CONTRACT, bias=False)


def projection_biases(module: nn.Module) -> int:
    """How many of W_q, W_k, W_v, W_o hold a bias vector (0 for bias=False, else 4)."""
    return sum(
        isinstance(getattr(getattr(module, name, None), "bias", None), torch.Tensor)
        for name in ("W_q", "W_k", "W_v", "W_o")
    )


def call_mha(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Build the learner's module with explicit weights; return its outputs and input gradients."""
    module = build_mha(cls, inputs)
    tensors = {name: tensor(inputs[name], grad=True) for name in ("query", "key", "value")}
    try:
        result = module(*tensors.values(), tensor(inputs["mask"]))
    except RuntimeError as exc:
        from attention_learner.checks import raising_function  # (checks imports the cases)

        n_q, n_k = inputs["query"].shape[1], inputs["key"].shape[1]
        where = raising_function(exc)
        if n_q == n_k or (where and where.split(".")[0] != "MultiHeadAttention"):
            raise  # the note's cause cannot be the one here: say nothing about it
        raise size_mismatch_note(
            exc,
            f"the query has n_q={n_q} positions, the key and value n_k={n_k}",
            "that the keys or values were computed from the query instead of from key and value",
        ) from exc
    out, weights = unpack(result, ("output", "weights"), "MultiHeadAttention.forward")
    grads = backward(out, inputs["G"], tensors, "MultiHeadAttention.forward")
    biases = np.array(float(projection_biases(module)))  # () the number of bias vectors
    return {"output": out, "weights": weights, **grads, "biases": biases}


MHA_LABELS = {
    "biases": "the number of bias vectors among W_q, W_k, W_v, W_o (bias=False must build "
    "every projection as nn.Linear(d_model, d_model, bias=False); bias=True keeps all four)",
}


def mha_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = attention_hints(inputs, expected, got)
    weights = got.get("weights")
    B, h, n_q, n_k = expected["weights"].shape
    if weights is not None and weights.shape == (B, n_q, n_k):
        hints.append("Return the weights of every head, shape (B, h, n_q, n_k), not their mean.")
    hints.append(
        "MultiHeadAttention runs your split_heads, merge_heads and "
        "scaled_dot_product_attention_torch: if one of their own tests fails, fix that first."
    )
    return hints


CASES = [
    Case(
        name="split_heads",
        make_inputs=make_split_inputs,
        call=lambda fn, i: {"heads": fn(torch.from_numpy(i["X"]), i["num_heads"])},
        describe=describe_heads,
        hints=split_hints,
    ),
    Case(
        name="merge_heads",
        make_inputs=make_merge_inputs,
        call=lambda fn, i: {"merged": fn(torch.from_numpy(i["X"]))},
        describe=describe_heads,
        hints=merge_hints,
    ),
    Case(
        name="MultiHeadAttention",
        make_inputs=make_mha_inputs,
        call=call_mha,
        describe=describe_mha,
        hints=mha_hints,
        labels=MHA_LABELS,
    ),
    Case(
        name="MultiHeadAttention__torch",
        make_inputs=make_mha_inputs,
        call=call_mha,
        describe=lambda p: "against torch.nn.MultiheadAttention with the same weights, " + describe_mha(p),
        hints=mha_hints,
    ),
]
