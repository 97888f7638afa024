"""Chapter 1 exercises, the judging half: references and classic bugs of the RNN step, the
recurrence and the Jacobian norms (the cases are in ``attention_learner.cases.ch01``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from grader.exercises.spec import Arrays, exercise
from grader.reference.rnn import jacobian_norms, rnn_forward, rnn_step


def _sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


# ---------------------------------------------------------------- rnn_step


def _pre_activation(i: dict[str, Any], bias: bool = True, recurrent: bool = True) -> np.ndarray:
    a = i["x_t"] @ i["W_xh"]  # (*B, d_h)
    if recurrent:
        a = a + i["h_prev"] @ i["W_hh"]
    return a + i["b"] if bias else a


STEP_BUGS = {
    "the bias b was left out": lambda i: {"h": np.tanh(_pre_activation(i, bias=False))},
    "the tanh was left out (h_t = tanh(x_t W_xh + h_prev W_hh + b))": lambda i: {"h": _pre_activation(i)},
    "the previous state h_prev was left out (the term h_prev @ W_hh)": lambda i: {
        "h": np.tanh(_pre_activation(i, recurrent=False))
    },
    "a sigmoid was used instead of tanh": lambda i: {"h": _sigmoid(_pre_activation(i))},
    "a ReLU was used instead of tanh (np.maximum(0, ...); the state must be tanh(...))": lambda i: {
        "h": np.maximum(0.0, _pre_activation(i))
    },
}


# ---------------------------------------------------------------- rnn_forward


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


def _bug_aliased(i: dict[str, Any]) -> Arrays:
    """Every row is h_T: one array stored T times and overwritten in place at each step."""
    H = _forward(i)  # (T, d_h)
    return {"H": np.broadcast_to(H[-1], H.shape).copy()}


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
    "every row of H holds the last state: one array was stored at every step and then "
    "overwritten in place (h[...] = ... or out= changes the stored rows; store a new array, "
    "or h.copy(), each step)": _bug_aliased,
}


# ---------------------------------------------------------------- jacobian_norms


def _chain_norms(
    H: np.ndarray,
    step: Callable[[int], np.ndarray],
    reverse: bool = False,
    ord: Any = 2,
    norm: Callable[[np.ndarray], Any] | None = None,
) -> np.ndarray:
    """Norms of products of per-step matrices step(t) for t = T, T-1, ..., as a learner might
    (``norm``: matrix -> number, in place of np.linalg.norm(., ord))."""
    T, d_h = H.shape
    norms: list[float | np.floating[Any]] = [1.0]
    product = np.eye(d_h)
    for k in range(1, T):
        J = step(T - k)  # (d_h, d_h), the factor for h_{T-k+1}, which is row T - k of H
        product = J @ product if reverse else product @ J
        norms.append(norm(product) if norm else np.linalg.norm(product, ord=ord))
    return np.array(norms)


def _step_jacobian(i: dict[str, Any], r: int) -> np.ndarray:
    """diag(1 - h_t^2) W_hh^T, the Jacobian d h_t / d h_{t-1} of row r = t - 1 of H: (d_h, d_h)."""
    return (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"].T


def _derivative_bug(derivative) -> Any:
    return lambda i: {"norms": _chain_norms(i["H"], lambda r: derivative(i["H"], r)[:, None] * i["W_hh"].T)}


JACOBIAN_BUGS = {
    "the tanh derivative diag(1 - h_t^2) was left out (these are the norms of W_hh^k)": (
        _derivative_bug(lambda H, r: np.ones(H.shape[1]))
    ),
    "the tanh derivative was taken at h_{t-1} instead of h_t (one step off)": _derivative_bug(
        lambda H, r: 1.0 - H[r - 1] ** 2
    ),
    "the tanh derivative was written 1 - h_t instead of 1 - h_t^2": _derivative_bug(lambda H, r: 1.0 - H[r]),
    "the Frobenius norm was used; the spectral norm is the largest singular value "
    "(np.linalg.norm(J, ord=2))": lambda i: {
        "norms": _chain_norms(i["H"], lambda r: (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"].T, ord="fro")
    },
    "the step Jacobians were multiplied in the wrong order (d h_T / d h_{T-k} = "
    "J_T J_{T-1} ... J_{T-k+1})": lambda i: {
        "norms": _chain_norms(i["H"], lambda r: (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"].T, reverse=True)
    },
    "the step Jacobian was built with W_hh instead of its transpose (h_t = tanh(x_t W_xh + "
    "h_{t-1} W_hh + b), so d h_t / d h_{t-1} = diag(1 - h_t^2) W_hh^T)": lambda i: {
        "norms": _chain_norms(i["H"], lambda r: (1.0 - i["H"][r] ** 2)[:, None] * i["W_hh"])
    },
    "the tanh derivative multiplied on the wrong side (W_hh^T diag(1 - h_t^2); the step "
    "Jacobian is diag(1 - h_t^2) W_hh^T)": lambda i: {
        "norms": _chain_norms(i["H"], lambda r: i["W_hh"].T * (1.0 - i["H"][r] ** 2)[None, :])
    },
    "the spectral norm taken as the largest entry (np.abs(J).max()); it is the largest "
    "singular value, np.linalg.norm(J, ord=2)": lambda i: {
        "norms": _chain_norms(i["H"], lambda r: _step_jacobian(i, r), norm=lambda m: np.abs(m).max())
    },
    "the norms came out in reverse order (entry k is d h_T / d h_{T-k}, so entry 0 is 1)": (
        lambda i: {"norms": jacobian_norms(i["H"], i["W_hh"])[::-1]}
    ),
}


EXERCISES = [
    exercise(
        "rnn_step",
        lambda i: {"h": rnn_step(i["x_t"], i["h_prev"], i["W_xh"], i["W_hh"], i["b"])},
        STEP_BUGS,
    ),
    exercise("rnn_forward", lambda i: {"H": _forward(i)}, FORWARD_BUGS),
    exercise("jacobian_norms", lambda i: {"norms": jacobian_norms(i["H"], i["W_hh"])}, JACOBIAN_BUGS),
]
