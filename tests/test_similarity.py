"""``python -m grader similarity``: planted copies are found, independent work is not.

The class of every test is built here from chapter 3's real source notebook: each student's
notebook is the released notebook (every solution cell a stub) with the cell
``scaled_dot_product_attention`` replaced by that student's code. The code is of three kinds,
all written for these tests:

- ``COURSE``: the course's own solution of the exercise (what a learner who copies from
  the open repository hands in), the original of every disguise;
- ``DISGUISES``: that solution under one disguise each (renamed, comments and prints,
  literals, reformatted, a helper extracted, restructured: a helper extracted above its
  caller, two statements merged, everything at once), ``INLINED``: an independent
  solution's helper inlined into it, and ``MHA_REORDERED``: chapter 4's MultiHeadAttention
  with its independent statements and methods reordered;
- ``INDEPENDENT``: ten correct solutions written independently of each other and of the
  course's (einsum or matmul, loops over queries or batch items, ``-inf``, NaN, masked
  arrays, ``where=`` reductions, a log-sum-exp, helpers), checked against the course's
  solution on random, batched, masked and extreme inputs.
"""

from __future__ import annotations

import copy
import csv
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

import nbformat
import numpy as np
import pytest

from grader.paths import CHAPTERS, ROOT, SOLUTIONS
from grader.similarity import DEFAULT_THRESHOLD
from grader.similarity.exercises import is_solution_cell, nbgrader_metadata, released
from grader.similarity.run import ALL_EXERCISES, compare, similarity_report
from grader.similarity.scoring import COMMON_FLOOR, MAX_COMMON_FRACTION, common_answer_limit, score_pairs
from tests.system_packages import BROWSER_MISSING

CH3 = "03_scaled_dot_product"
CH4 = "04_multi_head"
SDPA = "scaled_dot_product_attention"
MHA = "MultiHeadAttention"

COURSE = '''\
def scaled_dot_product_attention(Q, K, V, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V with an optional boolean mask (True = may attend).

    Q (..., n_q, d_k), K (..., n_k, d_k), V (..., n_k, d_v), mask broadcastable to
    (..., n_q, n_k). Returns (output (..., n_q, d_v), weights (..., n_q, n_k)).
    """
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)  # (..., n_q, n_k)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)  # fully masked rows
    e = np.exp(scores - row_max)  # masked entries: exp(-inf) = 0
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return weights @ V, weights  # (..., n_q, d_v), (..., n_q, n_k)
'''

DISGUISES = {
    "renamed": '''\
def scaled_dot_product_attention(queries, keys, values, allowed=None):
    """Attention."""
    width = queries.shape[-1]
    logits = queries @ np.swapaxes(keys, -1, -2) / math.sqrt(width)
    if allowed is not None:
        allowed = np.broadcast_to(allowed, logits.shape)
        logits = np.where(allowed, logits, -np.inf)
    top = logits.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    ex = np.exp(logits - top)
    norm = ex.sum(axis=-1, keepdims=True)
    attn = np.divide(ex, norm, out=np.zeros_like(ex), where=norm > 0)
    return attn @ values, attn
''',
    "comments_and_prints": """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    # my own attention implementation

    d_k = Q.shape[-1]   # key dimension
    print("d_k is", d_k)

    # raw scores, scaled
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    print(scores.shape)
    if mask is not None:
        # broadcast first
        mask = np.broadcast_to(mask, scores.shape)

        scores = np.where(mask, scores, -np.inf)
    # subtract the max for stability
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)

    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)
    print("total", total)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 0)

    # done!
    return weights @ V, weights
""",
    "literals": '''\
def scaled_dot_product_attention(Q, K, V, mask=None):
    """Scaled dot-product attention (my version)."""
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -2, -1) / math.sqrt(d_k)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0)
    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)
    weights = np.divide(e, total, out=np.zeros_like(e), where=total > 1e-300)
    return weights @ V, weights
''',
    "reformatted": """\
def scaled_dot_product_attention(Q, K, V,
                                 mask = None):
    d_k = Q.shape[ -1 ]
    scores = (Q @ np.swapaxes(K, -1, -2)) / (math.sqrt(d_k))
    if (mask is not None):
        mask = np.broadcast_to(
            mask,
            scores.shape,
        )
        scores = np.where(mask, scores, - np.inf)
    row_max = scores.max(keepdims = True, axis = -1)
    row_max = np.where(np.isfinite(row_max),
                       row_max,
                       0.0)
    e = np.exp(scores - row_max); total = e.sum(keepdims=True, axis=-1)
    weights = np.divide(e, total, where=(total > 0), out=np.zeros_like(e))
    return (weights @ V, weights)
""",
    "helper_extracted": """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    if mask is not None:
        mask = np.broadcast_to(mask, scores.shape)
        scores = np.where(mask, scores, -np.inf)
    weights = _row_softmax(scores)
    return weights @ V, weights


def _row_softmax(scores):
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
""",
    "restructured": """\
def _normalise(e):
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0)


def scaled_dot_product_attention(Q, K, V, mask=None):
    d_k = Q.shape[-1]
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(d_k)
    if mask is not None:
        scores = np.where(np.broadcast_to(mask, scores.shape), scores, -np.inf)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    weights = _normalise(np.exp(scores - row_max))
    return weights @ V, weights
""",
    "everything": '''\
import numpy as xp
from math import sqrt as root


def scaled_dot_product_attention(q_mat, k_mat, v_mat, keep=None):
    # compute attention
    dim = q_mat.shape[-1]
    print('dim', dim)
    sims = (q_mat @ xp.swapaxes(k_mat, -2, -1)) / root(dim)

    if keep is not None:
        keep = xp.broadcast_to(keep, sims.shape)
        sims = xp.where(keep, sims, -xp.inf)
    probs = softmax_rows(sims)
    return (probs @ v_mat,
            probs)


def softmax_rows(sims):
    """row softmax that survives fully masked rows"""
    hi = sims.max(keepdims=True, axis=-1)
    hi = xp.where(xp.isfinite(hi), hi, 0)
    ex = xp.exp(sims - hi)

    z = ex.sum(keepdims=True, axis=-1)
    return xp.divide(ex, z, where=z > 0, out=xp.zeros_like(ex))
''',
}

INDEPENDENT = [
    # 1: einsum, -inf, the maximum of a fully masked row replaced in place
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    scale = 1.0 / np.sqrt(K.shape[-1])
    logits = np.einsum("...qd,...kd->...qk", Q, K) * scale
    if mask is not None:
        logits = np.where(mask, logits, -np.inf)
    peak = np.max(logits, axis=-1, keepdims=True)
    peak[~np.isfinite(peak)] = 0.0
    expd = np.exp(logits - peak)
    denom = np.sum(expd, axis=-1, keepdims=True)
    probs = expd / np.where(denom == 0, 1.0, denom)
    return np.einsum("...qk,...kv->...qv", probs, V), probs
""",
    # 2: a loop over batch items and queries, softmax over the keys each query may see
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    n_q, n_k = Q.shape[-2], K.shape[-2]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2])
    if mask is None:
        allowed = np.ones(batch + (n_q, n_k), dtype=bool)
    else:
        allowed = np.broadcast_to(mask, batch + (n_q, n_k))
    qs = np.broadcast_to(Q, batch + Q.shape[-2:]).reshape(-1, n_q, Q.shape[-1])
    ks = np.broadcast_to(K, batch + K.shape[-2:]).reshape(-1, n_k, K.shape[-1])
    vs = np.broadcast_to(V, batch + V.shape[-2:]).reshape(-1, n_k, V.shape[-1])
    allowed = allowed.reshape(-1, n_q, n_k)
    out = np.zeros((len(qs), n_q, V.shape[-1]))
    att = np.zeros((len(qs), n_q, n_k))
    for b in range(len(qs)):
        for i in range(n_q):
            keep = allowed[b, i]
            if not keep.any():
                continue
            s = ks[b][keep] @ qs[b, i] / np.sqrt(Q.shape[-1])
            s = np.exp(s - s.max())
            att[b, i, keep] = s / s.sum()
            out[b, i] = att[b, i] @ vs[b]
    return out.reshape(batch + (n_q, V.shape[-1])), att.reshape(batch + (n_q, n_k))
""",
    # 3: log-sum-exp, rows without a key zeroed at the end
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    d = Q.shape[-1]
    s = np.matmul(Q, np.swapaxes(K, -2, -1)) / d ** 0.5
    if mask is None:
        mask = np.ones(s.shape, dtype=bool)
    mask = np.broadcast_to(mask, s.shape)
    s = np.where(mask, s, -np.inf)
    any_key = mask.any(axis=-1, keepdims=True)
    m = np.where(any_key, s.max(axis=-1, keepdims=True), 0.0)
    lse = m + np.log(np.sum(np.exp(s - m), axis=-1, keepdims=True))
    w = np.where(any_key, np.exp(s - lse), 0.0)
    return w @ V, w
""",
    # 4: NumPy's masked arrays
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    raw = (Q @ K.swapaxes(-1, -2)) * (Q.shape[-1] ** -0.5)
    hidden = np.zeros(raw.shape, bool) if mask is None else ~np.broadcast_to(mask, raw.shape)
    m = np.ma.masked_array(raw, mask=hidden)
    top = m.max(axis=-1, keepdims=True)
    ex = np.ma.exp(m - top)
    p = (ex / ex.sum(axis=-1, keepdims=True)).filled(0.0)
    return p @ V, p
""",
    # 5: a softmax helper taking the mask, transpose by an explicit axis order
    """\
def _stable_softmax(x, allowed):
    x = np.where(allowed, x, -np.inf)
    hi = np.max(x, axis=-1, keepdims=True)
    hi = np.nan_to_num(hi, neginf=0.0)
    num = np.exp(x - hi) * allowed
    den = num.sum(axis=-1, keepdims=True)
    den[den == 0] = 1.0
    return num / den


def scaled_dot_product_attention(Q, K, V, mask=None):
    logits = Q @ np.transpose(K, (*range(K.ndim - 2), K.ndim - 1, K.ndim - 2))
    logits = logits / math.sqrt(K.shape[-1])
    allowed = np.ones_like(logits, dtype=bool) if mask is None else np.broadcast_to(mask, logits.shape)
    weights = _stable_softmax(logits, allowed)
    return np.matmul(weights, V), weights
""",
    # 6: an additive bias, softmax only over rows that have a finite score
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    dk = K.shape[-1]
    scores = np.einsum("...id,...jd->...ij", Q, K) / np.sqrt(dk)
    bias = np.zeros_like(scores)
    if mask is not None:
        bias = np.where(mask, 0.0, -np.inf) + bias
    scores = scores + bias
    out_w = np.zeros_like(scores)
    ok = np.isfinite(scores).any(axis=-1)
    sub = scores[ok]
    sub = np.exp(sub - sub.max(axis=-1, keepdims=True))
    out_w[ok] = sub / sub.sum(axis=-1, keepdims=True)
    return np.einsum("...ij,...jv->...iv", out_w, V), out_w
""",
    # 7: keys by queries, normalised over axis -2, then transposed back
    """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    kq = np.matmul(K, np.swapaxes(Q, -1, -2)) / np.sqrt(Q.shape[-1])
    if mask is not None:
        mask_t = np.swapaxes(np.broadcast_to(mask, kq.shape[:-2] + kq.shape[:-3:-1]), -1, -2)
        kq = np.where(mask_t, kq, -np.inf)
    col_max = kq.max(axis=-2, keepdims=True)
    col_max[np.isneginf(col_max)] = 0
    ek = np.exp(kq - col_max)
    z = ek.sum(axis=-2, keepdims=True)
    w_t = np.divide(ek, z, out=np.zeros_like(ek), where=z != 0)
    attn = np.swapaxes(w_t, -1, -2)
    return attn @ V, attn
""",
    # 8: a 2-D helper called for every batch index, scores one key at a time
    """\
def attention_2d(q, k, v, allowed):
    out = np.zeros((q.shape[0], v.shape[1]))
    w = np.zeros((q.shape[0], k.shape[0]))
    for i, row in enumerate(q):
        idx = np.flatnonzero(allowed[i])
        if idx.size == 0:
            continue
        logits = np.array([row @ k[j] for j in idx]) / math.sqrt(q.shape[1])
        logits -= logits.max()
        p = np.exp(logits)
        p /= p.sum()
        w[i, idx] = p
        out[i] = p @ v[idx]
    return out, w


def scaled_dot_product_attention(Q, K, V, mask=None):
    lead = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2],
                               () if mask is None else np.shape(mask)[:-2])
    n_q, n_k = Q.shape[-2], K.shape[-2]
    outs = np.zeros(lead + (n_q, V.shape[-1]))
    weights = np.zeros(lead + (n_q, n_k))
    for index in np.ndindex(*lead):
        q = np.broadcast_to(Q, lead + Q.shape[-2:])[index]
        k = np.broadcast_to(K, lead + K.shape[-2:])[index]
        v = np.broadcast_to(V, lead + V.shape[-2:])[index]
        if mask is None:
            allowed = np.ones((n_q, n_k), bool)
        else:
            allowed = np.broadcast_to(mask, lead + (n_q, n_k))[index]
        outs[index], weights[index] = attention_2d(q, k, v, allowed)
    return outs, weights
""",
    # 9: masked scores as NaN, nanmax, NaN turned back into zero weights
    """\
import warnings


def scaled_dot_product_attention(Q, K, V, mask=None):
    sims = (Q @ np.moveaxis(K, -1, -2)) / np.sqrt(np.float64(Q.shape[-1]))
    if mask is not None:
        sims = np.where(np.broadcast_to(mask, sims.shape), sims, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        biggest = np.nanmax(sims, axis=-1, keepdims=True)
    shifted = np.nan_to_num(np.exp(sims - biggest), nan=0.0)
    norm = shifted.sum(-1, keepdims=True)
    attn = shifted / np.maximum(norm, np.finfo(float).tiny)
    return np.matmul(attn, V), attn
""",
    # 10: flattened to 3-D, one call per item, where= reductions, stacked back
    """\
def _one(q, k, v, m):
    s = q.dot(k.T) / np.sqrt(k.shape[1])
    top = np.max(s, axis=1, keepdims=True, where=m, initial=-np.inf)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(s - top, where=m, out=np.zeros_like(s))
    total = e.sum(axis=1, keepdims=True)
    w = e / np.where(total > 0, total, 1.0)
    return w @ v, w


def scaled_dot_product_attention(Q, K, V, mask=None):
    batch_shape = Q.shape[:-2]
    n_q, n_k = Q.shape[-2], K.shape[-2]
    q3 = Q.reshape((-1,) + Q.shape[-2:])
    k3 = K.reshape((-1,) + K.shape[-2:])
    v3 = V.reshape((-1,) + V.shape[-2:])
    if mask is None:
        m3 = np.ones((q3.shape[0], n_q, n_k), dtype=bool)
    else:
        m3 = np.broadcast_to(mask, batch_shape + (n_q, n_k)).reshape(-1, n_q, n_k)
    results = [_one(q, k, v, m) for q, k, v, m in zip(q3, k3, v3, m3)]
    out = np.stack([r[0] for r in results]).reshape(batch_shape + (n_q, V.shape[-1]))
    w = np.stack([r[1] for r in results]).reshape(batch_shape + (n_q, n_k))
    return out, w
""",
]

# INDEPENDENT[4] with its helper inlined (and its names changed): a copy of a classmate
INLINED = """\
def scaled_dot_product_attention(Q, K, V, mask=None):
    logits = Q @ np.transpose(K, (*range(K.ndim - 2), K.ndim - 1, K.ndim - 2))
    logits = logits / math.sqrt(K.shape[-1])
    ok = np.ones_like(logits, dtype=bool) if mask is None else np.broadcast_to(mask, logits.shape)
    logits = np.where(ok, logits, -np.inf)
    hi = np.max(logits, axis=-1, keepdims=True)
    hi = np.nan_to_num(hi, neginf=0.0)
    num = np.exp(logits - hi) * ok
    den = num.sum(axis=-1, keepdims=True)
    den[den == 0] = 1.0
    weights = num / den
    return np.matmul(weights, V), weights
"""

# Chapter 4's MultiHeadAttention as the course solves it, then with its independent
# statements reordered (and, in the second copy, renamed as well).
MHA_COURSE = '''\
class MultiHeadAttention(nn.Module):
    """h heads of scaled dot-product attention with projections W_q, W_k, W_v, W_o."""

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
'''

MHA_REORDERED = {
    "reordered": """\
class MultiHeadAttention(nn.Module):
    def forward(self, query, key, value, mask=None):
        v = split_heads(self.W_v(value), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        q = split_heads(self.W_q(query), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights

    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.W_o = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.num_heads = num_heads
""",
    "reordered_and_renamed": """\
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.h = num_heads
        self.value_proj = nn.Linear(d_model, d_model, bias=bias)
        self.key_proj = nn.Linear(d_model, d_model, bias=bias)
        self.query_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        keys = split_heads(self.key_proj(key), self.h)
        values = split_heads(self.value_proj(value), self.h)
        queries = split_heads(self.query_proj(query), self.h)
        context, attn = scaled_dot_product_attention_torch(queries, keys, values, mask)
        return self.out_proj(merge_heads(context)), attn
""",
}

# Two other ways to write it: a fused projection, and explicit weight matrices with einsum.
MHA_INDEPENDENT = [
    """\
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.heads = num_heads
        self.qkv = nn.ModuleList([nn.Linear(d_model, d_model, bias=bias) for _ in range(3)])
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    def forward(self, query, key, value, mask=None):
        parts = [split_heads(layer(x), self.heads) for layer, x in zip(self.qkv, (query, key, value))]
        out, weights = scaled_dot_product_attention_torch(*parts, mask=mask)
        return self.W_o(merge_heads(out)), weights
""",
    """\
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.n_heads = num_heads
        self.d_head = d_model // num_heads
        self.proj = nn.ModuleDict({name: nn.Linear(d_model, d_model, bias=bias) for name in "qkvo"})

    def forward(self, query, key, value, mask=None):
        B, n_q, d_model = query.shape
        def heads(x, name):
            y = self.proj[name](x)
            return y.view(B, -1, self.n_heads, self.d_head).permute(0, 2, 1, 3)
        scores = torch.einsum("bhqd,bhkd->bhqk", heads(query, "q"), heads(key, "k"))
        scores = scores / math.sqrt(self.d_head)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
        out = torch.einsum("bhqk,bhkd->bhqd", weights, heads(value, "v"))
        return self.proj["o"](out.permute(0, 2, 1, 3).reshape(B, n_q, d_model)), weights
""",
]


# --- building a class ------------------------------------------------------------------


@cache
def _released(assignment: str) -> nbformat.NotebookNode:
    """The learner's notebook as released (nbgrader's stubs in every solution cell)."""
    return nbformat.read(CHAPTERS / assignment / f"{assignment}.ipynb", as_version=4)


def _notebook(assignment: str, grade_id: str, code: str | None) -> nbformat.NotebookNode:
    nb = copy.deepcopy(_released(assignment))
    if code is not None:
        (cell,) = [c for c in nb.cells if nbgrader_metadata(c).get("grade_id") == grade_id]
        cell.source = code
    return nb


def write_class(
    submitted: Path, students: dict[str, str | None], assignment: str = CH3, grade_id: str = SDPA
) -> Path:
    """SUBMITTED/<student>/<assignment>/<assignment>.ipynb, each with its code in ``grade_id``
    (None: the released stub, untouched)."""
    for student, code in students.items():
        folder = submitted / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(_notebook(assignment, grade_id, code), folder / f"{assignment}.ipynb")
    return submitted


def independent_class() -> dict[str, str]:
    students = {f"indep{n:02d}": code for n, code in enumerate(INDEPENDENT, start=1)}
    students["course"] = COURSE
    return students


def scores(report, grade_id: str = SDPA) -> dict[tuple[str, str], float]:
    (result,) = [r for r in report.results if r.exercise.grade_id == grade_id]
    return {(m.a.student, m.b.student): m.pair.score for m in result.matches}


def _result(report, grade_id: str = SDPA):
    (result,) = [r for r in report.results if r.exercise.grade_id == grade_id]
    return result


# --- the code of the tests is what it claims to be -------------------------------------


def _load(code: str):
    namespace = {"np": np, "math": math}
    exec(compile(code, "<solution>", "exec"), namespace)  # our own test code, not a submission
    return namespace[SDPA]


def _cases():
    rng = np.random.default_rng(3)
    for batch in [(), (1,), (2,), (2, 3)]:
        for n_q, n_k, d_k, d_v in [(3, 4, 5, 2), (1, 1, 3, 2), (4, 4, 2, 3)]:
            for masking in [None, "random", "row fully masked", "causal", "padding"]:
                for scale in [1.0, 1e3, 1e-6]:
                    Q = rng.normal(size=batch + (n_q, d_k)) * scale
                    K = rng.normal(size=batch + (n_k, d_k))
                    V = rng.normal(size=batch + (n_k, d_v))
                    mask = None
                    if masking in ("random", "row fully masked"):
                        mask = rng.random(batch + (n_q, n_k)) > 0.4
                        if masking == "row fully masked":
                            mask[..., 0, :] = False
                    elif masking == "causal":
                        mask = np.tril(np.ones((n_q, n_k), dtype=bool))
                    elif masking == "padding":
                        mask = np.ones(batch + (1, n_k), dtype=bool)
                        mask[..., -1] = n_k == 1
                    yield Q, K, V, mask
    yield (
        rng.normal(size=(3, 4)) * 1e9,
        rng.normal(size=(5, 4)),
        rng.normal(size=(5, 2)),
        rng.random((3, 5)) > 0.3,
    )  # scores near -1e9 and +1e9


@pytest.mark.parametrize("name", [f"independent {n}" for n in range(1, 11)] + [*DISGUISES, "inlined"])
def test_the_solutions_of_the_tests_are_correct(name, capsys):
    """Every solution here (copies and independent ones) equals the course's on random,
    batched, masked, fully masked and extreme inputs, in float64, inputs unchanged."""
    code = {**{f"independent {n}": c for n, c in enumerate(INDEPENDENT, 1)}, **DISGUISES, "inlined": INLINED}[
        name
    ]
    mine, course = _load(code), _load(COURSE)
    with np.errstate(all="ignore"):
        for Q, K, V, mask in _cases():
            before = [Q.copy(), K.copy(), V.copy()]
            out, weights = mine(Q, K, V) if mask is None else mine(Q, K, V, mask)
            want_out, want_weights = course(Q, K, V, mask)
            assert out.shape == want_out.shape and weights.shape == want_weights.shape
            assert out.dtype == np.float64 and weights.dtype == np.float64
            np.testing.assert_allclose(out, want_out, atol=1e-10, rtol=1e-9)
            np.testing.assert_allclose(weights, want_weights, atol=1e-10, rtol=1e-9)
            assert all((a == b).all() for a, b in zip(before, (Q, K, V), strict=True))
    capsys.readouterr()  # the disguised copies print


def test_the_stub_is_nbgraders():
    """What the learner was given is computed from the source as nbgrader computes it: the
    released notebooks in chapters/ hold exactly those stubs."""
    for source in sorted(SOLUTIONS.glob("*/*.ipynb")):
        given = {
            nbgrader_metadata(c)["grade_id"]: c.source
            for c in _released(source.parent.name).cells
            if is_solution_cell(c)
        }
        for cell in nbformat.read(source, as_version=4).cells:
            if is_solution_cell(cell):
                assert released(cell.source) == given[nbgrader_metadata(cell)["grade_id"]]


# --- copies are found, independent work is not -----------------------------------------


@pytest.mark.parametrize("disguise", [*DISGUISES, "inlined"])
def test_a_disguised_copy_is_found(disguise, tmp_path):
    """The course's solution and a disguised copy of it, among ten independent solutions:
    the pair scores above the default threshold, and no other pair does."""
    students = independent_class()
    if disguise == "inlined":  # a classmate's solution (independent 5) with its helper inlined
        students["copy"], pair = INLINED, ("copy", "indep05")
    else:
        students["copy"], pair = DISGUISES[disguise], ("copy", "course")
    report = compare(write_class(tmp_path, students), SOLUTIONS, 0.0)
    found = scores(report)
    assert found[pair] >= DEFAULT_THRESHOLD
    assert {p for p, score in found.items() if score >= DEFAULT_THRESHOLD} == {pair}


@pytest.mark.parametrize("disguise", MHA_REORDERED)
def test_reordered_statements_are_found(disguise, tmp_path):
    """Chapter 4's MultiHeadAttention, its independent statements reordered (methods too)."""
    students = {
        "course": MHA_COURSE,
        "copy": MHA_REORDERED[disguise],
        "fused": MHA_INDEPENDENT[0],
        "einsum": MHA_INDEPENDENT[1],
        "stub": None,
    }
    report = compare(write_class(tmp_path, students, CH4, MHA), SOLUTIONS, 0.0)
    found = scores(report, MHA)
    assert found[("copy", "course")] >= 0.9
    assert {p for p, score in found.items() if score >= DEFAULT_THRESHOLD} == {("copy", "course")}


def test_ten_independent_solutions_are_not_flagged(tmp_path):
    """Ten correct solutions written independently, and the course's: no pair reaches the
    default threshold, and none comes close (the margin the default was chosen with)."""
    report = compare(write_class(tmp_path, independent_class()), SOLUTIONS, 0.0)
    found = scores(report)
    assert max(found.values(), default=0.0) < DEFAULT_THRESHOLD / 2, found
    assert _result(report).compared > 0  # they were compared, and do share common idioms


def test_the_stub_is_never_counted(tmp_path):
    """Two untouched stubs share no fingerprint; neither do two cells that add to the stub
    only code the notebook gave them (its imports, the setup cell, a test cell)."""
    pasted = "\n".join(
        c.source
        for c in _released(CH3).cells
        if c.cell_type == "code" and not is_solution_cell(c) and not c.source.lstrip().startswith("#")
    )
    stub = [c.source for c in _released(CH3).cells if nbgrader_metadata(c).get("grade_id") == SDPA][0]
    students = {
        "stub_a": None,
        "stub_b": None,
        "given_a": stub + "\n" + pasted,
        "given_b": pasted + "\n\n" + stub,
    }
    report = compare(write_class(tmp_path, students), SOLUTIONS, 0.0)
    for result in report.results:
        assert result.matches == [] and result.compared == 0
        assert result.nothing_own == len(students)
    assert not report.skipped


def test_code_most_submissions_share_counts_little():
    """A fingerprint held by more than the common fraction of submissions is dropped; one
    held by two counts more than one held by many."""
    n = 40
    everyone = set(range(1000, 1010))  # ten fingerprints held by every submission
    prints = [everyone | {n * 10 + i} for i in range(n)]  # plus one of its own each
    prints[1] = prints[1] | {1, 2, 3, 4}
    prints[2] = prints[2] | {1, 2, 3, 4}
    scored = score_pairs(prints, 0.0)
    assert not everyone & scored.counted
    assert [(p.a, p.b) for p in scored.pairs] == [(1, 2)]
    assert COMMON_FLOOR < MAX_COMMON_FRACTION * n


def test_an_answer_many_wrote_is_a_common_answer_not_pairs():
    """Thirty of sixty submissions with the same short answer (every fingerprint held by
    thirty: under the fraction that drops it) are one common answer; two who share code
    nobody else has are a pair."""
    answer = set(range(100, 110))
    prints = [set(answer) if i < 30 else {1000 + i} for i in range(60)]
    prints[40] |= {7, 8, 9, 10, 11}
    prints[41] |= {7, 8, 9, 10, 11}
    scored = score_pairs(prints, DEFAULT_THRESHOLD)
    assert [(p.a, p.b) for p in scored.pairs] == [(40, 41)]
    assert len(scored.common_answers) == 30 * 29 // 2
    assert 30 > common_answer_limit(60) and 2 <= common_answer_limit(60)


# --- what cannot be compared, and what comes out -----------------------------------------


def _broken_class(submitted: Path) -> Path:
    write_class(
        submitted,
        {
            "alice": COURSE,
            "bob": DISGUISES["renamed"],
            "carol": INDEPENDENT[0],
            "syntax": f"def {SDPA}(Q, K, V, mask=None):\n    return (\n",
        },
    )
    (submitted / "notjson" / CH3).mkdir(parents=True)
    (submitted / "notjson" / CH3 / f"{CH3}.ipynb").write_text("{not json", encoding="utf-8")
    nb = _notebook(CH3, SDPA, COURSE)
    for cell in nb.cells:
        if nbgrader_metadata(cell).get("grade_id") == SDPA:
            del cell.metadata["nbgrader"]  # pasted into a new cell: the grade id is gone
    (submitted / "nocell" / CH3).mkdir(parents=True)
    nbformat.write(nb, submitted / "nocell" / CH3 / f"{CH3}.ipynb")
    nb = _notebook(CH3, SDPA, None)
    nb.cells = [c for c in nb.cells if nbgrader_metadata(c).get("grade_id") != SDPA]  # deleted
    (submitted / "deleted" / CH3).mkdir(parents=True)
    nbformat.write(nb, submitted / "deleted" / CH3 / f"{CH3}.ipynb")
    nb = _notebook(CH3, SDPA, COURSE)
    for cell in nb.cells:
        if nbgrader_metadata(cell).get("grade_id") == SDPA:
            cell.cell_type = "markdown"
            del cell["outputs"], cell["execution_count"]
    (submitted / "markdown" / CH3).mkdir(parents=True)
    nbformat.write(nb, submitted / "markdown" / CH3 / f"{CH3}.ipynb")
    (submitted / "empty" / CH3).mkdir(parents=True)
    (submitted / "huge" / CH3).mkdir(parents=True)
    huge = _notebook(CH3, SDPA, COURSE + "x = 1\n" * 40_000)
    nbformat.write(huge, submitted / "huge" / CH3 / f"{CH3}.ipynb")
    not_utf8 = os.fsencode(submitted) + b"/\xff\xfebob/" + CH3.encode()
    os.makedirs(not_utf8)
    nbformat.write(_notebook(CH3, SDPA, COURSE), os.fsdecode(not_utf8 + f"/{CH3}.ipynb".encode()))
    (submitted / "renamed_file" / CH3).mkdir(parents=True)  # one notebook of another name: compared
    nbformat.write(_notebook(CH3, SDPA, INDEPENDENT[1]), submitted / "renamed_file" / CH3 / "mine.ipynb")
    return submitted


def test_broken_notebooks_are_listed_as_not_compared(tmp_path):
    """Not JSON, no cell with the grade id and no code of the learner's elsewhere, a markdown
    cell, a cell that does not parse, no notebook: each is listed with why; the others are
    compared as usual; exit status 0. A cell that lost its grade id is an added cell: it is
    compared (with a note), not lost."""
    submitted = _broken_class(tmp_path / "submitted")
    done = subprocess.run(
        [sys.executable, "-m", "grader", "similarity", str(submitted), "--out", str(tmp_path / "report")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert "see " in done.stdout and done.stderr == ""
    report = compare(submitted, SOLUTIONS, DEFAULT_THRESHOLD)
    why = {(s.student, s.exercise): s.why for s in report.skipped}
    assert "is not valid notebook JSON" in why[("notjson", SDPA)]
    assert "is not valid notebook JSON" in why[("notjson", "softmax_jacobian")]
    assert why[("deleted", SDPA)] == f"no cell has the grade id {SDPA!r}"
    notes = {(s.student, s.exercise): s.why for s in report.notes}
    assert notes[("nocell", SDPA)].startswith(f"no cell has the grade id {SDPA!r}: the other cells")
    assert "markdown cell, not code" in why[("markdown", SDPA)]
    assert why[("syntax", SDPA)].startswith("the cell does not parse: ")
    assert why[("syntax", SDPA)].endswith("(line 2)")
    assert "no notebook" in why[("empty", ALL_EXERCISES)]
    assert "over the 200,000 compared" in why[("huge", SDPA)]
    assert "not UTF-8" in why[(os.fsdecode(b"\xff\xfebob"), ALL_EXERCISES)]
    assert ("nocell", "softmax_jacobian") not in why  # the rest of that notebook is compared
    compared = {e.student for e in _result(report).entries}
    assert compared == {"alice", "bob", "carol", "renamed_file", "nocell"}
    found = scores(report)
    assert set(found) == {("alice", "bob"), ("alice", "nocell"), ("bob", "nocell")}
    assert found[("alice", "bob")] == 1.0 and min(found.values()) > 0.9
    page = (tmp_path / "report" / "similarity.html").read_text(encoding="utf-8")
    for text in [
        "no cell has the grade id",
        "does not parse",
        "is not valid notebook JSON",
        r"\xff\xfebob",
        "the other cells the learner could edit were compared",
    ]:
        assert text in page


def test_the_csv_and_the_page_cannot_be_turned_against_the_instructor(tmp_path):
    """Student ids that look like formulas stay text in the CSV; ids and code are escaped in
    the page, which loads nothing from anywhere."""
    hostile = "</pre><script>alert(1)</script>"
    students = {
        "=1+1": COURSE,
        "@SUM(A1)": DISGUISES["renamed"] + f"\nNOTE = {hostile!r}\n",
        "-2+3": DISGUISES["literals"],
        "<img src=x onerror=alert(1)>": DISGUISES["reformatted"],
    }
    report = similarity_report(
        write_class(tmp_path / "submitted", students), tmp_path / "report", SOLUTIONS, DEFAULT_THRESHOLD
    )
    assert len(report.matches) == 6
    with open(tmp_path / "report" / "similarity.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == ["assignment", "exercise", "student_a", "student_b", "score", "shared_lines"]
    ids = {cell for row in rows[1:] for cell in row[2:4]}
    assert ids == {"'=1+1", "'@SUM(A1)", "'-2+3", "<img src=x onerror=alert(1)>"}
    assert all(float(row[4]) >= DEFAULT_THRESHOLD and int(row[5]) > 0 for row in rows[1:])
    assert [float(r[4]) for r in rows[1:]] == sorted((float(r[4]) for r in rows[1:]), reverse=True)
    page = (tmp_path / "report" / "similarity.html").read_text(encoding="utf-8")
    assert "<script" not in page and "<img" not in page and "&lt;/pre&gt;&lt;script&gt;" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page
    assert "Evidence, not a verdict" in page and "changes no grade" in page


def test_bad_usage_exits_2(tmp_path):
    submitted = write_class(tmp_path / "submitted", {"alice": COURSE})
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "no_exercises" / "a").mkdir(parents=True)
    (tmp_path / "no_exercises" / "a" / "a.ipynb").write_text(
        nbformat.writes(nbformat.v4.new_notebook()), encoding="utf-8"
    )
    out = ["--out", str(tmp_path / "r")]
    for args, says in [
        ([str(tmp_path / "missing"), *out], "is not a directory"),
        ([str(submitted)], "--out"),
        ([str(submitted), *out, "--threshold", "1.5"], "between 0 and 1"),
        ([str(submitted), *out, "--threshold", "x"], "invalid"),
        ([str(submitted), "--out", str(tmp_path / "file")], "is a file"),
        (
            [str(submitted), *out, "--source", str(tmp_path / "no_exercises")],
            "no notebook with a solution cell",
        ),
    ]:
        done = subprocess.run(
            [sys.executable, "-m", "grader", "similarity", *args], cwd=ROOT, capture_output=True, text=True
        )
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert says in done.stderr, (args, done.stderr)
    assert not (tmp_path / "r").exists()


# --- the page in a browser, and the scale -----------------------------------------------

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--disable-background-networking",
]

INSPECT = """
const highlighted = [...document.querySelectorAll("pre.code .line[class*=' m']")];
const backgrounds = new Set(highlighted.map((el) => getComputedStyle(el).backgroundColor));
return {
  title: document.title,
  verdict: document.querySelector(".verdict").innerText,
  pairs: document.querySelectorAll("article.pair:not(.known)").length,
  known: document.querySelectorAll("article.pair.known").length,
  clusters: document.querySelectorAll("section.exercise ol li").length,
  highlighted: highlighted.length,
  backgrounds: [...backgrounds],
  resources: performance.getEntriesByType("resource").map((r) => r.name),
  overflow: document.documentElement.scrollWidth - document.documentElement.clientWidth,
  sidesColumns: getComputedStyle(document.querySelector(".sides")).gridTemplateColumns.split(" ").length,
};
"""


@pytest.mark.slow
def test_the_page_renders_in_chromium(tmp_path):
    """The report opened from disk in headless Chromium: no console error, nothing loaded
    from elsewhere, pairs side by side at 1280 px and stacked at 390 px without sideways
    scrolling, matching regions coloured."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        pytest.skip(f"{BROWSER_MISSING} (apt-get install chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    students = {**independent_class(), **{f"copy_{k}": v for k, v in DISGUISES.items()}, "stub": None}
    report = similarity_report(
        write_class(tmp_path / "submitted", students), tmp_path / "report", SOLUTIONS, DEFAULT_THRESHOLD
    )
    profile = tempfile.mkdtemp(prefix="similarity-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--window-size=1280,900"]:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.set_page_load_timeout(60)
        seen = {}
        for width in (1280, 390):
            metrics = {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600}
            driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", metrics)
            driver.get((tmp_path / "report" / "similarity.html").as_uri())
            seen[width] = driver.execute_script(INSPECT)
        errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    assert errors == []
    desktop, phone = seen[1280], seen[390]
    assert desktop["title"] == "Similarity report"
    assert desktop["verdict"].startswith("Evidence, not a verdict.")
    assert desktop["pairs"] == 10 and desktop["clusters"] >= 1 and desktop["highlighted"] > 50
    # the course's solution and its disguised copies, each beside the known solution they match
    assert desktop["known"] == len(report.known) >= len(DISGUISES)
    assert "rgba(0, 0, 0, 0)" not in desktop["backgrounds"] and len(desktop["backgrounds"]) >= 1
    assert desktop["resources"] == [] and phone["resources"] == []
    assert desktop["sidesColumns"] == 2 and phone["sidesColumns"] == 1
    assert desktop["overflow"] <= 0 and phone["overflow"] <= 0


@pytest.mark.slow
def test_the_benchmark_finds_every_planted_ring():
    """benchmarks/similarity.py on 300 generated submissions: it runs, and every planted pair
    is found (the 1,000-submission figures are in the benchmark's own output)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "similarity.py"), "--n", "300", "--rings", "10"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    found, planted = map(int, re.search(r"planted pairs found: (\d+) of (\d+)", done.stdout).groups())
    assert found == planted > 0, done.stdout
