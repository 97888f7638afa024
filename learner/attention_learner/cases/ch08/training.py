"""The case of ``train_step(model, optimizer, src, tgt, pad_id, bos_id)`` on :class:`ToySeq2Seq`,
a small stand-in model with explicit weights: three steps with an optimizer the case builds
(:mod:`attention_learner.cases.ch08.optimizer`); the gradients are large enough that clipping
changes every step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.cases.ch08.ids import int_tensor, lengths_text, padded_ids
from attention_learner.cases.ch08.optimizer import make_optimizer
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Inputs
from attention_learner.torch_cases import load_weights


class ToySeq2Seq(nn.Module):
    """A stand-in for a translator, small enough to follow: forward(src (B, n_src),
    tgt_in (B, n_tgt)) -> logits (B, n_tgt, V) = out(tanh(E_tgt[tgt_in] + mean_s E_src[src])).

    Position t's logits depend on the token the decoder reads there and on the source, so a
    wrong shift or a loss on the wrong positions shows in the parameters after a step.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d: int) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(src_vocab, d)
        self.tgt_embed = nn.Embedding(tgt_vocab, d)
        self.out = nn.Linear(d, tgt_vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        context = self.src_embed(src).mean(dim=1, keepdim=True)  # (B, 1, d)
        logits: torch.Tensor = self.out(torch.tanh(self.tgt_embed(tgt_in) + context))  # (B, n_tgt, V)
        return logits


TOY_PARAMETERS = ("src_embed.weight", "tgt_embed.weight", "out.weight", "out.bias")


def make_train_inputs(
    rng: np.random.Generator,
    src_vocab: int = 9,
    tgt_vocab: int = 8,
    d: int = 5,
    src_lengths: Sequence[int] = (5, 3, 4),
    tgt_lengths: Sequence[int] = (4, 4, 2),
    pad_id: int = 0,
    bos_id: int = 1,
    optimizer: str = "sgd",
    lr: float = 0.5,
    steps: int = 3,
    weight_scale: float = 8.0,
) -> Inputs:
    """Explicit weights of a :class:`ToySeq2Seq` whose output weights are ``weight_scale``
    times larger than usual (so the gradient's norm is well above 1 and clipping matters),
    and ``steps`` padded batches."""
    state = {
        "src_embed.weight": normal(rng, src_vocab, d),
        "tgt_embed.weight": normal(rng, tgt_vocab, d),
        "out.weight": normal(rng, tgt_vocab, d, scale=weight_scale),
        "out.bias": normal(rng, tgt_vocab, scale=0.5),
    }
    batches = [
        (padded_ids(rng, src_lengths, src_vocab, pad_id), padded_ids(rng, tgt_lengths, tgt_vocab, pad_id))
        for _ in range(steps)
    ]
    return {
        "args": (src_vocab, tgt_vocab, d),
        "state": state,
        "batches": batches,
        "pad_id": pad_id,
        "bos_id": bos_id,
        "optimizer": optimizer,
        "lr": lr,
    }


def toy_model(inputs: Inputs) -> ToySeq2Seq:
    """The case's ToySeq2Seq in float64 with its explicit weights."""
    model = ToySeq2Seq(*inputs["args"]).double()
    load_weights(model, inputs["state"], "src_embed, tgt_embed, out")
    return model


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """Every parameter of ``model`` in :data:`TOY_PARAMETERS` order, as one vector."""
    params = dict(model.named_parameters())
    return torch.cat([params[name].detach().reshape(-1) for name in TOY_PARAMETERS])


def call_train(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    """Run fn on each batch in turn; the losses it returned and the parameters after the
    first and the last step."""
    model = toy_model(inputs)
    optimizer = make_optimizer(inputs["optimizer"], model.parameters(), inputs["lr"])
    losses, outputs = [], {}
    for step, (src, tgt) in enumerate(inputs["batches"], start=1):
        loss = fn(model, optimizer, int_tensor(src), int_tensor(tgt), inputs["pad_id"], inputs["bos_id"])
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            loss = loss.item()
        if not isinstance(loss, float | int):
            raise TypeError(
                f"train_step should return the loss as a float (loss.item()), got {type(loss).__name__}"
            )
        losses.append(float(loss))
        if step in (1, len(inputs["batches"])):
            outputs[f"params_after_{step}"] = flat_parameters(model)
    return {"losses": np.array(losses), **outputs}


def describe_train(params: dict[str, Any]) -> str:
    optimizer = {"sgd": "SGD", "momentum": "SGD with momentum 0.9", "adam": "Adam"}[params["optimizer"]]
    return (
        f"{params['steps']} steps of {optimizer} (lr={params['lr']:g}) on a small stand-in model "
        f"(ToySeq2Seq, d={params['d']}) whose gradients have a norm above 1; batches of "
        f"{len(params['src_lengths'])} sentences, source lengths {lengths_text(params['src_lengths'])}, "
        f"target lengths {lengths_text(params['tgt_lengths'])}, "
        f"pad_id={params['pad_id']}, bos_id={params['bos_id']}"
    )


def train_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    losses, want = got.get("losses"), expected["losses"]
    if losses is None or losses.shape != want.shape:
        return []
    hints = ["train_step calls your shift_right and translation_loss: if their tests fail, fix them first."]
    first_loss = np.isclose(losses[0], want[0], atol=1e-6, rtol=1e-5)
    if not first_loss:
        hints.append(
            "The very first loss is already wrong, before any update: the model must read "
            "shift_right(tgt, bos_id) and the loss compare its logits with tgt (padding ignored)."
        )
        return hints
    after_1 = got.get("params_after_1")
    if after_1 is not None and after_1.shape == expected["params_after_1"].shape:
        if np.allclose(after_1, flat_parameters(toy_model(inputs)).numpy()):
            hints.append(
                "The parameters did not move: optimizer.step() must come after loss.backward(), "
                "and optimizer.zero_grad() before it."
            )
        elif not np.allclose(after_1, expected["params_after_1"], atol=1e-6, rtol=1e-5):
            hints.append(
                "The loss is right but the first update is not: the gradients, or their clipping, "
                "are wrong. If translation_loss's gradient test fails, fix that first; otherwise clip "
                "the gradients' global norm at 1.0 (nn.utils.clip_grad_norm_(model.parameters(), "
                "1.0)) after backward and before the step."
            )
        elif not np.allclose(losses, want, atol=1e-6, rtol=1e-5):
            hints.append(
                "The first step is right and later ones are not: gradients add up across steps "
                "unless optimizer.zero_grad() runs at the start of every step."
            )
    return hints


_PARAMETERS = "(src_embed, tgt_embed, out.weight, out.bias, flattened)"
MAX_TRAIN_STEPS = 64  # a label for the parameters after each step a case may run
TRAIN_LABELS = {
    "losses": "the list of losses train_step returned, one per step",
    "params_after_1": f"the vector of parameters after the first step {_PARAMETERS}",
    **{
        f"params_after_{step}": f"the vector of parameters after step {step} {_PARAMETERS}"
        for step in range(2, MAX_TRAIN_STEPS + 1)
    },
}
