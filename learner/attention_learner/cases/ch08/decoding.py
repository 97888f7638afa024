"""The case of ``greedy_decode_cached(model, src, max_len, bos_id, eos_id)`` on
:class:`DecodingStandIn`, a model with the contract's decoder attributes (the given decoder
layers, explicit weights) whose encoder is an embedding lookup; ``__counts`` wraps the model
(:func:`attention_learner.cases.ch08.decode_counts.count_calls`) to count calls of ``encode``,
projections of the source's keys and values, and query positions projected.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch
from torch import nn

from attention_learner.blocks import GivenDecoderLayer
from attention_learner.cases.ch08.decode_counts import count_calls
from attention_learner.cases.ch08.ids import count_text, int_tensor, lengths_text, padded_ids
from attention_learner.cases.ch08.translator import embedding_state, layer_state
from attention_learner.inputs import normal
from attention_learner.spec import Arrays, Inputs
from attention_learner.torch_cases import build_module, linear_state


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
        memory: torch.Tensor = self.src_embed(src)  # (B, n_src, d_model)
        return memory


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
    model = build_module(DecodingStandIn, inputs["args"], inputs["state"], STAND_IN_ATTRIBUTES)
    return cast(DecodingStandIn, model.eval())


def _watch_steps(model: DecodingStandIn) -> list[tuple[str, torch.Tensor]]:
    """Record, in order, the ids each call of ``model.tgt_embed`` embeds ("embed") and the
    logits each call of ``model.output_proj`` returns ("logits")."""
    events: list[tuple[str, torch.Tensor]] = []
    model.tgt_embed.register_forward_pre_hook(lambda m, args: events.append(("embed", args[0].detach())))
    model.output_proj.register_forward_hook(lambda m, args, out: events.append(("logits", out.detach())))
    return events


def _batch_argmax(events: list[tuple[str, torch.Tensor]], error: str, B: int) -> bool:
    """Whether the next token was the argmax over the batch axis of the (B, V) logits: the ids
    fed back are ``logits.argmax(dim=0)``, V of them, or the error came between the output
    layer and the next embedding with V where B belongs."""
    logits = [value for kind, value in events if kind == "logits" and value.ndim == 2 and value.shape[0] == B]
    if not logits or logits[-1].shape[1] == B:
        return False
    V = logits[-1].shape[1]
    if events[-1][0] == "logits":  # raised while choosing or storing the next token
        return f"({V})" in error or f"[{V}]" in error
    fed = events[-1][1]
    return fed.shape[0] == V and torch.equal(fed.reshape(-1), logits[-1].argmax(dim=0))


def _decode(fn: Any, model: DecodingStandIn, inputs: Inputs) -> torch.Tensor:
    src = int_tensor(inputs["src"])
    events = _watch_steps(model)
    try:
        ids = fn(model, src, inputs["max_len"], inputs["bos_id"], inputs["eos_id"])
    except AttributeError as exc:
        raise AttributeError(
            f"{exc}. The test's model offers {STAND_IN_ATTRIBUTES}: use only these."
        ) from exc
    except RuntimeError as exc:
        if _batch_argmax(events, str(exc), src.shape[0]):
            raise RuntimeError(
                f"{exc}\n(This is the argmax taken over the batch axis: argmax(dim=0) of the (B, V) "
                "logits gives one id per vocabulary entry. The next token of each sentence is the "
                "argmax over the vocabulary, argmax(dim=-1), shape (B,).)"
            ) from exc
        if "size" not in str(exc) or sum(kind == "embed" for kind, _ in events) < 2:
            raise
        raise RuntimeError(
            f"{exc}\n(If a KV cache appends along an axis other than the sequence axis, -2 of "
            "(B, h, t, d_head), the sizes stop matching after the first step.)"
        ) from exc
    if not isinstance(ids, torch.Tensor):
        raise TypeError(f"greedy_decode_cached should return a tensor of ids, got {type(ids).__name__}")
    return ids


def call_cached_decode(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
    return {"ids": _decode(fn, stand_in_model(inputs), inputs)}


def call_cached_decode_counts(fn: Any, inputs: Inputs) -> dict[str, Any]:  # raw outputs: tensors
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
        f"{len(lengths)} source(s) of lengths {lengths_text(lengths)} (pad_id={params['pad_id']}), "
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
    if ids.shape == want.shape and not np.array_equal(ids, want):
        hints += _wrong_step_hints(ids, want, inputs["eos_id"])
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
                hints += _query_rows_hints(count, ids, inputs["eos_id"], what)
            elif count.max() == 0:
                hints.append(
                    f"{key.replace('_', ' ')}: no call was seen. Project with the modules "
                    "themselves (layer.cross_attn.W_k(memory)), so that the test can count them."
                )
            else:
                hints.append(what.format(count_text(int(count.max()), "time")))
    return hints


def _steps_per_sentence(ids: np.ndarray, eos_id: int) -> np.ndarray:
    """(B,): the steps each sentence takes alone, up to its first EOS (T if it has none)."""
    ended = ids == eos_id
    steps: np.ndarray = np.where(ended.any(axis=1), ended.argmax(axis=1) + 1, ids.shape[1])
    return steps


def _wrong_step_hints(ids: np.ndarray, want: np.ndarray, eos_id: int) -> list[str]:
    """Where ids of the right shape go wrong: only after a sentence's EOS, or after a right
    first token."""
    real = np.arange(want.shape[1]) < _steps_per_sentence(want, eos_id)[:, None]  # up to each EOS
    if np.array_equal(ids[real], want[real]):
        return [
            "Every sentence is right up to its first EOS and wrong after it: a sentence that has "
            "produced eos_id only repeats eos_id."
        ]
    if np.array_equal(ids[:, :1], want[:, :1]):
        return [
            "The first token is right and a later one is not. From step 1 on, self-attention reads "
            "more than one position: in each layer, the new token attends over that layer's own "
            "cache (every earlier position and itself, appended along the sequence axis), with the "
            "scores divided by sqrt(d_head) and the softmax over the keys; and it sits at position t "
            "of the positional encoding."
        ]
    return []


def _query_rows_hints(count: np.ndarray, ids: np.ndarray | None, eos_id: int, what: str) -> list[str]:
    """The hint on the query positions self-attention projected, per layer (``count``), for
    the learner's own ``ids``: T steps project T positions with a KV cache."""
    if ids is None or ids.ndim != 2:
        return []
    B, T = ids.shape
    if np.all(count == T):
        return []  # one query per step: the steps themselves are the ids' business
    if B > 1 and np.all(count == _steps_per_sentence(ids, eos_id).sum()):
        return [
            f"Self-attention projected {count_text(int(count.max()), 'query position')} in each layer "
            f"for {count_text(T, 'step')} of {B} sentences: one per sentence and step, as if the "
            "sentences were decoded one at a time. Decode the batch together: each step projects "
            "the new tokens of all the sentences at once, a (B, 1, d_model) input."
        ]
    return [what.format(count_text(int(count.max()), "query position"), count_text(T, "step"))]


DECODE_LABELS = {
    "ids": "the array of generated ids",
    "encode_calls": "the number of calls of model.encode",
    "cross_keys": "per decoder layer, how many times the source's keys were projected (cross_attn.W_k)",
    "cross_values": "per decoder layer, how many times the source's values were projected (cross_attn.W_v)",
    "query_rows": "per decoder layer, the number of query positions self-attention projected",
}
