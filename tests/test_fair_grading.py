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

from tests.notebook_runner import exercise_of, run_cells, source_notebook

CH1, CH2, CH3, CH4, CH5 = (
    "01_rnn_bottlenecks",
    "02_queries_keys_values",
    "03_scaled_dot_product",
    "04_multi_head",
    "05_transformer_attention",
)

# (assignment, exercise, style, solution cell)
CORRECT = [
    (CH1, "rnn_step", "einsum", """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.tanh(np.einsum("...i,ij->...j", x_t, W_xh) + np.einsum("...i,ij->...j", h_prev, W_hh) + b)
"""),
    (CH1, "rnn_step", "documented-shapes-only", """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    if x_t.ndim == 1:  # (d_in,)
        return np.tanh(W_xh.T @ x_t + W_hh.T @ h_prev + b)
    rows = [np.tanh(W_xh.T @ x + W_hh.T @ h + b) for x, h in zip(x_t, h_prev)]  # (B, d_in)
    return np.stack(rows)
"""),
    (CH1, "rnn_step", "torch-inside", """
import torch
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    t = torch.from_numpy
    return torch.tanh(t(x_t) @ t(W_xh) + t(h_prev) @ t(W_hh) + t(b)).numpy()
"""),
    (CH1, "rnn_forward", "preallocated-in-place", """
def rnn_forward(X, h0, W_xh, W_hh, b):
    H = np.empty((X.shape[0], h0.shape[0]))
    h = h0
    for t in range(X.shape[0]):
        h = rnn_step(X[t], h, W_xh, W_hh, b)
        H[t] = h
    return H
"""),
    (CH1, "rnn_forward", "lists", """
def rnn_forward(X, h0, W_xh, W_hh, b):
    states = [h0]
    for x_t in X:
        states.append(rnn_step(x_t, states[-1], W_xh, W_hh, b))
    return np.array(states[1:])
"""),
    (CH1, "jacobian_norms", "explicit-diag-and-svd", """
def jacobian_norms(H, W_hh):
    T, d_h = H.shape
    product = np.eye(d_h)
    norms = [1.0]
    for t in range(T - 1, 0, -1):
        product = product @ np.diag(1 - H[t] ** 2) @ W_hh.T
        norms.append(np.linalg.svd(product, compute_uv=False)[0])
    return np.array(norms)
"""),
    (CH2, "dot_scores", "list-comprehension", """
def dot_scores(q, K):
    return np.array([float(np.dot(k, q)) for k in K])
"""),
    (CH2, "dot_scores", "einsum", """
def dot_scores(q, K):
    return np.einsum("nd,d->n", K, q)
"""),
    (CH2, "softmax", "in-place-on-a-copy", """
def softmax(z, axis=-1):
    e = np.array(z, dtype=np.float64, copy=True)
    e -= e.max(axis=axis, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=axis, keepdims=True)
    return e
"""),
    (CH2, "softmax", "torch-inside", """
import torch
def softmax(z, axis=-1):
    return torch.softmax(torch.as_tensor(np.asarray(z, dtype=np.float64)), dim=axis).numpy()
"""),
    (CH2, "softmax", "logsumexp", """
def softmax(z, axis=-1):
    m = np.max(z, axis=axis, keepdims=True)
    log_total = m + np.log(np.sum(np.exp(z - m), axis=axis, keepdims=True))
    return np.exp(z - log_total)
"""),
    (CH2, "attend", "einsum", """
def attend(q, K, V):
    s = np.einsum("nd,d->n", K, q)
    w = np.exp(s - s.max())
    w = w / w.sum()
    return np.einsum("n,nv->v", w, V), w
"""),
    (CH2, "project_qkv", "einsum-list", """
def project_qkv(X, W_q, W_k, W_v):
    return tuple(np.einsum("nd,dk->nk", X, W) for W in (W_q, W_k, W_v))
"""),
    (CH2, "dot_product_attention", "broadcast-then-sum", """
def dot_product_attention(Q, K, V):
    scores = (Q[:, None, :] * K[None, :, :]).sum(axis=-1)  # (n_q, n_k), no loop
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ V, weights
"""),
    (CH3, "scaled_dot_product_attention", "einsum-nan-to-num", """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = np.einsum("...qd,...kd->...qk", Q, K) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
    return np.einsum("...qk,...kv->...qv", weights, V), weights
"""),
    (CH3, "scaled_dot_product_attention", "torch-inside", """
import torch
def scaled_dot_product_attention(Q, K, V, mask=None):
    q, k, v = (torch.from_numpy(np.asarray(a, dtype=np.float64)) for a in (Q, K, V))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        m = torch.as_tensor(mask).expand(scores.shape)
        scores = scores.masked_fill(~m, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    return (weights @ v).numpy(), weights.numpy()
"""),
    (CH3, "scaled_dot_product_attention_torch", "finfo-min-fill", """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5
    if mask is None:
        weights = scores.softmax(dim=-1)
    else:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(dim=-1) * mask.any(dim=-1, keepdim=True)
    return weights @ V, weights
"""),
    (CH3, "scaled_dot_product_attention_torch", "manual-stable-softmax", """
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
"""),
    (CH3, "softmax_jacobian", "outer-by-broadcasting", """
def softmax_jacobian(p):
    return np.diagflat(p) - p[:, None] * p[None, :]
"""),
    (CH4, "split_heads", "view-permute", """
def split_heads(X, num_heads):
    B, n, d_model = X.shape
    return X.view(B, n, num_heads, -1).permute(0, 2, 1, 3)
"""),
    (CH4, "split_heads", "chunk-stack", """
def split_heads(X, num_heads):
    return torch.stack(X.chunk(num_heads, dim=-1), dim=1)
"""),
    (CH4, "merge_heads", "unbind-cat", """
def merge_heads(X):
    return torch.cat(X.unbind(dim=1), dim=-1)
"""),
    (CH4, "MultiHeadAttention", "einsum-per-head", """
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
"""),
    (CH5, "causal_mask", "tril-of-ones", """
def causal_mask(n):
    return torch.tril(torch.ones(n, n)).bool()
"""),
    (CH5, "padding_mask", "unsqueeze-compare", """
def padding_mask(lengths, max_len):
    return torch.as_tensor(lengths).unsqueeze(1) > torch.arange(max_len).unsqueeze(0)
"""),
]

# (assignment, exercise, false-pass class, solution cell, phrase the failure must contain)
WRONG = [
    (CH3, "scaled_dot_product_attention", "fill-minus-1e4", """
def scaled_dot_product_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e4)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    if mask is not None:
        weights = weights * np.broadcast_to(mask, weights.shape).any(axis=-1, keepdims=True)
    return weights @ V, weights
""", "differs from the expected value"),
    (CH3, "scaled_dot_product_attention_torch", "one-max-for-the-batch", """
def scaled_dot_product_attention_torch(Q, K, V, mask=None):
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    e = torch.exp(scores - scores.max())
    total = e.sum(dim=-1, keepdim=True)
    weights = e / torch.where(total > 0, total, torch.ones_like(total))
    return weights @ V, weights
""", "one maximum was subtracted for the whole array"),
    (CH4, "MultiHeadAttention", "bias-ignored", """
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
""", "bias=False must build"),
    (CH2, "softmax", "float32", """
def softmax(z, axis=-1):
    z = np.asarray(z, dtype=np.float32)
    e = np.exp(z - z.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)
""", "not float64"),
    (CH3, "softmax_jacobian", "mutates-p", """
def softmax_jacobian(p):
    J = -np.outer(p, p)
    p *= 1 - p
    return J + np.diag(p) + np.diag(np.outer(p, p).diagonal() * 0)
""", "modified one of its input arrays in place"),
    # the notebook says "without a Python loop over the queries": a loop is counted, not timed
    (CH2, "dot_product_attention", "one-query-at-a-time", """
def dot_product_attention(Q, K, V):
    pairs = [attend(q, K, V) for q in Q]
    return np.stack([c for c, _ in pairs]), np.stack([w for _, w in pairs])
""", "one query row was taken alone"),
    (CH1, "rnn_step", "squeezes-batch-of-one", """
def rnn_step(x_t, h_prev, W_xh, W_hh, b):
    return np.squeeze(np.tanh(x_t @ W_xh + h_prev @ W_hh + b))
""", "has shape"),
    (CH3, "scaled_dot_product_attention", "squeezes-batch-of-one", """
def scaled_dot_product_attention(Q, K, V, mask=None):
    Q, K, V = np.squeeze(Q), np.squeeze(K), np.squeeze(V)
    scores = Q @ np.swapaxes(K, -1, -2) / np.sqrt(Q.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    with np.errstate(invalid="ignore"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        weights = np.nan_to_num(e / e.sum(axis=-1, keepdims=True))
    return weights @ V, weights
""", "has shape"),
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


@pytest.mark.parametrize(
    "assignment,exercise,code,expect",
    [pytest.param(a, e, c, x, id=f"{e}-{s}") for a, e, s, c, x in WRONG],
)
def test_false_pass_class_loses_points(assignment, exercise, code, expect):
    failures = [v for v in _outcome(assignment, exercise, code).values() if v]
    assert failures, f"this wrong {exercise} kept every point"
    assert any(expect in f for f in failures), (
        f"no failure says {expect!r}; messages:\n" + "\n---\n".join(failures)
    )


def test_every_chapter_1_to_5_has_correct_styles():
    assert {a for a, *_ in CORRECT} == {CH1, CH2, CH3, CH4, CH5}
