"""Chapter 1 cases: one RNN step, the whole recurrence, and the norms of its Jacobians."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attention_learner.conventions import numpy_case
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, Inputs, describe_params, describe_scale
from attention_learner.tolerance import all_close

#: the absolute tolerance jacobian_norms grades at (its hint checks entry 0 at the same)
NORMS_ATOL = 1e-9

# ---------------------------------------------------------------- the weights


def rnn_weights(rng: np.random.Generator, d_in: int, d_h: int, weight_scale: float) -> Inputs:
    """W_xh (d_in, d_h), W_hh (d_h, d_h) and a non-zero bias b (d_h,), so a dropped term shows."""
    return {
        "W_xh": normal(rng, d_in, d_h, scale=1.0 / math.sqrt(d_in)),  # (d_in, d_h)
        "W_hh": normal(rng, d_h, d_h, scale=weight_scale / math.sqrt(d_h)),  # (d_h, d_h)
        "b": normal(rng, d_h, scale=0.5),  # (d_h,)
    }


# ---------------------------------------------------------------- rnn_step


def make_step_inputs(
    rng: np.random.Generator,
    d_in: int = 5,
    d_h: int = 3,
    batch: tuple[int, ...] | list[int] = (),
    input_scale: float = 1.0,
) -> Inputs:
    """x_t (*batch, d_in), a valid previous state h_prev (*batch, d_h) in (-1, 1), weights."""
    batch = tuple(batch)
    return {
        "x_t": normal(rng, *batch, d_in, scale=input_scale),  # (*B, d_in)
        "h_prev": np.tanh(normal(rng, *batch, d_h)),  # (*B, d_h)
        **rnn_weights(rng, d_in, d_h, 1.0),
    }


def describe_step(p: dict[str, Any]) -> str:
    sizes = describe_params(p, ("d_in", "d_h"))
    return f"batch {tuple(p['batch'])}, {sizes}" + describe_scale(p["input_scale"], "inputs")


def state_range_hint(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    """Any output that is a tanh RNN state must lie in [-1, 1]."""
    states = got.get("h", got.get("H"))
    if states is not None and np.isfinite(states).all() and np.abs(states).max() > 1.0:
        return ["A state made by tanh lies between -1 and 1; yours goes outside that range."]
    return []


# ---------------------------------------------------------------- rnn_forward


def make_forward_inputs(
    rng: np.random.Generator,
    T: int = 6,
    d_in: int = 5,
    d_h: int = 3,
    weight_scale: float = 1.0,
    input_scale: float = 1.0,
) -> Inputs:
    """X (T, d_in), a non-zero h0 (d_h,) so that ignoring it shows, and the weights."""
    return {
        "X": normal(rng, T, d_in, scale=input_scale),  # (T, d_in)
        "h0": np.tanh(normal(rng, d_h)),  # (d_h,)
        **rnn_weights(rng, d_in, d_h, weight_scale),
    }


def forward_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    H = got.get("H")
    T, d_h = expected["H"].shape
    if H is None:
        return []
    if H.shape == (T + 1, d_h):
        return ["H has one row too many: it must hold h_1 .. h_T, without h0."]
    if H.shape == (d_h,):
        return ["Only one state came back: return every state h_1 .. h_T, stacked into (T, d_h)."]
    return state_range_hint(inputs, expected, got)


# ---------------------------------------------------------------- jacobian_norms


def make_jacobian_inputs(
    rng: np.random.Generator,
    T: int = 7,
    d_in: int = 4,
    d_h: int = 5,
    gain: float = 1.0,
    input_scale: float = 1.0,
) -> Inputs:
    """States H (T, d_h) and a recurrent matrix W_hh (d_h, d_h) with entries N(0, gain^2 / d_h).

    The Jacobians depend only on H and W_hh, so the states need not come from running W_hh:
    each is tanh(x_t @ W_xh) for inputs x_t ~ N(0, input_scale^2) and W_xh ~ N(0, 1 / d_in),
    states in (-1, 1) that saturate as input_scale grows.
    """
    W_hh = normal(rng, d_h, d_h, scale=gain / math.sqrt(d_h))  # (d_h, d_h)
    W_xh = normal(rng, d_in, d_h, scale=1.0 / math.sqrt(d_in))  # (d_in, d_h)
    X = normal(rng, T, d_in, scale=input_scale)  # (T, d_in)
    return {"H": np.tanh(X @ W_xh), "W_hh": W_hh}  # H (T, d_h)


def describe_jacobian(p: dict[str, Any]) -> str:
    sizes = describe_params(p, ("T", "d_in", "d_h", "gain", "input_scale"))
    return f"states H and a recurrent matrix W_hh with {sizes}"


def jacobian_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    norms = got.get("norms")
    T = inputs["H"].shape[0]
    if norms is None:
        return []
    if norms.shape == (T - 1,):
        return ["There should be T entries, k = 0 .. T-1; entry 0 is the norm of the identity, 1."]
    if norms.shape == (T,) and not all_close(norms[0], 1.0, NORMS_ATOL, Case.rtol):
        return ["Entry 0 is d h_T / d h_T, the identity matrix, whose norm is 1."]
    return []


CASES = [
    Case(
        name="rnn_step",
        make_inputs=make_step_inputs,
        call=lambda fn, i: {"h": fn(i["x_t"], i["h_prev"], i["W_xh"], i["W_hh"], i["b"])},
        describe=describe_step,
        hints=state_range_hint,
    ),
    Case(
        name="rnn_forward",
        make_inputs=make_forward_inputs,
        call=lambda fn, i: {"H": fn(i["X"], i["h0"], i["W_xh"], i["W_hh"], i["b"])},
        describe=lambda p: describe_params(p, ("T", "d_in", "d_h", "weight_scale", "input_scale")),
        hints=forward_hints,
    ),
    Case(
        name="jacobian_norms",
        make_inputs=make_jacobian_inputs,
        call=lambda fn, i: {"norms": fn(i["H"], i["W_hh"])},
        describe=describe_jacobian,
        hints=jacobian_hints,
        atol=NORMS_ATOL,
    ),
]
CASES = [numpy_case(case) for case in CASES]  # every exercise of this chapter is NumPy
