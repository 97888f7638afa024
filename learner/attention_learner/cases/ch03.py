"""Chapter 3 cases: scaled dot-product attention (NumPy, PyTorch, its gradients) and the
softmax Jacobian."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attention_learner.attention_hints import attention_hints
from attention_learner.conventions import numpy_case
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays, Case, Inputs, describe_scale, unpack
from attention_learner.tolerance import all_close, matches
from attention_learner.torch_cases import backward, tensor

#: the absolute tolerance softmax_jacobian grades at (its hint checks the column sums at the same)
JACOBIAN_ATOL = 1e-8

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
    extreme: str | None = None,
) -> Inputs:
    """Q, K, V from three independent draws with every axis its own size, a mask, and a fixed
    upstream gradient G for the backward pass.

    ``extreme`` makes legal but extreme scores (each kind exposes one unstable implementation):

    - "masked_max": every key that no query of its batch item may see gets a score about
      1e4 above the visible ones (a max taken before masking makes every visible weight 0/0);
    - "very_negative": every score is about -4e9 (a finite fill such as -1e9 then beats the
      real scores);
    - "batch_scales": odd batch items have queries 1000 times larger than even ones (one max
      over the whole batch underflows the small items to 0/0).
    """
    batch = tuple(batch)
    Q = normal(rng, *batch, n_q, d_k, scale=logit_scale)  # (*B, n_q, d_k)
    K = normal(rng, *batch, n_k, d_k)  # (*B, n_k, d_k)
    V = normal(rng, *batch, n_k, d_v)  # (*B, n_k, d_v)
    mask_array = attention_mask(rng, mask, batch, n_q, n_k)  # bool or None
    G = normal(rng, *batch, n_q, d_v)  # (*B, n_q, d_v) upstream gradient
    root = np.sqrt(d_k)
    if extreme == "masked_max":
        if mask_array is None:
            raise ValueError("extreme='masked_max' needs a mask")
        hidden = ~np.broadcast_to(mask_array, (*batch, n_q, n_k)).any(axis=-2)  # (*B, n_k)
        Q[..., 0] = np.abs(Q[..., 0]) + 1.0  # every query leans along feature 0
        K[..., 0] = np.where(hidden, 1e4 * root, K[..., 0])  # hidden keys score >= 1e4
    elif extreme == "very_negative":
        Q[..., 0] = -4e9 * root  # score = -4e9 + (the other features' dot product) / sqrt(d_k)
        K[..., 0] = 1.0
    elif extreme == "batch_scales":
        if not batch:
            raise ValueError("extreme='batch_scales' needs a batch")
        factors = np.where(np.arange(batch[0]) % 2 == 1, 1000.0, 1.0)  # (B0,)
        Q = Q * factors.reshape(-1, *([1] * (Q.ndim - 1)))
    elif extreme is not None:
        raise ValueError(f"unknown extreme kind {extreme!r}")
    return {"Q": Q, "K": K, "V": V, "mask": mask_array, "G": G}


def rounding_of_extreme_scores(params: dict[str, Any]) -> float:
    """Scores near -4e9 are rounded to about 5e-7 in float64; the weights inherit that, and the
    gradient with respect to K multiplies it again by the -4e9 queries: two correct
    implementations differed by up to 1.5e-5 relative there over 10 fresh draws (0 elsewhere),
    so such a case allows 100 times the base tolerance."""
    return 100.0 if params.get("extreme") == "very_negative" else 1.0


def sizes_of_extreme_terms(params: dict[str, Any], inputs: Inputs, expected: Arrays) -> Arrays:
    """How large the terms are that each output entry of the PyTorch case sums, for scores
    near -4e9 (nothing otherwise): rounding there moves the weights W by about 5e-7 of
    themselves, and an entry made of large terms that cancel keeps their rounding.

    With dW = G V^T and the score gradient dS = W * (dW - rowsum(W * dW)), whose terms are at
    most D = |W| * (|dW| + rowsum(|W| |dW|)), the sizes are

        output: |W| |V|,   dV: |W|^T |G|,   dQ: |D| |K| / sqrt(d_k),   dK: D^T |Q| / sqrt(d_k).

    dK is the one that matters: Q's first feature is -4e9 sqrt(d_k), so its first column is a
    sum of terms of order 1e9 that can cancel to 1e4 (a correct implementation then missed
    the entry-wise tolerance on about 1 draw in 1000)."""
    if params.get("extreme") != "very_negative" or "weights" not in expected:
        return {}
    W = np.abs(expected["weights"])  # (*B, n_q, n_k)
    Q, K, V, G = (np.abs(inputs[name]) for name in "QKVG")
    dW = G @ np.swapaxes(V, -1, -2)  # (*B, n_q, n_k)
    D = W * (dW + (W * dW).sum(axis=-1, keepdims=True))  # (*B, n_q, n_k)
    root = np.sqrt(Q.shape[-1])
    return {
        "output": W @ V,  # (*B, n_q, d_v)
        "dV": np.swapaxes(W, -1, -2) @ G,  # (*B, n_k, d_v)
        "dQ": D @ K / root,  # (*B, n_q, d_k)
        "dK": np.swapaxes(D, -1, -2) @ Q / root,  # (*B, n_k, d_k)
    }


EXTREMES = {
    None: "",
    "masked_max": ", every fully hidden key holding a score about 1e4 above the visible ones",
    "very_negative": ", every score about -4e9 (legal, just very negative)",
    "batch_scales": ", odd batch items' queries 1000 times larger than even ones'",
}


def describe_attention(p: dict[str, Any]) -> str:
    """The case in words, from complete params."""
    text = (
        f"batch {tuple(p['batch'])}, n_q={p['n_q']}, n_k={p['n_k']}, d_k={p['d_k']}, "
        f"d_v={p['d_v']}, {describe_mask(p['mask'])}"
    )
    return text + describe_scale(p["logit_scale"], "queries") + EXTREMES[p["extreme"]]


def call_attention_numpy(fn: Any, inputs: Inputs) -> dict[str, Any]:
    result = fn(inputs["Q"], inputs["K"], inputs["V"], inputs["mask"])
    out, weights = unpack(result, ("output", "weights"), "scaled_dot_product_attention")
    return {"output": out, "weights": weights}


# ---------------------------------------------------------------- the PyTorch version


def attention_tensors(inputs: Inputs) -> dict[str, torch.Tensor]:
    """Q, K, V as float64 leaves that collect gradients."""
    return {name: tensor(inputs[name], grad=True) for name in "QKV"}


def _learner_torch_attention(fn: Any, inputs: Inputs) -> tuple[Any, Any, dict[str, torch.Tensor]]:
    """The learner's output and weights, and the gradients of sum(output * G) ({} when the
    output's shape is wrong: its comparison says what is wrong)."""
    tensors = attention_tensors(inputs)
    result = fn(*tensors.values(), tensor(inputs["mask"]))
    out, weights = unpack(result, ("output", "weights"), "scaled_dot_product_attention_torch")
    grads = backward(out, inputs["G"], tensors, "scaled_dot_product_attention_torch")
    return out, weights, grads


def call_attention_torch(fn: Any, inputs: Inputs) -> dict[str, Any]:
    """The learner's output, weights and gradients on the upstream gradient G."""
    out, weights, grads = _learner_torch_attention(fn, inputs)
    return {"output": out, "weights": weights, **grads}


def call_attention_gradients(fn: Any, inputs: Inputs) -> dict[str, Any]:
    """Only the gradients of sum(output * G) with respect to Q, K and V, in float64."""
    out, _, grads = _learner_torch_attention(fn, inputs)
    if not grads:
        raise ValueError(f"the output has shape {tuple(out.shape)}, expected {inputs['G'].shape}")
    return grads


GRADIENT_LABELS = {
    "dQ": "the gradient with respect to Q",
    "dK": "the gradient with respect to K",
    "dV": "the gradient with respect to V",
}


def gradient_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    """Which inputs' gradients are off, in one sentence."""
    off = [
        name[1]
        for name in ("dQ", "dK", "dV")
        if name in got
        and not matches(got[name], expected[name], Case.atol, Case.rtol)  # the gradients case's tolerance
    ]
    if not off:
        return []
    return [
        f"The gradients reaching {', '.join(off)} are off (the backward pass runs through your "
        "forward pass): a NaN or a detach() in the forward pass, or an operation that cuts the "
        "graph, shows up here."
    ]


# ---------------------------------------------------------------- the softmax Jacobian


def make_jacobian_inputs(rng: np.random.Generator, n: int = 5, concentration: float = 1.0) -> Inputs:
    """A probability vector p (n,) drawn from a Dirichlet distribution: small concentrations
    give peaked p (like large logits), large ones an almost uniform p."""
    return {"p": rng.dirichlet(np.full(n, concentration))}


def describe_jacobian(p: dict[str, Any]) -> str:
    text = f"a probability vector p with n={p['n']}"
    if p["concentration"] < 0.1:
        text += " (peaked: most of the mass on one entry)"
    elif p["concentration"] > 100:
        text += " (almost uniform)"
    return text


def jacobian_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    jac = got.get("jacobian")
    if jac is not None and jac.ndim == 2 and not all_close(jac.sum(axis=0), 0.0, JACOBIAN_ATOL, Case.rtol):
        return ["Each column of the Jacobian should sum to 0, because the p_i always sum to 1."]
    return []


CASES = [
    Case(
        name="scaled_dot_product_attention",
        make_inputs=make_attention_inputs,
        call=call_attention_numpy,
        describe=describe_attention,
        hints=attention_hints,
    ),
    Case(
        name="scaled_dot_product_attention_torch",
        make_inputs=make_attention_inputs,
        call=call_attention_torch,
        describe=describe_attention,
        hints=attention_hints,
        conditioning=rounding_of_extreme_scores,
        magnitude=sizes_of_extreme_terms,
    ),
    Case(
        name="scaled_dot_product_attention_torch__gradients",
        make_inputs=make_attention_inputs,
        call=call_attention_gradients,
        describe=lambda p: "the gradients of sum(output * G) for a fixed G, " + describe_attention(p),
        hints=gradient_hints,
        labels=GRADIENT_LABELS,
    ),
    Case(
        name="softmax_jacobian",
        make_inputs=make_jacobian_inputs,
        call=lambda fn, inputs: {"jacobian": fn(inputs["p"])},
        describe=describe_jacobian,
        hints=jacobian_hints,
        atol=JACOBIAN_ATOL,
    ),
]
NUMPY_EXERCISES = ("scaled_dot_product_attention", "softmax_jacobian")
CASES = [numpy_case(c) if c.name in NUMPY_EXERCISES else c for c in CASES]
