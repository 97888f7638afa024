"""Fair grading (issue 9): correct work in any reasonable style keeps every point, and each
false-pass class the issue found loses some.

Each style below is a complete, correct solution cell written the way a learner might (einsum,
matmul, loops and lists, in-place updates on the function's own arrays, torch inside a NumPy
exercise): every visible and hidden test cell of its exercise must pass. Each wrong solution is
one of the classes that used to keep full marks (extreme but legal scores, an ignored
constructor argument, broken conventions): at least one test cell of its exercise must fail,
with a message that names the problem.
"""

from __future__ import annotations

import pytest

from tests.bugzoo.ch07 import BLOCK_MERGE
from tests.notebook_runner import FRESH_SALTS, exercise_of, fresh_draw_failures, run_cells, source_notebook

CH1, CH2, CH3, CH4, CH5, CH6, CH7 = (
    "01_rnn_bottlenecks",
    "02_queries_keys_values",
    "03_scaled_dot_product",
    "04_multi_head",
    "05_transformer_attention",
    "06_tiny_translator",
    "07_attention_at_scale",
)

# (assignment, exercise, style, solution cell)
CORRECT = [
    (
        CH1,
        "rnn_step",
        "einsum",
        """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.tanh(np.einsum("...i,ij->...j", x_t, W_xh) + np.einsum("...i,ij->...j", h_prev, W_hh) + b)
""",
    ),
    (
        CH1,
        "rnn_step",
        "documented-shapes-only",
        """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    if x_t.ndim == 1:  # (d_in,)
        return np.tanh(W_xh.T @ x_t + W_hh.T @ h_prev + b)
    rows = [np.tanh(W_xh.T @ x + W_hh.T @ h + b) for x, h in zip(x_t, h_prev)]  # (B, d_in)
    return np.stack(rows)
""",
    ),
    (
        CH1,
        "rnn_step",
        "torch-inside",
        """
import torch
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    t = torch.from_numpy
    return torch.tanh(t(x_t) @ t(W_xh) + t(h_prev) @ t(W_hh) + t(b)).numpy()
""",
    ),
    (
        CH1,
        "rnn_forward",
        "preallocated-in-place",
        """
def rnn_forward(X, h0, W_xh, W_hh, b):
    H = np.empty((X.shape[0], h0.shape[0]))
    h = h0
    for t in range(X.shape[0]):
        h = rnn_step(X[t], h, W_xh, W_hh, b)
        H[t] = h
    return H
""",
    ),
    (
        CH1,
        "rnn_forward",
        "lists",
        """
def rnn_forward(X, h0, W_xh, W_hh, b):
    states = [h0]
    for x_t in X:
        states.append(rnn_step(x_t, states[-1], W_xh, W_hh, b))
    return np.array(states[1:])
""",
    ),
    (
        CH1,
        "jacobian_norms",
        "explicit-diag-and-svd",
        """
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    product = np.eye(d_h)
    norms = [1.0]
    for t in range(T - 1, 0, -1):
        product = product @ np.diag(1 - H[t] ** 2) @ W_hh.T
        norms.append(np.linalg.svd(product, compute_uv=False)[0])
    return np.array(norms)
""",
    ),
    (
        CH2,
        "dot_scores",
        "list-comprehension",
        """
def dot_scores(q, K):
    return np.array([float(np.dot(k, q)) for k in K])
""",
    ),
    (
        CH2,
        "dot_scores",
        "einsum",
        """
def dot_scores(q, K):
    return np.einsum("nd,d->n", K, q)
""",
    ),
    (
        CH2,
        "softmax",
        "in-place-on-a-copy",
        """
def softmax(z, axis=-1):
    e = np.array(z, dtype=np.float64, copy=True)
    e -= e.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e
""",
    ),
    (
        CH2,
        "softmax",
        "torch-inside",
        """
import torch
def softmax(z, axis=-1):  # torch's arithmetic; torch.softmax itself would be the exercise's answer
    t = torch.as_tensor(np.asarray(z, dtype=np.float64))
    e = torch.exp(t - t.amax(dim=axis, keepdim=True))
    return (e / e.sum(dim=axis, keepdim=True)).numpy()
""",
    ),
    (
        CH2,
        "softmax",
        "logsumexp",
        """
def softmax(z, axis=-1):
    m = np.max(z, axis=axis, keepdims=True)
    log_total = m + np.log(np.sum(np.exp(z - m), axis=axis, keepdims=True))
    return np.exp(z - log_total)
""",
    ),
    (
        CH2,
        "attend",
        "einsum",
        """
def attend(q, K, V):
    s = np.einsum("nd,d->n", K, q)
    w = np.exp(s - s.max())
    w = w / w.sum()
    return np.einsum("n,nv->v", w, V), w
""",
    ),
    (
        CH2,
        "project_qkv",
        "einsum-list",
        """
def project_qkv(X, W_q, W_k, W_v):
    return tuple(np.einsum("nd,dk->nk", X, W) for W in (W_q, W_k, W_v))
""",
    ),
    (
        CH2,
        "dot_product_attention",
        "broadcast-then-sum",
        """
def dot_product_attention(Q, K, V):
    scores = (Q[:, None, :] * K[None, :, :]).sum(axis=-1)  # (n_q, n_k), no loop
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights
""",
    ),
    (
        CH3,
        "scaled_dot_product_attention",
        "einsum-nan-to-num",
        """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
    return np.einsum("...qk,...kv->...qv", weights, V), weights
""",
    ),
    (
        CH3,
        "scaled_dot_product_attention",
        "torch-inside",
        """
import torch
def scaled_dot_product_attention(Q, K, V, mask=None):
    q, k, v = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (Q, K, V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        m = torch.as_tensor(mask).expand(scores.shape)
        scores = scores.masked_fill(~m, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return (weights @ v).numpy(), weights.numpy()
""",
    ),
    (
        CH3,
        "scaled_dot_product_attention_torch",
        "finfo-min-fill",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1) * mask.any(dim=-1, keepdim=True)
    return weights @ V, weights
""",
    ),
    (
        CH3,
        "scaled_dot_product_attention_torch",
        "manual-stable-softmax",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    mask = mask.expand(scores.shape)
    row_max = scores.masked_fill(~mask, float("-inf")).amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isfinite(row_max), row_max, torch.zeros_like(row_max)).detach()
    e = torch.exp(torch.where(mask, scores - row_max, torch.full_like(scores, float("-inf"))))
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ V, weights
""",
    ),
    (
        CH3,
        "softmax_jacobian",
        "outer-by-broadcasting",
        """
def softmax_jacobian(p):
    return np.diagflat(p) - p[:, None] * p[None, :]
""",
    ),
    (
        CH4,
        "split_heads",
        "view-permute",
        """
def split_heads(X, num_heads):
    B, n, d_model = X.shape
    return X.view(B, n, num_heads, -1).permute(0, 2, 1, 3)
""",
    ),
    (
        CH4,
        "split_heads",
        "chunk-stack",
        """
def split_heads(X, num_heads):
    return torch.stack(X.chunk(num_heads, dim=-1), dim=1)
""",
    ),
    (
        CH4,
        "merge_heads",
        "unbind-cat",
        """
def merge_heads(X):
    return torch.cat(X.unbind(dim=1), dim=-1)
""",
    ),
    (
        CH4,
        "MultiHeadAttention",
        "einsum-per-head",
        """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.h, self.d_head = num_heads, d_model // num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (
            nn.Linear(d_model, d_model, bias=bias) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        B, n_q, _ = query.shape
        q = self.W_q(query).unflatten(-1, (self.h, self.d_head))  # (B, n_q, h, d_head)
        k = self.W_k(key).unflatten(-1, (self.h, self.d_head))
        v = self.W_v(value).unflatten(-1, (self.h, self.d_head))
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(self.d_head)
        if mask is not None:
            has_key = mask.any(dim=-1, keepdim=True)
            scores = scores.masked_fill(~mask, float("-inf")).masked_fill(~has_key, 0.0)
            weights = scores.softmax(dim=-1) * has_key
        else:
            weights = scores.softmax(dim=-1)
        heads = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, n_q, -1)
        return self.W_o(heads), weights
""",
    ),
    (
        CH5,
        "causal_mask",
        "tril-of-ones",
        """
def causal_mask(n):
    return torch.tril(torch.ones(n, n)).bool()
""",
    ),
    (
        CH5,
        "padding_mask",
        "unsqueeze-compare",
        """
def padding_mask(lengths, max_len):
    return torch.as_tensor(lengths).unsqueeze(1) > torch.arange(max_len).unsqueeze(0)
""",
    ),
    # ---------------------------------------------------------------- chapter 6
    (
        CH6,
        "positional_encoding",
        "loops-over-positions-and-pairs",
        """
import math

def positional_encoding(n, d_model):
    pe = np.zeros((n, d_model))
    for p in range(n):
        for i in range(0, d_model, 2):
            angle = p / 10000 ** (i / d_model)
            pe[p, i] = math.sin(angle)
            if i + 1 < d_model:
                pe[p, i + 1] = math.cos(angle)
    return pe
""",
    ),
    (
        CH6,
        "positional_encoding",
        "exp-log-div-term",
        """
def positional_encoding(n, d_model):
    position = np.arange(n)[:, None]
    div_term = np.exp(np.arange(0, d_model, 2) * (-np.log(10000.0) / d_model))
    pe = np.zeros((n, d_model))
    pe[:, 0::2] = np.sin(position * div_term)
    pe[:, 1::2] = np.cos(position * div_term[: d_model // 2])
    return pe
""",
    ),
    (
        CH6,
        "positional_encoding",
        "torch-inside",
        """
def positional_encoding(n, d_model):
    p = torch.arange(n, dtype=torch.float64).unsqueeze(1)
    w = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    angles = p * w
    pe = torch.zeros(n, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return pe.numpy()
""",
    ),
    (
        CH6,
        "positional_encoding",
        "stack-then-reshape-and-helper",
        """
def _frequencies(d_model):
    return 1.0 / np.power(10000.0, np.arange(0, d_model, 2) / d_model)  # (ceil(d_model / 2),)

def positional_encoding(n, d_model):
    angles = np.outer(np.arange(n), _frequencies(d_model))  # (n, ceil(d_model / 2))
    pairs = np.stack([np.sin(angles), np.cos(angles)], axis=-1)  # (n, ceil(d_model / 2), 2)
    pe = pairs.reshape(n, -1)[:, :d_model]
    assert pe.shape == (n, d_model)
    return pe
""",
    ),
    (
        CH6,
        "positional_encoding",
        "where-on-column-parity-with-prints",
        """
def positional_encoding(n, d_model):
    j = np.arange(d_model)
    angles = np.arange(n)[:, None] / 10000 ** ((j - j % 2) / d_model)  # (n, d_model): one frequency per pair
    print("encoding", n, "positions in", d_model, "columns")
    return np.where(j % 2 == 0, np.sin(angles), np.cos(angles))
""",
    ),
    (
        CH6,
        "greedy_decode",
        "list-of-columns",
        """
def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    columns = [torch.full((src.shape[0],), bos_id, dtype=torch.long)]
    done = torch.zeros(src.shape[0], dtype=torch.bool)
    while len(columns) <= max_len and not done.all():
        logits = model.decode(torch.stack(columns, dim=1), memory)
        token = logits[:, -1].argmax(-1)
        token[done] = eos_id
        columns.append(token)
        done |= token == eos_id
    return torch.stack(columns, dim=1)[:, 1:]
""",
    ),
    (
        CH6,
        "greedy_decode",
        "masked-fill-and-any",
        """
@torch.no_grad()
def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    ys = torch.full((len(src), 1), bos_id, dtype=torch.int64)
    alive = torch.ones(len(src), dtype=torch.bool)
    for step in range(max_len):
        nxt = model.decode(ys, memory)[:, -1, :].max(dim=-1).indices
        nxt = nxt.masked_fill(~alive, eos_id)
        ys = torch.cat((ys, nxt.unsqueeze(-1)), dim=-1)
        alive = alive & (nxt != eos_id)
        if not alive.any():
            break
    return ys[:, 1:].clone()
""",
    ),
    (
        CH6,
        "greedy_decode",
        "preallocated-in-place",
        """
def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    B = src.shape[0]
    tgt = torch.full((B, max_len + 1), eos_id, dtype=torch.long)
    tgt[:, 0] = bos_id
    finished = torch.zeros(B, dtype=torch.bool)
    steps = 0
    for t in range(1, max_len + 1):
        next_id = model.decode(tgt[:, :t], memory)[:, -1].argmax(dim=-1)
        tgt[:, t] = torch.where(finished, torch.tensor(eos_id), next_id)
        finished |= tgt[:, t] == eos_id
        steps = t
        if bool(finished.all()):
            break
    return tgt[:, 1 : steps + 1]
""",
    ),
    (
        CH6,
        "greedy_decode",
        "helper-and-assert",
        """
def _step(model, tgt, memory):
    return model.decode(tgt, memory)[:, -1].argmax(dim=-1)  # (B,)

def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    tgt = torch.tensor([[bos_id]] * src.shape[0])
    finished = torch.tensor([False] * src.shape[0])
    for _ in range(max_len):
        next_id = torch.where(finished, eos_id, _step(model, tgt, memory))
        tgt = torch.hstack([tgt, next_id[:, None]])
        finished = torch.logical_or(finished, next_id.eq(eos_id))
        if finished.all():
            break
    assert tgt.dtype == torch.int64
    return tgt[:, 1:]
""",
    ),
    (
        CH6,
        "greedy_decode",
        "reruns-the-setup-cell",
        """
import numpy as np
import torch

torch.set_default_dtype(torch.float64)

def greedy_decode(model, src, max_len, bos_id, eos_id):
    memory = model.encode(src)
    out = torch.empty(src.shape[0], 0, dtype=torch.long)
    for _ in range(max_len):
        tgt = torch.cat([torch.full((src.shape[0], 1), bos_id, dtype=torch.long), out], dim=1)
        next_id = model.decode(tgt, memory)[:, -1].argmax(dim=-1)
        if out.shape[1]:
            ended = (out == eos_id).any(dim=1)
            next_id = torch.where(ended, torch.full_like(next_id, eos_id), next_id)
        out = torch.cat([out, next_id[:, None]], dim=1)
        if (out == eos_id).any(dim=1).all():
            break
    return out
""",
    ),
    # ---------------------------------------------------------------- chapter 7
    (
        CH7,
        "online_softmax_attention",
        "einsum-and-neg-inf-guards",
        """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    n_k = K.shape[-2]
    if mask is not None:
        mask = np.broadcast_to(mask, np.shape(mask)[:-1] + (n_k,))
    rows = () if mask is None else np.shape(mask)[:-1]
    shape = np.broadcast_shapes(Q.shape[:-1], K.shape[:-2] + (1,), rows)
    m = np.full(shape + (1,), -np.inf)
    l = np.zeros(shape + (1,))
    acc = np.zeros(shape + V.shape[-1:])
    for a in range(0, n_k, block_size):
        s = np.einsum("...qd,...kd->...qk", Q, K[..., a : a + block_size, :]) / np.sqrt(Q.shape[-1])
        if mask is not None:
            s = np.where(mask[..., a : a + block_size], s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        safe = np.where(m_new == -np.inf, 0.0, m_new)
        c = np.where(m == -np.inf, 0.0, np.exp(m - safe))
        p = np.exp(s - safe)
        l = c * l + p.sum(-1, keepdims=True)
        acc = c * acc + np.einsum("...qk,...kv->...qv", p, V[..., a : a + block_size, :])
        m = m_new
    out = np.zeros_like(acc)
    np.divide(acc, l, out=out, where=l > 0)
    return out
""",
    ),
    (
        CH7,
        "online_softmax_attention",
        "in-place-updates",
        """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    n_q, d_k = Q.shape[-2:]
    n_k, d_v = V.shape[-2:]
    batch = np.broadcast_shapes(Q.shape[:-2], K.shape[:-2], V.shape[:-2], np.shape(mask)[:-2])
    keys_mask = None if mask is None else np.broadcast_to(mask, (*np.shape(mask)[:-1], n_k))
    m = np.full((*batch, n_q, 1), -np.inf)
    total = np.zeros((*batch, n_q, 1))
    acc = np.zeros((*batch, n_q, d_v))
    for start in range(0, n_k, block_size):
        s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2)
        s /= math.sqrt(d_k)
        if mask is not None:
            s = np.where(keys_mask[..., start : start + block_size], s, -np.inf)
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        shift = np.where(np.isfinite(m_new), m_new, 0.0)
        correction = np.exp(np.where(np.isfinite(m), m - shift, -np.inf))
        s -= shift
        np.exp(s, out=s)
        total *= correction
        total += s.sum(axis=-1, keepdims=True)
        acc *= correction
        acc += s @ V[..., start : start + block_size, :]
        m = m_new
    acc[np.broadcast_to(total == 0, acc.shape)] = 0.0
    np.divide(acc, total, out=acc, where=total > 0)
    return acc
""",
    ),
    (
        CH7,
        "online_softmax_attention",
        "torch-inside",
        """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    q, k, v = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (Q, K, V))
    mk = (None if mask is None
          else torch.from_numpy(np.asarray(mask)).expand(*np.shape(mask)[:-1], k.shape[-2]))
    s0 = q @ k[..., :0, :].transpose(-1, -2)
    m = torch.full(s0.shape[:-1] + (1,), float("-inf"))
    l = torch.zeros_like(m)
    acc = torch.zeros(s0.shape[:-1] + v.shape[-1:])
    for a in range(0, k.shape[-2], block_size):
        s = q @ k[..., a : a + block_size, :].transpose(-1, -2) / math.sqrt(q.shape[-1])
        if mk is not None:
            s = s.masked_fill(~mk[..., a : a + block_size], float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        shift = torch.nan_to_num(m_new, neginf=0.0)
        c = torch.exp(torch.where(torch.isfinite(m), m - shift, torch.zeros_like(m)))
        p = torch.exp(s - shift)
        l, acc, m = c * l + p.sum(-1, keepdim=True), c * acc + p @ v[..., a : a + block_size, :], m_new
    return torch.where(l > 0, acc / torch.where(l > 0, l, torch.ones_like(l)), torch.zeros_like(acc)).numpy()
""",
    ),
    (
        CH7,
        "online_softmax_attention",
        "block-logsumexp-merge",
        BLOCK_MERGE.replace("{GUARD}", " & (l_b > 0)"),
    ),
    (
        CH7,
        "online_softmax_attention",
        "loop-over-query-rows-with-assert",
        """
def online_softmax_attention(Q, K, V, block_size, mask=None):
    shape = np.broadcast_shapes(Q.shape[:-1], K.shape[:-2] + (1,))
    Qb = np.broadcast_to(Q, shape + Q.shape[-1:])
    Kb = np.broadcast_to(K, shape[:-1] + K.shape[-2:])
    Vb = np.broadcast_to(V, shape[:-1] + V.shape[-2:])
    Mb = None if mask is None else np.broadcast_to(mask, shape + K.shape[-2:-1])
    out = np.zeros(shape + V.shape[-1:])
    for idx in np.ndindex(*shape):  # one query row at a time: the keys still come in blocks
        m, total, acc = -np.inf, 0.0, np.zeros(V.shape[-1])
        for a in range(0, K.shape[-2], block_size):
            s = Kb[idx[:-1]][a : a + block_size] @ Qb[idx] / math.sqrt(Q.shape[-1])
            if Mb is not None:
                s = np.where(Mb[idx][a : a + block_size], s, -np.inf)
            m_new = max(m, s.max())
            if m_new == -np.inf:
                continue
            c = math.exp(m - m_new) if m > -np.inf else 0.0
            p = np.exp(s - m_new)
            total, acc, m = c * total + p.sum(), c * acc + p @ Vb[idx[:-1]][a : a + block_size], m_new
        out[idx] = acc / total if total > 0 else 0.0
    assert out.dtype == np.float64
    return out
""",
    ),
    (
        CH7,
        "KVCache",
        "lists-of-chunks",
        """
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None
        self._chunks = []

    def __len__(self):
        return sum(k.shape[-2] for k, _ in self._chunks)

    def append(self, k_new, v_new):
        self._chunks.append((k_new, v_new))
        self.k = torch.cat([k for k, _ in self._chunks], dim=-2)
        self.v = torch.cat([v for _, v in self._chunks], dim=-2)
        return self.k, self.v
""",
    ),
    (
        CH7,
        "KVCache",
        "preallocated-buffer",
        """
class KVCache:
    def __init__(self):
        self.k = self.v = None
        self._n = 0
        self._kbuf = self._vbuf = None

    def __len__(self):
        return self._n

    def append(self, k_new, v_new):
        t = k_new.shape[-2]
        if self._kbuf is None or self._n + t > self._kbuf.shape[-2]:
            size = 2 * (self._n + t)
            kbuf = k_new.new_zeros(*k_new.shape[:-2], size, k_new.shape[-1])
            vbuf = v_new.new_zeros(*v_new.shape[:-2], size, v_new.shape[-1])
            if self._n:
                kbuf[..., : self._n, :] = self._kbuf[..., : self._n, :]
                vbuf[..., : self._n, :] = self._vbuf[..., : self._n, :]
            self._kbuf, self._vbuf = kbuf, vbuf
        self._kbuf[..., self._n : self._n + t, :] = k_new
        self._vbuf[..., self._n : self._n + t, :] = v_new
        self._n += t
        self.k, self.v = self._kbuf[..., : self._n, :], self._vbuf[..., : self._n, :]
        return self.k, self.v
""",
    ),
    (
        CH7,
        "KVCache",
        "dim-2-and-property-len",
        """
class KVCache:
    def __init__(self):
        self.k, self.v = None, None

    @property
    def length(self):
        return 0 if self.k is None else self.k.size(2)

    def __len__(self):
        return self.length

    def append(self, k_new, v_new):
        self.k = k_new if self.k is None else torch.cat((self.k, k_new), 2)
        self.v = v_new if self.v is None else torch.cat((self.v, v_new), 2)
        return (self.k, self.v)
""",
    ),
    (
        CH7,
        "KVCache",
        "empty-tensors-and-assert",
        """
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else int(self.k.shape[-2])

    def append(self, k_new, v_new):
        assert k_new.shape[-2] == v_new.shape[-2], "keys and values of the same positions"
        old_k = k_new[..., :0, :] if self.k is None else self.k
        old_v = v_new[..., :0, :] if self.v is None else self.v
        self.k, self.v = torch.cat([old_k, k_new], dim=-2), torch.cat([old_v, v_new], dim=-2)
        return self.k, self.v
""",
    ),
    (
        CH7,
        "KVCache",
        "numpy-concatenate-inside",
        """
class KVCache:
    def __init__(self):
        self.k = None
        self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k_new, v_new):
        def join(old, new):
            both = [old.numpy(), new.numpy()] if old is not None else [new.numpy()]
            return torch.from_numpy(np.concatenate(both, axis=-2))

        self.k, self.v = join(self.k, k_new), join(self.v, v_new)
        return self.k, self.v
""",
    ),
]

# (assignment, exercise, style, solution cell): chapter 7's third exercise, which the others'
# solution cells (KVCache) are run with
CACHED_STYLES = [
    (
        "manual-softmax-einsum",
        """
        q = self.W_q(x_new).view(B, t_new, self.num_heads, self.d_head)
        k = self.W_k(x_new).view(B, t_new, self.num_heads, self.d_head).permute(0, 2, 1, 3)
        v = self.W_v(x_new).view(B, t_new, self.num_heads, self.d_head).permute(0, 2, 1, 3)
        k, v = self.cache.append(k, v)
        scores = torch.einsum("bqhd,bhkd->bhqk", q, k) / math.sqrt(self.d_head)
        visible = torch.arange(k.shape[-2])[None, :] <= (start + torch.arange(t_new))[:, None]
        weights = scores.masked_fill(~visible, float("-inf")).softmax(dim=-1)
        out = torch.einsum("bhqk,bhkd->bqhd", weights, v).reshape(B, t_new, -1)
        return self.W_o(out)
""",
    ),
    (
        "float-mask-and-matmul",
        """
        q = self.W_q(x_new).reshape(B, t_new, self.num_heads, -1).transpose(1, 2)
        k, v = self.cache.append(self.W_k(x_new).reshape(B, t_new, self.num_heads, -1).transpose(1, 2),
                                 self.W_v(x_new).reshape(B, t_new, self.num_heads, -1).transpose(1, 2))
        n = k.shape[-2]
        bias = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)[start:]  # (t_new, n)
        weights = torch.softmax(q @ k.transpose(-2, -1) / self.d_head ** 0.5 + bias, dim=-1)
        return self.W_o((weights @ v).transpose(1, 2).contiguous().view(B, t_new, -1))
""",
    ),
    (
        "tril-mask-and-helpers",
        """
        def split(x):
            return torch.stack(x.chunk(self.num_heads, dim=-1), dim=1)  # (B, h, t_new, d_head)

        def merge(x):
            return torch.cat(x.unbind(dim=1), dim=-1)  # (B, t_new, d_model)

        k, v = self.cache.append(split(self.W_k(x_new)), split(self.W_v(x_new)))
        full = torch.tril(torch.ones(k.shape[-2], k.shape[-2], dtype=torch.bool))
        out = F.scaled_dot_product_attention(split(self.W_q(x_new)), k, v, attn_mask=full[-t_new:])
        return self.W_o(merge(out))
""",
    ),
    (
        "loop-over-heads-with-print",
        """
        k_all, v_all = self.cache.append(
            self.W_k(x_new).view(B, t_new, self.num_heads, self.d_head).transpose(1, 2),
            self.W_v(x_new).view(B, t_new, self.num_heads, self.d_head).transpose(1, 2),
        )
        q_all = self.W_q(x_new).view(B, t_new, self.num_heads, self.d_head).transpose(1, 2)
        mask = torch.ones(t_new, start + t_new, dtype=torch.bool).tril(diagonal=start)
        heads = []
        for h in range(self.num_heads):
            s = q_all[:, h] @ k_all[:, h].transpose(-1, -2) / math.sqrt(self.d_head)
            heads.append(torch.softmax(s.masked_fill(~mask, -torch.inf), dim=-1) @ v_all[:, h])
        print("decoded", t_new, "token(s) after", start)
        return self.W_o(torch.cat(heads, dim=-1))
""",
    ),
    (
        "is-causal-on-the-first-chunk",
        """
        q = self.W_q(x_new).unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)
        k_new = self.W_k(x_new).unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)
        v_new = self.W_v(x_new).unflatten(-1, (self.num_heads, self.d_head)).transpose(1, 2)
        k, v = self.cache.append(k_new, v_new)
        if start == 0:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            key_pos, query_pos = torch.arange(start + t_new), torch.arange(start, start + t_new)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=key_pos <= query_pos[:, None])
        return self.W_o(out.transpose(1, 2).flatten(2))
""",
    ),
]

_CACHED_HEAD = """
class CachedSelfAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)
        self.W_v = nn.Linear(d_model, d_model)
        self.W_o = nn.Linear(d_model, d_model)
        self.cache = KVCache()

    def reset(self):
        self.cache = KVCache()

    def forward(self, x_new):
        B, t_new, d_model = x_new.shape
        start = len(self.cache)
"""
CORRECT += [(CH7, "CachedSelfAttention", name, _CACHED_HEAD + body) for name, body in CACHED_STYLES]

# (assignment, exercise, false-pass class, solution cell, phrase the failure must contain)
WRONG = [
    (
        CH3,
        "scaled_dot_product_attention",
        "fill-minus-1e4",
        """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e4)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    if mask is not None:
        weights = weights * np.broadcast_to(mask, weights.shape).any(axis=-1, keepdims=True)
    return weights @ V, weights
""",
        "differs from the expected value",
    ),
    (
        CH3,
        "scaled_dot_product_attention_torch",
        "one-max-for-the-batch",
        """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ V, weights
""",
        "one maximum was subtracted for the whole array",
    ),
    (
        CH4,
        "MultiHeadAttention",
        "bias-ignored",
        """
class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads, bias=True):
        super().__init__()
        self.num_heads = num_heads
        self.W_q, self.W_k, self.W_v, self.W_o = (nn.Linear(d_model, d_model) for _ in range(4))

    def forward(self, query, key, value, mask=None):
        q = split_heads(self.W_q(query), self.num_heads)
        k = split_heads(self.W_k(key), self.num_heads)
        v = split_heads(self.W_v(value), self.num_heads)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)
        return self.W_o(merge_heads(heads)), weights
""",
        "bias=False must build",
    ),
    (
        CH2,
        "softmax",
        "float32",
        """
def softmax(z, axis=-1):
    z = np.asarray(z, dtype=np.float32)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
""",
        "not float64",
    ),
    (
        CH3,
        "softmax_jacobian",
        "mutates-p",
        """
def softmax_jacobian(p):
    J = -np.outer(p, p)
    p *= 1 - p
    return J + np.diag(p) + np.diag(np.outer(p, p).diagonal() * 0)
""",
        "modified one of its input arrays in place",
    ),
    # the notebook says "without a Python loop over the queries": a loop is counted, not timed
    (
        CH2,
        "dot_product_attention",
        "one-query-at-a-time",
        """
def dot_product_attention(Q, K, V):
    pairs = [attend(q, K, V) for q in Q]
    return np.stack([c for c, _ in pairs]), np.stack([w for _, w in pairs])
""",
        "one query row was taken alone",
    ),
    (
        CH1,
        "rnn_step",
        "squeezes-batch-of-one",
        """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.squeeze(np.tanh(x_t @ W_xh + h_prev @ W_hh + b))
""",
        "has shape",
    ),
    (
        CH3,
        "scaled_dot_product_attention",
        "squeezes-batch-of-one",
        """
def scaled_dot_product_attention(Q, K, V, mask=None):
    Q, K, V = np.squeeze(Q), np.squeeze(K), np.squeeze(V)
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
    return weights @ V, weights
""",
        "has shape",
    ),
]


def _outcome(assignment: str, exercise: str, code: str) -> dict[str, str]:
    outcome = run_cells(source_notebook(assignment), replace={exercise: code})
    mine = {k: v for k, v in outcome.items() if exercise_of(k) == exercise}
    assert mine, f"no test cell belongs to {exercise}"
    return mine


@pytest.mark.parametrize(
    "assignment,exercise,code",
    [pytest.param(a, e, c, id=f"{e}-{s}") for a, e, s, c in CORRECT],
)
def test_correct_style_keeps_every_point(assignment, exercise, code):
    failures = {k: v for k, v in _outcome(assignment, exercise, code).items() if v}
    assert not failures, "a correct solution lost points:\n" + "\n---\n".join(
        f"{k}: {v}" for k, v in failures.items()
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    "assignment,exercise,code",
    [pytest.param(a, e, c, id=f"{e}-{s}") for a, e, s, c in CORRECT],
)
def test_correct_style_keeps_every_point_on_fresh_draws(assignment, exercise, code):
    """The grader draws every submission's inputs afresh: a style must pass on those too (a
    log-sum-exp merge here once passed every notebook seed and failed 1 draw in 20)."""
    nb = source_notebook(assignment)
    failures = [f for salt in FRESH_SALTS for f in fresh_draw_failures(nb, {exercise: code}, salt)]
    assert not failures, "a correct solution lost points on a fresh draw:\n" + "\n---\n".join(failures)


@pytest.mark.parametrize(
    "assignment,exercise,code,expect",
    [pytest.param(a, e, c, x, id=f"{e}-{s}") for a, e, s, c, x in WRONG],
)
def test_false_pass_class_loses_points(assignment, exercise, code, expect):
    failures = [v for v in _outcome(assignment, exercise, code).values() if v]
    assert failures, f"this wrong {exercise} kept every point"
    assert any(expect in f for f in failures), f"no failure says {expect!r}; messages:\n" + "\n---\n".join(
        failures
    )


def test_every_chapter_1_to_7_has_correct_styles():
    assert {a for a, *_ in CORRECT} == {CH1, CH2, CH3, CH4, CH5, CH6, CH7}


@pytest.mark.parametrize(
    "exercise",
    ["positional_encoding", "greedy_decode", "online_softmax_attention", "KVCache", "CachedSelfAttention"],
)
def test_chapters_6_and_7_have_five_styles_per_exercise(exercise):
    assert sum(e == exercise for _, e, *_ in CORRECT) >= 5
