"""Chapter 8 cases: the whole Transformer built, trained and decoded, and the notebook's task.

The cases (inputs, call adapters, descriptions, hints; no implementation of an exercise):

- ``shift_right(tgt, bos_id)`` on padded batches of target ids;
- ``translation_loss(logits, targets, pad_id, label_smoothing)`` on padded targets, with
  logits up to +-1000 (``__gradients``: the gradient with respect to the logits as well);
- ``TinyTranslator`` with explicit weights loaded by the contract's parameter names, so that
  the given layers and a learner's own chapter-5 layers are tested alike, on batches padded
  in the source and in the target (``__torch``: against ``nn.Transformer``);
- ``train_step`` on :class:`ToySeq2Seq`, a small stand-in model with explicit weights,
  three steps with an optimizer the case builds; gradients are large enough that clipping
  changes every step;
- ``greedy_decode_cached`` on :class:`DecodingStandIn`, a model with the contract's decoder
  attributes (the given decoder layers, explicit weights) whose encoder is an embedding
  lookup; ``__counts`` wraps the model to count calls of ``encode``, projections of the
  source's keys and values in each layer's cross-attention, and query positions projected
  by each layer's self-attention;
- ``sample_next_token(logits, temperature, top_k, generator)`` with a generator the case
  seeds (``__limits``: temperature 0, top_k = 1, top_k = V).

The notebook's training section uses :func:`translation_task` (chapter 6's toy English ->
French pair, generated exactly as the book's chapter-6 pages generate it) and
:func:`training_budget` (how long the training cells may run here: not at all when the
grader runs the notebook).
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.blocks import GivenDecoderLayer
from attention_learner.inputs import normal
from attention_learner.recording import is_recording
from attention_learner.spec import Arrays, Case, Inputs
from attention_learner.torch_cases import (
    State,
    backward,
    build_module,
    linear_state,
    load_weights,
    mha_state,
    tensor,
)

# ---------------------------------------------------------------- shared pieces


def padded_ids(
    rng: np.random.Generator, lengths: Sequence[int], vocab: int, pad_id: int, first: int | None = None
) -> np.ndarray:
    """int64 (B, max(lengths)): row b holds lengths[b] random ids other than ``pad_id`` (the
    first one ``first`` when given), then padding."""
    drawn = rng.integers(vocab - 1, size=(len(lengths), max(lengths)))  # (B, n)
    ids = drawn + (drawn >= pad_id)  # every id but pad_id, equally likely
    ids[np.arange(max(lengths)) >= np.array(lengths)[:, None]] = pad_id
    if first is not None:
        ids[:, 0] = np.where(np.array(lengths) > 0, first, ids[:, 0])
    return ids.astype(np.int64)


def _lengths(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _int_tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, dtype=np.int64))


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


def call_shift(fn: Any, inputs: Inputs) -> Arrays:
    """The decoder input, and whether the learner's function left its ``tgt`` as it was
    (train_step still needs tgt, unshifted, as the loss's target)."""
    tgt = _int_tensor(inputs["tgt"])  # (B, n)
    out = fn(tgt, inputs["bos_id"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"shift_right should return a tensor, got {type(out).__name__}")
    unchanged = torch.equal(tgt, _int_tensor(inputs["tgt"]))
    return {"tgt_in": out.clone(), "tgt_unchanged": np.array(unchanged)}


def describe_shift(params: dict[str, Any]) -> str:
    lengths = params["lengths"]
    return (
        f"a batch of {len(lengths)} targets of lengths {_lengths(lengths)} padded to {max(lengths)} "
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
        logits, _int_tensor(inputs["targets"]), inputs["pad_id"], label_smoothing=inputs["label_smoothing"]
    )
    if not isinstance(loss, torch.Tensor):
        raise TypeError(f"translation_loss should return a tensor (a scalar), got {type(loss).__name__}")
    if loss.numel() != 1:
        raise ValueError(
            f"translation_loss should return one number (a 0-d tensor), got shape {tuple(loss.shape)}"
        )
    return loss.reshape(1)


def call_loss(fn: Any, inputs: Inputs) -> Arrays:
    with torch.no_grad():
        return {"loss": _loss_value(fn, tensor(inputs["logits"]), inputs)}


def call_loss_gradients(fn: Any, inputs: Inputs) -> Arrays:
    logits = tensor(inputs["logits"], grad=True)
    loss = _loss_value(fn, logits, inputs)
    return {"loss": loss, **backward(loss, inputs["upstream"], {"logits": logits}, "translation_loss")}


def describe_loss(params: dict[str, Any]) -> str:
    lengths = params["lengths"]
    text = (
        f"logits for {len(lengths)} targets of lengths {_lengths(lengths)} padded to {max(lengths)} "
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

# ---------------------------------------------------------------- TinyTranslator

TRANSLATOR_CONTRACT = (
    "src_embed and tgt_embed (nn.Embedding), encoder_layers and decoder_layers (nn.ModuleList of "
    "chapter 5's EncoderLayer and DecoderLayer: self_attn, cross_attn with W_q, W_k, W_v, W_o; ff; "
    "norm1, norm2, norm3) and output_proj (nn.Linear(d_model, tgt_vocab))"
)


def norm_state(rng: np.random.Generator, name: str, d_model: int) -> State:
    """An nn.LayerNorm's weight (about 1) and bias (about 0)."""
    return {
        f"{name}.weight": 1.0 + normal(rng, d_model, scale=0.2),
        f"{name}.bias": normal(rng, d_model, scale=0.1),
    }


def layer_state(rng: np.random.Generator, prefix: str, d_model: int, d_ff: int, decoder: bool) -> State:
    """Explicit weights of one chapter-5 layer whose parameters are named ``prefix + ...``."""
    state = mha_state(rng, d_model, prefix + "self_attn.")
    if decoder:
        state.update(mha_state(rng, d_model, prefix + "cross_attn."))
    state.update(linear_state(rng, prefix + "ff.0", d_model, d_ff))
    state.update(linear_state(rng, prefix + "ff.2", d_ff, d_model))
    for norm in ("norm1", "norm2", "norm3") if decoder else ("norm1", "norm2"):
        state.update(norm_state(rng, prefix + norm, d_model))
    return state


def embedding_state(rng: np.random.Generator, name: str, vocab: int, d_model: int) -> State:
    """Entries of size 1/sqrt(d_model): of size 1 once scaled by sqrt(d_model), like the encoding's."""
    return {f"{name}.weight": normal(rng, vocab, d_model, scale=1.0 / math.sqrt(d_model))}


def translator_state(
    rng: np.random.Generator, src_vocab: int, tgt_vocab: int, d_model: int, d_ff: int, num_layers: int
) -> State:
    state = {
        **embedding_state(rng, "src_embed", src_vocab, d_model),
        **embedding_state(rng, "tgt_embed", tgt_vocab, d_model),
    }
    for i in range(num_layers):
        state.update(layer_state(rng, f"encoder_layers.{i}.", d_model, d_ff, decoder=False))
    for i in range(num_layers):
        state.update(layer_state(rng, f"decoder_layers.{i}.", d_model, d_ff, decoder=True))
    state.update(linear_state(rng, "output_proj", d_model, tgt_vocab))
    return state


def make_translator_inputs(
    rng: np.random.Generator,
    src_vocab: int = 11,
    tgt_vocab: int = 13,
    d_model: int = 12,
    num_heads: int = 3,
    d_ff: int = 20,
    num_layers: int = 2,
    pad_id: int = 0,
    bos_id: int = 1,
    src_lengths: Sequence[int] = (6, 4),
    tgt_lengths: Sequence[int] = (5, 2),
) -> Inputs:
    """Explicit weights and a batch padded in the source and in the target (each target
    starts with BOS)."""
    if len(src_lengths) != len(tgt_lengths):
        raise ValueError("one source length and one target length per sentence")
    return {
        "args": (src_vocab, tgt_vocab, d_model, num_heads, d_ff, num_layers, pad_id),
        "state": translator_state(rng, src_vocab, tgt_vocab, d_model, d_ff, num_layers),
        "src": padded_ids(rng, src_lengths, src_vocab, pad_id),
        "tgt_in": padded_ids(rng, tgt_lengths, tgt_vocab, pad_id, first=bos_id),
        "pad_id": pad_id,
    }


def build_translator(cls: Any, inputs: Inputs) -> nn.Module:
    """The learner's class with the case's weights, in float64 and evaluation mode; a
    trainable parameter the contract does not name would keep its random value, so it is
    refused with a message."""
    model = build_module(cls, inputs["args"], inputs["state"], TRANSLATOR_CONTRACT)
    extra = [name for name, p in model.named_parameters() if p.requires_grad and name not in inputs["state"]]
    if extra:
        raise AttributeError(
            f"TinyTranslator has parameters the contract does not name: {', '.join(extra[:4])}"
            f"{' ...' if len(extra) > 4 else ''}. Its parameters are exactly those of {TRANSLATOR_CONTRACT}; "
            "the positional encoding is a buffer (register_buffer), not a parameter."
        )
    return model.eval()


def call_translator(cls: Any, inputs: Inputs) -> Arrays:
    """forward(src, tgt_in), and encode then decode as separate calls."""
    model = build_translator(cls, inputs)
    src, tgt_in = _int_tensor(inputs["src"]), _int_tensor(inputs["tgt_in"])
    src_pad = src != inputs["pad_id"]  # (B, n_src)
    with torch.no_grad():
        logits = model(src, tgt_in)
        memory = model.encode(src)
        if not isinstance(memory, torch.Tensor):
            raise TypeError(
                "TinyTranslator.encode should return the memory, one tensor (B, n_src, d_model), "
                f"got a {type(memory).__name__}"
            )
        decoded = model.decode(tgt_in, memory, src_pad)
    if memory.shape[:2] == src.shape:
        memory = memory * src_pad[..., None]  # padded positions are nobody's business
    return {"logits": logits, "decoded": decoded, "memory": memory}


def describe_translator(params: dict[str, Any]) -> str:
    src, tgt = params["src_lengths"], params["tgt_lengths"]
    return (
        f"src_vocab={params['src_vocab']}, tgt_vocab={params['tgt_vocab']}, d_model={params['d_model']}, "
        f"num_heads={params['num_heads']}, d_ff={params['d_ff']}, num_layers={params['num_layers']}, "
        f"pad_id={params['pad_id']}; {len(src)} sentence(s), source lengths {_lengths(src)} padded to "
        f"{max(src)}, target lengths {_lengths(tgt)} padded to {max(tgt)}"
    )


def _rows_close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per sentence (axis 0): whether a and b agree."""
    return np.array([np.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(a, b, strict=True)])


def translator_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    want = expected.get("logits")
    logits, decoded, memory = got.get("logits"), got.get("decoded"), got.get("memory")
    if want is None or logits is None or logits.shape != want.shape:
        if want is not None and logits is not None:
            return [f"forward(src, tgt_in) should return logits (B, n_tgt, tgt_vocab) = {want.shape}."]
        return []
    hints = []
    if decoded is not None and decoded.shape == logits.shape and not np.allclose(decoded, logits, atol=1e-9):
        hints.append(
            "forward(src, tgt_in) and decode(tgt_in, encode(src), src != pad_id) disagree: forward "
            "should be exactly those two calls."
        )
    if "memory" in expected and memory is not None and memory.shape == expected["memory"].shape:
        if np.allclose(memory, expected["memory"], atol=1e-6, rtol=1e-5):
            hints.append(
                "encode is right, so the problem is in decode: the target embedding (scaled, with "
                "positions), the masks of the decoder or the output projection."
            )
        else:
            hints.append(
                "encode is already wrong: embeddings scaled by sqrt(d_model), the positional encoding "
                "added, the source padding mask (src != pad_id) given to every encoder layer."
            )
    pad = inputs["pad_id"]
    full = (inputs["src"] != pad).all(axis=1) & (inputs["tgt_in"] != pad).all(axis=1)  # (B,) unpadded
    right = _rows_close(logits, want)
    if full.any() and right[full].all() and not right[~full].all():
        hints.append(
            "The sentences without padding come out right and the padded ones do not: look at the "
            "padding masks (source padding in the encoder and in cross-attention, target padding "
            "in the decoder), True = real token."
        )
    last = logits[full, -1] if full.any() else None
    if (
        last is not None
        and np.allclose(last, want[full, -1], atol=1e-6)
        and not np.allclose(logits[full], want[full], atol=1e-6)
    ):
        hints.append(
            "The last target position is right and earlier ones are not: earlier positions see "
            "later tokens, as if the decoder's causal mask were missing."
        )
    return hints


# ---------------------------------------------------------------- train_step


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
        return self.out(torch.tanh(self.tgt_embed(tgt_in) + context))  # (B, n_tgt, V)


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


class CaseOptimizer:
    """SGD (with momentum) or Adam, with the interface train_step uses: ``zero_grad()`` and
    ``step()`` (and ``param_groups``), computing what torch.optim.SGD and torch.optim.Adam
    compute with their defaults.

    The cases do not use torch.optim itself: its first ``step`` imports torch._dynamo, a second
    or two that every grading child would pay again.
    """

    def __init__(self, parameters: Any, lr: float, momentum: float = 0.0, adam: bool = False,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> None:  # fmt: skip
        self.params = [p for p in parameters]
        self.param_groups = [{"params": self.params, "lr": lr}]
        self.lr, self.momentum, self.adam, self.betas, self.eps = lr, momentum, adam, betas, eps
        self.state: dict[int, dict[str, Any]] = {}
        self.steps = 0

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.zero_()

    @torch.no_grad()
    def step(self) -> None:
        self.steps += 1
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            state = self.state.setdefault(i, {})
            if self.adam:
                b1, b2 = self.betas
                m = state["m"] = b1 * state.get("m", torch.zeros_like(p)) + (1 - b1) * p.grad
                v = state["v"] = b2 * state.get("v", torch.zeros_like(p)) + (1 - b2) * p.grad**2
                m_hat, v_hat = m / (1 - b1**self.steps), v / (1 - b2**self.steps)
                p -= self.lr * m_hat / (v_hat.sqrt() + self.eps)
            elif self.momentum:
                buffer = state["buffer"] = (p.grad.clone() if "buffer" not in state
                                            else self.momentum * state["buffer"] + p.grad)  # fmt: skip
                p -= self.lr * buffer
            else:
                p -= self.lr * p.grad


def make_optimizer(kind: str, parameters: Any, lr: float) -> CaseOptimizer:
    """The optimizer of a train_step case: "sgd", "momentum" (SGD, momentum 0.9) or "adam"."""
    if kind not in ("sgd", "momentum", "adam"):
        raise ValueError(f"unknown optimizer {kind!r}")
    return CaseOptimizer(parameters, lr, momentum=0.9 if kind == "momentum" else 0.0, adam=kind == "adam")


def toy_model(inputs: Inputs) -> ToySeq2Seq:
    """The case's ToySeq2Seq in float64 with its explicit weights."""
    model = ToySeq2Seq(*inputs["args"]).double()
    load_weights(model, inputs["state"], "src_embed, tgt_embed, out")
    return model


def flat_parameters(model: nn.Module) -> torch.Tensor:
    """Every parameter of ``model`` in :data:`TOY_PARAMETERS` order, as one vector."""
    params = dict(model.named_parameters())
    return torch.cat([params[name].detach().reshape(-1) for name in TOY_PARAMETERS])


def call_train(fn: Any, inputs: Inputs) -> Arrays:
    """Run fn on each batch in turn; the losses it returned and the parameters after the
    first and the last step."""
    model = toy_model(inputs)
    optimizer = make_optimizer(inputs["optimizer"], model.parameters(), inputs["lr"])
    losses, outputs = [], {}
    for step, (src, tgt) in enumerate(inputs["batches"], start=1):
        loss = fn(model, optimizer, _int_tensor(src), _int_tensor(tgt), inputs["pad_id"], inputs["bos_id"])
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
        f"{len(params['src_lengths'])} sentences, source lengths {_lengths(params['src_lengths'])}, "
        f"target lengths {_lengths(params['tgt_lengths'])}, "
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
    **{f"params_after_{step}": f"the vector of parameters after step {step} {_PARAMETERS}"
       for step in range(2, MAX_TRAIN_STEPS + 1)},
}


# ---------------------------------------------------------------- greedy_decode_cached


class DecodingStandIn(nn.Module):
    """A translator with what greedy_decode_cached may use, and its encoder replaced by an
    embedding lookup (a stand-in for a trained encoder: the test is about the decoder).

    Attributes: d_model, num_heads, pad_id, src_embed, tgt_embed, decoder_layers (the given
    decoder layers of chapter 5) and output_proj; ``encode(src) = src_embed(src)``. A
    TinyTranslator decodes like this model: target token y at position t enters as
    tgt_embed(y) sqrt(d_model) + PE[t].
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, d_model: int, num_heads: int, d_ff: int,
                 num_layers: int, pad_id: int) -> None:  # fmt: skip
        super().__init__()
        self.d_model, self.num_heads, self.pad_id = d_model, num_heads, pad_id
        self.src_embed = nn.Embedding(src_vocab, d_model)
        self.tgt_embed = nn.Embedding(tgt_vocab, d_model)
        self.decoder_layers = nn.ModuleList(
            GivenDecoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers)
        )
        self.output_proj = nn.Linear(d_model, tgt_vocab)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return self.src_embed(src)  # (B, n_src, d_model)


STAND_IN_ATTRIBUTES = (
    "encode(src), pad_id, d_model, num_heads, tgt_embed, decoder_layers (each with self_attn and "
    "cross_attn, whose W_q, W_k, W_v, W_o are nn.Linear, ff, norm1, norm2, norm3) and output_proj"
)


def make_cached_decode_inputs(
    rng: np.random.Generator,
    src_lengths: Sequence[int] = (5, 3, 4),
    src_vocab: int = 10,
    tgt_vocab: int = 9,
    d_model: int = 12,
    num_heads: int = 3,
    d_ff: int = 16,
    num_layers: int = 2,
    max_len: int = 7,
    pad_id: int = 0,
    bos_id: int = 1,
    eos_id: int = 2,
    eos_bias: float = -100.0,
    source_scale: float = 1.0,
) -> Inputs:
    """Explicit weights of a :class:`DecodingStandIn` and a padded source batch.

    The memory (the source embedding) has entries of size ``source_scale``, so that the
    source, its padding included, weighs on every step. The output layer never predicts
    padding (its bias there is -1e4), and ``eos_bias`` is added to its end-of-sentence bias:
    the default -100 never ends a sentence (decoding runs to ``max_len``, so that every step
    shows), values of 1 to 5 end some sentences at various steps, 20 ends all of them at once.
    """
    state = {"src_embed.weight": normal(rng, src_vocab, d_model, scale=source_scale),  # the memory
             **embedding_state(rng, "tgt_embed", tgt_vocab, d_model)}  # fmt: skip
    for i in range(num_layers):
        state.update(layer_state(rng, f"decoder_layers.{i}.", d_model, d_ff, decoder=True))
    state.update(linear_state(rng, "output_proj", d_model, tgt_vocab))
    state["output_proj.weight"] *= 3.0  # confident logits: no near-ties between two tokens
    state["output_proj.bias"][pad_id] = -1e4
    state["output_proj.bias"][eos_id] += eos_bias
    return {
        "args": (src_vocab, tgt_vocab, d_model, num_heads, d_ff, num_layers, pad_id),
        "state": state,
        "src": padded_ids(rng, src_lengths, src_vocab, pad_id),
        "max_len": max_len,
        "bos_id": bos_id,
        "eos_id": eos_id,
    }


def stand_in_model(inputs: Inputs) -> DecodingStandIn:
    return build_module(DecodingStandIn, inputs["args"], inputs["state"], STAND_IN_ATTRIBUTES).eval()


@dataclass
class DecodeCounts:
    """What a decode did to the model: calls of encode; per decoder layer, how many times the
    source's keys and values went through cross-attention's projections, and how many query
    positions self-attention projected."""

    encode_calls: int
    cross_keys: list[int]
    cross_values: list[int]
    query_rows: list[int]


def count_calls(model: DecodingStandIn) -> DecodeCounts:
    """Wrap ``model`` so that it counts (in the returned record) as it is used.

    A call of a whole attention module counts as one projection of its keys and values and
    as its queries' positions; the projections inside that call are not counted again.
    """
    counts = DecodeCounts(0, [0] * len(model.decoder_layers), [0] * len(model.decoder_layers),
                          [0] * len(model.decoder_layers))  # fmt: skip
    encode = model.encode

    def counted_encode(src: torch.Tensor) -> torch.Tensor:
        counts.encode_calls += 1
        return encode(src)

    model.encode = counted_encode
    for i, layer in enumerate(model.decoder_layers):
        _count_module(layer.cross_attn, i, counts, whole=("cross_keys", "cross_values"),
                      parts={"W_k": "cross_keys", "W_v": "cross_values"})  # fmt: skip
        _count_module(layer.self_attn, i, counts, whole=(), parts={"W_q": "query_rows"}, rows=True)
    return counts


def _count_module(attn: nn.Module, layer: int, counts: DecodeCounts, whole: tuple[str, ...],
                  parts: dict[str, str], rows: bool = False) -> None:  # fmt: skip
    inside = [False]

    def before(module: nn.Module, args: tuple) -> None:
        inside[0] = True
        for name in whole:
            getattr(counts, name)[layer] += 1
        if rows and args:
            counts.query_rows[layer] += int(args[0].shape[-2])

    def after(module: nn.Module, args: tuple, output: Any) -> None:
        inside[0] = False

    attn.register_forward_pre_hook(before)
    attn.register_forward_hook(after)
    for part, name in parts.items():

        def projected(module: nn.Module, args: tuple, output: Any, name: str = name) -> None:
            if not inside[0]:
                getattr(counts, name)[layer] += int(args[0].shape[-2]) if rows else 1

        getattr(attn, part).register_forward_hook(projected)


def _decode(fn: Any, model: nn.Module, inputs: Inputs) -> torch.Tensor:
    src = _int_tensor(inputs["src"])
    try:
        ids = fn(model, src, inputs["max_len"], inputs["bos_id"], inputs["eos_id"])
    except AttributeError as exc:
        raise AttributeError(
            f"{exc}. The test's model offers {STAND_IN_ATTRIBUTES}: use only these."
        ) from exc
    except RuntimeError as exc:
        if "size" not in str(exc):
            raise
        raise RuntimeError(
            f"{exc}\n(If a KV cache appends along an axis other than the sequence axis, -2 of "
            "(B, h, t, d_head), the sizes stop matching after the first step.)"
        ) from exc
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"greedy_decode_cached should return a tensor of ids, got {type(ids).__name__}")
    return ids


def call_cached_decode(fn: Any, inputs: Inputs) -> Arrays:
    return {"ids": _decode(fn, stand_in_model(inputs), inputs)}


def call_cached_decode_counts(fn: Any, inputs: Inputs) -> Arrays:
    model = stand_in_model(inputs)
    counts = count_calls(model)
    ids = _decode(fn, model, inputs)
    return {
        "ids": ids,
        "encode_calls": np.array([counts.encode_calls], dtype=np.float64),
        "cross_keys": np.array(counts.cross_keys, dtype=np.float64),
        "cross_values": np.array(counts.cross_values, dtype=np.float64),
        "query_rows": np.array(counts.query_rows, dtype=np.float64),
    }


def describe_cached_decode(params: dict[str, Any]) -> str:
    lengths = params["src_lengths"]
    bias = params["eos_bias"]
    eos = (
        " that never emits EOS"
        if bias <= -50
        else f", end-of-sentence logit raised by {bias:g}"
        if bias
        else ""
    )
    return (
        f"a model with {params['num_layers']} given decoder layer(s) (d_model={params['d_model']}, "
        f"num_heads={params['num_heads']}, d_ff={params['d_ff']}, tgt_vocab={params['tgt_vocab']}){eos}; "
        f"{len(lengths)} source(s) of lengths {_lengths(lengths)} (pad_id={params['pad_id']}), "
        f"max_len={params['max_len']}, bos_id={params['bos_id']}, eos_id={params['eos_id']}"
    )


def describe_cached_counts(params: dict[str, Any]) -> str:
    return (
        describe_cached_decode(params) + "; counting the calls of encode, the projections of the source's "
        "keys and values in each layer's cross-attention and the query positions each layer's "
        "self-attention projects"
    )


def cached_decode_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    ids, want = got.get("ids"), expected["ids"]
    if ids is None or ids.ndim != 2:
        return ["greedy_decode_cached should return one row of token ids per sentence: shape (B, T)."]
    hints = []
    if ids.shape[1] > want.shape[1] and ids.shape[1] == inputs["max_len"]:
        hints.append(
            "Decoding ran all max_len steps although every sentence had emitted EOS earlier: stop "
            "as soon as all of them have finished."
        )
    if ids.shape == want.shape and np.array_equal(ids[:, :1], want[:, :1]) and not np.array_equal(ids, want):
        hints.append(
            "The first token is right and later ones are not: at step t the new token must see "
            "the cached keys and values of every earlier position in each layer, and sit at "
            "position t of the positional encoding."
        )
    for key, what in (
        ("encode_calls", "model.encode ran {}: call it once, before the loop."),
        (
            "cross_keys",
            "Cross-attention projected the source's keys {} in some layer: "
            "compute layer.cross_attn.W_k(memory) and W_v(memory) once per layer, "
            "before the loop.",
        ),
        (
            "query_rows",
            "Self-attention projected {} in some layer, for {}: with a KV cache each step "
            "projects the new token only.",
        ),
    ):
        count = got.get(key)
        if count is None or key not in expected or count.shape != expected[key].shape:
            continue
        if not np.array_equal(count, expected[key]):
            if key == "query_rows":
                hints.append(what.format(_count(int(count.max()), "query position"),
                                         _count(want.shape[1], "step")))
            elif count.max() == 0:
                hints.append(
                    f"{key.replace('_', ' ')}: no call was seen. Project with the modules "
                    "themselves (layer.cross_attn.W_k(memory)), so that the test can count them."
                )
            else:
                hints.append(what.format(_count(int(count.max()), "time")))
    return hints


def _count(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless n is 1: "1 query position", "3 steps"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


DECODE_LABELS = {
    "ids": "the array of generated ids",
    "encode_calls": "the number of calls of model.encode",
    "cross_keys": "per decoder layer, how many times the source's keys were projected (cross_attn.W_k)",
    "cross_values": "per decoder layer, how many times the source's values were projected (cross_attn.W_v)",
    "query_rows": "per decoder layer, the number of query positions self-attention projected",
}


# ---------------------------------------------------------------- sample_next_token


def make_sample_inputs(
    rng: np.random.Generator,
    batch: int = 200,
    vocab: int = 6,
    temperature: float = 0.7,
    top_k: int | None = 3,
    logit_scale: float = 1.5,
) -> Inputs:
    """Logits (batch, vocab) and the seed of the torch.Generator the sampler must draw from."""
    return {
        "logits": normal(rng, batch, vocab, scale=logit_scale),  # (B, V)
        "temperature": float(temperature),
        "top_k": top_k,
        "generator_seed": int(rng.integers(2**31 - 1)),
    }


def call_sample(fn: Any, inputs: Inputs) -> Arrays:
    """fn(logits, temperature, top_k, generator) with a seeded generator; the global RNG is
    set to another seed meanwhile (and restored), so a draw from it shows."""
    generator = torch.Generator().manual_seed(inputs["generator_seed"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(inputs["generator_seed"] + 1)
        ids = fn(tensor(inputs["logits"]), inputs["temperature"], inputs["top_k"], generator)
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"sample_next_token should return a tensor of ids, got {type(ids).__name__}")
    return {"ids": ids}


def describe_sample(params: dict[str, Any]) -> str:
    k = "top_k=None (no filtering)" if params["top_k"] is None else f"top_k={params['top_k']}"
    return (
        f"{params['batch']} rows of {params['vocab']} logits of spread {params['logit_scale']:g}, "
        f"temperature={params['temperature']:g}, {k}, a seeded torch.Generator"
    )


def sample_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
    ids = got.get("ids")
    logits = inputs["logits"]
    if ids is None:
        return []
    if ids.shape != (logits.shape[0],):
        if inputs["temperature"] == 0:
            return [f"Return one id per row, shape ({logits.shape[0]},): with temperature 0 that is "
                    "the argmax over the vocabulary, logits.argmax(dim=-1)."]
        return [
            f"Return one id per row, shape ({logits.shape[0]},): "
            "squeeze the sample axis of torch.multinomial."
        ]
    if not np.array_equal(ids, np.round(ids)) or ids.min() < 0 or ids.max() >= logits.shape[1]:
        return ["The result should hold token ids, integers in [0, V)."]
    rank = (logits > logits[np.arange(len(ids)), ids.astype(int)][:, None]).sum(axis=1)  # (B,) 0 = the argmax
    hints = []
    if inputs["temperature"] == 0 and rank.any():
        hints.append("With temperature 0 every token must be the argmax of its row (no sampling).")
    k = inputs["top_k"]
    if k is not None and inputs["temperature"] != 0 and (rank >= k).any():
        hints.append(
            f"{int((rank >= k).sum())} sampled tokens are not among the top_k = {k} most likely of "
            "their row: set the other logits to -inf BEFORE the softmax and the draw."
        )
    if not hints:
        hints.append(
            "Draw with torch.multinomial(probabilities, 1, generator=generator) on the logits' own "
            "dtype, after dividing the logits by the temperature: another way of drawing, or the "
            "global random generator, gives other samples."
        )
    return hints


# ---------------------------------------------------------------- the cases

CASES = [
    Case(
        name="shift_right",
        make_inputs=make_shift_inputs,
        call=call_shift,
        describe=describe_shift,
        hints=shift_hints,
        labels={"tgt_in": "the decoder input",
                "tgt_unchanged": "whether tgt was left as it was (not modified in place)"},
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="translation_loss",
        make_inputs=make_loss_inputs,
        call=call_loss,
        describe=describe_loss,
        hints=loss_hints,
        labels=LOSS_LABELS,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="translation_loss__gradients",
        make_inputs=make_loss_inputs,
        call=call_loss_gradients,
        describe=describe_loss,
        hints=loss_hints,
        labels=LOSS_LABELS,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="TinyTranslator",
        make_inputs=make_translator_inputs,
        call=call_translator,
        describe=describe_translator,
        hints=translator_hints,
        labels={
            "logits": "the logits of forward(src, tgt_in)",
            "memory": "encode(src) at the real positions",
        },
        atol=1e-8,
        rtol=1e-6,
    ),
    Case(
        name="TinyTranslator__torch",
        make_inputs=make_translator_inputs,
        call=call_translator,
        describe=lambda p: "against nn.Transformer with the same weights, " + describe_translator(p),
        hints=translator_hints,
        labels={"logits": "the logits of forward(src, tgt_in)"},
        atol=1e-8,
        rtol=1e-6,
    ),
    Case(
        name="train_step",
        make_inputs=make_train_inputs,
        call=call_train,
        describe=describe_train,
        hints=train_hints,
        labels=TRAIN_LABELS,
        atol=1e-8,
        rtol=1e-6,
    ),
    Case(
        name="greedy_decode_cached",
        make_inputs=make_cached_decode_inputs,
        call=call_cached_decode,
        describe=describe_cached_decode,
        hints=cached_decode_hints,
        labels=DECODE_LABELS,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="greedy_decode_cached__counts",
        make_inputs=make_cached_decode_inputs,
        call=call_cached_decode_counts,
        describe=describe_cached_counts,
        hints=cached_decode_hints,
        labels=DECODE_LABELS,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="sample_next_token",
        make_inputs=make_sample_inputs,
        call=call_sample,
        describe=describe_sample,
        hints=sample_hints,
        labels={"ids": "the array of sampled ids"},
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="sample_next_token__limits",
        make_inputs=make_sample_inputs,
        call=call_sample,
        describe=lambda p: "a limit of sampling, " + describe_sample(p),
        hints=sample_hints,
        labels={"ids": "the array of sampled ids"},
        atol=0.0,
        rtol=0.0,
    ),
]


# ---------------------------------------------------------------- the notebook's training task

PAD, BOS, EOS = 0, 1, 2
SPECIAL_TOKENS = ("<pad>", "<bos>", "<eos>")
# Chapter 6's toy language pair: English noun -> (French noun, gender); no noun starts with a
# vowel, so "the" is always "le" or "la". Adjectives follow the noun in French and agree.
NOUNS = {
    "cat": ("chat", "m"), "dog": ("chien", "m"), "boy": ("garçon", "m"), "book": ("livre", "m"),
    "boat": ("bateau", "m"), "horse": ("cheval", "m"), "street": ("rue", "f"), "car": ("voiture", "f"),
    "house": ("maison", "f"), "girl": ("fille", "f"), "table": ("table", "f"), "flower": ("fleur", "f"),
}  # fmt: skip
ADJECTIVES = {
    "red": ("rouge", "rouge"), "black": ("noir", "noire"), "green": ("vert", "verte"),
    "white": ("blanc", "blanche"), "heavy": ("lourd", "lourde"), "tired": ("fatigué", "fatiguée"),
}  # fmt: skip
ARTICLES = {"the": ("le", "la"), "a": ("un", "une")}
VERBS = {"sees": "voit", "likes": "aime", "follows": "suit", "finds": "trouve", "pushes": "pousse"}
CONJUNCTION = {"and": "et"}


def translate(english: list[str]) -> list[str]:
    """The toy grammar's French for an English token list: articles take the noun's gender,
    adjectives move after the noun and agree with it, verbs and "and" go word for word."""
    out, i = [], 0
    while i < len(english):
        word = english[i]
        if word in ARTICLES:
            j = i + 1
            while english[j] in ADJECTIVES:
                j += 1
            noun, gender = NOUNS[english[j]]
            g = 0 if gender == "m" else 1
            out += [ARTICLES[word][g], noun] + [ADJECTIVES[a][g] for a in english[i + 1 : j]]
            i = j + 1
        else:
            out.append(VERBS.get(word) or CONJUNCTION[word])
            i += 1
    return out


def random_sentence(rng: np.random.Generator, n_clauses: int, p_adjective: float = 0.5) -> list[str]:
    """``n_clauses`` clauses "noun phrase, verb, noun phrase" joined by "and"; a noun phrase is
    an article, an adjective with probability ``p_adjective``, and a noun."""
    nouns, adjectives = list(NOUNS), list(ADJECTIVES)

    def noun_phrase() -> list[str]:
        words = [str(rng.choice(list(ARTICLES)))]
        if rng.random() < p_adjective:
            words.append(adjectives[rng.integers(len(adjectives))])
        return words + [nouns[rng.integers(len(nouns))]]

    words: list[str] = []
    for c in range(n_clauses):
        if c:
            words.append("and")
        words += noun_phrase() + [list(VERBS)[rng.integers(len(VERBS))]] + noun_phrase()
    return words


def make_pairs(n: int, seed: int, clauses: Sequence[int] = (1, 2, 3),
               exclude: set[tuple[str, ...]] | None = None) -> list[tuple[list[str], list[str]]]:  # fmt: skip
    """``n`` distinct (English, French) pairs, seeded; English sentences in ``exclude`` skipped."""
    rng = np.random.default_rng(seed)
    seen = set(exclude or ())
    pairs = []
    while len(pairs) < n:
        english = random_sentence(rng, int(rng.choice(list(clauses))))
        if tuple(english) not in seen:
            seen.add(tuple(english))
            pairs.append((english, translate(english)))
    return pairs


class Vocab:
    """Token <-> id, with <pad> = 0, <bos> = 1, <eos> = 2 first, then the words sorted."""

    def __init__(self, words: Sequence[str]) -> None:
        self.tokens = list(SPECIAL_TOKENS) + sorted(set(words) - set(SPECIAL_TOKENS))
        self.index = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, words: Sequence[str]) -> list[int]:
        return [self.index[w] for w in words]

    def decode(self, ids: Any) -> list[str]:
        """Ids -> words, up to the first <eos>, without <bos> and <pad>."""
        words = []
        for i in (int(i) for i in ids):
            if i == EOS:
                break
            if i not in (PAD, BOS):
                words.append(self.tokens[i])
        return words


def source_vocab() -> Vocab:
    return Vocab([*NOUNS, *ADJECTIVES, *ARTICLES, *VERBS, *CONJUNCTION])


def target_vocab() -> Vocab:
    words = [n for n, _ in NOUNS.values()] + [w for pair in ADJECTIVES.values() for w in pair]
    return Vocab(
        words + [w for pair in ARTICLES.values() for w in pair] + [*VERBS.values(), *CONJUNCTION.values()]
    )


def token_accuracy(predicted: list[str], reference: list[str]) -> float:
    """The share of the reference's positions, and of its end, that the prediction gets right."""
    hits = sum(p == r for p, r in zip(predicted, reference, strict=False)) + (
        len(predicted) == len(reference)
    )
    return hits / (len(reference) + 1)


@dataclass
class TranslationTask:
    """Training and held-out pairs of the toy language pair, their vocabularies and batches.

    ``batch(pairs)`` -> (src (B, n_src), tgt (B, n_tgt)): English ids, and the French ids
    followed by <eos>, both padded with <pad> = 0 (the decoder's input is shift_right(tgt)).
    """

    source: Vocab
    target: Vocab
    train_pairs: list[tuple[list[str], list[str]]]
    test_pairs: list[tuple[list[str], list[str]]]

    def batch(self, pairs: Sequence[tuple[list[str], list[str]]]) -> tuple[torch.Tensor, torch.Tensor]:
        src = torch.full((len(pairs), max(len(e) for e, _ in pairs)), PAD, dtype=torch.long)
        tgt = torch.full((len(pairs), max(len(f) for _, f in pairs) + 1), PAD, dtype=torch.long)
        for b, (english, french) in enumerate(pairs):
            src[b, : len(english)] = torch.tensor(self.source.encode(english))
            tgt[b, : len(french) + 1] = torch.tensor(self.target.encode(french) + [EOS])
        return src, tgt

    def random_batch(self, size: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``size`` training pairs drawn at random (with replacement)."""
        rows = torch.randint(len(self.train_pairs), (size,), generator=generator).tolist()
        return self.batch([self.train_pairs[r] for r in rows])


def translation_task(n_train: int = 3000, n_test: int = 200, seed: int = 1) -> TranslationTask:
    """Chapter 6's pairs: ``n_train`` training pairs (1 to 3 clauses, seed ``seed``) and
    ``n_test`` held-out ones (seed ``seed + 1``), none of them a training sentence."""
    train = make_pairs(n_train, seed)
    test = make_pairs(n_test, seed + 1, exclude={tuple(e) for e, _ in train})
    return TranslationTask(source_vocab(), target_vocab(), train, test)


#: the environment variable that overrides :func:`training_budget` (seconds; 0 = no training)
BUDGET_VARIABLE = "ATTENTION_TRAINING_SECONDS"


def training_budget(seconds: float) -> float:
    """How many seconds the notebook's training cells may train for, here.

    ``seconds`` in a Jupyter kernel (yours, Colab's, Binder's, ``attention-check``'s); 0 when
    the grader runs the notebook (its checks record: grading never trains) and when no
    Jupyter kernel runs it (the course's own tests execute the cells in-process). The
    environment variable ATTENTION_TRAINING_SECONDS, when set, decides instead (e.g. 0 for
    plain ``nbgrader autograde``, whose cells time out after 30 s).
    """
    if is_recording():
        return 0.0
    if os.environ.get(BUDGET_VARIABLE):
        return float(os.environ[BUDGET_VARIABLE])
    ipython, zmqshell = sys.modules.get("IPython"), sys.modules.get("ipykernel.zmqshell")
    shell = ipython.get_ipython() if ipython is not None else None
    if shell is None or zmqshell is None or not isinstance(shell, zmqshell.ZMQInteractiveShell):
        return 0.0
    return float(seconds)
