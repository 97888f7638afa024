"""Chapter 3 exercises, the judging half: references and classic bugs of scaled dot-product
attention (NumPy, PyTorch, its gradients) and of the softmax Jacobian.

The cases (inputs, how the learner's code is called, descriptions, hints) are in
``attention_learner.cases.ch03``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attention_learner.cases.ch03 import attention_tensors
from attention_learner.tolerance import all_close
from attention_learner.torch_cases import backward, tensor
from grader.exercises.spec import Arrays, attention_outputs, exercise
from grader.reference import scaled_dot_product_attention, softmax, softmax_jacobian
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch

#: (atol, rtol) within which two models' outputs on one input are the same outputs
SAME_OUTPUTS = (1e-9, 1e-5)

# ---------------------------------------------------------------- attention


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


def _bug_inverted_mask(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None:
        return {}
    return _attention(_with_mask(inputs, ~inputs["mask"]))


def _bug_mask_after_softmax(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None:
        return {}
    weights = softmax(_scores(inputs), axis=-1) * inputs["mask"]
    return attention_outputs(inputs, weights)


def _bug_large_negative_fill(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None or inputs["mask"].all(axis=-1).all():
        return {}
    scores = np.where(inputs["mask"], _scores(inputs), -1e9)
    return attention_outputs(inputs, softmax(scores, axis=-1))


def _masked_exp_softmax(inputs: dict[str, Any], row_max: np.ndarray) -> Arrays:
    """exp(scores - row_max) with masked entries dropped, normalised, NaN rows set to 0: what
    a learner gets who subtracts the wrong maximum and patches fully masked rows."""
    scores = _scores(inputs)
    e = np.exp(scores - row_max)  # (..., n_q, n_k)
    if inputs["mask"] is not None:
        e = np.where(inputs["mask"], e, 0.0)
    with np.errstate(all="ignore"):
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True), nan=0.0, posinf=0.0)
    return attention_outputs(inputs, weights)


def _max_before_masking(inputs: dict[str, Any]) -> tuple[Arrays, bool]:
    """That bug's outputs, and whether masking after the softmax gives the same outputs."""
    outputs = _masked_exp_softmax(inputs, _scores(inputs).max(axis=-1, keepdims=True))
    after = _bug_mask_after_softmax(inputs)
    same = all(all_close(outputs[k], after[k], *SAME_OUTPUTS) for k in outputs)
    return outputs, same


def _bug_max_before_masking_or_mask_after(inputs: dict[str, Any]) -> Arrays:
    """Where the bug shows at all (the visible scores underflow), the two bugs coincide."""
    if inputs["mask"] is None:
        return {}
    outputs, same = _max_before_masking(inputs)
    return outputs if same else {}


def _bug_one_max_for_everything(inputs: dict[str, Any]) -> Arrays:
    scores = _scores(inputs)
    if inputs["mask"] is not None:
        scores = np.where(inputs["mask"], scores, -np.inf)
    return _masked_exp_softmax(inputs, np.max(scores))


def _bug_finite_fill_rows_zeroed(inputs: dict[str, Any]) -> Arrays:
    if inputs["mask"] is None:
        return {}
    scores = np.where(inputs["mask"], _scores(inputs), -1e9)
    has_key = np.broadcast_to(inputs["mask"], scores.shape).any(axis=-1, keepdims=True)
    outputs = attention_outputs(inputs, softmax(scores, axis=-1) * has_key)
    right = _attention(inputs)
    if all(all_close(outputs[k], right[k], *SAME_OUTPUTS) for k in outputs):
        return {}  # scores above the fill: the bug does not show on these inputs
    return outputs


def _bug_softmax_over_queries(inputs: dict[str, Any]) -> Arrays:
    scores = _scores(inputs)
    if inputs["mask"] is not None:
        scores = np.where(inputs["mask"], scores, -np.inf)
    return attention_outputs(inputs, softmax(scores, axis=-2))


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
    "every visible weight of some query underflowed to 0, because a masked key holds the "
    "largest score and either the maximum was subtracted before masking or the mask was "
    "applied after the softmax; mask the scores with -inf first, then subtract each row's "
    "maximum": _bug_max_before_masking_or_mask_after,
    "the mask was applied after the softmax (masked weights were zeroed but the others were "
    "not renormalised; mask the scores with -inf before the softmax)": _bug_mask_after_softmax,
    "a finite fill such as -1e9 was used for masked scores: fully masked rows got uniform "
    "weights (a query with no visible key must get all-zero weights), and real scores below "
    "the fill lose to masked keys; fill with -inf": _bug_large_negative_fill,
    "a finite fill such as -1e9 was used for masked scores: real scores below the fill (here "
    "about -4e9) lose to the masked keys; fill with -inf": _bug_finite_fill_rows_zeroed,
    "one maximum was subtracted for the whole array instead of one per query row (keepdims "
    "and axis=-1): rows on a smaller scale underflow to 0": _bug_one_max_for_everything,
}


def torch_attention_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Output and gradients from torch's own F.scaled_dot_product_attention; weights from ours."""
    tensors = attention_tensors(inputs)  # Q, K, V: float64 leaves
    q, k, v = tensors.values()
    mask = tensor(inputs["mask"])
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (*B, n_q, d_v)
    grads = backward(out, inputs["G"], tensors, "F.scaled_dot_product_attention")
    _, weights = scaled_dot_product_attention_torch(q.detach(), k.detach(), v.detach(), mask)
    return {"output": out.detach(), "weights": weights, **grads}


def torch_gradients_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The gradients of sum(out * G) of torch's own F.scaled_dot_product_attention."""
    reference = torch_attention_reference(inputs)
    return {name: reference[name] for name in ("dQ", "dK", "dV")}


# ---------------------------------------------------------------- the softmax Jacobian


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


EXERCISES = [
    exercise("scaled_dot_product_attention", _attention, ATTENTION_BUGS),
    exercise("scaled_dot_product_attention_torch", torch_attention_reference, ATTENTION_BUGS),
    exercise("scaled_dot_product_attention_torch__gradients", torch_gradients_reference),
    exercise("softmax_jacobian", lambda inputs: {"jacobian": softmax_jacobian(inputs["p"])}, JACOBIAN_BUGS),
]
