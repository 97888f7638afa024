"""Multi-head attention (chapter 4).

    head_i = Attention(Q W_q^(i), K W_k^(i), V W_v^(i))        i = 1 .. h
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W_o

Each head works in its own subspace of size d_head = d_model / h. Instead of h small matrices
we keep one (d_model, d_model) projection per role and split its output into h slices of
d_head columns: slice i of ``X @ W_q`` is ``X @ W_q^(i)``. So the parameter count is that of
one full-width head, 4 d_model^2 weights plus 4 d_model biases, whatever h is.

Row-vector convention: a token is a row and a projection is ``X @ W``. ``nn.Linear`` stores
the transpose, ``weight = W.T``, and computes ``X @ weight.T + bias``.

Masks are boolean, True = may attend, broadcastable to the weights' shape (B, h, n_q, n_k):
a key padding mask is passed as (B, 1, 1, n_k), a causal mask as (n_q, n_k). A query with no
visible key gets all-zero weights and a zero attention output, so its final output is the
bias of W_o.

This module never calls ``nn.MultiheadAttention`` or ``F.scaled_dot_product_attention``: it is
built on the chapter-3 reference so that comparing it with torch's module means something.
"""

from __future__ import annotations

import torch
from torch import nn

from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch


def split_heads(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, n, d_model) -> (B, h, n, d_head): head i gets feature columns i*d_head .. (i+1)*d_head.

    The features are first cut into h groups, (B, n, h, d_head), and only then is the head
    axis moved in front of the sequence axis. Reshaping straight to (B, h, n, d_head) would
    mix the tokens of different positions into one "head".
    """
    B, n, d_model = x.shape
    if d_model % num_heads:
        raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
    d_head = d_model // num_heads
    x = x.reshape(B, n, num_heads, d_head)  # (B, n, h, d_head)
    return x.transpose(1, 2)  # (B, h, n, d_head)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """(B, h, n, d_head) -> (B, n, h * d_head), the inverse of :func:`split_heads`.

    Row t of the result is the concatenation [head_1[t], ..., head_h[t]].
    """
    B, h, n, d_head = x.shape
    x = x.transpose(1, 2)  # (B, n, h, d_head), no longer contiguous
    return x.reshape(B, n, h * d_head)  # (B, n, d_model)


class AttentionProjections(nn.Module):
    """The parameters of multi-head attention: ``W_q``, ``W_k``, ``W_v``, ``W_o``, each
    ``nn.Linear(d_model, d_model, bias=bias)`` (registered in that order), and the sizes
    ``d_model``, ``num_heads`` and ``d_head = d_model / num_heads``. The attention modules
    below and chapter 7's cached layer inherit them and define ``forward``."""

    d_model: int
    num_heads: int
    d_head: int
    W_q: nn.Linear
    W_k: nn.Linear
    W_v: nn.Linear
    W_o: nn.Linear

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        for name in ("W_q", "W_k", "W_v", "W_o"):
            setattr(self, name, nn.Linear(d_model, d_model, bias=bias))


class MultiHeadAttention(AttentionProjections):
    """h heads of scaled dot-product attention with learned projections W_q, W_k, W_v, W_o.

    forward(query (B, n_q, d_model), key (B, n_k, d_model), value (B, n_k, d_model),
    mask=None) returns (out (B, n_q, d_model), weights (B, h, n_q, n_k)). Each head scales its
    scores by 1/sqrt(d_head), the size of the vectors it compares, not by 1/sqrt(d_model).
    """

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.num_heads
        q = split_heads(self.W_q(query), h)  # (B, h, n_q, d_head)
        k = split_heads(self.W_k(key), h)  # (B, h, n_k, d_head)
        v = split_heads(self.W_v(value), h)  # (B, h, n_k, d_head)
        heads, weights = scaled_dot_product_attention_torch(q, k, v, mask)  # (B, h, n_q, d_head)
        out = self.W_o(merge_heads(heads))  # (B, n_q, d_model)
        return out, weights  # (B, n_q, d_model), (B, h, n_q, n_k)


# ---------------------------------------------------------------- torch's nn.MultiheadAttention


def copy_weights_to_torch(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    """Copy our projections into torch's module, in place.

    torch packs the three input projections into one ``in_proj_weight`` of shape
    (3 d_model, d_model): rows [W_q.weight; W_k.weight; W_v.weight], each of them in
    ``nn.Linear``'s layout (the transpose of the row-vector W). ``out_proj`` is W_o.
    """
    d = ours.d_model
    if theirs.embed_dim != d or theirs.num_heads != ours.num_heads or not theirs._qkv_same_embed_dim:
        raise ValueError("the two modules differ in d_model, num_heads or key/value sizes")
    with torch.no_grad():
        for i, proj in enumerate((ours.W_q, ours.W_k, ours.W_v)):
            theirs.in_proj_weight[i * d : (i + 1) * d].copy_(proj.weight)
            if theirs.in_proj_bias is not None:
                theirs.in_proj_bias[i * d : (i + 1) * d].copy_(proj.bias)
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        if theirs.out_proj.bias is not None:
            theirs.out_proj.bias.copy_(ours.W_o.bias)


def copy_weights_from_torch(theirs: nn.MultiheadAttention, ours: MultiHeadAttention) -> None:
    """The inverse of :func:`copy_weights_to_torch`: unpack torch's in_proj into W_q, W_k, W_v."""
    d = ours.d_model
    with torch.no_grad():
        for i, proj in enumerate((ours.W_q, ours.W_k, ours.W_v)):
            proj.weight.copy_(theirs.in_proj_weight[i * d : (i + 1) * d])
            if proj.bias is not None:
                proj.bias.copy_(theirs.in_proj_bias[i * d : (i + 1) * d])
        ours.W_o.weight.copy_(theirs.out_proj.weight)
        if ours.W_o.bias is not None:
            ours.W_o.bias.copy_(theirs.out_proj.bias)


def to_torch_multihead(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    """A new ``nn.MultiheadAttention(batch_first=True)`` computing the same function as ``ours``."""
    bias = ours.W_q.bias is not None
    weight = ours.W_q.weight
    theirs = nn.MultiheadAttention(
        ours.d_model,
        ours.num_heads,
        bias=bias,
        batch_first=True,
        device=weight.device,
        dtype=weight.dtype,
    )
    copy_weights_to_torch(ours, theirs)
    return theirs


def torch_attn_mask(mask: torch.Tensor, batch: int, num_heads: int, n_q: int, n_k: int) -> torch.Tensor:
    """Our mask as ``nn.MultiheadAttention``'s boolean ``attn_mask``.

    Ours: True = may attend, broadcastable to (B, h, n_q, n_k). Theirs: True = may NOT
    attend, shape (B * h, n_q, n_k).
    """
    full = mask.to(torch.bool).expand(batch, num_heads, n_q, n_k)  # (B, h, n_q, n_k)
    return ~full.reshape(batch * num_heads, n_q, n_k)  # (B*h, n_q, n_k), True = blocked
