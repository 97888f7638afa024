"""Chapter 8's classic bugs of greedy_decode_cached (its ids and its counted calls) and of
sample_next_token, each a model of the mistake run on the case's inputs.
"""

from __future__ import annotations

import math
from typing import Any, cast

import torch

from attention_learner.torch_cases import tensor
from grader.exercises.ch08_models import Outputs, decode_counts, draw, id_tensor, stand_in, uncached_ids
from grader.exercises.spec import Inputs
from grader.reference.at_scale import KVCache
from grader.reference.multi_head import merge_heads, split_heads
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.reference.transformer import DecoderLayer, key_padding


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
    norm: str = "post",
    self_scale: bool = True,
    self_softmax: str = "keys",
) -> Outputs:
    """Cached greedy decoding of the stand-in with one classic mistake switched on.

    ``stop``: "all" (right), "never", "any" (at the first EOS of any sentence), "first" (when
    sentence 0 has emitted EOS); ``norm``: "post" (the given layers') or "pre"; self-attention
    unscaled, or its softmax over the query axis (of size 1: every cached value weighs 1). (The
    argmax over the batch axis raises on every case, B != tgt_vocab: the case's call names it.)"""
    model = stand_in(inputs)
    src = id_tensor(inputs, "src")
    bos, eos, max_len = inputs["bos_id"], inputs["eos_id"], inputs["max_len"]
    memory = model.encode(src)
    src_keys = key_padding(src != model.pad_id) if source_mask else None
    layers = cast(list[DecoderLayer], list(model.decoder_layers))
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
            x = layer.norm1(y) if norm == "pre" else y  # pre-norm: each sublayer reads norm(y)
            q = split_heads(attn.W_q(x), h)
            k_new, v_new = split_heads(attn.W_k(x), h), split_heads(attn.W_v(x), h)
            k, v = (k_new, v_new) if cache == "none" else layer_cache.append(k_new, v_new)
            if cache == "newest_twice":  # the cache's keys, the new one again: (B, h, t + 2, d_head)
                k, v = torch.cat([k, k_new], dim=-2), torch.cat([v, v_new], dim=-2)
            if self_softmax == "queries":  # a softmax over one query: weight 1 on every key
                heads = v.sum(dim=-2, keepdim=True)  # (B, h, 1, d_head)
            else:
                heads, _ = scaled_dot_product_attention_torch(q, k, v, scale=None if self_scale else 1.0)
            y = _sublayer(layer.norm1, y, attn.W_o(merge_heads(heads)), norm)
            x = layer.norm2(y) if norm == "pre" else y
            q = split_heads(layer.cross_attn.W_q(x), h)
            heads, _ = scaled_dot_product_attention_torch(q, k_x, v_x, src_keys)
            y = _sublayer(layer.norm2, y, layer.cross_attn.W_o(merge_heads(heads)), norm)
            x = layer.norm3(y) if norm == "pre" else y
            y = _sublayer(layer.norm3, y, layer.ff(x), norm)
        next_id = model.output_proj(y[:, -1]).argmax(-1)
        if pad_after_eos:
            finished_id = eos if fill == "eos" else model.pad_id
            next_id = torch.where(finished, torch.full_like(next_id, finished_id), next_id)
        out.append(next_id)
        finished |= next_id == eos
        token = next_id[:, None]
        if (stop == "all" and bool(finished.all())) or (stop == "any" and bool(finished.any())):
            break
        if stop == "first" and bool(finished[0]):
            break
    return {"ids": torch.stack(out, dim=1)}


def _sublayer(layer_norm: torch.nn.Module, y: torch.Tensor, update: torch.Tensor, norm: str) -> torch.Tensor:
    """Post-norm: norm(y + update); pre-norm: y + update (the update read norm(y))."""
    return y + update if norm == "pre" else layer_norm(y + update)


def _cached_bug(**switches: Any):
    return lambda inputs: _cached_variant(inputs, **switches)


#: the words shared by the two ways of stopping before every sentence has finished (on a case
#: where both stop at the same step, either model explains the output)
STOPPED_EARLY = "decoding that stopped before every sentence had emitted EOS"

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
    "a finished sentence padded with pad_id after its EOS: it must repeat eos_id": _cached_bug(fill="pad"),
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
    f"{STOPPED_EARLY} (at the first EOS of any sentence): stop when all have, a finished sentence "
    "repeating eos_id meanwhile": _cached_bug(stop="any"),
    f"{STOPPED_EARLY} (when the first sentence emitted it): stop when all have, a finished sentence "
    "repeating eos_id meanwhile": _cached_bug(stop="first"),
    "pre-norm sublayers, y + sublayer(norm(y)): the given decoder layers are post-norm, "
    "y = layer.norm1(y + self-attention(y)), and so on": _cached_bug(norm="pre"),
    "self-attention's scores not divided by sqrt(d_head) (the first step, with one cached key, "
    "does not show it)": _cached_bug(self_scale=False),
    "self-attention's softmax taken over the query axis (dim=-2, of size 1 at each step, so "
    "every cached value got weight 1) instead of over the keys (dim=-1)": _cached_bug(self_softmax="queries"),
}


def _counted(encode: str = "once", cross: str = "once", queries: str = "new"):
    """The ids of a right decode with the counts of a wasteful one."""

    def bug(inputs: Inputs) -> Outputs:
        ids = uncached_ids(inputs)
        T = ids.shape[1]
        return decode_counts(inputs, ids, encode=T if encode == "every_step" else None,
                       cross=T if cross == "every_step" else None,
                       queries=T * (T + 1) // 2 if queries == "prefix" else None)  # fmt: skip

    return bug


def _with_counts(bug):
    """A bug of the ids, with the counts a cached decode of that many steps makes."""

    def counted(inputs: Inputs) -> Outputs:
        outputs = bug(inputs)
        return decode_counts(inputs, outputs["ids"]) if outputs else {}

    return counted


def _one_sentence_at_a_time(encode: str):
    """The right ids, decoded sentence by sentence (a batch of one each, each stopping at its
    own EOS): per layer, the source projected once per sentence and one query per sentence
    and step; model.encode called per sentence (``encode="per_sentence"``) or once."""

    def bug(inputs: Inputs) -> Outputs:
        ids = uncached_ids(inputs)
        B, T = ids.shape
        if B == 1:
            return {}  # a batch of one: nothing to tell apart
        ended = ids == inputs["eos_id"]  # (B, T)
        steps = torch.where(ended.any(dim=1), ended.int().argmax(dim=1) + 1, torch.tensor(T))  # (B,)
        return decode_counts(inputs, ids, encode=B if encode == "per_sentence" else 1, cross=B,
                             queries=int(steps.sum()))  # fmt: skip

    return bug


#: the words shared by the two per-sentence decodes (with model.encode called per sentence or once)
ONE_SENTENCE_AT_A_TIME = "the sentences decoded one at a time (a loop over the batch)"


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
    f"{ONE_SENTENCE_AT_A_TIME}, model.encode called for each: decode the whole batch together, "
    "one encode call and, at each step, one new token per sentence in each layer": _one_sentence_at_a_time(
        "per_sentence"
    ),
    f"{ONE_SENTENCE_AT_A_TIME}: decode the whole batch together, the source projected once per "
    "layer and, at each step, one new token per sentence in each layer": _one_sentence_at_a_time("once"),
    # the mistakes in the ids, with the counts of a cached decode (the ending rules are the
    # first test's business: the counts cases seldom end a sentence)
    **{
        description: _with_counts(bug) for description, bug in DECODE_BUGS.items() if "EOS" not in description
    },
}


# ---------------------------------------------------------------- sample_next_token


def _if_sampling(bug):
    """A bug of the draw: it does not apply with temperature 0 (the argmax)."""
    return lambda inputs: {} if inputs["temperature"] == 0 else bug(inputs)


def _multiplied(inputs: Inputs) -> Outputs:
    return draw(inputs, logits=tensor(inputs["logits"]) * inputs["temperature"], temperature=1.0)


def _smallest_k(inputs: Inputs) -> Outputs:
    k, logits = inputs["top_k"], tensor(inputs["logits"])
    if k is None or k >= logits.shape[-1]:
        return {}
    kth = torch.topk(logits, k, dim=-1, largest=False).values[..., -1:]
    return draw(inputs, logits=logits.masked_fill(logits > kth, float("-inf")), top_k=None)


def _over_the_batch(inputs: Inputs) -> Outputs:
    z = tensor(inputs["logits"]) / inputs["temperature"]
    k = inputs["top_k"]
    if k is not None and k < z.shape[-1]:
        z = z.masked_fill(z < torch.topk(z, k, dim=-1).values[..., -1:], float("-inf"))
    p = torch.softmax(z, dim=0)
    generator = torch.Generator().manual_seed(inputs["generator_seed"])
    return {"ids": torch.multinomial(p, 1, generator=generator).squeeze(-1)}


def _top_k_off_by(inputs: Inputs, change: int) -> Outputs:
    """The draw with top_k + change tokens kept (where that is another filter than top_k's)."""
    k, vocab = inputs["top_k"], inputs["logits"].shape[-1]
    if k is None or k >= vocab or not 1 <= k + change < vocab:
        return {}
    return draw(inputs, top_k=k + change)


#: keeping k - 1 tokens shows only where 1 < k < V: never on the limits (top_k = 1 keeps no
#: token at all, top_k = V and temperature 0 filter nothing), so ``__limits`` leaves it out
TOP_K_MINUS_ONE = (
    "top-k off by one: k - 1 tokens kept (torch.topk(z, top_k).values[:, -1:] is the k-th "
    "largest; keep z >= it)"
)

SAMPLE_BUGS = {
    "the temperature multiplied the logits instead of dividing them (logits / temperature)": _if_sampling(
        _multiplied
    ),
    "the temperature ignored": _if_sampling(lambda i: draw(i, temperature=1.0)),
    "top-k ignored: the draw came from all V tokens": _if_sampling(
        lambda i: {} if i["top_k"] is None else draw(i, top_k=None)
    ),
    "top-k that kept the k smallest logits instead of the k largest": _if_sampling(_smallest_k),
    "top-k off by one: k + 1 tokens kept (torch.topk(z, top_k).values[:, -1:] is the k-th "
    "largest; keep z >= it)": _if_sampling(lambda i: _top_k_off_by(i, 1)),
    TOP_K_MINUS_ONE: _if_sampling(lambda i: _top_k_off_by(i, -1)),
    "the argmax instead of a draw (that is temperature 0 only)": _if_sampling(
        lambda i: {"ids": tensor(i["logits"]).argmax(-1)}
    ),
    "a draw from torch's global random generator instead of the generator given": _if_sampling(
        lambda i: draw(i, seed_offset=1)
    ),
    "the softmax taken over the batch axis (dim=0) instead of the vocabulary": _if_sampling(_over_the_batch),
}
