"""The three kinds of attention in a Transformer, and its encoder and decoder layers (chapter 5).

- encoder self-attention: queries, keys and values all come from the source sequence; a key
  padding mask hides the padding of shorter sentences in a batch;
- masked decoder self-attention: the same on the target sequence, plus a causal mask, so
  that position i only sees positions j <= i;
- cross-attention: queries from the decoder, keys and values from the encoder's output
  (``memory``), whose length may differ.

Both layers are post-norm, as in "Attention Is All You Need": each sublayer is wrapped as
x = LayerNorm(x + Sublayer(x)). They have no dropout, so they are deterministic, and they
compute the same function as ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
(batch_first=True, norm_first=False, activation="relu", dropout=0) once the weights are
copied across with the helpers at the end of this file.

Masks are boolean, True = real token / may attend. torch's layers take the opposite
convention (True = ignore) for their key padding masks and boolean attention masks.
"""

from __future__ import annotations

from typing import Any, cast, overload

import torch
from torch import nn

from grader.reference.multi_head import (
    MultiHeadAttention,
    copy_weights_from_torch,
    copy_weights_to_torch,
)


def causal_mask(n: int) -> torch.Tensor:
    """Bool (n, n), True on and below the diagonal: query i may attend to keys j <= i."""
    return torch.ones(n, n, dtype=torch.bool).tril()  # (n, n)


def padding_mask(lengths: torch.Tensor, max_len: int) -> torch.Tensor:
    """Bool (B, max_len), True at the real tokens: entry (b, t) is t < lengths[b]."""
    positions = torch.arange(max_len, device=lengths.device)  # (max_len,)
    return positions < lengths[:, None]  # (B, max_len)


@overload
def key_padding(pad_mask: torch.Tensor) -> torch.Tensor: ...
@overload
def key_padding(pad_mask: None) -> None: ...
def key_padding(pad_mask: torch.Tensor | None) -> torch.Tensor | None:
    """A (B, n_k) padding mask as an attention mask (B, 1, 1, n_k): the same for every head and
    every query, hiding the padded keys."""
    return None if pad_mask is None else pad_mask[:, None, None, :]  # (B, 1, 1, n_k)


def feed_forward(d_model: int, d_ff: int) -> nn.Sequential:
    """The position-wise feed-forward network FFN(x) = ReLU(x W_1 + b_1) W_2 + b_2."""
    return nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with a residual connection and a LayerNorm after.

    forward(x (B, n, d_model), pad_mask (B, n) bool, True = real token) -> (B, n, d_model).
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = feed_forward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        attended, _ = self.self_attn(x, x, x, key_padding(pad_mask))  # (B, n, d_model)
        x = self.norm1(x + attended)  # (B, n, d_model)
        return self.norm2(x + self.ff(x))  # (B, n, d_model)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder's output, then feed-forward.

    forward(y (B, n_tgt, d_model), memory (B, n_src, d_model), tgt_pad_mask (B, n_tgt),
    memory_pad_mask (B, n_src)) -> (y (B, n_tgt, d_model), cross_weights (B, h, n_tgt, n_src)).
    The causal mask is built inside: target position i sees target positions j <= i.
    """

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = feed_forward(d_model, d_ff)
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
        self_mask = causal_mask(y.shape[1]).to(y.device)  # (n_tgt, n_tgt)
        if tgt_pad_mask is not None:
            self_mask = self_mask & key_padding(tgt_pad_mask)  # (B, 1, n_tgt, n_tgt)
        attended, _ = self.self_attn(y, y, y, self_mask)  # (B, n_tgt, d_model)
        y = self.norm1(y + attended)
        attended, cross_weights = self.cross_attn(
            y, memory, memory, key_padding(memory_pad_mask)
        )  # (B, n_tgt, d_model), (B, h, n_tgt, n_src)
        y = self.norm2(y + attended)
        y = self.norm3(y + self.ff(y))  # (B, n_tgt, d_model)
        return y, cross_weights


# ---------------------------------------------------------------- torch's layers

# (our submodule, torch's submodule) pairs of plain modules whose parameters match one to one.
_ENCODER_PAIRS = (("ff.0", "linear1"), ("ff.2", "linear2"), ("norm1", "norm1"), ("norm2", "norm2"))
_DECODER_PAIRS = _ENCODER_PAIRS + (("norm3", "norm3"),)
# (our attention, torch's attention)
_ENCODER_ATTENTION = (("self_attn", "self_attn"),)
_DECODER_ATTENTION = (("self_attn", "self_attn"), ("cross_attn", "multihead_attn"))


def _copy_layer(
    ours: EncoderLayer | DecoderLayer,
    theirs: nn.TransformerEncoderLayer | nn.TransformerDecoderLayer,
    pairs: tuple[tuple[str, str], ...],
    attention: tuple[tuple[str, str], ...],
    to_torch: bool,
) -> None:
    with torch.no_grad():
        for our_name, their_name in pairs:
            a, b = ours.get_submodule(our_name), theirs.get_submodule(their_name)
            src, dst = (a, b) if to_torch else (b, a)
            for name, param in dst.named_parameters():
                param.copy_(src.get_parameter(name))
    for our_name, their_name in attention:
        our_attn = cast(MultiHeadAttention, ours.get_submodule(our_name))
        their_attn = cast(nn.MultiheadAttention, theirs.get_submodule(their_name))
        if to_torch:
            copy_weights_to_torch(our_attn, their_attn)
        else:
            copy_weights_from_torch(their_attn, our_attn)


def _layer_kwargs(ours: EncoderLayer | DecoderLayer) -> dict[str, Any]:
    attn = ours.self_attn
    weight = attn.W_q.weight
    return {
        "d_model": attn.d_model,
        "nhead": attn.num_heads,
        "dim_feedforward": cast(nn.Linear, ours.ff[0]).out_features,
        "dropout": 0.0,
        "activation": "relu",
        "batch_first": True,
        "norm_first": False,
        "device": weight.device,
        "dtype": weight.dtype,
    }


def to_torch_encoder_layer(ours: EncoderLayer) -> nn.TransformerEncoderLayer:
    """A new ``nn.TransformerEncoderLayer`` (dropout 0, batch_first, post-norm) equal to ``ours``.

    Call it with ``src_key_padding_mask=~pad_mask`` (torch: True = ignore).
    """
    theirs = nn.TransformerEncoderLayer(**_layer_kwargs(ours))
    _copy_layer(ours, theirs, _ENCODER_PAIRS, _ENCODER_ATTENTION, to_torch=True)
    return theirs


def from_torch_encoder_layer(theirs: nn.TransformerEncoderLayer) -> EncoderLayer:
    """A new :class:`EncoderLayer` with the weights of torch's layer."""
    attn = theirs.self_attn
    ours = EncoderLayer(attn.embed_dim, attn.num_heads, theirs.linear1.out_features)
    ours.to(dtype=attn.in_proj_weight.dtype, device=attn.in_proj_weight.device)
    _copy_layer(ours, theirs, _ENCODER_PAIRS, _ENCODER_ATTENTION, to_torch=False)
    return ours


def to_torch_decoder_layer(ours: DecoderLayer) -> nn.TransformerDecoderLayer:
    """A new ``nn.TransformerDecoderLayer`` (dropout 0, batch_first, post-norm) equal to ``ours``.

    Call it with ``tgt_mask=~causal_mask(n_tgt)``, ``tgt_key_padding_mask=~tgt_pad_mask`` and
    ``memory_key_padding_mask=~memory_pad_mask``: torch builds no causal mask by itself.
    """
    theirs = nn.TransformerDecoderLayer(**_layer_kwargs(ours))
    _copy_layer(ours, theirs, _DECODER_PAIRS, _DECODER_ATTENTION, to_torch=True)
    return theirs


def from_torch_decoder_layer(theirs: nn.TransformerDecoderLayer) -> DecoderLayer:
    """A new :class:`DecoderLayer` with the weights of torch's layer."""
    attn = theirs.self_attn
    ours = DecoderLayer(attn.embed_dim, attn.num_heads, theirs.linear1.out_features)
    ours.to(dtype=attn.in_proj_weight.dtype, device=attn.in_proj_weight.device)
    _copy_layer(ours, theirs, _DECODER_PAIRS, _DECODER_ATTENTION, to_torch=False)
    return ours
