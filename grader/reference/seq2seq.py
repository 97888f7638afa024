"""The whole encoder-decoder Transformer, trained and decoded (chapter 8).

Assembly. ``TinyTranslator`` is the original architecture at toy size, built from the
chapter-5 layers:

    encode(src)   = EncoderLayer^N( E_src[src] * sqrt(d_model) + PE )             (B, n_src, d_model)
    decode(y, m)  = DecoderLayer^N( E_tgt[y] * sqrt(d_model) + PE, m ) @ W_out + b  (B, n_tgt, V)

It builds every mask itself from the token ids: the source padding mask (src != pad_id) hides
padded source positions from the encoder's self-attention and from cross-attention; the
target padding mask (tgt_in != pad_id) and the causal mask (built inside each decoder layer)
restrict the decoder's self-attention. With the weights copied, it computes the same function
as ``nn.Transformer`` (post-norm, ReLU, dropout 0) wrapped in the same embeddings and output
projection (:func:`torch_transformer_logits`).

Training with teacher forcing. The decoder reads the reference translation shifted right by
one position, ``tgt_in = [BOS, y_1, ..., y_{n-1}]`` (:func:`shift_right`), and at every
position t is trained to predict ``y_t``: one forward pass scores every position at once.
:func:`translation_loss` is the mean cross-entropy over the positions whose target is not
padding; with label smoothing eps the target distribution is (1 - eps) one-hot + eps / V
uniform, so the loss is (1 - eps) (-log p_y) + eps * mean_v (-log p_v), as in
``F.cross_entropy(..., label_smoothing=eps)``. :func:`train_step` is one step of gradient
descent on it, with the gradient's global norm clipped at 1.

Decoding. :func:`greedy_decode` is the plain loop of chapter 6, which runs the decoder over
the whole prefix at every step. :func:`greedy_decode_cached` returns the same ids while
computing each position once: the encoder runs once, each decoder layer projects the
source's keys and values for cross-attention once, and each step feeds one new token through
the layers, whose self-attention reads the earlier positions' keys and values from a
per-layer :class:`~grader.reference.at_scale.KVCache`. :func:`sample_next_token` replaces the
argmax by a draw from softmax(logits / T), optionally restricted to the k most likely tokens.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, cast

import torch
from torch import nn

from grader.reference.at_scale import KVCache
from grader.reference.multi_head import merge_heads, split_heads
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.reference.transformer import (
    DecoderLayer,
    EncoderLayer,
    causal_mask,
    key_padding,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
)
from grader.reference.translator import greedy_decode as chapter6_greedy_decode
from grader.reference.translator import positional_encoding

# ---------------------------------------------------------------- teacher forcing and the loss


def shift_right(tgt: torch.Tensor, bos_id: int) -> torch.Tensor:
    """(B, n) int64 -> (B, n): BOS, then tgt[:, :-1]. Position t of the result is the token
    the decoder reads when it must predict tgt[:, t]."""
    bos = torch.full_like(tgt[:, :1], bos_id)  # (B, 1)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, n)


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """log softmax over the last axis, z - max - log(sum(exp(z - max))): finite for any finite z."""
    shifted = logits - logits.amax(dim=-1, keepdim=True)  # (..., V), the largest entry is 0
    return shifted - shifted.exp().sum(dim=-1, keepdim=True).log()  # (..., V)


def translation_loss(
    logits: torch.Tensor, targets: torch.Tensor, pad_id: int, label_smoothing: float = 0.0
) -> torch.Tensor:
    """Mean cross-entropy over the positions whose target is not ``pad_id``; a 0-d tensor.

    logits (B, n, V), targets (B, n) int64. Per position the loss is
    (1 - eps) * (-log p[target]) + eps * mean_v (-log p[v]) with eps = ``label_smoothing``;
    the mean is over all real positions of the batch (token level, not sentence level).
    """
    log_p = log_softmax(logits)  # (B, n, V)
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)  # (B, n)
    uniform = -log_p.mean(dim=-1)  # (B, n): cross-entropy with the uniform distribution
    per_token = (1.0 - label_smoothing) * nll + label_smoothing * uniform  # (B, n)
    real = targets != pad_id  # (B, n)
    return torch.where(real, per_token, torch.zeros_like(per_token)).sum() / real.sum()


# ---------------------------------------------------------------- the assembled model


class TinyTranslator(nn.Module):
    """Embeddings, ``num_layers`` encoder and decoder layers (chapter 5) and an output layer.

    Submodules: ``src_embed``, ``tgt_embed`` (nn.Embedding), ``encoder_layers``,
    ``decoder_layers`` (nn.ModuleList), ``output_proj`` (nn.Linear(d_model, tgt_vocab)); the
    positional encoding is a buffer ``pe`` (max_len, d_model). ``encode(src) -> memory``,
    ``decode(tgt_in, memory, src_pad) -> logits`` and ``forward(src, tgt_in) -> logits``;
    ``decode`` keeps each layer's cross-attention weights in ``self.cross_weights``.
    """

    pe: torch.Tensor  # the buffer registered in __init__

    def __init__(
        self,
        src_vocab: int,
        tgt_vocab: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        num_layers: int,
        pad_id: int,
        max_len: int = 512,
    ) -> None:
        super().__init__()
        self.d_model, self.num_heads, self.pad_id = d_model, num_heads, pad_id
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        for embedding in (self.src_embed, self.tgt_embed):
            # entries of size 1/sqrt(d_model): of size 1 after the sqrt(d_model) scaling, like PE's
            nn.init.normal_(embedding.weight, std=d_model**-0.5)
        pe = torch.from_numpy(positional_encoding(max_len, d_model))  # (max_len, d_model) float64
        self.register_buffer("pe", pe, persistent=False)  # float64 whatever the default: .float() converts it
        self.encoder_layers = nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.output_proj = nn.Linear(d_model, tgt_vocab)
        self.cross_weights: list[torch.Tensor] = []

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        """ids (B, n) at positions start .. start + n - 1 -> E[ids] sqrt(d_model) + PE, (B, n, d_model)."""
        x = embedding(ids) * math.sqrt(self.d_model)  # (B, n, d_model)
        return x + self.pe[start : start + ids.shape[1]].to(x.dtype)  # (B, n, d_model)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src (B, n_src) -> memory (B, n_src, d_model); padded positions never reach real ones."""
        src_pad = src != self.pad_id  # (B, n_src), True = real token
        x = self.embed(self.src_embed, src)
        for layer in self.encoder_layers:
            x = layer(x, src_pad)  # (B, n_src, d_model)
        return x

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
        """tgt_in (B, n_tgt), memory (B, n_src, d_model), src_pad (B, n_src) -> logits (B, n_tgt, V).

        Position t sees tgt_in[:, :t+1] (the causal mask inside each layer) minus padding."""
        y = self.embed(self.tgt_embed, tgt_in)  # (B, n_tgt, d_model)
        tgt_pad = tgt_in != self.pad_id  # (B, n_tgt)
        self.cross_weights = []
        for layer in self.decoder_layers:
            y, weights = layer(y, memory, tgt_pad, src_pad)  # weights (B, h, n_tgt, n_src)
            self.cross_weights.append(weights.detach())
        return self.output_proj(y)  # (B, n_tgt, V)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_in, self.encode(src), src != self.pad_id)  # (B, n_tgt, V)


# ---------------------------------------------------------------- against nn.Transformer


def to_torch_transformer(model: TinyTranslator) -> nn.Transformer:
    """``nn.Transformer`` (batch_first, post-norm, ReLU, dropout 0) with ``model``'s layers.

    nn.Transformer ends each stack with a LayerNorm of its own, which the original post-norm
    architecture (and ours) does not have: both are removed (set to None).
    """
    encoder_layers = cast(list[EncoderLayer], list(model.encoder_layers))
    decoder_layers = cast(list[DecoderLayer], list(model.decoder_layers))
    first = encoder_layers[0]
    weight = first.self_attn.W_q.weight
    with warnings.catch_warnings():  # "enable_nested_tensor is True, but ...": it is turned off below
        warnings.simplefilter("ignore")
        theirs = nn.Transformer(
            d_model=model.d_model,
            nhead=model.num_heads,
            num_encoder_layers=len(model.encoder_layers),
            num_decoder_layers=len(model.decoder_layers),
            dim_feedforward=cast(nn.Linear, first.ff[0]).out_features,
            dropout=0.0,
            activation="relu",
            batch_first=True,
            norm_first=False,
            device=weight.device,
            dtype=weight.dtype,
        )
    theirs.encoder.layers = nn.ModuleList(to_torch_encoder_layer(x) for x in encoder_layers)
    theirs.decoder.layers = nn.ModuleList(to_torch_decoder_layer(x) for x in decoder_layers)
    theirs.encoder.norm = theirs.decoder.norm = None
    theirs.encoder.enable_nested_tensor = theirs.encoder.use_nested_tensor = False
    return theirs


def torch_transformer_logits(model: TinyTranslator, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
    """The logits of ``model`` computed by ``nn.Transformer`` between its embeddings and its
    output layer, with torch's masks (True = ignore). Run in training mode with dropout 0, so
    that torch's inference fast path (which treats padded rows its own way) is not taken."""
    theirs = to_torch_transformer(model).train()
    n_tgt = tgt_in.shape[1]
    src_ignored = src == model.pad_id  # (B, n_src), True = padding
    out = theirs(
        model.embed(model.src_embed, src),
        model.embed(model.tgt_embed, tgt_in),
        tgt_mask=~causal_mask(n_tgt).to(src.device),  # (n_tgt, n_tgt), True = future
        src_key_padding_mask=src_ignored,
        tgt_key_padding_mask=tgt_in == model.pad_id,
        memory_key_padding_mask=src_ignored,
    )  # (B, n_tgt, d_model)
    return model.output_proj(out)  # (B, n_tgt, V)


# ---------------------------------------------------------------- one training step


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    src: torch.Tensor | None,
    tgt: torch.Tensor,
    pad_id: int,
    bos_id: int,
    label_smoothing: float = 0.0,
    max_grad_norm: float = 1.0,
) -> float:
    """One step of teacher forcing: zero the gradients, predict ``tgt`` from ``src`` (None for
    a model that reads no source) and shift_right(tgt), back-propagate the padded loss, clip
    the gradients' global norm at ``max_grad_norm``, update. Returns the loss before the
    update, as a float."""
    optimizer.zero_grad()
    logits = model(src, shift_right(tgt, bos_id))  # (B, n_tgt, V)
    loss = translation_loss(logits, tgt, pad_id, label_smoothing)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    optimizer.step()
    return float(loss.item())


def warmup_inverse_sqrt(step: int, warmup: int) -> float:
    """The learning-rate factor of "Attention Is All You Need", normalised to peak at 1:
    linear from 1/warmup up to 1 over the first ``warmup`` steps, then sqrt(warmup / step)."""
    step = max(step, 1)
    return min(step / warmup, math.sqrt(warmup / step))


# ---------------------------------------------------------------- decoding


def greedy_decode(model: Any, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int) -> torch.Tensor:
    """The uncached loop: at every step the decoder reruns over the whole prefix
    [BOS, y_1, ..., y_t]. Returns the generated ids, int64 (B, T), without the BOS; a finished
    sentence repeats ``eos_id``; decoding stops when every sentence has emitted EOS or after
    ``max_len`` tokens. ``model`` has encode(src), decode(tgt, memory, src_pad) and pad_id:
    chapter 6's loop (:func:`grader.reference.translator.greedy_decode`, the one definition)
    with the source padding. (decode reads a pad_id in its input as padding: a model that
    predicted pad_id would see that position hidden from then on, so the cached loop agrees
    only with models that never predict it, as a trained one does not.)"""
    return chapter6_greedy_decode(model, src, max_len, bos_id, eos_id, source_padding=True)


def cross_keys_values(layer: DecoderLayer, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values that ``layer``'s cross-attention reads: (B, h, n_src, d_head) each.
    They depend on the source only, so a decode computes them once per layer."""
    attn = layer.cross_attn
    h = attn.num_heads
    return split_heads(attn.W_k(memory), h), split_heads(attn.W_v(memory), h)


def decoder_layer_step(
    layer: DecoderLayer,
    y: torch.Tensor,
    cache: KVCache,
    cross_kv: tuple[torch.Tensor, torch.Tensor],
    src_keys: torch.Tensor,
) -> torch.Tensor:
    """One decoder layer (post-norm) on the newest position only.

    y (B, 1, d_model) is the layer's input at the new position; its key and value join
    ``cache`` (the earlier positions' keys and values of this layer's self-attention), and
    its query attends to all of them: the cache holds only positions <= the new one, so no
    causal mask is needed. ``cross_kv`` are the source's keys and values, ``src_keys`` the
    source padding as an attention mask (B, 1, 1, n_src). Returns (B, 1, d_model).
    """
    attn = layer.self_attn
    h = attn.num_heads
    q = split_heads(attn.W_q(y), h)  # (B, h, 1, d_head)
    k, v = cache.append(split_heads(attn.W_k(y), h), split_heads(attn.W_v(y), h))  # (B, h, t + 1, d_head)
    heads, _ = scaled_dot_product_attention_torch(q, k, v)  # (B, h, 1, d_head)
    y = layer.norm1(y + attn.W_o(merge_heads(heads)))  # (B, 1, d_model)
    cross = layer.cross_attn
    q = split_heads(cross.W_q(y), h)  # (B, h, 1, d_head)
    heads, _ = scaled_dot_product_attention_torch(q, *cross_kv, src_keys)  # (B, h, 1, d_head)
    y = layer.norm2(y + cross.W_o(merge_heads(heads)))  # (B, 1, d_model)
    return layer.norm3(y + layer.ff(y))  # (B, 1, d_model)


@torch.no_grad()
def greedy_decode_cached(
    model: Any, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int
) -> torch.Tensor:
    """The same ids as :func:`greedy_decode`, each position computed once.

    Uses of ``model``: encode(src) (once), pad_id, d_model, tgt_embed, decoder_layers (each
    with self_attn, cross_attn, ff, norm1, norm2, norm3) and output_proj; the token at step
    t sits at position t (BOS at 0) and is embedded as E_tgt[y] sqrt(d_model) + PE[t].
    """
    memory = model.encode(src)  # (B, n_src, d_model), once
    src_keys = key_padding(src != model.pad_id)  # (B, 1, 1, n_src)
    layers = list(model.decoder_layers)
    cross = [cross_keys_values(layer, memory) for layer in layers]  # once per layer
    caches = [KVCache() for _ in layers]
    pe = torch.from_numpy(positional_encoding(max(max_len, 1), model.d_model)).to(memory.dtype)
    B = src.shape[0]
    token = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    out = []
    for t in range(max_len):
        y = model.tgt_embed(token) * math.sqrt(model.d_model) + pe[t]  # (B, 1, d_model)
        for layer, cache, kv in zip(layers, caches, cross, strict=True):
            y = decoder_layer_step(layer, y, cache, kv, src_keys)  # (B, 1, d_model)
        next_id = model.output_proj(y[:, -1]).argmax(dim=-1)  # (B,)
        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)
        out.append(next_id)
        finished |= next_id == eos_id
        token = next_id[:, None]  # (B, 1)
        if bool(finished.all()):
            break
    if not out:
        return torch.zeros((B, 0), dtype=torch.long, device=src.device)
    return torch.stack(out, dim=1)  # (B, T)


# ---------------------------------------------------------------- sampling


def sample_next_token(
    logits: torch.Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One token per row of logits (B, V): int64 (B,).

    temperature 0 is the argmax. Otherwise the logits are divided by the temperature, all but
    the ``top_k`` largest of each row are set to -inf (None: keep all), and the token is drawn
    from the softmax with ``torch.multinomial(p, 1, generator=generator)``.
    """
    if temperature == 0:
        return logits.argmax(dim=-1)  # (B,)
    z = logits / temperature  # (B, V)
    if top_k is not None and top_k < z.shape[-1]:
        kth = torch.topk(z, top_k, dim=-1).values[..., -1:]  # (B, 1), the k-th largest
        z = z.masked_fill(z < kth, float("-inf"))  # (B, V)
    p = (z - z.amax(dim=-1, keepdim=True)).exp()  # (B, V), 0 where filtered
    p = p / p.sum(dim=-1, keepdim=True)
    return torch.multinomial(p, 1, generator=generator).squeeze(-1)  # (B,)


# ---------------------------------------------------------------- sizes


def parameter_counts(model: TinyTranslator) -> dict[str, int]:
    """Parameters per part of the model, in the order data flows through them."""
    encoder_layers = cast(list[EncoderLayer], list(model.encoder_layers))
    decoder_layers = cast(list[DecoderLayer], list(model.decoder_layers))
    parts: dict[str, nn.Module | list[nn.Module]] = {
        "source embedding": model.src_embed,
        "target embedding": model.tgt_embed,
        "encoder self-attention": [layer.self_attn for layer in encoder_layers],
        "encoder feed-forward": [layer.ff for layer in encoder_layers],
        "encoder LayerNorms": [n for layer in encoder_layers for n in (layer.norm1, layer.norm2)],
        "decoder self-attention": [layer.self_attn for layer in decoder_layers],
        "decoder cross-attention": [layer.cross_attn for layer in decoder_layers],
        "decoder feed-forward": [layer.ff for layer in decoder_layers],
        "decoder LayerNorms": [
            n for layer in decoder_layers for n in (layer.norm1, layer.norm2, layer.norm3)
        ],
        "output projection": model.output_proj,
    }
    counts = {}
    for name, modules in parts.items():
        modules = modules if isinstance(modules, list) else [modules]
        counts[name] = sum(p.numel() for m in modules for p in m.parameters())
    return counts
