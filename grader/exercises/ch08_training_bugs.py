"""Chapter 8's classic bugs of shift_right, translation_loss, TinyTranslator and train_step,
each a model of the mistake run on the case's inputs (its outputs are compared with the
learner's: a bug is named only where its model reproduces them).
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch
from torch import nn

from attention_learner.torch_cases import tensor
from grader.exercises.ch08_models import Outputs, id_tensor, reference_translator, run_steps
from grader.exercises.spec import Inputs
from grader.reference.seq2seq import (
    log_softmax,
    shift_right,
    translation_loss,
)
from grader.reference.transformer import DecoderLayer, causal_mask, key_padding

# ---------------------------------------------------------------- shift_right


def _shift(build):
    return lambda i: {"tgt_in": build(id_tensor(i, "tgt"), i["bos_id"])}


def _bos(tgt: torch.Tensor, bos: int) -> torch.Tensor:
    return torch.full_like(tgt[:, :1], bos)


SHIFT_BUGS = {
    "the shift that drops the last token instead of prepending BOS (the decoder input is BOS, then "
    "tgt[:, :-1])": _shift(lambda t, b: t[:, :-1]),
    "BOS put in front of the whole target: drop the target's last token, so that the decoder input "
    "keeps the target's length": _shift(lambda t, b: torch.cat([_bos(t, b), t], dim=1)),
    "a shift to the left (tgt[:, 1:], then padding) instead of to the right": _shift(
        lambda t, b: torch.cat([t[:, 1:], torch.zeros_like(t[:, :1])], dim=1)
    ),
    "BOS put at the end instead of in front": _shift(lambda t, b: torch.cat([t[:, :-1], _bos(t, b)], dim=1)),
    "the first token replaced by BOS instead of shifting the target right": _shift(
        lambda t, b: torch.cat([_bos(t, b), t[:, 1:]], dim=1)
    ),
    "the target unchanged: the decoder must read it shifted right by one position": _shift(lambda t, b: t),
}


# ---------------------------------------------------------------- translation_loss


def _loss_parts(inputs: Inputs, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    targets = id_tensor(inputs, "targets")
    return log_softmax(logits), targets, targets != inputs["pad_id"]


def _per_token(log_p: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)  # (B, n)
    return (1 - eps) * nll - eps * log_p.mean(-1)


def _loss_bug(variant):
    """A classic mistake of the loss, as values and gradients: ``variant(inputs, logits)``."""

    def bug(inputs: Inputs) -> Outputs:
        logits = tensor(inputs["logits"], grad=True)
        loss = variant(inputs, logits)
        if loss is None:
            return {}
        loss = loss.reshape(1)
        loss.sum().backward()
        return {"loss": loss, "dlogits": logits.grad}

    return bug


def _all_positions(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p, targets, _ = _loss_parts(inputs, logits)
    return _per_token(log_p, targets, inputs["label_smoothing"]).mean()


def _per_sentence(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p, targets, real = _loss_parts(inputs, logits)
    per = _per_token(log_p, targets, inputs["label_smoothing"]) * real  # (B, n)
    return (per.sum(1) / real.sum(1)).mean()


def _summed(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p, targets, real = _loss_parts(inputs, logits)
    return (_per_token(log_p, targets, inputs["label_smoothing"]) * real).sum()


def _no_smoothing(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor | None:
    if not inputs["label_smoothing"]:
        return None
    return translation_loss(logits, id_tensor(inputs, "targets"), inputs["pad_id"])


def _smoothing_over_the_others(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor | None:
    eps = inputs["label_smoothing"]
    if not eps:
        return None
    log_p, targets, real = _loss_parts(inputs, logits)
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)
    others = (-log_p.sum(-1) - nll) / (log_p.shape[-1] - 1)  # mean over the V - 1 wrong tokens
    per = (1 - eps) * nll + eps * others
    return (per * real).sum() / real.sum()


def _wrong_axis(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p = log_softmax(logits.transpose(1, 2)).transpose(1, 2)  # normalised over the positions
    targets = id_tensor(inputs, "targets")
    real = targets != inputs["pad_id"]
    return (_per_token(log_p, targets, inputs["label_smoothing"]) * real).sum() / real.sum()


def _log_of_softmax(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log(torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True))  # overflows
    targets = id_tensor(inputs, "targets")
    real = targets != inputs["pad_id"]
    return (_per_token(log_p, targets, inputs["label_smoothing"]) * real).sum() / real.sum()


def _detached_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """z - logsumexp(z) with the log-sum-exp cut from the graph: the right values, and the
    gradient of z alone (the softmax term p - onehot loses its p)."""
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True).detach()  # (B, n, V)


def _detached_lse(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    targets = id_tensor(inputs, "targets")
    real = targets != inputs["pad_id"]
    per = _per_token(_detached_log_softmax(logits), targets, inputs["label_smoothing"])  # (B, n)
    return (per * real).sum() / real.sum()


DETACHED_LSE = (
    "the log-sum-exp detached from the graph (.detach(), .item() or a NumPy step): the loss's "
    "value is right, but its gradient misses the softmax's part; keep every step in torch"
)


def value_only(bug):
    """A loss bug's value without its gradient (for the case that compares the value only)."""

    def value(inputs: Inputs) -> Outputs:
        outputs = bug(inputs)
        return {"loss": outputs["loss"]} if outputs else {}

    return value


LOSS_BUGS = {
    "padding counted in the loss: the mean must be over the positions whose target is not pad_id "
    "only": _loss_bug(_all_positions),
    "a mean per sentence, then over the sentences: the mean is over all the real tokens of the batch "
    "together (a long sentence counts more)": _loss_bug(_per_sentence),
    "the sum of the real tokens' losses instead of their mean": _loss_bug(_summed),
    "label smoothing ignored": _loss_bug(_no_smoothing),
    "label smoothing spread over the V - 1 wrong tokens; here (as in F.cross_entropy) eps is spread "
    "over all V tokens, the right one included: (1 - eps) (-log p_y) + eps mean_v (-log p_v)": _loss_bug(
        _smoothing_over_the_others
    ),
    "a softmax over the positions instead of the vocabulary (the last axis)": _loss_bug(_wrong_axis),
    "the log of a softmax computed with exp of the raw logits, which overflows: use z - max(z) - "
    "log(sum(exp(z - max(z))))": _loss_bug(_log_of_softmax),
    DETACHED_LSE: _loss_bug(_detached_lse),
}


def _translator_variant(
    inputs: Inputs,
    scale: bool = True,
    positions: bool = True,
    encoder_mask: str = "right",
    cross_mask: str = "right",
    target_padding: bool = True,
    causal: bool = True,
    target_embedding: str = "tgt",
    pad_id: int | None = None,
    table: torch.dtype = torch.float64,
) -> Outputs:
    """The logits of the reference's weights with one classic mistake switched on."""
    model = reference_translator(inputs)
    src, tgt_in = id_tensor(inputs, "src"), id_tensor(inputs, "tgt_in")
    pad = inputs["pad_id"] if pad_id is None else pad_id
    d = model.d_model
    pe = model.pe.to(table).to(torch.float64)  # a float32 table: every entry rounded

    def embed(embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        x = embedding(ids) * (math.sqrt(d) if scale else 1.0)
        return x + pe[: ids.shape[1]] if positions else x

    src_pad, tgt_pad = src != pad, tgt_in != pad
    masks = {"right": src_pad, "none": None, "inverted": ~src_pad}
    with torch.no_grad():
        x = embed(model.src_embed, src)
        for layer in model.encoder_layers:
            x = layer(x, masks[encoder_mask])
        y = embed(model.src_embed if target_embedding == "src" else model.tgt_embed, tgt_in)
        n = tgt_in.shape[1]
        own = causal_mask(n) if causal else torch.ones(n, n, dtype=torch.bool)
        if target_padding:
            own = own & key_padding(tgt_pad)
        for layer in cast(list[DecoderLayer], list(model.decoder_layers)):
            y = layer.norm1(y + layer.self_attn(y, y, y, own)[0])
            y = layer.norm2(y + layer.cross_attn(y, x, x, key_padding(masks[cross_mask]))[0])
            y = layer.norm3(y + layer.ff(y))
        return {"logits": model.output_proj(y)}


def _translator_bug(**switches: Any):
    def bug(inputs: Inputs) -> Outputs:
        if switches.get("pad_id") == inputs["pad_id"]:
            return {}  # the mistake does not show with this pad_id
        return _translator_variant(inputs, **switches)

    return bug


TRANSLATOR_BUGS = {
    "embeddings not scaled by sqrt(d_model) before the positional encoding is added": _translator_bug(
        scale=False
    ),
    "no positional encoding added to the embeddings": _translator_bug(positions=False),
    "the source padding mask missing in the encoder's self-attention": _translator_bug(encoder_mask="none"),
    "the source padding mask missing in cross-attention (the "
    "decoder reads padded source positions)": _translator_bug(cross_mask="none"),
    "source padding masks missing everywhere (encoder and cross-attention)": _translator_bug(
        encoder_mask="none", cross_mask="none"
    ),
    "the source padding masks inverted: True must mark the real tokens, src != pad_id": _translator_bug(
        encoder_mask="inverted", cross_mask="inverted"
    ),
    "the target padding mask missing in the decoder's self-attention": _translator_bug(target_padding=False),
    "the causal mask missing in the decoder: position t sees the target tokens after it": _translator_bug(
        causal=False
    ),
    "the target ids embedded with the source embedding (the decoder has its own, tgt_embed)": _translator_bug(
        target_embedding="src"
    ),
    "masks built with pad_id 0 instead of the model's pad_id": _translator_bug(pad_id=0),
    "the positional table kept in float32 (its entries off by about 1e-7): keep it float64, as "
    "positional_encoding returns it, and add it with .to(x.dtype)": _translator_bug(table=torch.float32),
}
TORCH_TRANSLATOR_BUGS = {k: v for k, v in TRANSLATOR_BUGS.items()}


def _train_variant(zero_grad: str = "before", clip: str = "norm", decoder_input: str = "shifted",
                   loss_target: str = "tgt", loss: str = "right"):  # fmt: skip
    def step(model, optimizer, src, tgt, inputs) -> float:
        pad, bos = inputs["pad_id"], inputs["bos_id"]
        if zero_grad == "before":
            optimizer.zero_grad()
        tgt_in = shift_right(tgt, bos)
        logits = model(src, tgt_in if decoder_input == "shifted" else tgt)
        targets = tgt if loss_target == "tgt" else tgt_in
        if loss == "detached_lse":
            per = -_detached_log_softmax(logits).gather(-1, targets[..., None]).squeeze(-1)  # (B, n)
            real = targets != pad
            value = (per * real).sum() / real.sum()
        else:
            value = translation_loss(logits, targets, pad)
        value.backward()
        if clip == "norm":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        elif clip == "value":
            nn.utils.clip_grad_value_(model.parameters(), 1.0)
        if zero_grad == "before_step":
            optimizer.zero_grad()
        optimizer.step()
        return float(value.item())

    return lambda inputs: run_steps(inputs, step)


TRAIN_BUGS = {
    "no gradient clipping before the update: nn.utils.clip_grad_norm_(model.parameters(), 1.0) goes after "
    "loss.backward() and before optimizer.step()": _train_variant(clip="none"),
    "clip_grad_value_ (each entry cut to [-1, 1]) instead of "
    "clipping the gradients' global norm at 1.0": _train_variant(clip="value"),
    "no optimizer.zero_grad(): the gradients of every step add up": _train_variant(zero_grad="never"),
    "optimizer.zero_grad() between backward and step: the update uses zero gradients": _train_variant(
        zero_grad="before_step"
    ),
    "the model read tgt itself instead of shift_right(tgt, "
    "bos_id) (it learns to copy its input)": _train_variant(decoder_input="tgt"),
    "the loss compared the logits with the decoder's input shift_right(tgt) instead of tgt": _train_variant(
        loss_target="tgt_in"
    ),
    f"translation_loss with {DETACHED_LSE}": _train_variant(loss="detached_lse"),
}
