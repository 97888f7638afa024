"""Chapter 2 exercises: dot-product scores, the stable softmax and unscaled attention."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.exercises.cases import normal
from grader.exercises.spec import Arrays, unpack
from grader.exercises.spec import legacy_exercise as Exercise
from grader.reference import softmax
from grader.reference.qkv import attend, dot_product_attention, dot_scores, project_qkv


def _naive_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


def _scaled_text(params: dict[str, Any], key: str = "logit_scale", what: str = "queries") -> str:
    scale = params.get(key, 1.0)
    return f", {what} scaled by {scale:g}" if scale != 1.0 else ""


def nan_hint(got: Arrays, key: str, what: str) -> list[str]:
    """NaN or inf in a softmax output: exp overflowed (inf / inf) or underflowed (0 / 0)."""
    value = got.get(key)
    if value is not None and not np.isfinite(value).all():
        return [
            f"NaN or inf in {what} means exp() overflowed (inf / inf) or every exp() "
            "underflowed to 0 (0 / 0): subtract the maximum along the axis before exponentiating."
        ]
    return []


def sums_hint(
    got: Arrays, key: str, what: str, expected_shape: tuple[int, ...], axis: int = -1
) -> list[str]:
    """Softmax weights must sum to 1 along ``axis``."""
    value = got.get(key)
    if value is None or value.shape != expected_shape or not np.isfinite(value).all():
        return []
    if not np.allclose(value.sum(axis=axis), 1.0, atol=1e-6):
        return [f"{what} should sum to 1 along axis {axis}; yours do not."]
    return []


# ---------------------------------------------------------------- dot_scores


def make_query_inputs(
    rng: np.random.Generator, n: int = 5, d: int = 3, d_v: int = 4, logit_scale: float = 1.0
) -> dict[str, Any]:
    """One query q (d,), keys K (n, d) and values V (n, d_v), every axis its own size."""
    return {
        "q": normal(rng, d, scale=logit_scale),  # (d,)
        "K": normal(rng, n, d),  # (n, d)
        "V": normal(rng, n, d_v),  # (n, d_v)
    }


def describe_query(params: dict[str, Any], with_values: bool = True) -> str:
    sizes = f"n={params.get('n', 5)} keys, d={params.get('d', 3)}"
    if with_values:
        sizes += f", d_v={params.get('d_v', 4)}"
    return sizes + _scaled_text(params, what="the query")


SCORE_BUGS = {
    "the scores were divided by sqrt(d): this chapter's scores are unscaled (chapter 3 adds "
    "the scaling)": lambda i: {"scores": dot_scores(i["q"], i["K"]) / math.sqrt(len(i["q"]))},
    "a softmax was applied: dot_scores returns the raw scores q . k_i": lambda i: {
        "scores": softmax(dot_scores(i["q"], i["K"]))
    },
    "the scores are negative squared distances -|q - k_i|^2, not dot products": lambda i: {
        "scores": -np.sum((i["K"] - i["q"]) ** 2, axis=-1)
    },
}


def scores_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    scores = got.get("scores")
    n = expected["scores"].shape[0]
    if scores is not None and scores.shape in ((1, n), (n, 1)):
        return ["Return a flat vector of n scores, shape (n,), not a matrix."]
    return []


# ---------------------------------------------------------------- softmax


def make_softmax_inputs(
    rng: np.random.Generator,
    shape: tuple[int, ...] | list[int] = (4, 7),
    axis: int = -1,
    logit_scale: float = 1.0,
    shift: float = 0.0,
) -> dict[str, Any]:
    """Logits z of ``shape`` with N(shift, logit_scale^2) entries, and the axis to normalise."""
    return {"z": normal(rng, *tuple(shape), scale=logit_scale) + shift, "axis": axis}


def call_softmax(fn: Any, i: dict[str, Any]) -> Arrays:
    """Pass ``axis`` only when it is not -1, so that a missing default shows as its own error."""
    if i["axis"] == -1:
        return {"p": fn(i["z"])}
    return {"p": fn(i["z"], axis=i["axis"])}


def describe_softmax(params: dict[str, Any]) -> str:
    text = f"z of shape {tuple(params.get('shape', (4, 7)))}, axis={params.get('axis', -1)}"
    if params.get("logit_scale", 1.0) != 1.0:
        text += f", logits scaled by {params['logit_scale']:g}"
    if params.get("shift", 0.0) != 0.0:
        text += f", every logit shifted by {params['shift']:g}"
    return text


def _bug_no_keepdims(i: dict[str, Any]) -> Arrays:
    z = i["z"] - np.max(i["z"], axis=i["axis"], keepdims=True)
    e = np.exp(z)
    return {"p": e / e.sum(axis=i["axis"])}


SOFTMAX_BUGS = {
    "the maximum was not subtracted before exp(), which overflows or underflows for large "
    "logits": lambda i: {"p": _naive_softmax(i["z"], axis=i["axis"])},
    "the softmax was taken over the last axis whatever `axis` says": lambda i: {
        "p": softmax(i["z"], axis=-1)
    },
    "the softmax was taken over axis 0 instead of `axis`": lambda i: {"p": softmax(i["z"], axis=0)},
    "the exponentials were divided by their sum over the whole array, not along `axis`": (
        lambda i: {"p": np.exp(i["z"] - i["z"].max()) / np.exp(i["z"] - i["z"].max()).sum()}
    ),
    "the sum was taken without keepdims=True, so it was broadcast along the wrong axis": (
        _bug_no_keepdims
    ),
}


def softmax_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    what = "the softmax output"
    return nan_hint(got, "p", what) or sums_hint(
        got, "p", what.capitalize(), expected["p"].shape, inputs["axis"]
    )


# ---------------------------------------------------------------- attend


def _weights_to_attend(i: dict[str, Any], weights: np.ndarray) -> Arrays:
    return {"context": weights @ i["V"], "weights": weights}


ATTEND_BUGS = {
    "the scores were divided by sqrt(d): this chapter's attention is unscaled": lambda i: (
        _weights_to_attend(i, softmax(dot_scores(i["q"], i["K"]) / math.sqrt(len(i["q"]))))
    ),
    "the weights were not normalised: exp(scores) must be divided by its sum (a softmax)": (
        lambda i: _weights_to_attend(i, np.exp(dot_scores(i["q"], i["K"])))
    ),
    "the raw scores were used as weights (the softmax is missing)": lambda i: _weights_to_attend(
        i, dot_scores(i["q"], i["K"])
    ),
    "only the best-matching value was returned (an argmax); attention averages all values "
    "with the softmax weights": lambda i: {
        "context": i["V"][np.argmax(dot_scores(i["q"], i["K"]))],
        "weights": softmax(dot_scores(i["q"], i["K"])),
    },
}


def call_attend(fn: Any, i: dict[str, Any]) -> Arrays:
    context, weights = unpack(fn(i["q"], i["K"], i["V"]), ("context", "weights"), "attend")
    return {"context": context, "weights": weights}


def attend_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = nan_hint(got, "weights", "the weights") or sums_hint(
        got, "weights", "The weights", expected["weights"].shape
    )
    context = got.get("context")
    d, d_v = inputs["K"].shape[1], inputs["V"].shape[1]
    if context is not None and context.shape == (d,) and d != d_v:
        hints.append("The context has the size of a key: it should average the values V.")
    return hints


# ---------------------------------------------------------------- project_qkv


def make_projection_inputs(
    rng: np.random.Generator, n: int = 5, d_model: int = 7, d_k: int = 3, d_v: int = 4
) -> dict[str, Any]:
    """Tokens X (n, d_model) and three different projections W_q, W_k (d_model, d_k), W_v."""
    return {
        "X": normal(rng, n, d_model),  # (n, d_model)
        "W_q": normal(rng, d_model, d_k),  # (d_model, d_k)
        "W_k": normal(rng, d_model, d_k),  # (d_model, d_k)
        "W_v": normal(rng, d_model, d_v),  # (d_model, d_v)
    }


def _qkv(Q: np.ndarray, K: np.ndarray, V: np.ndarray) -> Arrays:
    return {"Q": Q, "K": K, "V": V}


PROJECTION_BUGS = {
    "the queries and keys were swapped (it should be Q = X W_q and K = X W_k)": lambda i: _qkv(
        i["X"] @ i["W_k"], i["X"] @ i["W_q"], i["X"] @ i["W_v"]
    ),
    "W_q was used for the keys too (it should be K = X W_k)": lambda i: _qkv(
        i["X"] @ i["W_q"], i["X"] @ i["W_q"], i["X"] @ i["W_v"]
    ),
}


def call_project(fn: Any, i: dict[str, Any]) -> Arrays:
    result = fn(i["X"], i["W_q"], i["W_k"], i["W_v"])
    return _qkv(*unpack(result, ("Q", "K", "V"), "project_qkv"))


# ---------------------------------------------------------------- dot_product_attention


def make_attention_inputs(
    rng: np.random.Generator,
    n_q: int = 3,
    n_k: int = 5,
    d_k: int = 7,
    d_v: int = 2,
    logit_scale: float = 1.0,
) -> dict[str, Any]:
    """Q (n_q, d_k), K (n_k, d_k), V (n_k, d_v) from three independent draws."""
    return {
        "Q": normal(rng, n_q, d_k, scale=logit_scale),  # (n_q, d_k)
        "K": normal(rng, n_k, d_k),  # (n_k, d_k)
        "V": normal(rng, n_k, d_v),  # (n_k, d_v)
    }


def describe_attention(params: dict[str, Any]) -> str:
    sizes = ", ".join(
        f"{k}={params.get(k, v)}" for k, v in {"n_q": 3, "n_k": 5, "d_k": 7, "d_v": 2}.items()
    )
    return sizes + _scaled_text(params)


def _attention_from_weights(i: dict[str, Any], weights: np.ndarray) -> Arrays:
    return {"output": weights @ i["V"], "weights": weights}


ATTENTION_BUGS = {
    "the scores were divided by sqrt(d_k): this chapter's attention is unscaled": lambda i: (
        _attention_from_weights(i, softmax(i["Q"] @ i["K"].T / math.sqrt(i["Q"].shape[-1])))
    ),
    "the softmax was taken over the queries (axis 0); each query's weights must sum to 1 "
    "over the keys (the last axis)": lambda i: _attention_from_weights(
        i, softmax(i["Q"] @ i["K"].T, axis=0)
    ),
    "the softmax was taken over the whole score matrix instead of each row": lambda i: (
        _attention_from_weights(i, softmax((i["Q"] @ i["K"].T).ravel()).reshape(len(i["Q"]), -1))
    ),
    "the maximum was not subtracted before exp(), which overflows for large scores": lambda i: (
        _attention_from_weights(i, _naive_softmax(i["Q"] @ i["K"].T))
    ),
}


def call_attention(fn: Any, i: dict[str, Any]) -> Arrays:
    result = fn(i["Q"], i["K"], i["V"])
    output, weights = unpack(result, ("output", "weights"), "dot_product_attention")
    return {"output": output, "weights": weights}


def attention_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    return nan_hint(got, "weights", "the weights") or sums_hint(
        got, "weights", "Each query's weights", expected["weights"].shape
    )


def _attend_reference(i: dict[str, Any]) -> Arrays:
    context, weights = attend(i["q"], i["K"], i["V"])
    return {"context": context, "weights": weights}


def _attention_reference(i: dict[str, Any]) -> Arrays:
    output, weights = dot_product_attention(i["Q"], i["K"], i["V"])
    return {"output": output, "weights": weights}


EXERCISES = [
    Exercise(
        name="dot_scores",
        make_inputs=make_query_inputs,
        call=lambda fn, i: {"scores": fn(i["q"], i["K"])},
        reference=lambda i: {"scores": dot_scores(i["q"], i["K"])},
        bugs=SCORE_BUGS,
        hints=scores_hints,
        describe=lambda p: describe_query(p, with_values=False),
    ),
    Exercise(
        name="softmax",
        make_inputs=make_softmax_inputs,
        call=call_softmax,
        reference=lambda i: {"p": softmax(i["z"], axis=i["axis"])},
        bugs=SOFTMAX_BUGS,
        hints=softmax_hints,
        describe=describe_softmax,
    ),
    Exercise(
        name="attend",
        make_inputs=make_query_inputs,
        call=call_attend,
        reference=_attend_reference,
        bugs=ATTEND_BUGS,
        hints=attend_hints,
        describe=describe_query,
    ),
    Exercise(
        name="project_qkv",
        make_inputs=make_projection_inputs,
        call=call_project,
        reference=lambda i: _qkv(*project_qkv(i["X"], i["W_q"], i["W_k"], i["W_v"])),
        bugs=PROJECTION_BUGS,
        describe=lambda p: ", ".join(
            f"{k}={p.get(k, v)}" for k, v in {"n": 5, "d_model": 7, "d_k": 3, "d_v": 4}.items()
        ),
    ),
    Exercise(
        name="dot_product_attention",
        make_inputs=make_attention_inputs,
        call=call_attention,
        reference=_attention_reference,
        bugs=ATTENTION_BUGS,
        hints=attention_hints,
        describe=describe_attention,
    ),
]
