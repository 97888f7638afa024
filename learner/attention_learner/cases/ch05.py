"""Chapter 5 cases: causal_mask, padding_mask, EncoderLayer and DecoderLayer.

The layers are run with explicit weights (outputs, cross-attention weights, gradients), and
for the properties that hold whatever the weights are, on two inputs that differ only where
the output must not care: future target tokens (causality) and padded tokens (padding). The
call adapters return the learner's raw outputs on both inputs; how far they moved is derived
by whoever judges them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Case, Inputs, unpack
from attention_learner.torch_cases import (
    backward,
    build_module,
    linear_state,
    mha_state,
    size_mismatch_note,
    tensor,
)

# ---------------------------------------------------------------- causal_mask and padding_mask


def make_causal_inputs(rng: np.random.Generator, n: int = 5) -> Inputs:
    """Just the length n: the mask has no random part."""
    return {"n": n}


def make_padding_inputs(
    rng: np.random.Generator, lengths: Sequence[int] = (3, 5, 1), max_len: int = 6
) -> dict[str, Any]:
    return {"lengths": np.array(lengths, dtype=np.int64), "max_len": max_len}


def padding_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    mask = got.get("mask")
    if mask is not None and mask.shape == expected["mask"].shape[::-1]:
        return ["The mask should be (B, max_len): one row per sequence."]
    return []


# ---------------------------------------------------------------- the layers' inputs

ENCODER_CONTRACT = (
    "self_attn (a MultiHeadAttention), ff (nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), "
    "nn.Linear(d_ff, d_model))), norm1 and norm2 (nn.LayerNorm(d_model))"
)
DECODER_CONTRACT = (
    "self_attn and cross_attn (MultiHeadAttention), ff (nn.Sequential(nn.Linear(d_model, d_ff), "
    "nn.ReLU(), nn.Linear(d_ff, d_model))), norm1, norm2 and norm3 (nn.LayerNorm(d_model))"
)


def layer_state(
    rng: np.random.Generator, d_model: int, d_ff: int, attention: Sequence[str], norms: int
) -> dict[str, np.ndarray]:
    """Explicit weights under the contract's names; LayerNorm gains and shifts are not 1 and 0,
    so that swapped norms show."""
    state = {}
    for name in attention:
        state.update(mha_state(rng, d_model, prefix=f"{name}."))
    state.update(linear_state(rng, "ff.0", d_model, d_ff))
    state.update(linear_state(rng, "ff.2", d_ff, d_model))
    for i in range(1, norms + 1):
        state[f"norm{i}.weight"] = 1.0 + normal(rng, d_model, scale=0.2)
        state[f"norm{i}.bias"] = normal(rng, d_model, scale=0.2)
    return state


def _drawn_padding(rng: np.random.Generator, batch: int, n: int, padded: bool) -> np.ndarray | None:
    """A padding mask (B, n), True = real token, of drawn lengths: the first sequence is full,
    the others 1 .. n - 1 long; None when not ``padded``. The lengths are drawn here, never
    taken: a helper from (lengths, n) to the mask would be the padding_mask exercise."""
    if not padded:
        return None
    lengths = rng.integers(1, n, size=batch)  # (B,) 1 .. n - 1
    lengths[0] = n
    return np.arange(n) < lengths[:, None]  # (B, n)


def make_encoder_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    n: int = 5,
    num_heads: int = 3,
    d_head: int = 4,
    d_ff: int = 7,
    padded: bool = False,
) -> dict[str, Any]:
    d_model = num_heads * d_head
    pad_mask = _drawn_padding(rng, batch, n, padded)  # (B, n) or None
    return {
        "x": normal(rng, batch, n, d_model),  # (B, n, d_model)
        "pad_mask": pad_mask,
        "x_changed": normal(rng, batch, n, d_model),  # replaces x at padded positions
        "state": layer_state(rng, d_model, d_ff, ("self_attn",), norms=2),
        "args": (d_model, num_heads, d_ff),
        "G": normal(rng, batch, n, d_model),  # upstream gradient
    }


def decoder_cut(n_tgt: int, cut: int | None) -> int:
    """The last target position that must not move when later ones change (the middle one
    when ``cut`` is None)."""
    return n_tgt // 2 if cut is None else cut


def make_decoder_inputs(
    rng: np.random.Generator,
    batch: int = 2,
    n_tgt: int = 5,
    n_src: int = 7,
    num_heads: int = 3,
    d_head: int = 4,
    d_ff: int = 11,
    padded: bool = False,
    cut: int | None = None,
) -> dict[str, Any]:
    """``cut``: the last target position that must not move when later ones change."""
    d_model = num_heads * d_head
    tgt_pad_mask = _drawn_padding(rng, batch, n_tgt, padded)  # (B, n_tgt) or None
    memory_pad_mask = _drawn_padding(rng, batch, n_src, padded)  # (B, n_src) or None
    return {
        "y": normal(rng, batch, n_tgt, d_model),  # (B, n_tgt, d_model)
        "memory": normal(rng, batch, n_src, d_model),  # (B, n_src, d_model)
        "tgt_pad_mask": tgt_pad_mask,
        "memory_pad_mask": memory_pad_mask,
        "y_changed": normal(rng, batch, n_tgt, d_model),  # replaces y after position `cut`
        "memory_changed": normal(rng, batch, n_src, d_model),  # replaces padded memory
        "cut": decoder_cut(n_tgt, cut),
        "state": layer_state(rng, d_model, d_ff, ("self_attn", "cross_attn"), norms=3),
        "args": (d_model, num_heads, d_ff),
        "G": normal(rng, batch, n_tgt, d_model),  # upstream gradient
    }


def describe_encoder(params: dict[str, Any]) -> str:
    h, d_head = params["num_heads"], params["d_head"]
    padded = "a padding mask" if params["padded"] else "no padding"
    return (
        f"batch {params['batch']}, n={params['n']}, num_heads={h}, "
        f"d_head={d_head} (d_model={h * d_head}), d_ff={params['d_ff']}, {padded}"
    )


def describe_decoder(params: dict[str, Any]) -> str:
    h, d_head = params["num_heads"], params["d_head"]
    padded = "padding masks" if params["padded"] else "no padding"
    return (
        f"batch {params['batch']}, n_tgt={params['n_tgt']}, "
        f"n_src={params['n_src']}, num_heads={h}, d_head={d_head} "
        f"(d_model={h * d_head}), d_ff={params['d_ff']}, {padded}"
    )


# ---------------------------------------------------------------- running a layer


def build_encoder(cls: Any, inputs: dict[str, Any]) -> nn.Module:
    return build_module(cls, inputs["args"], inputs["state"], ENCODER_CONTRACT)


def build_decoder(cls: Any, inputs: dict[str, Any]) -> nn.Module:
    return build_module(cls, inputs["args"], inputs["state"], DECODER_CONTRACT)


def _single_tensor(result: Any, what: str) -> torch.Tensor:
    if not isinstance(result, torch.Tensor):
        raise TypeError(f"{what} should return one tensor (B, n, d_model), got {type(result)}")
    return result


def run_encoder(module: nn.Module, x: torch.Tensor, inputs: dict[str, Any]) -> torch.Tensor:
    result = module(x, tensor(inputs["pad_mask"]))
    return _single_tensor(result, "EncoderLayer.forward")


def run_decoder(
    module: nn.Module, y: torch.Tensor, memory: torch.Tensor, inputs: dict[str, Any]
) -> tuple[torch.Tensor, torch.Tensor]:
    try:
        result = module(y, memory, tensor(inputs["tgt_pad_mask"]), tensor(inputs["memory_pad_mask"]))
    except RuntimeError as exc:
        n_tgt, n_src = y.shape[1], memory.shape[1]
        raise size_mismatch_note(
            exc,
            f"y has n_tgt={n_tgt} positions and memory n_src={n_src}",
            "that the cross-attention took its keys and values from y instead of memory, or "
            "that a mask was built for the wrong sequence",
        ) from exc
    return unpack(result, ("output", "cross_weights"), "DecoderLayer.forward")


def call_encoder(cls: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    module = build_encoder(cls, inputs)
    x = tensor(inputs["x"], grad=True)
    out = run_encoder(module, x, inputs)
    return {"output": out, **backward(out, inputs["G"], {"x": x}, "EncoderLayer.forward")}


def call_decoder(cls: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    module = build_decoder(cls, inputs)
    tensors = {"y": tensor(inputs["y"], grad=True), "memory": tensor(inputs["memory"], grad=True)}
    out, cross_weights = run_decoder(module, tensors["y"], tensors["memory"], inputs)
    grads = backward(out, inputs["G"], tensors, "DecoderLayer.forward")
    return {"output": out, "cross_weights": cross_weights, **grads}


# ---------------------------------------------------------------- properties


def call_encoder_padding(cls: Any, inputs: Inputs) -> dict[str, Any]:
    """The outputs on x and on x with its padded tokens replaced; real tokens' outputs must
    not move."""
    module = build_encoder(cls, inputs)
    real = torch.from_numpy(inputs["pad_mask"])[..., None]  # (B, n, 1)
    x = tensor(inputs["x"])  # (B, n, d_model)
    x_changed = torch.where(real, x, tensor(inputs["x_changed"]))  # (B, n, d_model)
    with torch.no_grad():
        return {
            "output": run_encoder(module, x, inputs),
            "output_changed": run_encoder(module, x_changed, inputs),
        }


def call_decoder_causality(cls: Any, inputs: Inputs) -> dict[str, Any]:
    """The outputs on y and on y with the target tokens after ``cut`` replaced."""
    module = build_decoder(cls, inputs)
    cut = inputs["cut"]
    y, memory = tensor(inputs["y"]), tensor(inputs["memory"])
    y_changed = y.clone()
    y_changed[:, cut + 1 :] = tensor(inputs["y_changed"])[:, cut + 1 :]
    with torch.no_grad():
        before, _ = run_decoder(module, y, memory, inputs)
        after, _ = run_decoder(module, y_changed, memory, inputs)
    return {"output": before, "output_changed": after}


def call_decoder_memory_padding(cls: Any, inputs: Inputs) -> dict[str, Any]:
    """The outputs with memory and with memory's padded positions replaced."""
    module = build_decoder(cls, inputs)
    real = torch.from_numpy(inputs["memory_pad_mask"])[..., None]  # (B, n_src, 1)
    y, memory = tensor(inputs["y"]), tensor(inputs["memory"])
    memory_changed = torch.where(real, memory, tensor(inputs["memory_changed"]))
    with torch.no_grad():
        before, _ = run_decoder(module, y, memory, inputs)
        after, _ = run_decoder(module, y, memory_changed, inputs)
    return {"output": before, "output_changed": after}


def _two_outputs(got: Arrays, shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """The raw outputs on both inputs, checked to have the layer's output shape."""
    for key in ("output", "output_changed"):
        if key not in got:
            raise ValueError(f"no {key} was returned")
        if got[key].shape != shape:
            raise ValueError(f"the output has shape {got[key].shape}, expected {shape}")
    return got["output"], got["output_changed"]


# A property alone is no answer (a layer that returns zeros never moves): each property case
# also compares the output on the unchanged input with the reference's.


def derive_encoder_padding(inputs: Inputs, got: Arrays) -> Arrays:
    """How far the real tokens' outputs moved (should be 0), and the output itself."""
    before, after = _two_outputs(got, inputs["x"].shape)
    real = inputs["pad_mask"][..., None]  # (B, n, 1)
    return {"change_at_real_tokens": (after - before) * real, "output": before}


def derive_causality(inputs: Inputs, got: Arrays) -> Arrays:
    """How far outputs 0..cut moved when the tokens after ``cut`` changed (should be 0), and
    the output itself."""
    before, after = _two_outputs(got, inputs["y"].shape)
    return {"change_up_to_cut": (after - before)[:, : inputs["cut"] + 1], "output": before}


def derive_memory_padding(inputs: Inputs, got: Arrays) -> Arrays:
    """How far the outputs moved when padded memory changed (should be 0), and the output."""
    before, after = _two_outputs(got, inputs["y"].shape)
    return {"change": after - before, "output": before}


def _moved(got: Arrays, key: str) -> bool:
    """Whether the property case's change ``key`` is not zero (the property is broken)."""
    change = got.get(key)
    return change is not None and bool(np.abs(change).max(initial=0.0) > 1e-6)


def causality_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    if not _moved(got, "change_up_to_cut"):
        return []
    return [
        f"Changing the target tokens after position {inputs['cut']} moved the outputs at "
        f"positions 0..{inputs['cut']}: the decoder looked into the future. Build a causal "
        "mask (True on and below the diagonal) and pass it to self_attn."
    ]


def encoder_padding_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    if not _moved(got, "change_at_real_tokens"):
        return []
    return [
        "Changing padding tokens moved the outputs of real tokens: padded keys must be hidden "
        "from every query (pass pad_mask[:, None, None, :], True = real token, to self_attn)."
    ]


def memory_padding_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    if not _moved(got, "change"):
        return []
    return [
        "Changing padded positions of memory moved the decoder's outputs: pass "
        "memory_pad_mask[:, None, None, :] to cross_attn."
    ]


def encoder_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    pad, out = inputs["pad_mask"], got.get("output")
    if pad is None or out is None or out.shape != expected["output"].shape:
        return []
    error = np.abs(out - expected["output"]).max(axis=-1)  # (B, n)
    if error[pad].max() < 1e-6 < error[~pad].max():
        return [
            "Only the outputs at padding positions differ: the mask must hide padded keys "
            "(shape (B, 1, 1, n)), not padded queries."
        ]
    return []


def decoder_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    weights = got.get("cross_weights")
    if weights is not None and "cross_weights" in expected:
        B, h, n_tgt, n_src = expected["cross_weights"].shape
        if weights.shape == (B, h, n_tgt, n_tgt) and n_tgt != n_src:
            return [
                "cross_weights is (B, h, n_tgt, n_tgt): the cross-attention seems to take its "
                "keys and values from y instead of memory (the encoder output); its weights "
                "are (B, h, n_tgt, n_src)."
            ]
    return []


make_padded_encoder_inputs = partial(make_encoder_inputs, padded=True)
make_padded_decoder_inputs = partial(make_decoder_inputs, padded=True)

CASES = [
    Case(
        name="causal_mask",
        make_inputs=make_causal_inputs,
        call=lambda fn, i: {"mask": fn(i["n"])},
        describe=lambda p: f"n={p['n']}",
    ),
    Case(
        name="padding_mask",
        make_inputs=make_padding_inputs,
        call=lambda fn, i: {"mask": fn(torch.from_numpy(i["lengths"]), i["max_len"])},
        describe=lambda p: f"lengths={list(p['lengths'])}, max_len={p['max_len']}",
        hints=padding_hints,
    ),
    Case(
        name="EncoderLayer",
        make_inputs=make_encoder_inputs,
        call=call_encoder,
        describe=describe_encoder,
        hints=encoder_hints,
    ),
    Case(
        name="EncoderLayer__torch",
        make_inputs=make_encoder_inputs,
        call=call_encoder,
        describe=lambda p: (
            "against nn.TransformerEncoderLayer (dropout 0, post-norm) with the same weights, "
            + describe_encoder(p)
        ),
        hints=encoder_hints,
    ),
    Case(
        name="EncoderLayer__padding",
        make_inputs=make_padded_encoder_inputs,
        call=call_encoder_padding,
        describe=lambda p: "changing the padded tokens, " + describe_encoder(p),
        hints=encoder_padding_hints,
        derive=derive_encoder_padding,
    ),
    Case(
        name="DecoderLayer",
        make_inputs=make_decoder_inputs,
        call=call_decoder,
        describe=describe_decoder,
        hints=decoder_hints,
    ),
    Case(
        name="DecoderLayer__torch",
        make_inputs=make_decoder_inputs,
        call=call_decoder,
        describe=lambda p: (
            "against nn.TransformerDecoderLayer (dropout 0, post-norm) with the same weights, "
            + describe_decoder(p)
        ),
        hints=decoder_hints,
    ),
    Case(
        name="DecoderLayer__causality",
        make_inputs=make_decoder_inputs,
        call=call_decoder_causality,
        describe=lambda p: (
            f"changing the target tokens after position {decoder_cut(p['n_tgt'], p['cut'])}, "
            + describe_decoder(p)
        ),
        hints=causality_hints,
        derive=derive_causality,
    ),
    Case(
        name="DecoderLayer__memory_padding",
        make_inputs=make_padded_decoder_inputs,
        call=call_decoder_memory_padding,
        describe=lambda p: "changing the padded memory positions, " + describe_decoder(p),
        hints=memory_padding_hints,
        derive=derive_memory_padding,
    ),
]


def upstream_hint(case: Case) -> Case:
    """``case`` whose failure messages also say, conditionally, which earlier exercises the
    layer may run: its own hints cannot tell whether the learner's layer calls them."""
    hints = case.hints

    def all_hints(inputs: Inputs, expected: Arrays, got: Arrays) -> list[str]:
        own = hints(inputs, expected, got) if hints is not None else []
        return own + [
            f"If your {case.function} builds its masks with your causal_mask or padding_mask, "
            "check that their own tests pass first (MultiHeadAttention here is the given one)."
        ]

    return dataclasses.replace(case, hints=all_hints)


CASES = [upstream_hint(c) if c.function in ("EncoderLayer", "DecoderLayer") else c for c in CASES]
