"""The case of ``TinyTranslator``: explicit weights loaded by the contract's parameter names
(so that the given layers and a learner's own chapter-5 layers are tested alike), on batches
padded in the source and in the target; ``__torch`` compares with ``nn.Transformer``.

An embedding of ids x is E[x] sqrt(d_model) + PE[0..n-1]; the state's embeddings have entries of
size 1 / sqrt(d_model), so that once scaled they are of size 1, like the encoding's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.cases.ch08.ids import int_tensor, lengths_text, padded_ids
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Inputs
from attention_learner.torch_cases import State, build_module, linear_state, mha_state

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


def call_translator(cls: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    """forward(src, tgt_in), and encode then decode as separate calls."""
    model: Any = build_translator(cls, inputs)  # the learner's class
    src, tgt_in = int_tensor(inputs["src"]), int_tensor(inputs["tgt_in"])
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
        f"pad_id={params['pad_id']}; {len(src)} sentence(s), source lengths {lengths_text(src)} padded to "
        f"{max(src)}, target lengths {lengths_text(tgt)} padded to {max(tgt)}"
    )


#: TinyTranslator's tolerance (its cases compare at atol + rtol |expected|)
TRANSLATOR_ATOL, TRANSLATOR_RTOL = 1e-8, 1e-6


def _rows_close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per sentence (axis 0): whether a and b agree."""
    return np.array([np.allclose(x, y, atol=1e-6, rtol=1e-5) for x, y in zip(a, b, strict=True)])


def _encode_hints(memory: np.ndarray, want: np.ndarray) -> list[str]:
    """Whether encode(src) is right (to float64 rounding), off by float32 rounding only, or wrong."""
    if np.allclose(memory, want, atol=1e-12, rtol=1e-10):
        return [
            "encode is right, so the problem is in decode: the target embedding (scaled, with "
            "positions), the masks of the decoder or the output projection."
        ]
    if np.allclose(memory, want, atol=1e-6, rtol=1e-5):
        return [
            "encode(src) agrees with the expected memory only to about 1e-7 of its size, the rounding "
            "of float32: some tensor of your model is float32 (a table made with dtype=torch.float32, "
            "or .float()); the tests run in float64."
        ]
    return [
        "encode is already wrong: embeddings scaled by sqrt(d_model), the positional encoding "
        "added, the source padding mask (src != pad_id) given to every encoder layer."
    ]


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
        hints += _encode_hints(memory, expected["memory"])
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
