"""Chapter 6 cases: positional_encoding and greedy_decode.

greedy_decode is tested on :class:`ToyTranslator`, a deterministic stand-in for a trained
model whose weights the test builds, never by training. Its end-of-sentence logit is set
so that each sentence of the batch ends at a chosen step (or never), so that the tests can
ask for sentences ending at different steps, EOS as the very first token, and max_len
reached without EOS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.conventions import numpy_case
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, Inputs

# ---------------------------------------------------------------- positional_encoding


def make_pe_inputs(rng: np.random.Generator, n: int = 6, d_model: int = 8) -> dict[str, Any]:
    return {"n": n, "d_model": d_model}


def call_pe(fn: Any, inputs: Inputs) -> Arrays:
    return {"pe": fn(inputs["n"], inputs["d_model"])}


def describe_pe(params: dict[str, Any]) -> str:
    return f"n={params['n']}, d_model={params['d_model']}"


def pe_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    pe = got.get("pe")
    if pe is None or pe.shape != expected["pe"].shape:
        return []
    hints = []
    if np.abs(pe).max() > 1 + 1e-9:
        hints.append("Some entries are larger than 1 in size: every entry is a sine or a cosine.")
    if len(pe) > 1 and np.allclose(pe[0], expected["pe"][1]):
        hints.append(
            "Row 0 holds the encoding of position 1: positions start at 0, so row 0 is "
            "0, 1, 0, 1, ... (sin(0) in even columns, cos(0) in odd ones)."
        )
    return hints


def make_offset_inputs(
    rng: np.random.Generator, n: int = 40, d_model: int = 16, offsets: Sequence[int] = (1, 3, 7)
) -> Inputs:
    """An even d_model: with an odd one the lone last sine column has no partner, and its
    products do depend on the position."""
    return {"n": n, "d_model": d_model, "offsets": tuple(offsets)}


def derive_offsets(inputs: Inputs, raw: Arrays) -> Arrays:
    """From the encoding: how much PE[p] . PE[p + k] varies with p, for each offset k (0 when
    it depends on k only), and whether every entry lies in [-1, 1]."""
    pe = raw["pe"]
    n, d_model = inputs["n"], inputs["d_model"]
    if pe.shape != (n, d_model):
        raise ValueError(f"the encoding has shape {pe.shape}, expected {(n, d_model)}")
    spread = [np.ptp(np.einsum("pd,pd->p", pe[:-k], pe[k:])) for k in inputs["offsets"]]
    return {"dot_spread": np.array(spread), "bounded": np.array(np.abs(pe).max() <= 1.0 + 1e-12)}


def describe_offsets(params: dict[str, Any]) -> str:
    return (
        f"n={params['n']}, d_model={params['d_model']}: PE[p] . PE[p + k] must not depend on p "
        f"(offsets k = {list(params['offsets'])}), and every entry must be in [-1, 1]"
    )


OFFSET_LABELS = {
    "dot_spread": "the spread over p of PE[p] . PE[p + k], one entry per offset k",
    "bounded": "whether every entry is in [-1, 1]",
}


# ---------------------------------------------------------------- greedy_decode


class ToyTranslator:
    """A deterministic stand-in for a trained encoder-decoder, with explicit weights.

    encode(src (B, n_src) int64) -> memory = W_src[src], float64 (B, n_src, V)
    decode(tgt (B, n_tgt) int64, memory) -> logits (B, n_tgt, V), where
        logits[b, t] = W_next[tgt[b, t]] + W_pos[t] + mean over s of memory[b, s]
    so the logits at position t depend on the token at t, on t itself and on the source.
    """

    def __init__(self, W_next: np.ndarray, W_pos: np.ndarray, W_src: np.ndarray) -> None:
        self.W_next = torch.as_tensor(W_next, dtype=torch.float64)  # (V, V)
        self.W_pos = torch.as_tensor(W_pos, dtype=torch.float64)  # (P, V)
        self.W_src = torch.as_tensor(W_src, dtype=torch.float64)  # (V_src, V)
        self.encode_calls = 0  # the notebook's rules, counted: encode once ...
        self.decode_batches: list[int] = []  # ... and decode the whole batch at every step

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        self.encode_calls += 1
        return self.W_src[src]  # (B, n_src, V)

    def decode(self, tgt: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        self.decode_batches.append(int(tgt.shape[0]))
        n_tgt = tgt.shape[1]
        positions = torch.arange(n_tgt) % self.W_pos.shape[0]  # (n_tgt,), never out of range
        return (
            self.W_next[tgt]  # (B, n_tgt, V)
            + self.W_pos[positions]  # (n_tgt, V)
            + memory.mean(dim=1, keepdim=True)  # (B, 1, V)
        )


def make_decode_inputs(
    rng: np.random.Generator,
    stops: Sequence[int | None] = (2, 4, 1),
    n_src: int = 5,
    vocab: int = 9,
    max_len: int = 7,
    bos_id: int = 1,
    eos_id: int = 2,
) -> dict[str, Any]:
    """A toy model and a batch whose sentence b emits EOS as its token ``stops[b]`` (0 = the
    first token; None = never, so that decoding runs into ``max_len``).

    Ordinary logits are sums of normal draws (the token's own row of W_next dominates, and
    never predicts the same token again); the EOS logit at position t of sentence b is
    100 (t - stops[b]) + 50, decided by a marker token at src[b, 0], and reading EOS pushes
    the next EOS logit down by 1000, so that a decoder that keeps going after EOS shows.
    """
    batch = len(stops)
    V = vocab
    V_src = vocab + batch  # the last `batch` source ids are the sentences' markers
    W_next = normal(rng, V, V, scale=2.0)
    W_next[np.arange(V), np.arange(V)] -= 10.0  # no token follows itself: sequences keep moving
    W_pos = normal(rng, max_len + 1, V)
    W_src = normal(rng, V_src, V, scale=3.0)  # the source matters: sentences differ
    W_next[:, eos_id] = 0.0
    W_next[eos_id, eos_id] = -1000.0  # after EOS, EOS is not predicted again
    W_next[:, bos_id] = -1000.0  # the model never predicts BOS
    W_pos[:, eos_id] = 100.0 * np.arange(max_len + 1)
    W_src[:, eos_id] = 0.0
    src = rng.integers(3, V, size=(batch, n_src))  # (B, n_src), ordinary tokens
    for b, stop in enumerate(stops):
        marker = V + b
        src[b, 0] = marker
        s = max_len + 10 if stop is None else stop
        W_src[marker, eos_id] = n_src * (50.0 - 100.0 * s)  # its mean over n_src positions
    return {
        "W_next": W_next,
        "W_pos": W_pos,
        "W_src": W_src,
        "src": src.astype(np.int64),
        "max_len": max_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
    }


def toy_model(inputs: Inputs) -> ToyTranslator:
    return ToyTranslator(inputs["W_next"], inputs["W_pos"], inputs["W_src"])


def call_decode(fn: Any, inputs: Inputs) -> Arrays:
    """The ids, and the two rules the notebook states, counted on the toy model: how many
    times ``encode`` ran, and the smallest batch ``decode`` was given (B when it always got
    the whole batch). The return type is part of the contract: an int64 tensor."""
    src = torch.from_numpy(inputs["src"])
    model = toy_model(inputs)
    ids = fn(model, src, inputs["max_len"], inputs["bos_id"], inputs["eos_id"])
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64:
        kind = type(ids).__name__ if not isinstance(ids, torch.Tensor) else f"tensor of {ids.dtype}"
        raise TypeError(f"greedy_decode should return an int64 tensor of token ids, got a {kind}")
    return {"ids": ids, "encode_calls": np.array(model.encode_calls),
            "smallest_decode_batch": np.array(min(model.decode_batches, default=len(src)))}


def describe_decode(params: dict[str, Any]) -> str:
    stops = list(params["stops"])
    ends = ", ".join("never" if s is None else f"token {s}" for s in stops)
    return (
        f"a toy model, batch of {len(stops)} sentences that emit EOS at: {ends}; "
        f"n_src={params['n_src']}, vocab={params['vocab']}, "
        f"max_len={params['max_len']}, bos_id={params['bos_id']}, "
        f"eos_id={params['eos_id']}"
    )


def decode_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    ids = got.get("ids")
    if ids is None or ids.ndim != 2:
        return ["greedy_decode should return one row of token ids per sentence: shape (B, T)."]
    hints = []
    if "encode_calls" in got and int(got["encode_calls"]) != 1:
        hints.append("Encode the source once, before the loop: the memory does not change while "
                     "the target grows.")
    if "smallest_decode_batch" in got and int(got["smallest_decode_batch"]) < len(inputs["src"]):
        hints.append("Decode the whole batch at every step (one call for all sentences), never one "
                     "sentence at a time: finished sentences are padded with EOS.")
    if not np.array_equal(ids, np.round(ids)):
        hints.append("The ids are not whole numbers: return the argmax (token ids), not logits.")
    want = expected["ids"]
    if ids.shape[1] > want.shape[1] and ids.shape[1] == inputs["max_len"]:
        hints.append(
            f"Decoding ran all {inputs['max_len']} steps although every sentence had emitted "
            "EOS earlier: stop as soon as all of them have finished."
        )
    if ids.shape[1] < want.shape[1]:
        hints.append(
            "Decoding stopped too early: it must go on until EVERY sentence of the batch has "
            "emitted EOS (or max_len tokens were produced)."
        )
    return hints


CASES = [
    Case(
        name="positional_encoding",
        make_inputs=make_pe_inputs,
        call=call_pe,
        describe=describe_pe,
        hints=pe_hints,
        atol=1e-8,
        rtol=1e-6,
    ),
    Case(
        name="positional_encoding__properties",
        make_inputs=make_offset_inputs,
        call=call_pe,
        describe=describe_offsets,
        derive=derive_offsets,
        labels=OFFSET_LABELS,
        atol=1e-9,
        rtol=1e-6,
    ),
    Case(
        name="greedy_decode",
        make_inputs=make_decode_inputs,
        call=call_decode,
        describe=describe_decode,
        hints=decode_hints,
        labels={"encode_calls": "how many times model.encode was called (once)",
                "smallest_decode_batch": "the smallest batch model.decode was given (the whole "
                                         "batch, every step)"},
    ),
]
# the NumPy exercises of this chapter keep the course's NumPy conventions (float64 results,
# inputs left unchanged), decided by the judge as in chapters 1 to 3
NUMPY_EXERCISES = ("positional_encoding", "positional_encoding__properties")
CASES = [numpy_case(c) if c.name in NUMPY_EXERCISES else c for c in CASES]
