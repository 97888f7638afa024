"""Chapter 6 exercises, the judging half: references and classic bugs of positional_encoding
and greedy_decode.

The cases (inputs, the toy model greedy_decode is tested on, how the learner's code is called,
descriptions, hints) are in ``attention_learner.cases.ch06``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from attention_learner.cases.ch06 import toy_model
from grader.exercises.ch06_bugs import HINTED_PE_BUGS
from grader.exercises.spec import Inputs, exercise
from grader.reference.translator import greedy_decode, positional_encoding


def _pe_variant(
    n: int,
    d_model: int,
    base: float = 10000.0,
    exponent: str = "2i",
    order: str = "interleaved",
    start: int = 0,
    sign: float = -1.0,
) -> np.ndarray:
    """The sinusoidal encoding with one classic bug switched on."""
    positions = np.arange(start, start + n, dtype=np.float64)[:, None]  # (n, 1)
    pairs = np.arange((d_model + 1) // 2, dtype=np.float64)  # (ceil(d/2),): i = 0, 1, 2, ...
    if exponent == "2i":
        frequencies = base ** (sign * 2 * pairs / d_model)
    elif exponent == "i":
        frequencies = base ** (sign * pairs / d_model)
    else:  # "column": each column j gets its own frequency base^(-j/d)
        columns = np.arange(d_model, dtype=np.float64)
        angles = positions * base ** (sign * columns / d_model)  # (n, d_model)
        pe = np.where(np.arange(d_model) % 2 == 0, np.sin(angles), np.cos(angles))
        return pe
    angles = positions * frequencies  # (n, ceil(d/2))
    sin, cos = np.sin(angles), np.cos(angles[:, : d_model // 2])
    if order == "concatenated":
        return np.concatenate([sin, cos], axis=1)  # (n, d_model)
    pe = np.empty((n, d_model))
    if order == "swapped":
        pe[:, 0::2] = np.cos(angles)
        pe[:, 1::2] = np.sin(angles[:, : d_model // 2])
    else:
        pe[:, 0::2], pe[:, 1::2] = sin, cos
    return pe


def _pe_bug(**kw: Any):
    return lambda i: {"pe": _pe_variant(i["n"], i["d_model"], **kw)}


# Most of these bugs keep each pair of columns on a circle that turns at a fixed speed, so
# their dot products still depend on the offset only: the properties test names only the
# bug that breaks that (one frequency per column); the comparison test names them all.

PE_BUGS = {
    "sin and cos swapped (the sine belongs in the even columns 2i, the cosine in the odd "
    "columns 2i + 1)": _pe_bug(order="swapped"),
    "the sines and cosines concatenated ([sin | cos]) instead of interleaved (sin in column 2i, "
    "cos in column 2i + 1)": _pe_bug(order="concatenated"),
    "a frequency exponent of i / d_model instead of 2i / d_model (i counts the pairs; the "
    "exponent uses the even column index 2i)": _pe_bug(exponent="i"),
    "one frequency per column (exponent j / d_model for column j) instead of one per pair of "
    "columns (2i / d_model for both columns 2i and 2i + 1)": _pe_bug(exponent="column"),
    "a base of 1000 instead of 10000": _pe_bug(base=1000.0),
    # math.e, the same float as np.e, which mypy reads as deleted once it has analysed dask
    # (dask.array imports numpy's e, then binds e in a module-level except)
    "a base of e (np.exp(-2i / d_model)) instead of 10000": _pe_bug(base=math.e),
    "frequencies 10000^(+2i/d_model) (a missing minus sign: divide the position by "
    "10000^(2i/d_model))": _pe_bug(sign=1.0),
    "positions counted from 1 instead of 0": _pe_bug(start=1),
    **HINTED_PE_BUGS,
}


def _decode_variant(
    inputs: Inputs,
    stop: str = "all",
    pad_after_eos: bool = True,
    position: int = -1,
    start: str = "bos",
    keep_bos: bool = False,
    flat_argmax: bool = False,
) -> dict[str, torch.Tensor]:
    """Greedy decoding of the toy model with one classic bug switched on."""
    model = toy_model(inputs)
    src = torch.from_numpy(inputs["src"])
    bos, eos, max_len = inputs["bos_id"], inputs["eos_id"], inputs["max_len"]
    memory = model.encode(src)
    B = src.shape[0]
    first = {"bos": bos, "zero": 0, "eos": eos}[start]
    tgt = torch.full((B, 1), first, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    for _ in range(max_len):
        logits = model.decode(tgt, memory)[:, position]  # (B, V)
        if flat_argmax:
            next_id = (logits.argmax() % logits.shape[-1]).expand(B)  # one id for the batch
        else:
            next_id = logits.argmax(dim=-1)  # (B,)
        if pad_after_eos:
            next_id = torch.where(finished, torch.full_like(next_id, eos), next_id)
        tgt = torch.cat([tgt, next_id[:, None]], dim=1)
        finished |= next_id == eos
        if stop == "same_step" and (next_id == eos).all():
            break  # no record of which sentences finished earlier
        if (stop == "all" and finished.all()) or (stop == "any" and finished.any()):
            break
    return {"ids": tgt if keep_bos else tgt[:, 1:]}


def _decode_bug(**kw: Any):
    return lambda i: _decode_variant(i, **kw)


DECODE_BUGS = {
    "decoding that keeps going after EOS: a finished sentence must only repeat eos_id "
    "(replace its next token by eos_id)": _decode_bug(pad_after_eos=False),
    "decoding that keeps going after EOS: it stops only when every sentence emits EOS at the "
    "same step; keep a record of the finished sentences (finished |= next_id == eos_id) and "
    "make them repeat eos_id": _decode_bug(pad_after_eos=False, stop="same_step"),
    "decoding that runs all max_len steps instead of stopping when every sentence has "
    "emitted EOS": _decode_bug(stop="never"),
    "decoding that treats the batch as one sequence: it stops as soon as ONE sentence has "
    "emitted EOS": _decode_bug(stop="any"),
    "decoding that treats the batch as one sequence: the argmax was taken over the whole "
    "batch's logits (use argmax(dim=-1))": _decode_bug(flat_argmax=True),
    "feeding back the argmax of the wrong position: the next token comes from the logits at "
    "the LAST position, logits[:, -1]": _decode_bug(position=0),
    "decoding that forgets BOS: the decoder's input must start with bos_id (it started with 0)": _decode_bug(
        start="zero"
    ),
    "decoding that forgets BOS: the decoder's input must start with bos_id (it started with "
    "eos_id)": _decode_bug(start="eos"),
    "an output that keeps the BOS in front: return the generated tokens only": _decode_bug(keep_bos=True),
    "an output that returns the prompt (the source ids) instead of the generated tokens": (
        lambda i: {"ids": torch.from_numpy(i["src"])}
    ),
}


def _decode_reference(inputs: Inputs) -> dict[str, torch.Tensor | np.ndarray]:
    src = torch.from_numpy(inputs["src"])
    ids = greedy_decode(toy_model(inputs), src, inputs["max_len"], inputs["bos_id"], inputs["eos_id"])
    return {"ids": ids, "encode_at_most_once": np.array(True), "smallest_decode_batch": np.array(len(src))}


EXERCISES = [
    exercise(
        "positional_encoding",
        reference=lambda i: {"pe": positional_encoding(i["n"], i["d_model"])},
        bugs=PE_BUGS,
    ),
    exercise(
        "positional_encoding__properties",
        reference=lambda i: {"dot_spread": np.zeros(len(i["offsets"])), "bounded": np.array(True)},
        bugs={k: v for k, v in PE_BUGS.items() if k.startswith("one frequency per column")},
    ),
    exercise("greedy_decode", reference=_decode_reference, bugs=DECODE_BUGS),
]
