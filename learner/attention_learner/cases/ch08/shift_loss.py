"""The cases of ``shift_right(tgt, bos_id)`` and ``translation_loss(logits, targets, pad_id,
label_smoothing)``.

shift_right: tgt_in = [BOS, tgt_0, ..., tgt_{n-2}], the target shifted right by one position.
translation_loss: with p = softmax(z) over the vocabulary and R the real (non-pad) positions,
loss = (1 / |R|) sum_{(b, t) in R} [(1 - eps) (-log p_y) + eps mean_v (-log p_v)];
``__gradients`` compares d loss / d logits as well, with logits up to +-1000.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.cases.ch08.ids import int_tensor, lengths_text, padded_ids
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Inputs
from attention_learner.torch_cases import backward, tensor

# ---------------------------------------------------------------- shift_right


def make_shift_inputs(
    rng: np.random.Generator,
    lengths: Sequence[int] = (6, 4, 1),
    vocab: int = 9,
    bos_id: int = 1,
    pad_id: int = 0,
) -> Inputs:
    """A padded batch of target sentences (each ending with its own last token, then padding)."""
    return {"tgt": padded_ids(rng, lengths, vocab, pad_id), "bos_id": bos_id}


def call_shift(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    """The decoder input, and whether the learner's function left its ``tgt`` as it was
    (train_step still needs tgt, unshifted, as the loss's target)."""
    tgt = int_tensor(inputs["tgt"])  # (B, n)
    out = fn(tgt, inputs["bos_id"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"shift_right should return a tensor, got {type(out).__name__}")
    unchanged = torch.equal(tgt, int_tensor(inputs["tgt"]))
    return {"tgt_in": out.clone(), "tgt_unchanged": np.array(unchanged)}


def describe_shift(params: dict[str, Any]) -> str:
    lengths = params["lengths"]
    return (
        f"a batch of {len(lengths)} targets of lengths {lengths_text(lengths)} padded to {max(lengths)} "
        f"with pad_id={params['pad_id']}, bos_id={params['bos_id']}"
    )


def shift_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    out, want = got.get("tgt_in"), expected["tgt_in"]
    if out is None:
        return []
    if "tgt_unchanged" in got and not bool(got["tgt_unchanged"]):
        return [
            "shift_right changed tgt in place: build a new tensor (torch.cat of a BOS column and "
            "tgt[:, :-1]) and leave tgt as it was, since train_step still compares the logits with "
            "the unshifted tgt."
        ]
    n = want.shape[1]
    if out.shape == (want.shape[0], n - 1):
        return [
            f"The result has {n - 1} columns for a target of {n}: the decoder input keeps the "
            "target's length, one BOS in front and the target without its LAST token."
        ]
    if out.shape == (want.shape[0], n + 1):
        return ["The result is one column too long: drop the target's last token after putting BOS in front."]
    if out.shape == want.shape and not np.all(out[:, 0] == inputs["bos_id"]):
        return [f"Column 0 must be bos_id = {inputs['bos_id']} in every row."]
    return []


# ---------------------------------------------------------------- translation_loss


def make_loss_inputs(
    rng: np.random.Generator,
    lengths: Sequence[int] = (5, 3, 1),
    vocab: int = 7,
    pad_id: int = 0,
    label_smoothing: float = 0.0,
    logit_scale: float = 2.0,
) -> Inputs:
    """Logits (B, n, V) of spread ``logit_scale`` and padded targets; the logits at padded
    positions are as large as the others, so that counting them changes the loss."""
    targets = padded_ids(rng, lengths, vocab, pad_id)  # (B, n)
    return {
        "logits": normal(rng, len(lengths), max(lengths), vocab, scale=logit_scale),  # (B, n, V)
        "targets": targets,
        "pad_id": pad_id,
        "label_smoothing": float(label_smoothing),
        "upstream": np.array([1.0]),
    }


def _loss_value(fn: Any, logits: torch.Tensor, inputs: Inputs) -> torch.Tensor:
    loss = fn(
        logits, int_tensor(inputs["targets"]), inputs["pad_id"], label_smoothing=inputs["label_smoothing"]
    )
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"translation_loss should return a tensor (a scalar), got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(
            f"translation_loss should return one number (a 0-d tensor), got shape {tuple(loss.shape)}"
        )
    return loss.reshape(1)


def call_loss(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    with torch.no_grad():
        return {"loss": _loss_value(fn, tensor(inputs["logits"]), inputs)}


def call_loss_gradients(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    logits = tensor(inputs["logits"], grad=True)
    loss = _loss_value(fn, logits, inputs)
    return {"loss": loss, **backward(loss, inputs["upstream"], {"logits": logits}, "translation_loss")}


def describe_loss(params: dict[str, Any]) -> str:
    lengths = params["lengths"]
    text = (
        f"logits for {len(lengths)} targets of lengths {lengths_text(lengths)} padded to {max(lengths)} "
        f"(pad_id={params['pad_id']}), vocabulary {params['vocab']}, "
        f"logits of spread {params['logit_scale']:g}"
    )
    if params["label_smoothing"]:
        text += f", label_smoothing={params['label_smoothing']:g}"
    return text


def loss_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    hints = []
    loss = got.get("loss")
    if loss is not None and not np.all(np.isfinite(loss)):
        hints.append(
            "The loss is not finite: take log_softmax as z - max(z) - log(sum(exp(z - max(z)))), "
            "never the log of a softmax that underflowed to 0."
        )
    grad = got.get("dlogits")
    if grad is not None and grad.shape == inputs["logits"].shape:
        padded = inputs["targets"] == inputs["pad_id"]
        if np.abs(grad[padded]).max(initial=0.0) > 1e-12:
            hints.append("The loss depends on the logits at padded positions: they must not count at all.")
    return hints


LOSS_LABELS = {"loss": "the loss", "dlogits": "the gradient with respect to the logits"}
