"""Chapter 2 exercises, the judging half: references and classic bugs of the scores, the
softmax, attend, the projections and unscaled attention (the cases are in
``attention_learner.cases.ch02``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.exercises.spec import Arrays, attention_outputs, exercise
from grader.reference import softmax
from grader.reference.qkv import attend, dot_product_attention, dot_scores, project_qkv


def _naive_softmax(z: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(z)
    return e / e.sum(axis=axis, keepdims=True)


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


def _bug_no_keepdims(i: dict[str, Any]) -> Arrays:
    z = i["z"] - np.max(i["z"], axis=i["axis"], keepdims=True)
    e = np.exp(z)
    return {"p": e / e.sum(axis=i["axis"])}


SOFTMAX_BUGS = {
    "the maximum was not subtracted before exp(), which overflows or underflows for large logits": lambda i: {
        "p": _naive_softmax(i["z"], axis=i["axis"])
    },
    "the softmax was taken over the last axis whatever `axis` says": lambda i: {
        "p": softmax(i["z"], axis=-1)
    },
    "the softmax was taken over axis 0 instead of `axis`": lambda i: {"p": softmax(i["z"], axis=0)},
    "the exponentials were divided by their sum over the whole array, not along `axis`": (
        lambda i: {"p": np.exp(i["z"] - i["z"].max()) / np.exp(i["z"] - i["z"].max()).sum()}
    ),
    "the sum was taken without keepdims=True, so it was broadcast along the wrong axis": (_bug_no_keepdims),
    "one maximum was subtracted for the whole array (np.max(z) without axis): slices whose "
    "logits lie far below it underflow to 0 / 0; subtract the maximum along `axis`, with "
    "keepdims=True": lambda i: {"p": _global_max_softmax(i["z"], i["axis"])},
}


def _global_max_softmax(z: np.ndarray, axis: int) -> np.ndarray:
    """exp(z - max(z)) normalised along ``axis``: stable only when every slice is near the top."""
    e = np.exp(z - np.max(z))
    with np.errstate(all="ignore"):
        return e / e.sum(axis=axis, keepdims=True)


def _weights_to_attend(i: dict[str, Any], weights: np.ndarray) -> Arrays:
    return {"context": weights @ i["V"], "weights": weights}


ATTEND_BUGS = {
    "the scores were divided by sqrt(d): this chapter's attention is unscaled": lambda i: _weights_to_attend(
        i, softmax(dot_scores(i["q"], i["K"]) / math.sqrt(len(i["q"])))
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


ATTENTION_BUGS = {
    "the scores were divided by sqrt(d_k): this chapter's attention is unscaled": lambda i: attention_outputs(
        i, softmax(i["Q"] @ i["K"].T / math.sqrt(i["Q"].shape[-1]))
    ),
    "the softmax was taken over the queries (axis 0); each query's weights must sum to 1 "
    "over the keys (the last axis)": lambda i: attention_outputs(i, softmax(i["Q"] @ i["K"].T, axis=0)),
    "the softmax was taken over the whole score matrix instead of each row": lambda i: attention_outputs(
        i, softmax((i["Q"] @ i["K"].T).ravel()).reshape(len(i["Q"]), -1)
    ),
    "the maximum was not subtracted before exp(), which overflows for large scores": lambda i: (
        attention_outputs(i, _naive_softmax(i["Q"] @ i["K"].T))
    ),
}


def _attend_reference(i: dict[str, Any]) -> Arrays:
    context, weights = attend(i["q"], i["K"], i["V"])
    return {"context": context, "weights": weights}


def _attention_reference(i: dict[str, Any]) -> Arrays:
    output, weights = dot_product_attention(i["Q"], i["K"], i["V"])
    return {"output": output, "weights": weights, "rows_taken_one_at_a_time": np.array([0.0])}


EXERCISES = [
    exercise("dot_scores", lambda i: {"scores": dot_scores(i["q"], i["K"])}, SCORE_BUGS),
    exercise("softmax", lambda i: {"p": softmax(i["z"], axis=i["axis"])}, SOFTMAX_BUGS),
    exercise("attend", _attend_reference, ATTEND_BUGS),
    exercise(
        "project_qkv",
        lambda i: _qkv(*project_qkv(i["X"], i["W_q"], i["W_k"], i["W_v"])),
        PROJECTION_BUGS,
    ),
    exercise("dot_product_attention", _attention_reference, ATTENTION_BUGS),
]
