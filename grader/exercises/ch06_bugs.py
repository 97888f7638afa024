"""Chapter 6's classic bugs of the positional encoding that the learner's hints used to model:
wrong frequencies, wrong positions, floored angles and the lone last column of an odd d_model.

They lived in ``attention_learner.cases.ch06`` until a student called one with the right
arguments (the positions 0 .. n - 1) and handed it in as the encoding: a model one argument
from the answer is an answer. Here they are classic bugs of the exercise like the others of
``grader.exercises.ch06``: the parent computes their outputs on a case's inputs, and the
learner package ships those outputs for the visible cases only.

Every model varies the angles of PE[p, 2i] = sin(a_pi), PE[p, 2i + 1] = cos(a_pi), whose
right value is a_pi = p w_i with w_i = 10000^(-2i / d_model), or the last column alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.exercises.spec import Arrays, Inputs
from grader.reference.translator import positional_encoding


def _pairs(d_model: int) -> np.ndarray:
    """(ceil(d_model / 2),) float64: the pair index i of the columns 2i and 2i + 1."""
    return np.arange((d_model + 1) // 2, dtype=np.float64)


def _from_angles(angles: np.ndarray, d_model: int) -> np.ndarray:
    """(n, d_model): sin(angles[:, i]) in column 2i, cos(angles[:, i]) in column 2i + 1, from
    angles (n, ceil(d_model / 2))."""
    pe = np.zeros((len(angles), d_model))
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return pe


def _with_frequencies(frequencies: Any, positions: Any = None):
    """A bug whose pair i turns at ``frequencies(i, d_model)`` (the right ones when None) at
    the positions ``positions(p, n)`` (0 .. n - 1 when None)."""

    def bug(inputs: Inputs) -> Arrays:
        n, d = inputs["n"], inputs["d_model"]
        p, i = np.arange(n, dtype=np.float64), _pairs(d)
        w = 10000.0 ** (-2 * i / d) if frequencies is None else frequencies(i, d)  # (ceil(d / 2),)
        at = p if positions is None else positions(p, n)  # (n,)
        return {"pe": _from_angles(at[:, None] * w[None, :], d)}

    return bug


def _floored_angles(inputs: Inputs) -> Arrays:
    """Angles floor(p / 10000^(2i / d_model)): the position divided with ``//``."""
    n, d = inputs["n"], inputs["d_model"]
    p, wavelengths = np.arange(n, dtype=np.float64), 10000.0 ** (2 * _pairs(d) / d)
    return {"pe": _from_angles(np.floor(p[:, None] / wavelengths[None, :]), d)}


def _last_column(kind: str):
    """An odd d_model's lone last sine column sin(p w), w = 10000^(-(d_model - 1) / d_model),
    replaced by zeros ("zero") or by cos(p w) ("cosine"); {} for an even d_model."""

    def bug(inputs: Inputs) -> Arrays:
        n, d = inputs["n"], inputs["d_model"]
        if d % 2 == 0:
            return {}
        pe = positional_encoding(n, d)  # (n, d)
        w = 10000.0 ** (-(d - 1) / d)
        pe[:, -1] = 0.0 if kind == "zero" else np.cos(np.arange(n) * w)
        return {"pe": pe}

    return bug


def _other_width(change: int):
    """An odd d_model made even: the encoding of width d_model + ``change`` (+1 or -1), cut to
    d_model columns or padded with a zero column; {} for an even d_model."""

    def bug(inputs: Inputs) -> Arrays:
        n, d = inputs["n"], inputs["d_model"]
        width = d + change
        if d % 2 == 0 or width < 1:
            return {}
        pe = positional_encoding(n, width)  # (n, width)
        return {"pe": np.pad(pe, ((0, 0), (0, max(0, d - width))))[:, :d]}

    return bug


_ODD = "with an odd d_model, column d_model - 1 is a lone sine, sin(p w) with 2i = d_model - 1"

#: classic bug, in words -> inputs -> its encoding (the parent names the one an output matches)
HINTED_PE_BUGS = {
    "an exponent of 4i / d_model (the right one is 2i / d_model): the even column index 2i "
    "was doubled again (with i = np.arange(0, d_model, 2) the exponent is i / d_model, not "
    "2 * i / d_model)": _with_frequencies(lambda i, d: 10000.0 ** (-4 * i / d)),
    "integer division in the exponent: 2 * i // d_model is 0 for every pair, so every "
    "frequency came out as 1 (use / for the exponent 2i / d_model)": _with_frequencies(
        lambda i, d: 10000.0 ** -((2 * i) // d)
    ),
    "integer division of the angles: p // 10000^(2i / d_model) floors every angle to a whole "
    "number (divide with /)": _floored_angles,
    "log10(10000) = 4 where the natural log ln(10000) = 9.21 belongs: exp(-2i * ln(10000) / "
    "d_model) is 10000^(-2i / d_model) (np.log, not np.log10)": _with_frequencies(
        lambda i, d: np.exp(-2 * i * np.log10(10000.0) / d)
    ),
    "a base of 10 instead of 10000 in w_i = 10000^(-2i / d_model)": _with_frequencies(
        lambda i, d: 10.0 ** (-2 * i / d)
    ),
    "positions scaled into [0, 1] (p / (n - 1), as np.linspace(0, 1, n) gives): the positions "
    "are the whole numbers p = 0, 1, ..., n - 1": _with_frequencies(None, lambda p, n: p / (n - 1)),
    "positions scaled into [0, 1) (p / n): the positions are the whole numbers p = 0, 1, ..., "
    "n - 1": _with_frequencies(None, lambda p, n: p / n),
    f"the last column of an odd d_model was left at zero: {_ODD}": _last_column("zero"),
    f"the last column of an odd d_model holds a cosine: {_ODD}": _last_column("cosine"),
    "the last column of an odd d_model: the encoding was computed for d_model + 1 columns and "
    f"cut, so every frequency is off; {_ODD}, and the exponent divides by d_model": _other_width(1),
    "the last column of an odd d_model: the encoding was computed for d_model - 1 columns and "
    f"padded with zeros, so every frequency is off; {_ODD}, and the exponent divides by "
    "d_model": _other_width(-1),
}
