"""Chapter 7 cases: online_softmax_attention (NumPy), KVCache and CachedSelfAttention (PyTorch).

- ``online_softmax_attention(Q, K, V, block_size, mask=None) -> out`` runs on block sizes that
  do and do not divide n_k, 1 and >= n_k, masks with a fully masked row, scores of order
  +-1000 and batch axes.
- ``KVCache`` is asked for what ``append`` returns after every step, ``len(cache)``, and
  its ``k`` and ``v`` at the end.
- ``CachedSelfAttention`` is fed a sequence in chunks (a prompt, then one token at a time);
  its outputs per chunk, the cache's length after each chunk and the cached keys and values
  are returned raw, for comparison with the full causal pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, reproduces, wrong_along, wrong_entries
from attention_learner.conventions import numpy_case
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays, Case, unpack
from attention_learner.torch_cases import build_module, mha_state, tensor

# ---------------------------------------------------------------- online softmax


def make_online_inputs(
    rng: np.random.Generator,
    n_q: int = 3,
    n_k: int = 7,
    d_k: int = 5,
    d_v: int = 2,
    block_size: int = 3,
    batch: Sequence[int] = (),
    mask: str | None = None,
    logit_scale: float = 1.0,
    extreme: str | None = None,
) -> dict[str, Any]:
    """Q, K, V from independent draws; ``logit_scale`` multiplies Q, so that the scores have
    standard deviation ``logit_scale`` (1000 gives scores of order +-1000).

    ``extreme="hidden_after_negative"``: every score is about -logit_scale instead (Q's first
    feature is -logit_scale sqrt(d_k) and K's is 1; the other features add scores of order 1),
    key 0 is visible to every query and the second block of keys to none. Whatever the draw,
    a rescale taken for that block as exp(0 - m) with m about -1000 overflows to inf, and
    inf * 0 is NaN in an implementation that does not guard a block with no visible key."""
    batch = tuple(batch)
    Q = normal(rng, *batch, n_q, d_k, scale=logit_scale)  # (*B, n_q, d_k)
    K = normal(rng, *batch, n_k, d_k)  # (*B, n_k, d_k)
    V = normal(rng, *batch, n_k, d_v)  # (*B, n_k, d_v)
    mask_array = attention_mask(rng, mask, batch, n_q, n_k)  # bool or None
    if extreme == "hidden_after_negative":
        if n_k <= block_size:
            raise ValueError("extreme='hidden_after_negative' needs a second block of keys")
        Q = Q / logit_scale
        Q[..., 0] = -logit_scale * np.sqrt(d_k)  # score = -logit_scale + (the other features) / sqrt(d_k)
        K[..., 0] = 1.0
        shape = (*batch, n_q, n_k)
        visible = (
            np.ones(shape, dtype=bool) if mask_array is None else np.broadcast_to(mask_array, shape).copy()
        )
        visible[..., 0] = True
        visible[..., block_size : 2 * block_size] = False
        mask_array = visible  # (*B, n_q, n_k)
    elif extreme is not None:
        raise ValueError(f"unknown extreme kind {extreme!r}")
    return {"Q": Q, "K": K, "V": V, "mask": mask_array, "block_size": block_size}


def describe_online(params: dict[str, Any]) -> str:
    n_k, block = params["n_k"], params["block_size"]
    blocks = f"{-(-n_k // block)} block(s)" + (f", the last of {n_k % block}" if n_k % block else "")
    text = (
        f"batch {tuple(params['batch'])}, n_q={params['n_q']}, n_k={n_k}, "
        f"d_k={params['d_k']}, d_v={params['d_v']}, block_size={block} ({blocks}), "
        f"{describe_mask(params['mask'])}"
    )
    if params.get("extreme") == "hidden_after_negative":
        return text + (
            f", every score about -{params['logit_scale']:g} and the second block of "
            "keys hidden from every query"
        )
    if params["logit_scale"] != 1.0:
        text += f", scores of order +-{params['logit_scale']:g}"
    return text


#: what the memory case's test cell may allocate on top of what the job had when it started;
#: the grader's kernel limit (an address-space limit lowered before that cell) enforces it
MEMORY_CASE_BUDGET = 256 * 2**20


def make_memory_inputs(
    rng: np.random.Generator,
    n_q: int = 1024,
    n_k: int = 65536,
    distinct: int = 61,
    block_size: int = 2048,
) -> dict[str, Any]:
    """A case whose (n_q, n_k) float64 score matrix (512 MiB by default) is larger than
    :data:`MEMORY_CASE_BUDGET`, while blocks of (n_q, block_size) fit easily.

    The keys and values are ``distinct`` random rows, each repeated (about equally often) and
    shuffled along the key axis, so that the exact answer is cheap to compute for whoever
    judges: attention over the distinct rows, each weighted by how often it occurs.
    """
    Q = normal(rng, n_q, 2)  # (n_q, 2)
    K_rows, V_rows = normal(rng, distinct, 2), normal(rng, distinct, 3)  # (m, 2), (m, 3)
    which = rng.permutation(np.arange(n_k) % distinct)  # (n_k,) the row each key repeats
    return {
        "Q": Q,
        "K": K_rows[which],
        "V": V_rows[which],
        "mask": None,
        "block_size": block_size,
        "K_rows": K_rows,
        "V_rows": V_rows,
        "counts": np.bincount(which, minlength=distinct),
    }


def describe_memory(params: dict[str, Any]) -> str:
    full = params["n_q"] * params["n_k"] * 8
    return (
        f"{params['n_q']} queries and {params['n_k']} keys in blocks of {params['block_size']}: "
        f"the whole (n_q, n_k) score matrix would take {full / 2**20:.0f} MiB, more than the "
        f"{MEMORY_CASE_BUDGET // 2**20} MiB this test may allocate when graded"
    )


def call_online(fn: Any, inputs: dict[str, Any]) -> Arrays:
    out = fn(inputs["Q"], inputs["K"], inputs["V"], inputs["block_size"], inputs["mask"])
    if isinstance(out, tuple):
        raise TypeError(
            "online_softmax_attention should return the output array alone, not a tuple "
            "(there is no weights matrix to return: it is never built)"
        )
    return {"output": out}


#: the comparison's tolerances (the cases')
ONLINE_ATOL, ONLINE_RTOL = 1e-9, 1e-7
#: above this many scores (n_q * n_k) the hints model no bug: the memory case is judged alone
MODELLED_SCORES = 2**20


def _max_grows_after_first_block(inputs: dict[str, Any]) -> np.ndarray:
    """Bool (..., n_q): the queries whose largest visible score comes after the first block of
    keys (where an online softmax's running max grows); s = Q K^T / sqrt(d_k)."""
    Q, K, block, mask = (inputs[n] for n in ("Q", "K", "block_size", "mask"))
    s = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])  # (..., n_q, n_k)
    if mask is not None:
        s = np.where(np.broadcast_to(mask, s.shape), s, -np.inf)
    first, every = s[..., :block].max(axis=-1), s.max(axis=-1)  # (..., n_q)
    return np.where(np.isfinite(every), every, 0.0) > np.where(np.isfinite(first), first, 0.0)


def online_where_wrong(inputs: dict[str, Any], out: np.ndarray, expected: np.ndarray) -> list[str]:
    """Which query rows (and batch items) are wrong, and whether they are exactly the rows whose
    largest score comes after the first block (where the running max grows)."""
    wrong = wrong_entries(out, expected, ONLINE_ATOL, ONLINE_RTOL).any(axis=-1)  # (..., n_q)
    if not wrong.any():
        return []
    rows = np.flatnonzero(wrong.reshape(-1, wrong.shape[-1]).any(axis=0))
    text = f"The wrong outputs are in query rows {index_ranges(rows)} (of 0-{wrong.shape[-1] - 1})"
    if wrong.ndim > 1:
        items = np.argwhere(wrong.reshape(-1, wrong.shape[-1]).any(axis=-1)).ravel()
        text += f", batch items {index_ranges(items)} (flattened, of 0-{wrong.size // wrong.shape[-1] - 1})"
    grows = np.broadcast_to(_max_grows_after_first_block(inputs), wrong.shape)
    if inputs["K"].shape[-2] > inputs["block_size"] and np.array_equal(wrong, grows):
        text += (
            "; they are exactly the queries whose largest score comes after the first block, "
            "where the running max grows: look at the rescaling by exp(m_old - m_new)"
        )
    return [text + "."]


def _behind_a_hidden_block(inputs: dict[str, Any], rows: tuple[int, ...]) -> np.ndarray:
    """Bool (..., n_q) of the shape ``rows``: the queries with a block of keys they see none
    of, after an earlier block where they saw one (False everywhere without a mask)."""
    mask, block = inputs.get("mask"), inputs["block_size"]
    if mask is None:
        return np.zeros(rows, dtype=bool)
    n_k = inputs["K"].shape[-2]
    visible = np.broadcast_to(mask, (*rows, n_k))  # (..., n_q, n_k)
    seen = np.zeros(rows, dtype=bool)
    behind = np.zeros(rows, dtype=bool)
    for start in range(0, n_k, block):
        here = visible[..., start : start + block].any(axis=-1)  # (..., n_q)
        behind |= seen & ~here
        seen |= here
    return behind


def online_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    out = got.get("output")
    hints = []
    if out is None or out.shape != expected["output"].shape:
        return hints
    broken = ~np.isfinite(out).all(axis=-1)  # (..., n_q)
    if broken.any() and not (broken & ~_behind_a_hidden_block(inputs, out.shape[:-1])).any():
        hints.append(
            "Every NaN row is a query that sees no key in some block after seeing one "
            "earlier: such a block adds nothing, but a weight for it like exp(shift - m) with its "
            "shift set to 0 overflows when the scores so far are about -1000, and inf * 0 = NaN. "
            "Give a block with no visible key the weight 0 (or skip it)."
        )
    elif broken.any():
        hints.append(
            "Some outputs are NaN or infinite. exp overflows above about 709: subtract the "
            "running max before exponentiating, and give a row that has seen no visible key "
            "yet (running max still -inf) a shift of 0 rather than computing -inf - (-inf)."
        )
    mask = inputs.get("mask")
    if mask is not None:
        empty = ~np.broadcast_to(mask, (*out.shape[:-1], mask.shape[-1])).any(axis=-1)  # (..., n_q)
        if empty.any() and np.abs(np.nan_to_num(out[empty], nan=1.0)).max() > 0:
            hints.append("A query whose keys are all masked must get an all-zero output.")
    if out.shape[-2] * inputs["K"].shape[-2] > MODELLED_SCORES:
        return hints
    return hints or online_where_wrong(inputs, out, expected["output"])


# ---------------------------------------------------------------- the KV cache

CACHE_CONTRACT = (
    "KVCache() starts empty (k and v None, len 0); append(k_new, v_new) adds the new "
    "positions after the cached ones along axis -2 and returns (k, v)"
)


def make_cache_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    num_heads: int = 3,
    d_k: int = 4,
    d_v: int = 5,
    chunks: Sequence[int] = (3, 1, 2),
) -> dict[str, Any]:
    """Keys and values of a whole sequence, appended chunk by chunk."""
    n = sum(chunks)
    return {
        "k": normal(rng, batch, num_heads, n, d_k),  # (B, h, n, d_k)
        "v": normal(rng, batch, num_heads, n, d_v),  # (B, h, n, d_v)
        "chunks": tuple(chunks),
    }


def describe_cache(params: dict[str, Any]) -> str:
    return (
        f"batch {params['batch']}, num_heads={params['num_heads']}, "
        f"d_k={params['d_k']}, d_v={params['d_v']}, appending chunks of "
        f"{list(params['chunks'])} positions"
    )


def chunk_bounds(chunks: Sequence[int]) -> list[tuple[int, int]]:
    ends = np.cumsum(chunks)
    return [(int(e - c), int(e)) for c, e in zip(chunks, ends, strict=True)]


def _cache_length(cache: Any) -> int:
    try:
        return len(cache)
    except TypeError as exc:
        raise TypeError("KVCache should define __len__: the number of cached positions") from exc


def call_cache(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """Append the chunks one by one; return what each append returned, len(cache) after each
    step, and the cache's k and v at the end."""
    cache = cls()
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    outputs: dict[str, Any] = {"length_before": np.array([_cache_length(cache)], dtype=np.float64)}
    lengths = []
    for step, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
        try:
            result = cache.append(k[:, :, a:b].clone(), v[:, :, a:b].clone())
        except RuntimeError as exc:
            if step == 0 or "Sizes of tensors must match" not in str(exc):
                raise
            raise RuntimeError(
                f"{exc}. Appending a chunk of {b - a} position(s) to {a} cached ones failed: the "
                "cache seems to append along an axis other than the sequence axis (-2)"
            ) from exc
        outputs[f"k_step{step}"], outputs[f"v_step{step}"] = unpack(result, ("k", "v"), "KVCache.append")
        lengths.append(_cache_length(cache))
    outputs["lengths"] = np.array(lengths, dtype=np.float64)
    for name in ("k", "v"):
        if not hasattr(cache, name):
            raise AttributeError(f"KVCache has no attribute {name!r}: {CACHE_CONTRACT}")
        outputs[f"cache_{name}"] = getattr(cache, name)
    return outputs


def cache_where_wrong(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    """The first append whose result is wrong, and along which positions."""
    for s, (a, b) in enumerate(chunk_bounds(inputs["chunks"])):
        for name in ("k", "v"):
            want, mine = expected[f"{name}_step{s}"], got.get(f"{name}_step{s}")
            if mine is None or reproduces(want, mine, 0.0, 0.0):
                continue
            where = (
                f"it has shape {mine.shape}, expected {want.shape}"
                if mine.shape != want.shape
                else f"positions {index_ranges(wrong_along(wrong_entries(mine, want, 0.0, 0.0), -2))} of "
                f"0-{b - 1} are wrong"
            )
            return [
                f"The first wrong result of append is at step {s} (adding positions "
                f"{index_ranges(range(a, b))} to {a} cached ones), in its {name}: {where}."
            ]
    return []


def cache_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    if got.get("length_before") is not None and np.any(got["length_before"] != 0):
        hints.append("A new KVCache should be empty: len(cache) == 0 before the first append.")
    lengths = got.get("lengths")
    if (
        lengths is not None
        and lengths.shape == expected["lengths"].shape
        and not np.array_equal(lengths, expected["lengths"])
    ):
        hints.append(
            f"len(cache) after each append was {lengths.astype(int).tolist()}, expected "
            f"{expected['lengths'].astype(int).tolist()} (the number of cached positions)."
        )
    # the classic bugs are named by the judge from their outputs (grader.exercises.ch07): a
    # model of a cache held here would be a cache
    return hints + cache_where_wrong(inputs, expected, got)


# ---------------------------------------------------------------- cached self-attention

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
            lengths.append(_cache_length(module.cache))
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


CASES = [
    Case(
        name="online_softmax_attention",
        make_inputs=make_online_inputs,
        call=call_online,
        describe=describe_online,
        hints=online_hints,
        atol=ONLINE_ATOL,
        rtol=ONLINE_RTOL,
    ),
    Case(
        name="online_softmax_attention__memory",
        make_inputs=make_memory_inputs,
        call=call_online,
        describe=describe_memory,
        hints=online_hints,
        atol=ONLINE_ATOL,
        rtol=ONLINE_RTOL,
    ),
    Case(
        name="KVCache",
        make_inputs=make_cache_inputs,
        call=call_cache,
        describe=describe_cache,
        hints=cache_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="CachedSelfAttention",
        make_inputs=make_cached_inputs,
        call=call_cached,
        describe=describe_cached,
        hints=cached_hints,
        atol=CACHED_ATOL,
        rtol=CACHED_RTOL,
    ),
    Case(
        name="CachedSelfAttention__torch",
        make_inputs=make_cached_inputs,
        call=call_cached,
        describe=lambda p: (
            "against nn.MultiheadAttention's full causal pass with the same weights, " + describe_cached(p)
        ),
        hints=cached_hints,
        atol=CACHED_ATOL,
        rtol=CACHED_RTOL,
    ),
]
# the NumPy exercises of this chapter keep the course's NumPy conventions (float64 results,
# inputs left unchanged), decided by the judge as in chapters 1 to 3
NUMPY_EXERCISES = ("online_softmax_attention", "online_softmax_attention__memory")
CASES = [numpy_case(c) if c.name in NUMPY_EXERCISES else c for c in CASES]
