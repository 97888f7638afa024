"""A decoder-only (GPT-style) language model, for the pages of chapter 8.

Drop the encoder and the cross-attention from the Transformer and what is left is a stack of
causal self-attention blocks: given tokens y_0 .. y_t it scores the next one, y_{t+1}. Trained
on plain text with the same shifted-by-one targets as a translator (the input is the text
without its last token, the target the text without its first), it learns the distribution
of the text; generating from it is sampling one token at a time
(:func:`grader.reference.seq2seq.sample_next_token`) with a KV cache in every block.

Each block is post-norm like the course's other layers, x = LayerNorm(x + SelfAttention(x))
then x = LayerNorm(x + FFN(x)), with the sinusoidal positions of chapter 6; GPT-2 and its
successors put the LayerNorm before each sublayer instead and learn their positions, which
matters for deep models and not at this size.

The text is English from chapter 6's toy grammar (:func:`grader.reference.translator.
random_sentence`), so whether a generated sentence is grammatical can be decided exactly
(:func:`is_grammatical`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import cast

import numpy as np
import torch
from torch import nn

from grader.reference.at_scale import KVCache, chunk_causal_mask
from grader.reference.multi_head import MultiHeadAttention, merge_heads, split_heads
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.reference.seq2seq import sample_next_token
from grader.reference.transformer import causal_mask, feed_forward, key_padding
from grader.reference.translator import (
    ADJECTIVES,
    ARTICLES,
    BOS,
    CONJUNCTION,
    EOS,
    NOUNS,
    PAD,
    VERBS,
    Vocab,
    positional_encoding,
    random_sentence,
)


class CausalBlock(nn.Module):
    """Masked self-attention and a feed-forward network, post-norm (a decoder layer without
    cross-attention). ``step(x_new, cache)`` runs it on new positions only, reading the
    earlier positions' keys and values from ``cache``."""

    def __init__(self, d_model: int, num_heads: int, d_ff: int) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = feed_forward(d_model, d_ff)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, pad_mask: torch.Tensor | None = None) -> torch.Tensor:
        mask = causal_mask(x.shape[1]).to(x.device)  # (n, n)
        if pad_mask is not None:
            mask = mask & key_padding(pad_mask)  # (B, 1, n, n)
        x = self.norm1(x + self.self_attn(x, x, x, mask)[0])  # (B, n, d_model)
        return self.norm2(x + self.ff(x))

    def step(self, x_new: torch.Tensor, cache: KVCache) -> torch.Tensor:
        attn = self.self_attn
        h, start = attn.num_heads, len(cache)
        q = split_heads(attn.W_q(x_new), h)  # (B, h, t_new, d_head)
        k, v = cache.append(split_heads(attn.W_k(x_new), h), split_heads(attn.W_v(x_new), h))
        mask = chunk_causal_mask(start, x_new.shape[1]).to(x_new.device)  # (t_new, start + t_new)
        heads, _ = scaled_dot_product_attention_torch(q, k, v, mask)  # (B, h, t_new, d_head)
        x = self.norm1(x_new + attn.W_o(merge_heads(heads)))
        return self.norm2(x + self.ff(x))  # (B, t_new, d_model)


class DecoderOnlyLM(nn.Module):
    """Token embedding (scaled by sqrt(d_model)) plus positions, ``num_layers`` causal blocks,
    an output layer: forward(ids (B, n)) -> logits (B, n, vocab) of the next token."""

    pe: torch.Tensor  # the buffer registered in __init__

    def __init__(self, vocab: int, d_model: int, num_heads: int, d_ff: int, num_layers: int,
                 pad_id: int = PAD, max_len: int = 256) -> None:  # fmt: skip
        super().__init__()
        self.d_model, self.pad_id = d_model, pad_id
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        self.register_buffer("pe", torch.from_numpy(positional_encoding(max_len, d_model)), persistent=False)
        self.blocks = nn.ModuleList(CausalBlock(d_model, num_heads, d_ff) for _ in range(num_layers))
        self.output_proj = nn.Linear(d_model, vocab)

    def embed_at(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        x = self.embed(ids) * math.sqrt(self.d_model)  # (B, n, d_model)
        return x + self.pe[start : start + ids.shape[1]].to(x.dtype)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed_at(ids)
        for block in self.blocks:
            x = block(x, ids != self.pad_id)
        return self.output_proj(x)  # (B, n, vocab)


@torch.no_grad()
def generate(
    model: DecoderOnlyLM,
    prompt: torch.Tensor,
    max_new: int,
    temperature: float,
    top_k: int | None,
    generator: torch.Generator,
    eos_id: int = EOS,
) -> torch.Tensor:
    """Continue each row of ``prompt`` (B, n0) by up to ``max_new`` sampled tokens, with one
    KV cache per block: the prompt in one chunk, then one token per step. Returns the new
    tokens (B, T); a row that has produced ``eos_id`` repeats it; stops when all have."""
    caches = [KVCache() for _ in model.blocks]
    x, start, token = model.embed_at(prompt), 0, None
    finished = torch.zeros(prompt.shape[0], dtype=torch.bool)
    out = []
    for _ in range(max_new):
        if token is not None:
            x = model.embed_at(token[:, None], start)  # (B, 1, d_model)
        n_new = x.shape[1]
        for block, cache in zip(cast(Iterable[CausalBlock], model.blocks), caches, strict=True):
            x = block.step(x, cache)
        start += n_new
        token = sample_next_token(model.output_proj(x[:, -1]), temperature, top_k, generator)  # (B,)
        token = torch.where(finished, torch.full_like(token, eos_id), token)
        out.append(token)
        finished |= token == eos_id
        if bool(finished.all()):
            break
    return torch.stack(out, dim=1)


def english_vocab() -> Vocab:
    return Vocab(list(NOUNS) + list(ADJECTIVES) + list(ARTICLES) + list(VERBS) + list(CONJUNCTION))


def english_sentences(n: int, seed: int, clauses: tuple[int, ...] = (1, 2)) -> list[list[str]]:
    """``n`` sentences of the toy grammar (not necessarily distinct), seeded."""
    rng = np.random.default_rng(seed)
    return [random_sentence(rng, int(rng.choice(clauses))) for _ in range(n)]


def lm_batch(sentences: list[list[str]], vocab: Vocab) -> torch.Tensor:
    """(B, n) ids: <bos>, the sentence, <eos>, then padding."""
    n = max(len(s) for s in sentences) + 2
    ids = torch.full((len(sentences), n), PAD, dtype=torch.long)
    for b, words in enumerate(sentences):
        ids[b, : len(words) + 2] = torch.tensor([BOS, *vocab.encode(words), EOS])
    return ids


def is_grammatical(words: list[str]) -> bool:
    """Whether ``words`` is a sentence of the toy grammar: clauses "NP verb NP" joined by
    "and", a noun phrase being an article, at most one adjective and a noun."""
    i = 0

    def noun_phrase() -> bool:
        nonlocal i
        if i >= len(words) or words[i] not in ARTICLES:
            return False
        i += 1
        if i < len(words) and words[i] in ADJECTIVES:
            i += 1
        if i >= len(words) or words[i] not in NOUNS:
            return False
        i += 1
        return True

    while True:
        if not noun_phrase() or i >= len(words) or words[i] not in VERBS:
            return False
        i += 1
        if not noun_phrase():
            return False
        if i == len(words):
            return True
        if words[i] not in CONJUNCTION:
            return False
        i += 1


class _AsTranslator(nn.Module):
    """A language model behind a translator's call ``model(src, tgt_in)`` (no source), so that
    :func:`grader.reference.seq2seq.train_step` trains it: with tgt = text[:, 1:], the step's
    decoder input shift_right(tgt, BOS) is the text without its last token."""

    def __init__(self, lm: DecoderOnlyLM) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, src: torch.Tensor | None, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.lm(tgt_in)


def train_language_model(lm: DecoderOnlyLM, ids: torch.Tensor, steps: int, batch_size: int, lr: float,
                         seed: int = 0) -> list[float]:  # fmt: skip
    """Adam on random batches of the rows of ``ids`` (B, n) (<bos> text <eos> padding), each
    token predicted from the ones before it; returns the loss of every step."""
    from grader.reference.seq2seq import train_step

    wrapped = _AsTranslator(lm)
    optimizer = torch.optim.Adam(lm.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    lm.train()
    for _ in range(steps):
        batch = ids[torch.randint(len(ids), (batch_size,), generator=generator)]
        batch = batch[:, : int((batch != lm.pad_id).sum(1).max())]  # trim the common padding
        losses.append(train_step(wrapped, optimizer, None, batch[:, 1:], lm.pad_id, BOS))
    lm.eval()
    return losses
