"""Chapter 2 cases: dot-product scores, the stable softmax, attention for one query, the
Q/K/V projections and unscaled attention for many queries."""

from __future__ import annotations

from typing import Any

import numpy as np

from attention_learner.conventions import numpy_case
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, describe_params, describe_scale, unpack
from attention_learner.tolerance import all_close


def nan_hint(got: Arrays, key: str, what: str) -> list[str]:
    """NaN or inf in a softmax output: exp overflowed (inf / inf) or underflowed (0 / 0)."""
    value = got.get(key)
    if value is not None and not np.isfinite(value).all():
        return [
            f"NaN or inf in {what} means exp() overflowed (inf / inf) or every exp() "
            "underflowed to 0 (0 / 0): subtract the maximum along the axis before exponentiating."
        ]
    return []


def sums_hint(got: Arrays, key: str, what: str, expected_shape: tuple[int, ...], axis: int = -1) -> list[str]:
    """Softmax weights must sum to 1 along ``axis``."""
    value = got.get(key)
    if value is None or value.shape != expected_shape or not np.isfinite(value).all():
        return []
    if not all_close(value.sum(axis=axis), 1.0, Case.atol, Case.rtol):  # these cases' tolerance
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
    sizes = f"n={params['n']} keys, d={params['d']}"
    if with_values:
        sizes += f", d_v={params['d_v']}"
    return sizes + describe_scale(params["logit_scale"], "the query")


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


def call_softmax(fn: Any, i: dict[str, Any]) -> dict[str, Any]:
    """Pass ``axis`` only when it is not -1, so that a missing default shows as its own error."""
    if i["axis"] == -1:
        return {"p": fn(i["z"])}
    return {"p": fn(i["z"], axis=i["axis"])}


def describe_softmax(params: dict[str, Any]) -> str:
    text = f"z of shape {tuple(params['shape'])}, axis={params['axis']}"
    text += describe_scale(params["logit_scale"], "logits")
    if params["shift"] != 0.0:
        text += f", every logit shifted by {params['shift']:g}"
    return text


def softmax_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    what = "the softmax output"
    return nan_hint(got, "p", what) or sums_hint(
        got, "p", what.capitalize(), expected["p"].shape, inputs["axis"]
    )


# ---------------------------------------------------------------- attend


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


def call_project(fn: Any, i: dict[str, Any]) -> dict[str, Any]:
    Q, K, V = unpack(fn(i["X"], i["W_q"], i["W_k"], i["W_v"]), ("Q", "K", "V"), "project_qkv")
    return {"Q": Q, "K": K, "V": V}


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
    sizes = describe_params(params, ("n_q", "n_k", "d_k", "d_v"))
    return sizes + describe_scale(params["logit_scale"], "queries")


class RowCounter(np.ndarray):
    """A view of the queries that counts how often a single row is taken from it, or from
    any array computed from it (``Q[i]``, ``for q in Q``, ``scores[i]``): the notebook's rule
    "no Python loop over the queries", measured on inputs the check builds. Whole-array
    operations (``Q @ K.T``, reductions, slices) take no row."""

    counter: list[int]

    def __array_finalize__(self, obj: Any) -> None:
        self.counter = getattr(obj, "counter", None) or [0]

    def __getitem__(self, key: Any) -> Any:
        first = key[0] if isinstance(key, tuple) and key else key
        if isinstance(first, int | np.integer) and self.ndim >= 2:
            self.counter[0] += 1
        return super().__getitem__(key)

    def __iter__(self) -> Any:
        if self.ndim >= 2:
            self.counter[0] += len(self)
        return super().__iter__()


def call_attention(fn: Any, i: dict[str, Any]) -> Arrays:
    Q = i["Q"].view(RowCounter)  # (n_q, d_k), the same memory: in-place writes still show
    result = fn(Q, i["K"], i["V"])
    output, weights = unpack(result, ("output", "weights"), "dot_product_attention")
    return {
        "output": np.asarray(output),
        "weights": np.asarray(weights),
        "rows_taken_one_at_a_time": np.array([float(Q.counter[0])]),
    }


def unscaled_attention_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    looped = got.get("rows_taken_one_at_a_time")
    if looped is not None and looped.size and looped.ravel()[0] > 0:
        return [
            "Your function takes the queries one row at a time (a Python loop over Q): stack "
            "them and use one matrix product, Q @ K.T, for every query at once."
        ]
    return nan_hint(got, "weights", "the weights") or sums_hint(
        got, "weights", "Each query's weights", expected["weights"].shape
    )


CASES = [
    Case(
        name="dot_scores",
        make_inputs=make_query_inputs,
        call=lambda fn, i: {"scores": fn(i["q"], i["K"])},
        describe=lambda p: describe_query(p, with_values=False),
        hints=scores_hints,
    ),
    Case(
        name="softmax",
        make_inputs=make_softmax_inputs,
        call=call_softmax,
        describe=describe_softmax,
        hints=softmax_hints,
    ),
    Case(
        name="attend",
        make_inputs=make_query_inputs,
        call=call_attend,
        describe=describe_query,
        hints=attend_hints,
    ),
    Case(
        name="project_qkv",
        make_inputs=make_projection_inputs,
        call=call_project,
        describe=lambda p: describe_params(p, ("n", "d_model", "d_k", "d_v")),
    ),
    Case(
        name="dot_product_attention",
        make_inputs=make_attention_inputs,
        call=call_attention,
        describe=describe_attention,
        hints=unscaled_attention_hints,
        labels={"rows_taken_one_at_a_time": "how many times one query row was taken alone (no loop: 0)"},
    ),
]
CASES = [numpy_case(case) for case in CASES]  # every exercise of this chapter is NumPy
