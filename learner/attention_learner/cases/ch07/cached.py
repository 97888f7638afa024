"""The case of CachedSelfAttention: a sequence fed in chunks against the full causal pass."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, reproduces, wrong_along, wrong_entries
from attention_learner.cases.ch07.cache import cache_length, chunk_bounds
from attention_learner.inputs import normal
from attention_learner.spec import Arrays
from attention_learner.torch_cases import build_module, mha_state, tensor

CACHED_CONTRACT = (
    "W_q, W_k, W_v, W_o (nn.Linear(d_model, d_model), as in chapter 4's MultiHeadAttention) "
    "and cache (a KVCache)"
)


def make_cached_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    num_heads: int = 3,
    d_head: int = 4,
    chunks: Sequence[int] = (3, 1, 1),
) -> dict[str, Any]:
    """A sequence x (B, n, d_model) decoded in ``chunks`` (a prompt, then new tokens) and
    explicit weights for the layer."""
    d_model = num_heads * d_head
    return {
        "x": normal(rng, batch, sum(chunks), d_model),  # (B, n, d_model)
        "chunks": tuple(chunks),
        "state": mha_state(rng, d_model),
        "args": (d_model, num_heads),
    }


def describe_cached(params: dict[str, Any]) -> str:
    h, d_head = params["num_heads"], params["d_head"]
    chunks = list(params["chunks"])
    return (
        f"batch {params['batch']}, num_heads={h}, d_head={d_head} (d_model={h * d_head}), "
        f"a sequence of {sum(chunks)} tokens fed in chunks of {chunks}"
    )


def call_cached(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Feed the chunks in order; return each chunk's output, the cache length after each
    chunk, and the cached keys and values at the end."""
    module = build_module(cls, inputs["args"], inputs["state"], CACHED_CONTRACT)
    if not hasattr(module, "cache"):
        raise AttributeError(f"CachedSelfAttention has no attribute 'cache'. It holds {CACHED_CONTRACT}.")
    x = tensor(inputs["x"])  # (B, n, d_model)
    outputs: dict[str, Any] = {}
    lengths = []
    with torch.no_grad():
        for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
            out = module(x[:, a:b])
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"CachedSelfAttention.forward should return one tensor, got {type(out)}")
            outputs[f"out_step{step}"] = out  # (B, b - a, d_model)
            lengths.append(cache_length(module.cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    for name in ("k", "v"):
        cached = getattr(module.cache, name, None)
        if cached is not None:  # an empty cache is reported by cached_hints
            outputs[f"cache_{name}"] = cached
    return outputs


CACHED_ATOL, CACHED_RTOL = 1e-9, 1e-7


def _steps_right(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[bool]:
    """For each chunk, whether its output is right at the case's tolerance."""
    return [
        reproduces(expected[f"out_step{s}"], got.get(f"out_step{s}"), CACHED_ATOL, CACHED_RTOL)
        for s in range(len(inputs["chunks"]))
    ]


def _heads_before_w_o(inputs: dict[str, Any], out: np.ndarray) -> np.ndarray:
    """A chunk's output (B, t, d_model) taken back through W_o: the merged heads m with
    m W_o^T + b_o = out, solved for m with the case's (invertible) W_o, as (B, t, h, d_head)."""
    state, h = inputs["state"], inputs["args"][1]
    W, b = np.asarray(state["W_o.weight"], dtype=np.float64), np.asarray(state["W_o.bias"], dtype=np.float64)
    B, t, d_model = out.shape
    merged = np.linalg.solve(W, (out - b).reshape(-1, d_model).T).T  # (B t, d_model)
    return merged.reshape(B, t, h, d_model // h)


def wrong_heads(inputs: dict[str, Any], mine: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The heads whose output, before W_o, differs from the right one's: a bug confined to some
    heads (a loop over heads that skips one, a head's own slice of columns) shows here."""
    with np.errstate(all="ignore"):
        ours, right = _heads_before_w_o(inputs, mine), _heads_before_w_o(inputs, want)
    scale = max(1.0, float(np.abs(right).max()))
    return wrong_along(wrong_entries(ours, right, 1e-6 * scale, 1e-6), 2)


def _heads_sentence(inputs: dict[str, Any], mine: np.ndarray, want: np.ndarray) -> str | None:
    """Which heads of a wrong chunk are wrong, undoing W_o (None if it cannot be told)."""
    if not np.isfinite(mine).all():
        return None
    wrong, h = wrong_heads(inputs, mine, want), inputs["args"][1]
    if len(wrong) == 0:
        return None
    if len(wrong) == h:
        return "Taken back through W_o, every head of that chunk is wrong (not one head's slice)."
    right = [i for i in range(h) if i not in set(wrong.tolist())]
    return (
        f"Taken back through W_o, head{'s' if len(wrong) > 1 else ''} {index_ranges(wrong)} of that "
        f"chunk {'are' if len(wrong) > 1 else 'is'} wrong and head{'s' if len(right) > 1 else ''} "
        f"{index_ranges(right)} right: look at what the wrong heads do differently (head i is "
        "columns i * d_head to (i + 1) * d_head - 1 of q, k and v)."
    )


def cached_where_wrong(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    """The first wrong chunk, which of its tokens and which of its heads are wrong, when no
    model explains it."""
    right = _steps_right(inputs, expected, got)
    if all(right):
        return []
    s = right.index(False)
    a, b = chunk_bounds(inputs["chunks"])[s]
    mine, want = got.get(f"out_step{s}"), expected[f"out_step{s}"]
    text = f"The first wrong chunk is chunk {s} (positions {index_ranges(range(a, b))})"
    if mine is not None and mine.shape == want.shape:
        wrong = wrong_along(wrong_entries(mine, want, CACHED_ATOL, CACHED_RTOL), 1) + a
        text += f", wrong at positions {index_ranges(wrong)}"
    lines = [text + "."]
    if mine is not None and mine.shape == want.shape:
        lines += [sentence for sentence in [_heads_sentence(inputs, mine, want)] if sentence]
    if s > 0:
        lines.append(
            "The chunks before it are right, so the problem is in how later chunks use the "
            "cache: their queries must attend to every cached position, in order, and to the "
            "new tokens up to their own."
        )
    return lines


def cached_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    if "cache_k" in expected and "cache_k" not in got:
        hints.append(
            "self.cache is still empty after decoding: forward must append the new keys and "
            "values to self.cache and attend to everything it returns."
        )
    lengths, want = got.get("lengths"), expected.get("lengths")
    if lengths is not None and want is not None and lengths.shape == want.shape and (lengths != want).any():
        hints.append(
            f"len(self.cache) after each chunk was {lengths.astype(int).tolist()}, expected "
            f"{want.astype(int).tolist()}."
        )
        if np.array_equal(lengths, 2 * want):
            hints.append(
                "Each chunk was appended to the cache twice: call self.cache.append once per "
                "forward and attend to the keys and values it returns."
            )
    # the classic bugs are named by the judge from their outputs (grader.exercises.ch07): a
    # model of the layer's outputs held here would be the layer
    return hints or cached_where_wrong(inputs, expected, got)
