"""Chapter 3 exercises: scaled dot-product attention (NumPy, PyTorch) and the softmax Jacobian."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from grader.exercises.cases import attention_mask, describe_mask, normal
from grader.exercises.spec import Arrays, Exercise, unpack
from grader.reference import scaled_dot_product_attention, softmax, softmax_jacobian
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch

# ---------------------------------------------------------------- attention cases


def make_attention_inputs(
    rng: np.random.Generator,
    n_q: int = 3,
    n_k: int = 5,
    d_k: int = 7,
    d_v: int = 2,
    batch: tuple[int, ...] | list[int] = (),
    mask: str | None = None,
    logit_scale: float = 1.0,
) -> dict[str, Any]:
    """Q, K, V from three independent draws with every axis its own size."""
    batch = tuple(batch)
    return {
        "Q": normal(rng, *batch, n_q, d_k, scale=logit_scale),  # (*B, n_q, d_k)
        "K": normal(rng, *batch, n_k, d_k),  # (*B, n_k, d_k)
        "V": normal(rng, *batch, n_k, d_v),  # (*B, n_k, d_v)
        "mask": attention_mask(rng, mask, batch, n_q, n_k),
        "G": normal(rng, *batch, n_q, d_v),  # upstream gradient for the backward checks
    }


def describe_attention(params: dict[str, Any]) -> str:
    shape = (
        f"batch {tuple(params.get('batch', ()))}, n_q={params.get('n_q', 3)}, "
        f"n_k={params.get('n_k', 5)}, d_k={params.get('d_k', 7)}, d_v={params.get('d_v', 2)}"
    )
    extra = ""
    if params.get("logit_scale", 1.0) != 1.0:
        extra = f", queries scaled by {params['logit_scale']:g}"
    return f"{shape}, {describe_mask(params.get('mask'))}{extra}"


def _attention(inputs: dict[str, Any], **kwargs: Any) -> Arrays:
    out, weights = scaled_dot_product_attention(
        inputs["Q"], inputs["K"], inputs["V"], inputs.get("mask"), **kwargs
    )
    return {"output": out, "weights": weights}


def _with_mask(inputs: dict[str, Any], mask: np.ndarray | None) -> dict[str, Any]:
    return {**inputs, "mask": mask}


def _scores(inputs: dict[str, Any]) -> np.ndarray:
    Q, K = inputs["Q"], inputs["K"]
    return Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # (..., n_q, n_k)


def _weights_to_outputs(inputs: dict[str, Any], weights: np.ndarray) -> Arrays:
    return {"output": weights @ inputs["V"], "weights": weights}


def _bug_inverted_mask(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None:
        return {}
    return _attention(_with_mask(inputs, ~inputs["mask"]))


def _bug_mask_after_softmax(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None:
        return {}
    weights = softmax(_scores(inputs), axis=-1) * inputs["mask"]
    return _weights_to_outputs(inputs, weights)


def _bug_large_negative_fill(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None or inputs["mask"].all(axis=-1).all():
        return {}
    scores = np.where(inputs["mask"], _scores(inputs), -1e9)
    return _weights_to_outputs(inputs, softmax(scores, axis=-1))


def _bug_softmax_over_queries(inputs: dict[str, Any]) -> Arrays:
    scores = _scores(inputs)
    if inputs["mask"] is not None:
        scores = np.where(inputs["mask"], scores, -np.inf)
    return _weights_to_outputs(inputs, softmax(scores, axis=-2))


ATTENTION_BUGS = {
    "the scores were not divided by sqrt(d_k)": lambda i: _attention(i, scale=1.0),
    "the scores were divided by d_k instead of sqrt(d_k)": lambda i: _attention(
        i, scale=1.0 / i["Q"].shape[-1]
    ),
    "the scores were divided by sqrt(d_v) instead of sqrt(d_k)": lambda i: _attention(
        i, scale=1.0 / math.sqrt(i["V"].shape[-1])
    ),
    "the softmax was taken over the wrong axis (over queries; each query's weights must sum "
    "to 1 over the keys, the last axis)": _bug_softmax_over_queries,
    "the mask is inverted (True must mean 'may attend')": _bug_inverted_mask,
    "the mask was applied after the softmax (masked weights were zeroed but the others were "
    "not renormalised; mask the scores with -inf before the softmax)": _bug_mask_after_softmax,
    "fully masked rows got uniform weights (a large negative fill such as -1e9 gives every "
    "key the same weight there; a query with no visible key must get all-zero weights)": (
        _bug_large_negative_fill
    ),
}


def attention_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    """Extra sentences: NaN on fully masked rows, rows that do not sum to 1."""
    hints = []
    mask = inputs.get("mask")
    weights = got.get("weights")
    if mask is None or weights is None or weights.shape != expected["weights"].shape:
        return hints
    empty = ~np.broadcast_to(mask, weights.shape).any(axis=-1)  # (..., n_q)
    if empty.any() and np.isnan(weights[empty]).any():
        hints.append(
            "Rows whose keys are all masked came out NaN (a softmax of all -inf is 0/0): "
            "give those rows zero weights and a zero output."
        )
    row_sums = np.nansum(weights, axis=-1)[~empty]
    if row_sums.size and not np.allclose(row_sums, 1.0, atol=1e-6):
        hints.append("The weights of each query should sum to 1 over the keys (last axis).")
    return hints


def call_attention_numpy(fn: Any, inputs: dict[str, Any]) -> Arrays:
    result = fn(inputs["Q"], inputs["K"], inputs["V"], inputs["mask"])
    out, weights = unpack(result, ("output", "weights"), "scaled_dot_product_attention")
    return {"output": out, "weights": weights}


# ---------------------------------------------------------------- the PyTorch version


def _tensors(inputs: dict[str, Any]) -> tuple[torch.Tensor, ...]:
    q, k, v = (torch.tensor(inputs[n], dtype=torch.float64, requires_grad=True) for n in "QKV")
    mask = None if inputs["mask"] is None else torch.tensor(inputs["mask"])
    return q, k, v, mask


def _backward(out: torch.Tensor, inputs: dict[str, Any], q, k, v) -> Arrays:
    """Gradients of sum(out * G) with respect to Q, K and V."""
    (out * torch.tensor(inputs["G"])).sum().backward()
    return {"dQ": q.grad, "dK": k.grad, "dV": v.grad}


def call_attention_torch(fn: Any, inputs: dict[str, Any]) -> Arrays:
    q, k, v, mask = _tensors(inputs)
    result = fn(q, k, v, mask)
    out, weights = unpack(result, ("output", "weights"), "scaled_dot_product_attention_torch")
    if not isinstance(out, torch.Tensor) or not out.requires_grad:
        raise TypeError("the output should be a tensor that carries gradients back to Q, K, V")
    grads = _backward(out, inputs, q, k, v)
    return {"output": out, "weights": weights, **grads}


def torch_attention_reference(inputs: dict[str, Any]) -> Arrays:
    """Output and gradients from torch's own F.scaled_dot_product_attention; weights from ours."""
    q, k, v, mask = _tensors(inputs)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    grads = _backward(out, inputs, q, k, v)
    _, weights = scaled_dot_product_attention_torch(q.detach(), k.detach(), v.detach(), mask)
    return {"output": out.detach(), "weights": weights, **{n: g for n, g in grads.items()}}


def call_gradcheck(fn: Any, inputs: dict[str, Any]) -> Arrays:
    """Output, weights and gradients as for the torch exercise, plus torch.autograd.gradcheck
    of the learner's output in float64 (finite differences), as 1.0 (pass) or 0.0."""
    outputs = call_attention_torch(fn, inputs)
    q, k, v, mask = _tensors(inputs)
    ok = torch.autograd.gradcheck(
        lambda a, b, c: fn(a, b, c, mask)[0], (q, k, v), eps=1e-6, atol=1e-5, raise_exception=False
    )
    return {**outputs, "gradcheck_passed": np.array(1.0 if ok else 0.0)}


# ---------------------------------------------------------------- the softmax Jacobian


def make_jacobian_inputs(rng: np.random.Generator, n: int = 5, logit_scale: float = 1.0) -> dict:
    return {"p": softmax(normal(rng, n, scale=logit_scale))}


def _jacobian_bug(fn):
    return lambda inputs: {"jacobian": fn(inputs["p"])}


JACOBIAN_BUGS = {
    "the sign is flipped (it should be diag(p) - p p^T)": _jacobian_bug(
        lambda p: np.outer(p, p) - np.diag(p)
    ),
    "the diagonal term diag(p) is missing": _jacobian_bug(lambda p: -np.outer(p, p)),
    "the outer product p p^T is missing (only diag(p) is left)": _jacobian_bug(np.diag),
    "the diagonal was computed as p instead of p (1 - p)": _jacobian_bug(
        lambda p: np.diag(p) - np.outer(p, p) * (1 - np.eye(len(p)))
    ),
}


def jacobian_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    jac = got.get("jacobian")
    if jac is not None and jac.ndim == 2 and not np.allclose(jac.sum(axis=0), 0.0, atol=1e-8):
        return ["Each column of the Jacobian should sum to 0, because the p_i always sum to 1."]
    return []


EXERCISES = [
    Exercise(
        name="scaled_dot_product_attention",
        make_inputs=make_attention_inputs,
        call=call_attention_numpy,
        reference=_attention,
        bugs=ATTENTION_BUGS,
        hints=attention_hints,
        describe=describe_attention,
    ),
    Exercise(
        name="scaled_dot_product_attention_torch",
        make_inputs=make_attention_inputs,
        call=call_attention_torch,
        reference=torch_attention_reference,
        bugs=ATTENTION_BUGS,
        hints=attention_hints,
        describe=describe_attention,
    ),
    Exercise(
        name="scaled_dot_product_attention_torch__gradcheck",
        make_inputs=make_attention_inputs,
        call=call_gradcheck,
        reference=lambda inputs: {**torch_attention_reference(inputs), "gradcheck_passed": np.array(1.0)},
        bugs=ATTENTION_BUGS,
        hints=attention_hints,
        describe=lambda p: "torch.autograd.gradcheck in float64, " + describe_attention(p),
    ),
    Exercise(
        name="softmax_jacobian",
        make_inputs=make_jacobian_inputs,
        call=lambda fn, inputs: {"jacobian": fn(inputs["p"])},
        reference=lambda inputs: {"jacobian": softmax_jacobian(inputs["p"])},
        bugs=JACOBIAN_BUGS,
        hints=jacobian_hints,
        describe=lambda p: f"p = softmax(z) with n={p.get('n', 5)}"
        + (f", logits scaled by {p['logit_scale']:g}" if p.get("logit_scale", 1) != 1 else ""),
        atol=1e-8,
    ),
]
