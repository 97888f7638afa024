"""Chapter 1 exercises: the RNN recurrence and its gradient through time."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.exercises.cases import normal
from grader.exercises.spec import Arrays
from grader.exercises.spec import legacy_exercise as Exercise
from grader.reference.rnn import jacobian_norms, random_rnn, rnn_forward, rnn_step


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def _weights(rng: np.random.Generator, d_in: int, d_h: int, weight_scale: float) -> dict:
    """W_xh (d_in, d_h), W_hh (d_h, d_h) and a non-zero bias b (d_h,), so a dropped term shows."""
    return {
        "W_xh": normal(rng, d_in, d_h, scale=1.0 / math.sqrt(d_in)),
        "W_hh": normal(rng, d_h, d_h, scale=weight_scale / math.sqrt(d_h)),
        "b": normal(rng, d_h, scale=0.5),
    }


def _shape_text(params: dict[str, Any], keys: tuple[str, ...], defaults: dict[str, Any]) -> str:
    return ", ".join(f"{k}={params.get(k, defaults[k])}" for k in keys)


# ---------------------------------------------------------------- rnn_step

STEP_DEFAULTS = {"d_in": 5, "d_h": 3, "batch": (), "input_scale": 1.0}


def make_step_inputs(
    rng: np.random.Generator,
    d_in: int = 5,
    d_h: int = 3,
    batch: tuple[int, ...] | list[int] = (),
    input_scale: float = 1.0,
) -> dict[str, Any]:
    """x_t (*batch, d_in), a valid previous state h_prev (*batch, d_h) in (-1, 1), weights."""
    batch = tuple(batch)
    return {
        "x_t": normal(rng, *batch, d_in, scale=input_scale),  # (*B, d_in)
        "h_prev": np.tanh(normal(rng, *batch, d_h)),  # (*B, d_h)
        **_weights(rng, d_in, d_h, 1.0),
    }


def _pre_activation(i: dict[str, Any], bias: bool = True, recurrent: bool = True) -> np.ndarray:
    a = i["x_t"] @ i["W_xh"]  # (*B, d_h)
    if recurrent:
        a = a + i["h_prev"] @ i["W_hh"]
    return a + i["b"] if bias else a


STEP_BUGS = {
    "the bias b was left out": lambda i: {"h": np.tanh(_pre_activation(i, bias=False))},
    "the tanh was left out (h_t = tanh(x_t W_xh + h_prev W_hh + b))": lambda i: {
        "h": _pre_activation(i)
    },
    "the previous state h_prev was left out (the term h_prev @ W_hh)": lambda i: {
        "h": np.tanh(_pre_activation(i, recurrent=False))
    },
    "a sigmoid was used instead of tanh": lambda i: {"h": _sigmoid(_pre_activation(i))},
}


def state_range_hint(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    """Any output that is a tanh RNN state must lie in [-1, 1]."""
    states = got.get("h", got.get("H"))
    if states is not None and np.isfinite(states).all() and np.abs(states).max() > 1.0:
        return ["A state made by tanh lies between -1 and 1; yours goes outside that range."]
    return []


# ---------------------------------------------------------------- rnn_forward

FORWARD_DEFAULTS = {"T": 6, "d_in": 5, "d_h": 3, "weight_scale": 1.0, "input_scale": 1.0}


def make_forward_inputs(
    rng: np.random.Generator,
    T: int = 6,
    d_in: int = 5,
    d_h: int = 3,
    weight_scale: float = 1.0,
    input_scale: float = 1.0,
) -> dict[str, Any]:
    """X (T, d_in), a non-zero h0 (d_h,) so that ignoring it shows, and the weights."""
    return {
        "X": normal(rng, T, d_in, scale=input_scale),  # (T, d_in)
        "h0": np.tanh(normal(rng, d_h)),  # (d_h,)
        **_weights(rng, d_in, d_h, weight_scale),
    }


def _forward(i: dict[str, Any], **changes: Any) -> np.ndarray:
    args = {k: i[k] for k in ("X", "h0", "W_xh", "W_hh", "b")} | changes
    return rnn_forward(**args)  # (T, d_h)


def _bug_no_carry(i: dict[str, Any]) -> Arrays:
    return {"H": np.tanh(i["X"] @ i["W_xh"] + i["h0"] @ i["W_hh"] + i["b"])}


def _bug_linear(i: dict[str, Any]) -> Arrays:
    h, states = i["h0"], []
    for x_t in i["X"]:
        h = x_t @ i["W_xh"] + h @ i["W_hh"] + i["b"]
        states.append(h)
    return {"H": np.stack(states)}


FORWARD_BUGS = {
    "the states h_0 .. h_{T-1} were returned; H must hold h_1 .. h_T (row t - 1 is h_t)": (
        lambda i: {"H": np.vstack([i["h0"], _forward(i)[:-1]])}
    ),
    "every step started from h0 instead of the previous step's state": _bug_no_carry,
    "the initial state h0 was ignored (the recurrence started from zeros)": lambda i: {
        "H": _forward(i, h0=np.zeros_like(i["h0"]))
    },
    "the bias b was left out": lambda i: {"H": _forward(i, b=np.zeros_like(i["b"]))},
    "the tanh was left out": _bug_linear,
}


def forward_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
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

JACOBIAN_DEFAULTS = {"T": 7, "d_in": 4, "d_h": 5, "gain": 1.0, "input_scale": 1.0}


def make_jacobian_inputs(
    rng: np.random.Generator,
    T: int = 7,
    d_in: int = 4,
    d_h: int = 5,
    gain: float = 1.0,
    input_scale: float = 1.0,
) -> dict[str, Any]:
    """The states H (T, d_h) of a random RNN of the given gain, run from h0 = 0, and its W_hh."""
    w = random_rnn(rng, d_in, d_h, gain)
    X = normal(rng, T, d_in, scale=input_scale)  # (T, d_in)
    H = rnn_forward(X, np.zeros(d_h), w.W_xh, w.W_hh, w.b)  # (T, d_h)
    return {"H": H, "W_hh": w.W_hh}


def _chain_norms(H: np.ndarray, step, reverse: bool = False, ord: Any = 2) -> np.ndarray:
    """Norms of products of per-step matrices step(t) for t = T, T-1, ..., as a learner might."""
    T, d_h = H.shape
    norms, product = [1.0], np.eye(d_h)
    for k in range(1, T):
        J = step(T - k)  # the factor for h_{T-k+1}, which is row T - k of H
        product = J @ product if reverse else product @ J
        norms.append(np.linalg.norm(product, ord=ord))
    return np.array(norms)


def _derivative_bug(derivative) -> Any:
    return lambda i: {
        "norms": _chain_norms(i["H"], lambda r: derivative(i["H"], r)[:, None] * i["W_hh"].T)
    }


JACOBIAN_BUGS = {
    "the tanh derivative diag(1 - h_t^2) was left out (these are the norms of W_hh^k)": (
        _derivative_bug(lambda H, r: np.ones(H.shape[1]))
    ),
    "the tanh derivative was taken at h_{t-1} instead of h_t (one step off)": _derivative_bug(
        lambda H, r: 1.0 - H[r - 1] ** 2
    ),
    "the tanh derivative was written 1 - h_t instead of 1 - h_t^2": _derivative_bug(
        lambda H, r: 1.0 - H[r]
    ),
    "the Frobenius norm was used; the spectral norm is the largest singular value "
    "(np.linalg.norm(J, ord=2))": lambda i: {
        "norms": _chain_norms(
            i["H"], lambda r: (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"].T, ord="fro"
        )
    },
    "the step Jacobians were multiplied in the wrong order (d h_T / d h_{T-k} = "
    "J_T J_{T-1} ... J_{T-k+1})": lambda i: {
        "norms": _chain_norms(
            i["H"], lambda r: (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"].T, reverse=True
        )
    },
    "the norms came out in reverse order (entry k is d h_T / d h_{T-k}, so entry 0 is 1)": (
        lambda i: {"norms": jacobian_norms(i["H"], i["W_hh"])[::-1]}
    ),
}


def jacobian_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    norms = got.get("norms")
    T = inputs["H"].shape[0]
    if norms is None:
        return []
    if norms.shape == (T - 1,):
        return ["There should be T entries, k = 0 .. T-1; entry 0 is the norm of the identity, 1."]
    if norms.shape == (T,) and not np.isclose(norms[0], 1.0):
        return ["Entry 0 is d h_T / d h_T, the identity matrix, whose norm is 1."]
    return []


EXERCISES = [
    Exercise(
        name="rnn_step",
        make_inputs=make_step_inputs,
        call=lambda fn, i: {"h": fn(i["x_t"], i["h_prev"], i["W_xh"], i["W_hh"], i["b"])},
        reference=lambda i: {"h": rnn_step(i["x_t"], i["h_prev"], i["W_xh"], i["W_hh"], i["b"])},
        bugs=STEP_BUGS,
        hints=state_range_hint,
        describe=lambda p: (
            _shape_text(p, ("batch", "d_in", "d_h"), STEP_DEFAULTS)
            + (f", inputs scaled by {p['input_scale']:g}" if "input_scale" in p else "")
        ),
    ),
    Exercise(
        name="rnn_forward",
        make_inputs=make_forward_inputs,
        call=lambda fn, i: {"H": fn(i["X"], i["h0"], i["W_xh"], i["W_hh"], i["b"])},
        reference=lambda i: {"H": _forward(i)},
        bugs=FORWARD_BUGS,
        hints=forward_hints,
        describe=lambda p: _shape_text(p, tuple(FORWARD_DEFAULTS), FORWARD_DEFAULTS),
    ),
    Exercise(
        name="jacobian_norms",
        make_inputs=make_jacobian_inputs,
        call=lambda fn, i: {"norms": fn(i["H"], i["W_hh"])},
        reference=lambda i: {"norms": jacobian_norms(i["H"], i["W_hh"])},
        bugs=JACOBIAN_BUGS,
        hints=jacobian_hints,
        describe=lambda p: (
            "the states of a random RNN with "
            + _shape_text(p, tuple(JACOBIAN_DEFAULTS), JACOBIAN_DEFAULTS)
        ),
        atol=1e-9,
    ),
]
