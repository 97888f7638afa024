"""Chapter 8 exercises, the judging half: references and classic bugs of shift_right,
translation_loss, TinyTranslator, train_step, greedy_decode_cached and sample_next_token.

The cases (inputs, the stand-in models, how the learner's code is called, descriptions,
hints) are in ``attention_learner.cases.ch08``. References come from
``grader.reference.seq2seq``; ``TinyTranslator__torch`` is judged against ``nn.Transformer``
with the same weights, and greedy_decode_cached against the UNCACHED greedy loop (the
definition of the ids it must return), on the case's stand-in model.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.cases.ch08 import (
    STAND_IN_ATTRIBUTES,
    TRANSLATOR_CONTRACT,
    flat_parameters,
    make_optimizer,
    toy_model,
)
from attention_learner.torch_cases import load_weights, tensor
from grader.exercises.spec import Arrays, Inputs, exercise
from grader.reference.at_scale import KVCache
from grader.reference.multi_head import merge_heads, split_heads
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.reference.seq2seq import (
    TinyTranslator,
    greedy_decode,
    log_softmax,
    sample_next_token,
    shift_right,
    torch_transformer_logits,
    train_step,
    translation_loss,
)
from grader.reference.transformer import causal_mask, key_padding


def _ids(inputs: Inputs, key: str) -> torch.Tensor:
    return torch.from_numpy(np.array(inputs[key], dtype=np.int64))


def _once_per_inputs(build):
    """``build(inputs)``, built once for the inputs it was last asked about: the reference and
    every classic bug of one case share one model (none of them changes its weights)."""
    last: dict[str, Any] = {}

    def cached(inputs: Inputs) -> Any:
        if last.get("inputs") is not inputs:
            last.clear()
            last["inputs"], last["value"] = inputs, build(inputs)  # holding inputs keeps its id unique
        return last["value"]

    return cached


# ---------------------------------------------------------------- shift_right


def _shift(build):
    return lambda i: {"tgt_in": build(_ids(i, "tgt"), i["bos_id"])}


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
    targets = _ids(inputs, "targets")
    return log_softmax(logits), targets, targets != inputs["pad_id"]


def _loss_reference(inputs: Inputs) -> Arrays:
    loss = translation_loss(tensor(inputs["logits"]), _ids(inputs, "targets"), inputs["pad_id"],
                            inputs["label_smoothing"])  # fmt: skip
    return {"loss": loss.reshape(1)}


def _loss_gradient_reference(inputs: Inputs) -> Arrays:
    logits = tensor(inputs["logits"], grad=True)
    loss = translation_loss(logits, _ids(inputs, "targets"), inputs["pad_id"], inputs["label_smoothing"])
    loss.backward()
    return {"loss": loss.reshape(1), "dlogits": logits.grad}


def _per_token(log_p: torch.Tensor, targets: torch.Tensor, eps: float) -> torch.Tensor:
    nll = -log_p.gather(-1, targets[..., None]).squeeze(-1)  # (B, n)
    return (1 - eps) * nll - eps * log_p.mean(-1)


def _loss_bug(variant):
    """A classic mistake of the loss, as values and gradients: ``variant(inputs, logits)``."""

    def bug(inputs: Inputs) -> Arrays:
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
    return translation_loss(logits, _ids(inputs, "targets"), inputs["pad_id"])


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
    targets = _ids(inputs, "targets")
    real = targets != inputs["pad_id"]
    return (_per_token(log_p, targets, inputs["label_smoothing"]) * real).sum() / real.sum()


def _log_of_softmax(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    log_p = torch.log(torch.exp(logits) / torch.exp(logits).sum(-1, keepdim=True))  # overflows
    targets = _ids(inputs, "targets")
    real = targets != inputs["pad_id"]
    return (_per_token(log_p, targets, inputs["label_smoothing"]) * real).sum() / real.sum()


def _detached_log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """z - logsumexp(z) with the log-sum-exp cut from the graph: the right values, and the
    gradient of z alone (the softmax term p - onehot loses its p)."""
    return logits - torch.logsumexp(logits, dim=-1, keepdim=True).detach()  # (B, n, V)


def _detached_lse(inputs: Inputs, logits: torch.Tensor) -> torch.Tensor:
    targets = _ids(inputs, "targets")
    real = targets != inputs["pad_id"]
    per = _per_token(_detached_log_softmax(logits), targets, inputs["label_smoothing"])  # (B, n)
    return (per * real).sum() / real.sum()


DETACHED_LSE = (
    "the log-sum-exp detached from the graph (.detach(), .item() or a NumPy step): the loss's "
    "value is right, but its gradient misses the softmax's part; keep every step in torch"
)


def _value_only(bug):
    """A loss bug's value without its gradient (for the case that compares the value only)."""

    def value(inputs: Inputs) -> Arrays:
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


# ---------------------------------------------------------------- TinyTranslator


@_once_per_inputs
def _reference_translator(inputs: Inputs) -> TinyTranslator:
    model = TinyTranslator(*inputs["args"], max_len=64).double()
    load_weights(model, inputs["state"], TRANSLATOR_CONTRACT)
    return model.eval()


def _translator_reference(inputs: Inputs) -> Arrays:
    model = _reference_translator(inputs)
    src, tgt_in = _ids(inputs, "src"), _ids(inputs, "tgt_in")
    with torch.no_grad():
        logits = model(src, tgt_in)
        memory = model.encode(src) * (src != inputs["pad_id"])[..., None]
    return {"logits": logits, "decoded": logits, "memory": memory}


def _translator_torch_reference(inputs: Inputs) -> Arrays:
    model = _reference_translator(inputs)
    with torch.no_grad():
        return {"logits": torch_transformer_logits(model, _ids(inputs, "src"), _ids(inputs, "tgt_in"))}


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
) -> Arrays:
    """The logits of the reference's weights with one classic mistake switched on."""
    model = _reference_translator(inputs)
    src, tgt_in = _ids(inputs, "src"), _ids(inputs, "tgt_in")
    pad = inputs["pad_id"] if pad_id is None else pad_id
    d = model.d_model

    def embed(embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        x = embedding(ids) * (math.sqrt(d) if scale else 1.0)
        return x + model.pe[: ids.shape[1]] if positions else x

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
        for layer in model.decoder_layers:
            y = layer.norm1(y + layer.self_attn(y, y, y, own)[0])
            y = layer.norm2(y + layer.cross_attn(y, x, x, key_padding(masks[cross_mask]))[0])
            y = layer.norm3(y + layer.ff(y))
        return {"logits": model.output_proj(y)}


def _translator_bug(**switches: Any):
    def bug(inputs: Inputs) -> Arrays:
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
}
TORCH_TRANSLATOR_BUGS = {k: v for k, v in TRANSLATOR_BUGS.items()}


# ---------------------------------------------------------------- train_step


def _run_steps(inputs: Inputs, step) -> Arrays:
    model = toy_model(inputs)
    optimizer = make_optimizer(inputs["optimizer"], model.parameters(), inputs["lr"])
    losses, outputs = [], {}
    for i, (src, tgt) in enumerate(inputs["batches"], start=1):
        losses.append(step(model, optimizer, torch.tensor(src), torch.tensor(tgt), inputs))
        if i in (1, len(inputs["batches"])):
            outputs[f"params_after_{i}"] = flat_parameters(model)
    return {"losses": np.array(losses), **outputs}


def _train_reference(inputs: Inputs) -> Arrays:
    return _run_steps(inputs, lambda m, o, s, t, i: train_step(m, o, s, t, i["pad_id"], i["bos_id"]))


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

    return lambda inputs: _run_steps(inputs, step)


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


# ---------------------------------------------------------------- greedy_decode_cached


class _StandInReference(TinyTranslator):
    """The reference translator with the case's stand-in encoder (an embedding lookup)."""

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        return self.src_embed(src)  # (B, n_src, d_model)


@_once_per_inputs
def _stand_in(inputs: Inputs) -> _StandInReference:
    model = _StandInReference(*inputs["args"], max_len=64).double()
    load_weights(model, inputs["state"], STAND_IN_ATTRIBUTES)
    return model.eval()


@_once_per_inputs
def _uncached_ids(inputs: Inputs) -> torch.Tensor:
    return greedy_decode(_stand_in(inputs), _ids(inputs, "src"), inputs["max_len"], inputs["bos_id"],
                         inputs["eos_id"])  # fmt: skip


def _counts(inputs: Inputs, ids: torch.Tensor, encode: int | None = None, cross: int | None = None,
            queries: int | None = None) -> Arrays:  # fmt: skip
    """The counts of a decode of T = ids.shape[1] steps (those of a right one where not given)."""
    layers = inputs["args"][5]
    steps = ids.shape[1]
    return {
        "ids": ids,
        "encode_calls": np.array([1.0 if encode is None else encode]),
        "cross_keys": np.full(layers, 1.0 if cross is None else cross),
        "cross_values": np.full(layers, 1.0 if cross is None else cross),
        "query_rows": np.full(layers, float(steps if queries is None else queries)),
    }


def _decode_reference(inputs: Inputs) -> Arrays:
    return {"ids": _uncached_ids(inputs)}


def _counts_reference(inputs: Inputs) -> Arrays:
    return _counts(inputs, _uncached_ids(inputs))


@torch.no_grad()
def _cached_variant(
    inputs: Inputs,
    cache: str = "per_layer",
    position: str = "t",
    scale: bool = True,
    source_mask: bool = True,
    pad_after_eos: bool = True,
    stop: str = "all",
    fill: str = "eos",
) -> Arrays:
    """Cached greedy decoding of the stand-in with one classic mistake switched on."""
    model = _stand_in(inputs)
    src = _ids(inputs, "src")
    bos, eos, max_len = inputs["bos_id"], inputs["eos_id"], inputs["max_len"]
    memory = model.encode(src)
    src_keys = key_padding(src != model.pad_id) if source_mask else None
    layers = list(model.decoder_layers)
    h = model.num_heads
    cross = [(split_heads(layer.cross_attn.W_k(memory), h), split_heads(layer.cross_attn.W_v(memory), h))
             for layer in layers]  # fmt: skip
    shared = KVCache()
    caches = [shared] * len(layers) if cache == "shared" else [KVCache() for _ in layers]
    B = src.shape[0]
    token = torch.full((B, 1), bos, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    out = []
    for t in range(max_len):
        where = {"t": t, "zero": 0, "next": t + 1}[position]
        y = model.tgt_embed(token) * (math.sqrt(model.d_model) if scale else 1.0) + model.pe[where]
        for layer, layer_cache, (k_x, v_x) in zip(layers, caches, cross, strict=True):
            attn = layer.self_attn
            q = split_heads(attn.W_q(y), h)
            k_new, v_new = split_heads(attn.W_k(y), h), split_heads(attn.W_v(y), h)
            k, v = (k_new, v_new) if cache == "none" else layer_cache.append(k_new, v_new)
            if cache == "newest_twice":  # the cache's keys, the new one again: (B, h, t + 2, d_head)
                k, v = torch.cat([k, k_new], dim=-2), torch.cat([v, v_new], dim=-2)
            heads, _ = scaled_dot_product_attention_torch(q, k, v)
            y = layer.norm1(y + attn.W_o(merge_heads(heads)))
            q = split_heads(layer.cross_attn.W_q(y), h)
            heads, _ = scaled_dot_product_attention_torch(q, k_x, v_x, src_keys)
            y = layer.norm2(y + layer.cross_attn.W_o(merge_heads(heads)))
            y = layer.norm3(y + layer.ff(y))
        next_id = model.output_proj(y[:, -1]).argmax(-1)
        if pad_after_eos:
            finished_id = eos if fill == "eos" else model.pad_id
            next_id = torch.where(finished, torch.full_like(next_id, finished_id), next_id)
        out.append(next_id)
        finished |= next_id == eos
        token = next_id[:, None]
        if stop == "all" and bool(finished.all()):
            break
    return {"ids": torch.stack(out, dim=1)}


def _cached_bug(**switches: Any):
    return lambda inputs: _cached_variant(inputs, **switches)


DECODE_BUGS = {
    "a KV cache that is not used: each step's query attends to the new token only (append its key and "
    "value to the layer's cache and attend over everything the cache returns)": _cached_bug(cache="none"),
    "one KV cache shared by all the decoder layers: each layer caches its own keys and values": _cached_bug(
        cache="shared"
    ),
    "every new token embedded at position 0: the token fed at "
    "step t sits at position t (BOS at 0)": _cached_bug(position="zero"),
    "the newest token attended twice: its key and value were appended to the cache and then "
    "concatenated to what the cache returned again (attend over the cache's keys and values "
    "only)": _cached_bug(cache="newest_twice"),
    "a finished sentence padded with pad_id after its EOS: it must repeat eos_id": _cached_bug(
        fill="pad"
    ),
    "positions off by one: the token fed at step t sits at "
    "position t of the encoding (BOS at 0)": _cached_bug(position="next"),
    "the new token's embedding not scaled by sqrt(d_model)": _cached_bug(scale=False),
    "the source padding ignored in cross-attention (mask the source keys where src == pad_id)": _cached_bug(
        source_mask=False
    ),
    "decoding that keeps going after EOS: a finished sentence must only repeat eos_id": _cached_bug(
        pad_after_eos=False
    ),
    "decoding that runs all max_len steps instead of stopping "
    "when every sentence has emitted EOS": _cached_bug(stop="never"),
}


def _counted(encode: str = "once", cross: str = "once", queries: str = "new"):
    """The ids of a right decode with the counts of a wasteful one."""

    def bug(inputs: Inputs) -> Arrays:
        ids = _uncached_ids(inputs)
        T = ids.shape[1]
        return _counts(inputs, ids, encode=T if encode == "every_step" else None,
                       cross=T if cross == "every_step" else None,
                       queries=T * (T + 1) // 2 if queries == "prefix" else None)  # fmt: skip

    return bug


def _with_counts(bug):
    """A bug of the ids, with the counts a cached decode of that many steps makes."""
    return lambda inputs: _counts(inputs, bug(inputs)["ids"])


COUNT_BUGS = {
    "decoding without a KV cache: the ids are right, but every step ran the decoder layers over the whole "
    "prefix (projecting every earlier position, and the source, again); each step must project the new "
    "token only": _counted(cross="every_step", queries="prefix"),
    "the decoder's self-attention recomputed the queries, keys and values of the whole prefix at every "
    "step instead of projecting the new token only and reading the rest from its KV cache": _counted(
        queries="prefix"
    ),
    "cross-attention recomputed every step: the source's keys and values (layer.cross_attn.W_k(memory), "
    "W_v(memory)) depend on the source only; compute them once per layer, before the loop": _counted(
        cross="every_step"
    ),
    "the encoder ran at every step: call model.encode(src) once, before the loop": _counted(
        encode="every_step"
    ),
    # the mistakes in the ids, with the counts of a cached decode (the ending rules are the
    # first test's business: the counts cases seldom end a sentence)
    **{
        description: _with_counts(bug) for description, bug in DECODE_BUGS.items() if "EOS" not in description
    },
}


# ---------------------------------------------------------------- sample_next_token


def _sample(inputs: Inputs, logits: torch.Tensor | None = None, temperature: float | None = None,
            top_k: Any = "same", seed_offset: int = 0) -> Arrays:  # fmt: skip
    generator = torch.Generator().manual_seed(inputs["generator_seed"] + seed_offset)
    logits = tensor(inputs["logits"]) if logits is None else logits
    t = inputs["temperature"] if temperature is None else temperature
    k = inputs["top_k"] if top_k == "same" else top_k
    return {"ids": sample_next_token(logits, t, k, generator)}


def _sample_reference(inputs: Inputs) -> Arrays:
    return _sample(inputs)


def _if_sampling(bug):
    """A bug of the draw: it does not apply with temperature 0 (the argmax)."""
    return lambda inputs: {} if inputs["temperature"] == 0 else bug(inputs)


def _multiplied(inputs: Inputs) -> Arrays:
    return _sample(inputs, logits=tensor(inputs["logits"]) * inputs["temperature"], temperature=1.0)


def _smallest_k(inputs: Inputs) -> Arrays:
    k, logits = inputs["top_k"], tensor(inputs["logits"])
    if k is None or k >= logits.shape[-1]:
        return {}
    kth = torch.topk(logits, k, dim=-1, largest=False).values[..., -1:]
    return _sample(inputs, logits=logits.masked_fill(logits > kth, float("-inf")), top_k=None)


def _over_the_batch(inputs: Inputs) -> Arrays:
    z = tensor(inputs["logits"]) / inputs["temperature"]
    k = inputs["top_k"]
    if k is not None and k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, k, dim=-1).values[..., -1:], float("-inf"))
    p = torch.softmax(z, dim=0)
    generator = torch.Generator().manual_seed(inputs["generator_seed"])
    return {"ids": torch.multinomial(p, 1, generator=generator).squeeze(-1)}


def _top_k_off_by(inputs: Inputs, change: int) -> Arrays:
    """The draw with top_k + change tokens kept (where that is another filter than top_k's)."""
    k, vocab = inputs["top_k"], inputs["logits"].shape[-1]
    if k is None or k >= vocab or not 1 <= k + change < vocab:
        return {}
    return _sample(inputs, top_k=k + change)


#: keeping k - 1 tokens shows only where 1 < k < V: never on the limits (top_k = 1 keeps no
#: token at all, top_k = V and temperature 0 filter nothing), so ``__limits`` leaves it out
TOP_K_MINUS_ONE = ("top-k off by one: k - 1 tokens kept (torch.topk(z, top_k).values[:, -1:] is the k-th "
                   "largest; keep z >= it)")

SAMPLE_BUGS = {
    "the temperature multiplied the logits instead of dividing them (logits / temperature)": _if_sampling(
        _multiplied
    ),
    "the temperature ignored": _if_sampling(lambda i: _sample(i, temperature=1.0)),
    "top-k ignored: the draw came from all V tokens": _if_sampling(
        lambda i: {} if i["top_k"] is None else _sample(i, top_k=None)
    ),
    "top-k that kept the k smallest logits instead of the k largest": _if_sampling(_smallest_k),
    "top-k off by one: k + 1 tokens kept (torch.topk(z, top_k).values[:, -1:] is the k-th "
    "largest; keep z >= it)": _if_sampling(lambda i: _top_k_off_by(i, 1)),
    TOP_K_MINUS_ONE: _if_sampling(lambda i: _top_k_off_by(i, -1)),
    "the argmax instead of a draw (that is temperature 0 only)": _if_sampling(
        lambda i: {"ids": tensor(i["logits"]).argmax(-1)}
    ),
    "a draw from torch's global random generator instead of the generator given": _if_sampling(
        lambda i: _sample(i, seed_offset=1)
    ),
    "the softmax taken over the batch axis (dim=0) instead of the vocabulary": _if_sampling(_over_the_batch),
}


EXERCISES = [
    exercise("shift_right", lambda i: {"tgt_in": shift_right(_ids(i, "tgt"), i["bos_id"]),
                                       "tgt_unchanged": np.array(True)}, SHIFT_BUGS),
    exercise("translation_loss", _loss_reference,
             {k: _value_only(b) for k, b in LOSS_BUGS.items() if k != DETACHED_LSE}),  # its value is right
    exercise("translation_loss__gradients", _loss_gradient_reference, LOSS_BUGS),
    exercise("TinyTranslator", _translator_reference, TRANSLATOR_BUGS),
    exercise("TinyTranslator__torch", _translator_torch_reference, TORCH_TRANSLATOR_BUGS),
    exercise("train_step", _train_reference, TRAIN_BUGS),
    exercise("greedy_decode_cached", _decode_reference, DECODE_BUGS),
    exercise("greedy_decode_cached__counts", _counts_reference, COUNT_BUGS),
    exercise("sample_next_token", _sample_reference, SAMPLE_BUGS),
    exercise("sample_next_token__limits", _sample_reference,
             {k: b for k, b in SAMPLE_BUGS.items() if k != TOP_K_MINUS_ONE}),
]
