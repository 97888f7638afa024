"""The cases of online_softmax_attention (NumPy): block sizes, masks, large scores, memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from attention_learner.bug_models import index_ranges, wrong_entries
from attention_learner.inputs import attention_mask, describe_mask, normal
from attention_learner.spec import Arrays


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
    hints: list[str] = []
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
