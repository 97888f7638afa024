"""Building blocks that later chapters give ready-made, as thin adapters over PyTorch's own.

A chapter's setup cell imports what it needs under the name its exercises use, e.g.
``from attention_learner.blocks import GivenMultiHeadAttention as MultiHeadAttention``.
These are not the course's reference implementations and contain none of the exercises'
steps: the work is done by ``torch.nn.functional.scaled_dot_product_attention`` and
``torch.nn.functional.multi_head_attention_forward``. The adapters only translate the
course's conventions (masks are bool with True = may attend; a query that may see no key
gets all-zero weights and a zero attention output, never NaN).

Chapter 8 assembles a whole Transformer and is given the pieces of chapters 5 and 6:
``GivenEncoderLayer`` and ``GivenDecoderLayer`` (post-norm, with the submodule names of
chapter 5's contract, so that a learner's own layers can take their place) compose
``GivenMultiHeadAttention`` with torch's ``nn.LayerNorm`` and ``nn.Linear``, and
``given_positional_encoding`` is the sinusoidal encoding of chapter 6. Each is listed in the
grader's delegation rules for the exercise it answers, so it earns nothing there.
"""

from __future__ import annotations

from typing import Literal, overload

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "GivenDecoderLayer",
    "GivenEncoderLayer",
    "GivenMultiHeadAttention",
    "given_attention",
    "given_positional_encoding",
]


def given_attention(
    Q: torch.Tensor, K: torch.Tensor, V: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V and the weights, via F.scaled_dot_product_attention.

    Q (..., n_q, d_k), K (..., n_k, d_k), V (..., n_k, d_v); mask bool, True = may attend,
    broadcastable to (..., n_q, n_k). Returns (output (..., n_q, d_v), weights (..., n_q, n_k)).
    The weights are attention applied to the identity as values: softmax(...) @ I.
    A query row with no visible key gets zero weights and a zero output, on every torch
    version: such rows are computed with every key visible and then zeroed, so that no NaN
    reaches the forward or the backward pass.
    """
    n_k = K.shape[-2]
    # torch's CPU kernel does not compare the lengths: K and V of different lengths give a
    # silently wrong output, and a backward that crashes or hangs the process
    if V.shape[-2] != n_k or Q.shape[-1] != K.shape[-1]:
        raise ValueError(
            f"given_attention: K {tuple(K.shape)} and V {tuple(V.shape)} must have the same length "
            f"(axis -2), and Q {tuple(Q.shape)} and K the same width (axis -1)"
        )
    attn_mask, visible = None, None
    if mask is not None:
        # torch.broadcast_shapes is unannotated (it returns a torch.Size)
        scores_shape = torch.broadcast_shapes(Q.shape[:-1] + (n_k,), mask.shape)  # type: ignore[no-untyped-call]
        mask = mask.to(torch.bool).expand(scores_shape)
        visible = mask.any(dim=-1, keepdim=True)  # (..., n_q, 1)
        attn_mask = mask | ~visible  # rows with no visible key: every key, zeroed below
    eye = torch.eye(n_k, dtype=V.dtype, device=V.device).expand(*K.shape[:-2], n_k, n_k)
    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=attn_mask)  # (..., n_q, d_v)
    weights = F.scaled_dot_product_attention(Q, K, eye, attn_mask=attn_mask)  # (..., n_q, n_k)
    if visible is not None:
        out = torch.where(visible, out, torch.zeros((), dtype=out.dtype))
        weights = torch.where(visible, weights, torch.zeros((), dtype=weights.dtype))
    return out, weights


class GivenMultiHeadAttention(nn.Module):
    """Multi-head attention with the course's interface, computed by torch's own
    ``F.multi_head_attention_forward``.

    Parameters: ``W_q, W_k, W_v, W_o``, each ``nn.Linear(d_model, d_model, bias=bias)`` (a
    projection is x @ W, so each Linear holds W.T). ``forward(query (B, n_q, d_model), key
    (B, n_k, d_model), value (B, n_k, d_model), mask=None)`` returns (out (B, n_q, d_model),
    weights (B, h, n_q, n_k)); mask bool, True = may attend, broadcastable to (B, h, n_q, n_k).
    A query that may see no key in a head gets zero weights and a zero context in that head
    (the output is then W_o's bias there when every head is blind). No dropout.
    """

    def __init__(self, d_model: int, num_heads: int, bias: bool = True) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} is not divisible by num_heads={num_heads}")
        self.d_model, self.num_heads = d_model, num_heads
        self.W_q = nn.Linear(d_model, d_model, bias=bias)
        self.W_k = nn.Linear(d_model, d_model, bias=bias)
        self.W_v = nn.Linear(d_model, d_model, bias=bias)
        self.W_o = nn.Linear(d_model, d_model, bias=bias)

    @overload
    def _torch_forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        blocked: torch.Tensor | None,
        need_weights: Literal[True],
    ) -> tuple[torch.Tensor, torch.Tensor]: ...
    @overload
    def _torch_forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        blocked: torch.Tensor | None,
        need_weights: Literal[False],
    ) -> tuple[torch.Tensor, None]: ...
    def _torch_forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        blocked: torch.Tensor | None,
        need_weights: bool,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """torch's multi-head attention on (B, n, d_model) inputs: (out (n_q, B, d_model),
        weights (B, h, n_q, n_k) when ``need_weights``, else None)."""
        in_bias = None
        if self.W_q.bias is not None:
            in_bias = torch.cat([self.W_q.bias, self.W_k.bias, self.W_v.bias])  # (3 d_model,)
        return F.multi_head_attention_forward(
            query.transpose(0, 1),  # (n_q, B, d_model): torch's sequence-first layout
            key.transpose(0, 1),  # (n_k, B, d_model)
            value.transpose(0, 1),  # (n_k, B, d_model)
            self.d_model,
            self.num_heads,
            None,  # no packed in_proj_weight: the three projections are separate
            in_bias,
            None,
            None,
            False,
            0.0,
            self.W_o.weight,
            self.W_o.bias,
            training=self.training,
            need_weights=need_weights,
            attn_mask=blocked,  # (B h, n_q, n_k), True = may NOT attend (torch's convention)
            use_separate_proj_weight=True,
            q_proj_weight=self.W_q.weight,
            k_proj_weight=self.W_k.weight,
            v_proj_weight=self.W_v.weight,
            average_attn_weights=False,
        )

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        B, n_q, _ = query.shape
        n_k, h = key.shape[1], self.num_heads
        blocked = safe_blocked = visible = None
        if mask is not None:
            mask = mask.to(torch.bool).expand(B, h, n_q, n_k)  # (B, h, n_q, n_k)
            visible = mask.any(dim=-1, keepdim=True)  # (B, h, n_q, 1)
            blocked = (~mask).reshape(B * h, n_q, n_k)  # (B h, n_q, n_k)
            safe_blocked = (~(mask | ~visible)).reshape(B * h, n_q, n_k)  # blind rows see all
        # The output comes from torch's fused path (a blind query's context is zero there);
        # the per-head weights from its explicit path, on a mask where blind rows see every
        # key (so no NaN appears), zeroed afterwards.
        out, _ = self._torch_forward(query, key, value, blocked, need_weights=False)
        _, weights = self._torch_forward(query, key, value, safe_blocked, need_weights=True)
        if visible is not None:
            weights = torch.where(visible, weights, torch.zeros((), dtype=weights.dtype))
        return out.transpose(0, 1), weights  # (B, n_q, d_model), (B, h, n_q, n_k)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_head={self.d_model // self.num_heads}"


# ---------------------------------------------------------------- chapter 8's given layers


def _feed_forward(d_model: int, d_ff: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class GivenEncoderLayer(nn.Module):
    """Chapter 5's encoder layer: ``self_attn`` (GivenMultiHeadAttention), ``ff``
    (Linear(d_model, d_ff), ReLU, Linear(d_ff, d_model)), ``norm1``, ``norm2``.

    forward(x (B, n, d_model), pad_mask (B, n) bool, True = real token) -> (B, n, d_model),
    post-norm: x = norm1(x + self_attn(x, x, x)); x = norm2(x + ff(x)); padded keys hidden.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = GivenMultiHeadAttention(d_model, num_heads)
        self.ff = _feed_forward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        keys = None if pad_mask is None else pad_mask[:, None, None, :]  # (B, 1, 1, n)
        x = self.norm1(x + self.self_attn(x, x, x, keys)[0])  # (B, n, d_model)
        out: torch.Tensor = self.norm2(x + self.ff(x))  # (B, n, d_model)
        return out


class GivenDecoderLayer(nn.Module):
    """Chapter 5's decoder layer: ``self_attn``, ``cross_attn`` (GivenMultiHeadAttention),
    ``ff``, ``norm1``, ``norm2``, ``norm3``.

    forward(y (B, n_tgt, d_model), memory (B, n_src, d_model), tgt_pad_mask (B, n_tgt),
    memory_pad_mask (B, n_src)) -> (y (B, n_tgt, d_model), cross_weights (B, h, n_tgt, n_src)),
    post-norm; the causal mask is built inside (target position i sees positions j <= i).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = GivenMultiHeadAttention(d_model, num_heads)
        self.cross_attn = GivenMultiHeadAttention(d_model, num_heads)
        self.ff = _feed_forward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(
        self,
        y: torch.Tensor,
        memory: torch.Tensor,
        tgt_pad_mask: torch.Tensor | None = None,
        memory_pad_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        n = y.shape[1]
        own = torch.ones(n, n, dtype=torch.bool, device=y.device).tril()  # (n, n)
        if tgt_pad_mask is not None:
            own = own & tgt_pad_mask[:, None, None, :]  # (B, 1, n, n)
        y = self.norm1(y + self.self_attn(y, y, y, own)[0])  # (B, n_tgt, d_model)
        source = None if memory_pad_mask is None else memory_pad_mask[:, None, None, :]  # (B, 1, 1, n_src)
        attended, cross_weights = self.cross_attn(y, memory, memory, source)
        y = self.norm2(y + attended)  # (B, n_tgt, d_model)
        return self.norm3(y + self.ff(y)), cross_weights  # (B, n_tgt, d_model), (B, h, n_tgt, n_src)


def given_positional_encoding(n: int, d_model: int) -> np.ndarray:
    """Chapter 6's sinusoidal encoding, float64 (n, d_model): column 2i is sin(p w_i), column
    2i + 1 is cos(p w_i), w_i = 10000^(-2i / d_model), for positions p = 0 .. n - 1."""
    angles = np.arange(n)[:, None] * np.exp(-np.log(10000.0) * np.arange(0, d_model, 2) / d_model)
    encoding = np.zeros((n, d_model))
    encoding[:, 0::2] = np.sin(angles)  # (n, ceil(d_model / 2))
    encoding[:, 1::2] = np.cos(angles[:, : d_model // 2])  # (n, floor(d_model / 2))
    return encoding
