"""Chapter 5 exercises: causal_mask, padding_mask, EncoderLayer and DecoderLayer.

The layers are judged three ways: against the reference with explicit weights (outputs,
cross-attention weights, gradients), against torch's own nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer with the same weights, and by properties that hold whatever the
weights are: changing future target tokens must not move earlier outputs (causality), and
changing padded tokens must not move the outputs of real ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from grader.exercises.cases import normal
from grader.exercises.ch04 import (
    backward,
    build_module,
    linear_state,
    mha_state,
    size_mismatch_note,
    tensor,
)
from grader.exercises.spec import Arrays, unpack
from grader.exercises.spec import legacy_exercise as Exercise
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

# ---------------------------------------------------------------- causal_mask and padding_mask

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


def make_padding_inputs(
    rng: np.random.Generator, lengths: Sequence[int] = (3, 5, 1), max_len: int = 6
) -> dict[str, Any]:
    return {"lengths": np.array(lengths, dtype=np.int64), "max_len": max_len}


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


def _lengths(rng: np.random.Generator, batch: int, n: int, padded: bool) -> np.ndarray | None:
    """Sequence lengths for a padding mask: the first sequence is full, the others shorter."""
    if not padded:
        return None
    lengths = rng.integers(1, n, size=batch)  # 1 .. n - 1
    lengths[0] = n
    return lengths


def _mask_of(lengths: np.ndarray | None, n: int) -> np.ndarray | None:
    return None if lengths is None else np.arange(n) < lengths[:, None]  # (B, n)


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
    lengths = _lengths(rng, batch, n, padded)
    return {
        "x": normal(rng, batch, n, d_model),  # (B, n, d_model)
        "pad_mask": _mask_of(lengths, n),  # (B, n) or None
        "x_changed": normal(rng, batch, n, d_model),  # replaces x at padded positions
        "state": layer_state(rng, d_model, d_ff, ("self_attn",), norms=2),
        "args": (d_model, num_heads, d_ff),
        "G": normal(rng, batch, n, d_model),  # upstream gradient
    }


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
    tgt_lengths = _lengths(rng, batch, n_tgt, padded)
    src_lengths = _lengths(rng, batch, n_src, padded)
    return {
        "y": normal(rng, batch, n_tgt, d_model),  # (B, n_tgt, d_model)
        "memory": normal(rng, batch, n_src, d_model),  # (B, n_src, d_model)
        "tgt_pad_mask": _mask_of(tgt_lengths, n_tgt),  # (B, n_tgt) or None
        "memory_pad_mask": _mask_of(src_lengths, n_src),  # (B, n_src) or None
        "y_changed": normal(rng, batch, n_tgt, d_model),  # replaces y after position `cut`
        "memory_changed": normal(rng, batch, n_src, d_model),  # replaces padded memory
        "cut": n_tgt // 2 if cut is None else cut,
        "state": layer_state(rng, d_model, d_ff, ("self_attn", "cross_attn"), norms=3),
        "args": (d_model, num_heads, d_ff),
        "G": normal(rng, batch, n_tgt, d_model),  # upstream gradient
    }


def describe_encoder(params: dict[str, Any]) -> str:
    h, d_head = params.get("num_heads", 3), params.get("d_head", 4)
    padded = "a padding mask" if params.get("padded") else "no padding"
    return (
        f"batch {params.get('batch', 2)}, n={params.get('n', 5)}, num_heads={h}, "
        f"d_head={d_head} (d_model={h * d_head}), d_ff={params.get('d_ff', 7)}, {padded}"
    )


def describe_decoder(params: dict[str, Any]) -> str:
    h, d_head = params.get("num_heads", 3), params.get("d_head", 4)
    padded = "padding masks" if params.get("padded") else "no padding"
    return (
        f"batch {params.get('batch', 2)}, n_tgt={params.get('n_tgt', 5)}, "
        f"n_src={params.get('n_src', 7)}, num_heads={h}, d_head={d_head} "
        f"(d_model={h * d_head}), d_ff={params.get('d_ff', 11)}, {padded}"
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


def call_encoder(cls: Any, inputs: dict[str, Any]) -> Arrays:
    module = build_encoder(cls, inputs)
    x = tensor(inputs["x"], grad=True)
    out = run_encoder(module, x, inputs)
    return {"output": out, **backward(out, inputs["G"], {"x": x}, "EncoderLayer.forward")}


def call_decoder(cls: Any, inputs: dict[str, Any]) -> Arrays:
    module = build_decoder(cls, inputs)
    tensors = {"y": tensor(inputs["y"], grad=True), "memory": tensor(inputs["memory"], grad=True)}
    out, cross_weights = run_decoder(module, *tensors.values(), inputs)
    grads = backward(out, inputs["G"], tensors, "DecoderLayer.forward")
    return {"output": out, "cross_weights": cross_weights, **grads}


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


def torch_encoder_reference(inputs: dict[str, Any]) -> Arrays:
    """Output and input gradient of nn.TransformerEncoderLayer with the same weights."""
    theirs = to_torch_encoder_layer(build_encoder(EncoderLayer, inputs))
    x = tensor(inputs["x"], grad=True)
    n = x.shape[1]
    out = theirs(x, src_mask=torch_mask(key_padding(tensor(inputs["pad_mask"])), inputs, n, n))
    return {"output": out, **backward(out, inputs["G"], {"x": x}, "nn.TransformerEncoderLayer")}


def torch_decoder_reference(inputs: dict[str, Any]) -> Arrays:
    """Output and input gradients of nn.TransformerDecoderLayer with the same weights."""
    theirs = to_torch_decoder_layer(build_decoder(DecoderLayer, inputs))
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


# ---------------------------------------------------------------- properties


def call_encoder_padding(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """How much the real tokens' outputs move when the padded tokens change (should be 0)."""
    module = build_encoder(cls, inputs)
    real = torch.from_numpy(inputs["pad_mask"])[..., None]  # (B, n, 1)
    x = tensor(inputs["x"])
    x_changed = torch.where(real, x, tensor(inputs["x_changed"]))  # (B, n, d_model)
    with torch.no_grad():
        change = run_encoder(module, x_changed, inputs) - run_encoder(module, x, inputs)
    return {"change_at_real_tokens": change * real}


def call_decoder_causality(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """How much outputs 0..cut move when the target tokens after ``cut`` change (should be 0)."""
    module = build_decoder(cls, inputs)
    cut = inputs["cut"]
    y, memory = tensor(inputs["y"]), tensor(inputs["memory"])
    y_changed = y.clone()
    y_changed[:, cut + 1 :] = tensor(inputs["y_changed"])[:, cut + 1 :]
    with torch.no_grad():
        before, _ = run_decoder(module, y, memory, inputs)
        after, _ = run_decoder(module, y_changed, memory, inputs)
    return {"change_up_to_cut": (after - before)[:, : cut + 1]}


def call_decoder_memory_padding(cls: Any, inputs: dict[str, Any]) -> Arrays:
    """How much the outputs move when the padded memory positions change (should be 0)."""
    module = build_decoder(cls, inputs)
    real = torch.from_numpy(inputs["memory_pad_mask"])[..., None]  # (B, n_src, 1)
    y, memory = tensor(inputs["y"]), tensor(inputs["memory"])
    memory_changed = torch.where(real, memory, tensor(inputs["memory_changed"]))
    with torch.no_grad():
        before, _ = run_decoder(module, y, memory, inputs)
        after, _ = run_decoder(module, y, memory_changed, inputs)
    return {"change": after - before}


def no_change(key: str, shape) -> Any:
    """The expected outcome of a property check: an all-zero change of the given shape."""
    return lambda inputs: {key: np.zeros(shape(inputs))}


def causality_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    return [
        f"Changing the target tokens after position {inputs['cut']} moved the outputs at "
        f"positions 0..{inputs['cut']}: the decoder looked into the future. Build a causal "
        "mask (True on and below the diagonal) and pass it to self_attn."
    ]


def encoder_padding_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    return [
        "Changing padding tokens moved the outputs of real tokens: padded keys must be hidden "
        "from every query (pass pad_mask[:, None, None, :], True = real token, to self_attn)."
    ]


def memory_padding_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    return [
        "Changing padded positions of memory moved the decoder's outputs: pass "
        "memory_pad_mask[:, None, None, :] to cross_attn."
    ]


# ---------------------------------------------------------------- classic bugs of the layers


def encoder_variant(
    inputs: dict[str, Any],
    pre_norm: bool = False,
    attn_residual: bool = True,
    ff_residual: bool = True,
    attn_mask: str = "keys",
) -> Arrays:
    """The encoder layer with one classic bug switched on (output only)."""
    layer = build_encoder(EncoderLayer, inputs)
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
) -> Arrays:
    """The decoder layer with one classic bug switched on (output and cross weights)."""
    layer = build_decoder(DecoderLayer, inputs)
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


EXERCISES = [
    Exercise(
        name="causal_mask",
        make_inputs=lambda rng, n=5: {"n": n},
        call=lambda fn, i: {"mask": fn(i["n"])},
        reference=lambda i: {"mask": causal_mask(i["n"])},
        bugs=CAUSAL_BUGS,
        describe=lambda p: f"n={p.get('n', 5)}",
    ),
    Exercise(
        name="padding_mask",
        make_inputs=make_padding_inputs,
        call=lambda fn, i: {"mask": fn(torch.from_numpy(i["lengths"]), i["max_len"])},
        reference=lambda i: {"mask": _padding(i)},
        bugs=PADDING_BUGS,
        hints=padding_hints,
        describe=lambda p: f"lengths={list(p.get('lengths', (3, 5, 1)))}, max_len={p.get('max_len', 6)}",
    ),
    Exercise(
        name="EncoderLayer",
        make_inputs=make_encoder_inputs,
        call=call_encoder,
        reference=lambda i: call_encoder(EncoderLayer, i),
        bugs=ENCODER_BUGS,
        hints=encoder_hints,
        describe=describe_encoder,
    ),
    Exercise(
        name="EncoderLayer__torch",
        make_inputs=make_encoder_inputs,
        call=call_encoder,
        reference=torch_encoder_reference,
        bugs=ENCODER_BUGS,
        hints=encoder_hints,
        describe=lambda p: (
            "against nn.TransformerEncoderLayer (dropout 0, post-norm) with the "
            "same weights, " + describe_encoder(p)
        ),
    ),
    Exercise(
        name="EncoderLayer__padding",
        make_inputs=lambda rng, **p: make_encoder_inputs(rng, **{"padded": True, **p}),
        call=call_encoder_padding,
        reference=no_change("change_at_real_tokens", lambda i: i["x"].shape),
        hints=encoder_padding_hints,
        describe=lambda p: "changing the padded tokens, " + describe_encoder({"padded": True, **p}),
    ),
    Exercise(
        name="DecoderLayer",
        make_inputs=make_decoder_inputs,
        call=call_decoder,
        reference=lambda i: call_decoder(DecoderLayer, i),
        bugs=DECODER_BUGS,
        hints=decoder_hints,
        describe=describe_decoder,
    ),
    Exercise(
        name="DecoderLayer__torch",
        make_inputs=make_decoder_inputs,
        call=call_decoder,
        reference=torch_decoder_reference,
        bugs=DECODER_BUGS,
        hints=decoder_hints,
        describe=lambda p: (
            "against nn.TransformerDecoderLayer (dropout 0, post-norm) with the "
            "same weights, " + describe_decoder(p)
        ),
    ),
    Exercise(
        name="DecoderLayer__causality",
        make_inputs=make_decoder_inputs,
        call=call_decoder_causality,
        reference=no_change("change_up_to_cut", lambda i: i["y"][:, : i["cut"] + 1].shape),
        hints=causality_hints,
        describe=lambda p: (
            "changing the target tokens after position "
            f"{p.get('cut', p.get('n_tgt', 5) // 2)}, " + describe_decoder(p)
        ),
    ),
    Exercise(
        name="DecoderLayer__memory_padding",
        make_inputs=lambda rng, **p: make_decoder_inputs(rng, **{"padded": True, **p}),
        call=call_decoder_memory_padding,
        reference=no_change("change", lambda i: i["y"].shape),
        hints=memory_padding_hints,
        describe=lambda p: "changing the padded memory positions, " + describe_decoder({"padded": True, **p}),
    ),
]
