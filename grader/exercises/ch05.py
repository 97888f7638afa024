"""Chapter 5 exercises, the judging half: references and classic bugs of causal_mask,
padding_mask, EncoderLayer and DecoderLayer (the cases are in ``attention_learner.cases.ch05``).

The layers are judged three ways: against the reference with explicit weights, against
torch's own nn.TransformerEncoderLayer / nn.TransformerDecoderLayer with the same weights,
and by properties (causality, padding) whose expected change is zero.
"""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import torch

from attention_learner.cases.ch05 import (
    build_decoder,
    build_encoder,
    call_decoder,
    call_decoder_causality,
    call_decoder_memory_padding,
    call_encoder,
    call_encoder_padding,
)
from attention_learner.torch_cases import backward, tensor
from grader.exercises.spec import exercise
from grader.reference.multi_head import torch_attn_mask
from grader.reference.transformer import (
    DecoderLayer,
    EncoderLayer,
    causal_mask,
    key_padding,
    padding_mask,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
)

FLOAT_MASK = "a float mask: build it with dtype=torch.bool (True = may attend)"


def _mask_bug(fn):
    return lambda inputs: {"mask": fn(inputs)}  # spec.to_numpy keeps bool apart from float


CAUSAL_BUGS = {
    "an inverted mask (True must mean 'may attend': on and below the diagonal)": _mask_bug(
        lambda i: ~causal_mask(i["n"])
    ),
    "the upper triangle (triu): that lets each position see the future instead of the past": (
        _mask_bug(lambda i: causal_mask(i["n"]).T.contiguous())
    ),
    "a mask off by one that leaves out the diagonal (tril(diagonal=-1)): position i must see "
    "itself": _mask_bug(lambda i: causal_mask(i["n"]).tril(-1)),
    "a mask off by one that lets position i see position i + 1 (tril(diagonal=1))": _mask_bug(
        lambda i: torch.ones(i["n"], i["n"], dtype=torch.bool).tril(1)
    ),
    FLOAT_MASK: _mask_bug(lambda i: causal_mask(i["n"]).double()),
}


def _padding(inputs: dict[str, Any]) -> torch.Tensor:
    return padding_mask(torch.from_numpy(inputs["lengths"]), inputs["max_len"])


PADDING_BUGS = {
    "an inverted mask (True must mean a real token)": _mask_bug(lambda i: ~_padding(i)),
    "a mask off by one (t <= length keeps one padding position; use t < length)": _mask_bug(
        lambda i: padding_mask(torch.from_numpy(i["lengths"]) + 1, i["max_len"])
    ),
    "a mask off by one (t < length - 1 drops the last real token)": _mask_bug(
        lambda i: padding_mask(torch.from_numpy(i["lengths"]) - 1, i["max_len"])
    ),
    FLOAT_MASK: _mask_bug(lambda i: _padding(i).double()),
}


def torch_mask(our_mask: torch.Tensor | None, inputs: dict[str, Any], n_q: int, n_k: int):
    """Our mask (True = may attend, broadcastable to (B, h, n_q, n_k)) as a boolean attention
    mask for torch's layers, (B * h, n_q, n_k) with True = ignore.

    Padding goes in through this attention mask rather than torch's ``*_key_padding_mask``
    arguments, which compute the same thing but whose first call imports sympy (a second or
    two of a test cell's time). tests/test_ch05_reference.py covers the key padding path.
    """
    if our_mask is None:
        return None
    B, h = inputs["G"].shape[0], inputs["args"][1]
    return torch_attn_mask(our_mask, B, h, n_q, n_k)


def torch_encoder_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Output and input gradient of nn.TransformerEncoderLayer with the same weights."""
    theirs = to_torch_encoder_layer(cast(EncoderLayer, build_encoder(EncoderLayer, inputs)))
    x = tensor(inputs["x"], grad=True)
    n = x.shape[1]
    out = theirs(x, src_mask=torch_mask(key_padding(tensor(inputs["pad_mask"])), inputs, n, n))
    return {"output": out, **backward(out, inputs["G"], {"x": x}, "nn.TransformerEncoderLayer")}


def torch_decoder_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Output and input gradients of nn.TransformerDecoderLayer with the same weights."""
    theirs = to_torch_decoder_layer(cast(DecoderLayer, build_decoder(DecoderLayer, inputs)))
    tensors = {"y": tensor(inputs["y"], grad=True), "memory": tensor(inputs["memory"], grad=True)}
    n_tgt, n_src = inputs["y"].shape[1], inputs["memory"].shape[1]
    self_mask = causal_mask(n_tgt)  # (n_tgt, n_tgt)
    if inputs["tgt_pad_mask"] is not None:
        self_mask = self_mask & key_padding(tensor(inputs["tgt_pad_mask"]))
    memory_mask = key_padding(tensor(inputs["memory_pad_mask"]))
    out = theirs(
        *tensors.values(),
        tgt_mask=torch_mask(self_mask, inputs, n_tgt, n_tgt),
        memory_mask=torch_mask(memory_mask, inputs, n_tgt, n_src),
    )
    return {"output": out, **backward(out, inputs["G"], tensors, "nn.TransformerDecoderLayer")}


def no_change(key: str, shape, reference_output) -> Any:
    """The expected outcome of a property check: an all-zero change of the given shape, and
    the reference layer's output on the unchanged input (a property alone earns nothing)."""
    return lambda inputs: {key: np.zeros(shape(inputs)), "output": reference_output(inputs)}


def reference_output(call, cls) -> Any:
    """inputs -> the reference layer's "output" through the learner-side case's own call."""
    return lambda inputs: np.asarray(call(cls, inputs)["output"].detach().double())


# ---------------------------------------------------------------- classic bugs of the layers


def encoder_variant(
    inputs: dict[str, Any],
    pre_norm: bool = False,
    attn_residual: bool = True,
    ff_residual: bool = True,
    attn_mask: str = "keys",
) -> dict[str, torch.Tensor]:
    """The encoder layer with one classic bug switched on (output only)."""
    layer = cast(EncoderLayer, build_encoder(EncoderLayer, inputs))
    x = tensor(inputs["x"])  # (B, n, d_model)
    pad = tensor(inputs["pad_mask"])  # (B, n) or None
    mask = {
        "keys": key_padding(pad),
        "none": None,
        "inverted": None if pad is None else key_padding(~pad),
        "queries": None if pad is None else pad[:, None, :, None],  # (B, 1, n, 1)
    }[attn_mask]
    with torch.no_grad():
        if pre_norm:
            x = x + layer.self_attn(*[layer.norm1(x)] * 3, mask)[0]
            return {"output": x + layer.ff(layer.norm2(x))}
        attended = layer.self_attn(x, x, x, mask)[0]
        x = layer.norm1(x + attended if attn_residual else attended)
        return {"output": layer.norm2(x + layer.ff(x) if ff_residual else layer.ff(x))}


def decoder_variant(
    inputs: dict[str, Any],
    pre_norm: bool = False,
    causal: str = "tril",
    cross_mask: str = "keys",
) -> dict[str, torch.Tensor]:
    """The decoder layer with one classic bug switched on (output and cross weights)."""
    layer = cast(DecoderLayer, build_decoder(DecoderLayer, inputs))
    y, memory = tensor(inputs["y"]), tensor(inputs["memory"])
    n = y.shape[1]
    self_mask = {
        "tril": causal_mask(n),
        "none": torch.ones(n, n, dtype=torch.bool),
        "no_diagonal": causal_mask(n).tril(-1),
        "triu": causal_mask(n).T,  # the future and the diagonal
    }[causal]
    tgt_pad, memory_pad = tensor(inputs["tgt_pad_mask"]), tensor(inputs["memory_pad_mask"])
    if tgt_pad is not None:
        self_mask = self_mask & key_padding(tgt_pad)  # (B, 1, n, n)
    memory_mask = key_padding(memory_pad) if cross_mask == "keys" else None
    with torch.no_grad():
        if pre_norm:
            y = y + layer.self_attn(*[layer.norm1(y)] * 3, self_mask)[0]
            attended, weights = layer.cross_attn(layer.norm2(y), memory, memory, memory_mask)
            y = y + attended
            return {"output": y + layer.ff(layer.norm3(y)), "cross_weights": weights}
        y = layer.norm1(y + layer.self_attn(y, y, y, self_mask)[0])
        attended, weights = layer.cross_attn(y, memory, memory, memory_mask)
        y = layer.norm2(y + attended)
        return {"output": layer.norm3(y + layer.ff(y)), "cross_weights": weights}


PRE_NORM = (
    "pre-norm (x + sublayer(norm(x))); the contract's layer is post-norm, as in the original "
    "paper: x = norm(x + sublayer(x))"
)

ENCODER_BUGS = {
    PRE_NORM: lambda i: encoder_variant(i, pre_norm=True),
    "the residual connection around self-attention is missing (norm1(x + attention), not "
    "norm1(attention))": lambda i: encoder_variant(i, attn_residual=False),
    "the residual connection around the feed-forward network is missing": lambda i: encoder_variant(
        i, ff_residual=False
    ),
    "the padding mask is inverted (True must mean a real token)": lambda i: (
        encoder_variant(i, attn_mask="inverted") if i["pad_mask"] is not None else {}
    ),
    "the padding mask was not passed to self-attention": lambda i: (
        encoder_variant(i, attn_mask="none") if i["pad_mask"] is not None else {}
    ),
    "a padding mask reshaped to (B, 1, n, 1), which hides padded queries instead of padded "
    "keys; use pad_mask[:, None, None, :]": lambda i: (
        encoder_variant(i, attn_mask="queries") if i["pad_mask"] is not None else {}
    ),
}

DECODER_BUGS = {
    "no causal mask: each target position also sees the positions after it": lambda i: decoder_variant(
        i, causal="none"
    ),
    "a causal mask off by one that hides the diagonal (each position must see itself; use "
    "tril, not tril(diagonal=-1))": lambda i: decoder_variant(i, causal="no_diagonal"),
    "an inverted causal mask (triu: True must be on and below the diagonal)": lambda i: decoder_variant(
        i, causal="triu"
    ),
    PRE_NORM: lambda i: decoder_variant(i, pre_norm=True),
    "the memory padding mask was not passed to cross-attention": lambda i: (
        decoder_variant(i, cross_mask="none") if i["memory_pad_mask"] is not None else {}
    ),
}


EXERCISES = [
    exercise("causal_mask", lambda i: {"mask": causal_mask(i["n"])}, CAUSAL_BUGS),
    exercise("padding_mask", lambda i: {"mask": _padding(i)}, PADDING_BUGS),
    exercise("EncoderLayer", lambda i: call_encoder(EncoderLayer, i), ENCODER_BUGS),
    exercise("EncoderLayer__torch", torch_encoder_reference, ENCODER_BUGS),
    exercise(
        "EncoderLayer__padding",
        no_change(
            "change_at_real_tokens",
            lambda i: i["x"].shape,
            reference_output(call_encoder_padding, EncoderLayer),
        ),
    ),
    exercise("DecoderLayer", lambda i: call_decoder(DecoderLayer, i), DECODER_BUGS),
    exercise("DecoderLayer__torch", torch_decoder_reference, DECODER_BUGS),
    exercise(
        "DecoderLayer__causality",
        no_change(
            "change_up_to_cut",
            lambda i: i["y"][:, : i["cut"] + 1].shape,
            reference_output(call_decoder_causality, DecoderLayer),
        ),
    ),
    exercise(
        "DecoderLayer__memory_padding",
        no_change(
            "change", lambda i: i["y"].shape, reference_output(call_decoder_memory_padding, DecoderLayer)
        ),
    ),
]
