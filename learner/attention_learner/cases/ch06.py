"""Chapter 6 cases: positional_encoding and greedy_decode.

greedy_decode is tested on :class:`ToyTranslator`, a deterministic stand-in for a trained
model whose weights the test builds, never by training. Its end-of-sentence logit is set
so that each sentence of the batch ends at a chosen step (or never), so that the tests can
ask for sentences ending at different steps, EOS as the very first token, and max_len
reached without EOS.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, wrong_along, wrong_entries
from attention_learner.conventions import numpy_case
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, Inputs
from attention_learner.tolerance import all_close

# ---------------------------------------------------------------- positional_encoding


def make_pe_inputs(rng: np.random.Generator, n: int = 6, d_model: int = 8) -> dict[str, Any]:
    return {"n": n, "d_model": d_model}


def call_pe(fn: Any, inputs: Inputs) -> Arrays:
    return {"pe": fn(inputs["n"], inputs["d_model"])}


def describe_pe(params: dict[str, Any]) -> str:
    return f"n={params['n']}, d_model={params['d_model']}"


#: the comparison's tolerances
PE_ATOL, PE_RTOL = 1e-8, 1e-6


def pe_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    pe = got.get("pe")
    if pe is None or pe.shape != expected["pe"].shape:
        return []
    hints = []
    if np.abs(pe).max() > 1 + 1e-9:
        hints.append("Some entries are larger than 1 in size: every entry is a sine or a cosine.")
    if len(pe) > 1 and all_close(pe[0], expected["pe"][1], PE_ATOL, PE_RTOL):
        hints.append(
            "Row 0 holds the encoding of position 1: positions start at 0, so row 0 is "
            "0, 1, 0, 1, ... (sin(0) in even columns, cos(0) in odd ones)."
        )
    # the classic bugs (grader.exercises.ch06, ch06_bugs) are named by the judge from their
    # outputs; the package holds no model of the encoding, which would be one argument from it
    return hints or pe_where_wrong(pe, expected["pe"])


def pe_where_wrong(pe: np.ndarray, expected: np.ndarray) -> list[str]:
    """Which columns and rows (positions) of the encoding are wrong, in words (nothing when
    every entry is right: the failure is elsewhere)."""
    wrong = wrong_entries(pe, expected, PE_ATOL, PE_RTOL)
    if not wrong.any():
        return []
    columns, rows = wrong_along(wrong, 1), wrong_along(wrong, 0)
    kinds = {"even (sine)" if c % 2 == 0 else "odd (cosine)" for c in columns}
    return [
        f"The wrong entries are in columns {index_ranges(columns)} (of 0-{pe.shape[1] - 1}; "
        f"{' and '.join(sorted(kinds))} ones) and in rows {index_ranges(rows)} (positions; the "
        f"first wrong one is {rows[0]})."
    ]


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
        self.encode_calls = 0  # the notebook's rules, counted: encode at most once ...
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


def call_decode(fn: Any, inputs: Inputs) -> dict[str, Any]:
    """The ids, and the two rules the notebook states, counted on the toy model: how many
    times ``encode`` ran, and the smallest batch ``decode`` was given (B when it always got
    the whole batch). The return type is part of the contract: an int64 tensor."""
    src = torch.from_numpy(inputs["src"])
    model = toy_model(inputs)
    ids = fn(model, src, inputs["max_len"], inputs["bos_id"], inputs["eos_id"])
    if not isinstance(ids, torch.Tensor) or ids.dtype != torch.int64:
        kind = type(ids).__name__ if not isinstance(ids, torch.Tensor) else f"tensor of {ids.dtype}"
        raise TypeError(f"greedy_decode should return an int64 tensor of token ids, got a {kind}")
    # the rules as their purpose: the source is never encoded again (zero calls is right when
    # nothing is decoded, max_len = 0), and no call of decode splits the batch (a batch of one
    # cannot be split: any decode is whole there)
    return {
        "ids": ids,
        "encode_at_most_once": np.array(model.encode_calls <= 1),
        "smallest_decode_batch": np.array(min(model.decode_batches, default=len(src))),
    }


def describe_decode(params: dict[str, Any]) -> str:
    stops = list(params["stops"])
    ends = ", ".join("never" if s is None else f"token {s}" for s in stops)
    return (
        f"a toy model, batch of {len(stops)} sentences that emit EOS at: {ends}; "
        f"n_src={params['n_src']}, vocab={params['vocab']}, "
        f"max_len={params['max_len']}, bos_id={params['bos_id']}, "
        f"eos_id={params['eos_id']}"
    )


def _padded(ids: np.ndarray, width: int, eos_id: int) -> np.ndarray:
    """``ids`` (B, T) with columns of eos_id added up to ``width`` columns."""
    return np.pad(ids, ((0, 0), (0, width - ids.shape[1])), constant_values=eos_id)


def _next_tokens_after_prefixes(inputs: Inputs, ids: np.ndarray) -> np.ndarray:
    """(B, T): the argmax of the toy model's logits at step t when it is fed BOS and the
    returned tokens before t, [bos_id, ids[:, :t]], as greedy decoding feeds it (one call:
    the logits at position t depend on tokens 0 .. t only)."""
    model = toy_model(inputs)
    src = torch.tensor(inputs["src"])
    fed = np.concatenate([np.full((len(ids), 1), inputs["bos_id"]), ids[:, :-1]], axis=1)  # (B, T)
    logits = model.decode(torch.tensor(fed), model.encode(src))  # (B, T, V)
    return logits.argmax(dim=-1).numpy()


def _next_tokens_after_newest(inputs: Inputs, ids: np.ndarray) -> np.ndarray:
    """(B, T): the argmax of the toy model's logits when step t is fed only the token before
    it (bos_id at t = 0), a (B, 1) target, instead of everything so far."""
    model = toy_model(inputs)
    B, T = ids.shape
    fed = np.concatenate([np.full((B, 1), inputs["bos_id"]), ids[:, :-1]], axis=1).reshape(B * T, 1)
    memory = model.encode(torch.tensor(inputs["src"])).repeat_interleave(T, dim=0)  # (B T, n_src, V)
    return model.decode(torch.tensor(fed), memory)[:, 0].argmax(dim=-1).numpy().reshape(B, T)


def _first_break(inputs: Inputs, ids: np.ndarray, predicted: np.ndarray) -> tuple[int, int] | None:
    """(step, sentence) of the first token that greedy decoding's rules do not give, when each
    step's token should be ``predicted`` until the sentence's EOS and eos_id after it; None
    when every token follows them."""
    eos = inputs["eos_id"]
    finished_before = np.cumsum(ids == eos, axis=1) - (ids == eos) > 0  # (B, T) EOS at an earlier step
    rule = np.where(finished_before, eos, predicted)
    breaks = np.argwhere((ids != rule).T)  # (step, sentence) pairs, by step
    return None if len(breaks) == 0 else (int(breaks[0][0]), int(breaks[0][1]))


def _stops_right(inputs: Inputs, ids: np.ndarray) -> bool:
    """Whether decoding stopped where it should: after max_len tokens, or at the first step
    after which every sentence has emitted EOS."""
    done = (np.cumsum(ids == inputs["eos_id"], axis=1) > 0).all(axis=0)  # (T,) all finished by t
    first_done = int(np.argmax(done)) + 1 if done.any() else None
    return bool(ids.shape[1] == min(first_done or inputs["max_len"], inputs["max_len"]))


def decode_models(inputs: Inputs, want: np.ndarray) -> list[tuple[str, Callable[[np.ndarray], bool]]]:
    """(note, whether the bug explains the returned ids) for each classic bug of greedy
    decoding that the judging half does not name already. Each decides from ``want`` (the
    right ids) or from the toy model's logits on the returned ids, never by decoding."""
    eos, max_len, T = inputs["eos_id"], inputs["max_len"], want.shape[1]
    return [
        (
            "Every step produced the token of the first step again: either the next token was read "
            "from the logits of the first position (logits[:, 0]; the last is logits[:, -1]), or "
            "the decoder was fed the same input each time (tgt must grow: append each new token "
            "with torch.cat and decode the whole tgt again).",
            lambda ids: (
                ids.shape[1] > 1
                and _stops_right(inputs, ids)
                and np.array_equal(ids, np.repeat(want[:, :1], ids.shape[1], axis=1))
            ),
        ),
        (
            "Each step was fed only the newest token (tgt = next_id[:, None]) instead of BOS and "
            "every token so far: the model must see the whole prefix, at its positions.",
            lambda ids: (
                _first_break(inputs, ids, _next_tokens_after_newest(inputs, ids)) is None
                and _stops_right(inputs, ids)
            ),
        ),
        (
            "The first generated token is missing: return tgt[:, 1:] (drop the BOS only), not tgt[:, 2:].",
            lambda ids: T > 1 and np.array_equal(ids, want[:, 1:]),
        ),
        (
            f"Decoding made max_len - 1 = {max_len - 1} tokens: max_len counts the generated tokens, "
            "not the BOS (range(max_len) steps).",
            lambda ids: T == max_len > 1 and np.array_equal(ids, want[:, :-1]),
        ),
        (
            "Decoding stopped one step late: a column of eos_id after every sentence had finished "
            "(update finished with the new tokens before testing finished.all()).",
            lambda ids: T + 1 < max_len and np.array_equal(ids, _padded(want, T + 1, eos)),
        ),
        (
            f"Decoding ran all {max_len} steps although every sentence had emitted EOS by step "
            f"{T - 1}: stop as soon as all of them have finished.",
            lambda ids: T < max_len and np.array_equal(ids, _padded(want, max_len, eos)),
        ),
        (
            "Decoding stopped too early: it must go on until EVERY sentence of the batch has "
            "emitted EOS (or max_len tokens were produced).",
            lambda ids: (
                0 < ids.shape[1] < T - (T == max_len) and np.array_equal(ids, want[:, : ids.shape[1]])
            ),
        ),
    ]


def decode_where_wrong(inputs: Inputs, ids: np.ndarray, want: np.ndarray) -> list[str]:
    """The first step whose token greedy decoding's rules do not give, or, when every token
    follows them, how the length differs."""
    at = _first_break(inputs, ids, _next_tokens_after_prefixes(inputs, ids))
    if at is None:
        return [
            f"Every returned token follows from the model's logits, but the output has "
            f"{ids.shape[1]} steps where {want.shape[1]} are expected: check when the loop stops."
        ]
    step, b = at
    if (ids[b, :step] == inputs["eos_id"]).any():
        return [
            f"Sentence {b} goes on after its EOS: at step {step} (0 = the first generated token) "
            f"it has token {ids[b, step]}, where a finished sentence only repeats eos_id."
        ]
    return [
        f"The first wrong token is at step {step} (0 = the first generated token) of sentence "
        f"{b}: {ids[b, step]}, where the argmax of the logits after BOS and the tokens before "
        f"it is {_next_tokens_after_prefixes(inputs, ids)[b, step]}."
    ]


def decode_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    ids = got.get("ids")
    if ids is None or ids.ndim != 2:
        return ["greedy_decode should return one row of token ids per sentence: shape (B, T)."]
    hints = []
    if "encode_at_most_once" in got and not got["encode_at_most_once"]:
        hints.append(
            "model.encode ran more than once: encode the source once, before the loop "
            "(the memory does not change while the target grows)."
        )
    if "smallest_decode_batch" in got and int(got["smallest_decode_batch"]) < len(inputs["src"]):
        hints.append(
            "Decode the whole batch at every step (one call for all sentences), never one "
            "sentence at a time: finished sentences are padded with EOS."
        )
    want = expected["ids"].astype(np.int64)
    if len(ids) != len(want) or np.array_equal(ids, want):
        return hints  # another output is wrong (or the batch is): the checks above say which
    if not np.array_equal(ids, np.round(ids)):
        return [*hints, "The ids are not whole numbers: return the argmax (token ids), not logits."]
    ids = ids.astype(np.int64)  # reported as float64, like every tensor
    if ids.size == 0:
        return [*hints, "greedy_decode returned no tokens: it should take at least one step (max_len >= 1)."]
    vocab = len(inputs["W_next"])
    if ids.min() < 0 or ids.max() >= vocab:
        return [
            *hints,
            f"Some ids are outside the vocabulary 0-{vocab - 1}: return the generated "
            "target tokens (argmax over the vocabulary), not the source.",
        ]
    named = [note for note, explains in decode_models(inputs, want) if explains(ids)]
    return hints + (named or decode_where_wrong(inputs, ids, want))


CASES = [
    Case(
        name="positional_encoding",
        make_inputs=make_pe_inputs,
        call=call_pe,
        describe=describe_pe,
        hints=pe_hints,
        atol=PE_ATOL,
        rtol=PE_RTOL,
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
        labels={
            "encode_at_most_once": "whether model.encode was called at most once (1 = yes)",
            "smallest_decode_batch": "the smallest batch model.decode was given (the whole "
            "batch, every step)",
        },
    ),
]
# the NumPy exercises of this chapter keep the course's NumPy conventions (float64 results,
# inputs left unchanged), decided by the judge as in chapters 1 to 3
NUMPY_EXERCISES = ("positional_encoding", "positional_encoding__properties")
CASES = [numpy_case(c) if c.name in NUMPY_EXERCISES else c for c in CASES]
