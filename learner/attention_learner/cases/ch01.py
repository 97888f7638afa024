"""Chapter 1 cases: one RNN step, the whole recurrence, and the norms of its Jacobians."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, Inputs

# ---------------------------------------------------------------- NumPy conventions

CONVENTION_LABELS = {
    "float64": "whether every output is float64",
    "unchanged": "whether the input arrays were left unmodified",
}


def is_float64(value: Any) -> bool:
    """True for a float64 array or tensor, a Python float, or a tuple or list of those."""
    if isinstance(value, tuple | list) and any(hasattr(v, "dtype") for v in value):
        return all(is_float64(v) for v in value)
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        dtype = np.asarray(value).dtype
    return str(dtype) in ("float64", "torch.float64")


def numpy_conventions(adapter: Callable[[Any, Inputs], dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    """A NumPy exercise's call adapter that also reports two conventions as raw facts.

    "float64": whether everything the learner's function returned is float64 (a float32
    result loses precision the later chapters rely on); "unchanged": whether every input
    array is bit-for-bit what it was before the call (an in-place update such as
    ``z -= z.max()`` corrupts the caller's data).
    """

    def call(fn: Any, inputs: Inputs) -> dict[str, Any]:
        before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
        returned: list[Any] = []

        def spy(*args: Any, **kwargs: Any) -> Any:  # sees the return value before conversion
            result = fn(*args, **kwargs)
            returned.append(result)
            return result

        outputs = dict(adapter(spy, inputs))
        unchanged = all(np.array_equal(inputs[k], v, equal_nan=True) for k, v in before.items())
        float64 = all(is_float64(r) for r in returned)
        return {**outputs, "float64": np.array(float64), "unchanged": np.array(unchanged)}

    call.__doc__ = adapter.__doc__
    return call


def convention_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    """Plain sentences for a broken convention (only when the reported fact shows it)."""
    hints = []
    if "float64" in got and not bool(got["float64"]):
        hints.append(
            "An output is not float64 (float32 or an integer type?): NumPy exercises return "
            "float64 arrays, so compute in float64 (no np.float32, no float32 tensors)."
        )
    if "unchanged" in got and not bool(got["unchanged"]):
        hints.append(
            "Your function modified one of its input arrays in place (e.g. z -= ..., z[...] = "
            "..., np.exp(z, out=z)): the caller's arrays must stay as they were; write "
            "z = z - ... or work on a copy."
        )
    return hints


def numpy_case(case: Case) -> Case:
    """``case`` with the NumPy conventions checked: float64 outputs, inputs left unmodified."""
    hints = case.hints

    def all_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
        own = hints(inputs, expected, got) if hints is not None else []
        return own + convention_hints(inputs, expected, got)

    return dataclasses.replace(
        case,
        call=numpy_conventions(case.call),
        hints=all_hints,
        labels={**case.labels, **CONVENTION_LABELS},
    )


def rnn_weights(rng: np.random.Generator, d_in: int, d_h: int, weight_scale: float) -> Inputs:
    """W_xh (d_in, d_h), W_hh (d_h, d_h) and a non-zero bias b (d_h,), so a dropped term shows."""
    return {
        "W_xh": normal(rng, d_in, d_h, scale=1.0 / math.sqrt(d_in)),  # (d_in, d_h)
        "W_hh": normal(rng, d_h, d_h, scale=weight_scale / math.sqrt(d_h)),  # (d_h, d_h)
        "b": normal(rng, d_h, scale=0.5),  # (d_h,)
    }


def _sizes(p: dict[str, Any], keys: tuple[str, ...]) -> str:
    return ", ".join(f"{k}={p[k]}" for k in keys)


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
    text = f"batch {tuple(p['batch'])}, " + _sizes(p, ("d_in", "d_h"))
    if p["input_scale"] != 1.0:
        text += f", inputs scaled by {p['input_scale']:g}"
    return text


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
    sizes = _sizes(p, ("T", "d_in", "d_h", "gain", "input_scale"))
    return f"states H and a recurrent matrix W_hh with {sizes}"


def jacobian_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    norms = got.get("norms")
    T = inputs["H"].shape[0]
    if norms is None:
        return []
    if norms.shape == (T - 1,):
        return ["There should be T entries, k = 0 .. T-1; entry 0 is the norm of the identity, 1."]
    if norms.shape == (T,) and not np.isclose(norms[0], 1.0):
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
        describe=lambda p: _sizes(p, ("T", "d_in", "d_h", "weight_scale", "input_scale")),
        hints=forward_hints,
    ),
    Case(
        name="jacobian_norms",
        make_inputs=make_jacobian_inputs,
        call=lambda fn, i: {"norms": fn(i["H"], i["W_hh"])},
        describe=describe_jacobian,
        hints=jacobian_hints,
        atol=1e-9,
    ),
]
CASES = [numpy_case(case) for case in CASES]  # every exercise of this chapter is NumPy
