"""A tiny translator (chapter 6): positional encodings, greedy decoding, and the models.

Positional encoding (Vaswani et al., 2017), for position p and feature pair i:

    PE[p, 2i]     = sin(p * w_i)        w_i = 10000^(-2i / d_model)
    PE[p, 2i + 1] = cos(p * w_i)

Each pair (2i, 2i + 1) is a point on a circle turning at its own frequency w_i, so moving
from position p to p + k rotates every pair by the angle k * w_i: PE[p + k] = PE[p] R(k),
where R(k) is block-diagonal with 2 x 2 rotations that do not depend on p. Hence the dot
product PE[p] . PE[p + k] = sum_i cos(k * w_i) depends on the offset k only. With an odd
d_model the last column is a sine without its cosine partner.

Greedy decoding feeds the model its own most likely token, one step at a time, starting
from the beginning-of-sentence token, until every sentence of the batch has emitted the
end-of-sentence token or ``max_len`` tokens were produced.

:func:`greedy_decode` is written against the exercise's interface, ``encode(src) -> memory``
and ``decode(tgt, memory) -> logits (B, n_tgt, vocab)``. The Transformer the chapter trains
is the book's one encoder-decoder, ``grader.reference.seq2seq.TinyTranslator`` (chapter 8's,
whose ``decode`` also takes the source padding); :class:`GRUTranslator` is the recurrent
baseline, with or without attention over the encoder's states, with the same interface.
:func:`translate_batch` decodes either.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from attention_learner.cases.ch08.language import (
    ADJECTIVES,
    ARTICLES,
    BOS,
    CONJUNCTION,
    EOS,
    NOUNS,
    PAD,
    SPECIAL_TOKENS,
    VERBS,
    Vocab,
    make_pairs,
    random_sentence,
    source_vocab,
    target_vocab,
    token_accuracy,
    translate,
    translate_with_alignment,
)
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch

__all__ = [
    "ADJECTIVES", "ARTICLES", "BOS", "CONJUNCTION", "EOS", "NOUNS", "PAD", "SPECIAL_TOKENS", "VERBS",
    "GRUTranslator", "Vocab", "greedy_decode", "make_pairs", "parameter_count", "positional_encoding",
    "random_sentence", "source_vocab", "target_vocab", "to_batch", "token_accuracy", "train_translator",
    "translate", "translate_batch", "translate_with_alignment",
]  # fmt: skip


# ---------------------------------------------------------------- positional encoding


def positional_encoding(n: int, d_model: int) -> np.ndarray:
    """The sinusoidal encoding of positions 0 .. n-1, float64 (n, d_model).

    Column 2i is sin(p * w_i) and column 2i + 1 is cos(p * w_i), w_i = 10000^(-2i/d_model).
    """
    positions = np.arange(n, dtype=np.float64)[:, None]  # (n, 1)
    two_i = np.arange(0, d_model, 2, dtype=np.float64)  # (ceil(d_model / 2),): 0, 2, 4, ...
    frequencies = np.power(10000.0, -two_i / d_model)  # (ceil(d_model / 2),)
    angles = positions * frequencies  # (n, ceil(d_model / 2))
    pe = np.empty((n, d_model), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)  # even columns
    pe[:, 1::2] = np.cos(angles[:, : d_model // 2])  # odd columns (one fewer if d_model is odd)
    return pe


# ---------------------------------------------------------------- greedy decoding


@torch.no_grad()
def greedy_decode(
    model: Any, src: torch.Tensor, max_len: int, bos_id: int, eos_id: int, source_padding: bool = False
) -> torch.Tensor:
    """Decode a batch greedily; return the generated ids, int64 (B, T), without the BOS.

    ``model.encode(src)`` is called once; at step t, ``model.decode(tgt, memory)`` sees the
    ids produced so far, tgt = [BOS, y_1, ..., y_t] (B, t + 1), and y_{t+1} is the argmax of
    its logits at the LAST position. A sentence that has emitted ``eos_id`` is finished: its
    later entries are ``eos_id``. Decoding stops when every sentence has finished or after
    ``max_len`` steps, so T = min(max_len, the step at which the last sentence finished).

    With ``source_padding`` the model is chapter 8's (``decode(tgt, memory, src_pad)`` and a
    ``pad_id``): decode is also given src_pad = src != model.pad_id (B, n_src). This is the
    book's one uncached greedy loop; ``grader.reference.seq2seq.greedy_decode`` calls it so.
    """
    memory = model.encode(src)
    padding = (src != model.pad_id,) if source_padding else ()  # (B, n_src), or nothing
    B = src.shape[0]
    tgt = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)  # (B,)
    for _ in range(max_len):
        logits = model.decode(tgt, memory, *padding)  # (B, t + 1, vocab)
        next_id = logits[:, -1].argmax(dim=-1)  # (B,)
        next_id = torch.where(finished, torch.full_like(next_id, eos_id), next_id)
        tgt = torch.cat([tgt, next_id[:, None]], dim=1)  # (B, t + 2)
        finished |= next_id == eos_id
        if bool(finished.all()):
            break
    return tgt[:, 1:]  # (B, T)


# ---------------------------------------------------------------- the synthetic language pair
#
# The toy language pair (NOUNS, ADJECTIVES, ARTICLES, VERBS, CONJUNCTION, translate, Vocab, the
# vocabularies, make_pairs, token_accuracy) has one definition, in the learner's package
# (``attention_learner.cases.ch08.language``: the chapter 8 notebook trains on it); it is
# imported above and named here for the book's pages.


def to_batch(
    pairs: list[tuple[list[str], list[str]]], src_vocab: Vocab, tgt_vocab: Vocab
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Padded id tensors for teacher forcing: (src (B, n_src), tgt_in (B, m), tgt_out (B, m)).

    tgt_out is the translation followed by <eos>; tgt_in is the same sequence shifted right
    by one, starting with <bos>: at position t the decoder reads the true token t - 1 and
    must predict token t. Padding is 0 everywhere.
    """
    n_src = max(len(e) for e, _ in pairs)
    m = max(len(f) for _, f in pairs) + 1
    src = torch.full((len(pairs), n_src), PAD, dtype=torch.long)
    tgt_in = torch.full((len(pairs), m), PAD, dtype=torch.long)
    tgt_out = torch.full((len(pairs), m), PAD, dtype=torch.long)
    for b, (english, french) in enumerate(pairs):
        s, f = src_vocab.encode(english), tgt_vocab.encode(french)
        src[b, : len(s)] = torch.tensor(s)
        tgt_in[b, : len(f) + 1] = torch.tensor([BOS] + f)
        tgt_out[b, : len(f) + 1] = torch.tensor(f + [EOS])
    return src, tgt_in, tgt_out


# ---------------------------------------------------------------- the Transformer translator
#
# The book's one encoder-decoder Transformer is ``grader.reference.seq2seq.TinyTranslator``: the
# class chapter 8 has the learner assemble (``output_proj`` and the rest of its names are the
# learner's), trained here in chapter 6 and drawn by ``book_figures.draw_transformer``.


# ---------------------------------------------------------------- the recurrent baselines


class GRUTranslator(nn.Module):
    """A GRU encoder-decoder, with or without attention over the encoder's states.

    Without attention the decoder starts from the encoder's last state (of each sentence's
    last real token) and sees nothing else of the source: the whole sentence must fit in one
    vector of size ``hidden``. With attention, the decoder state s_t of each step is a query
    over the encoder states H (scaled dot-product attention, padding masked), and the
    context c_t = softmax(s_t H^T / sqrt(hidden)) H joins s_t before the output layer.
    """

    def __init__(self, src_vocab: int, tgt_vocab: int, hidden: int = 64, attention: bool = False) -> None:
        super().__init__()
        self.attention = attention
        self.src_embed = nn.Embedding(src_vocab, hidden)
        self.tgt_embed = nn.Embedding(tgt_vocab, hidden)
        self.encoder = nn.GRU(hidden, hidden, batch_first=True)
        self.decoder = nn.GRU(hidden, hidden, batch_first=True)
        self.output_proj = nn.Linear(2 * hidden if attention else hidden, tgt_vocab)
        self.attention_weights: torch.Tensor | None = None
        self.pad_id = PAD

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """src (B, n_src) -> (states (B, n_src, hidden), last state (1, B, hidden), pad (B, n_src))."""
        pad = src != PAD  # (B, n_src)
        states, _ = self.encoder(self.src_embed(src))  # (B, n_src, hidden)
        last = pad.sum(dim=1) - 1  # (B,) index of each sentence's last real token
        final = states[torch.arange(src.shape[0]), last]  # (B, hidden)
        return states, final[None], pad

    def decode(
        self,
        tgt: torch.Tensor,
        memory: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
        src_pad: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tgt (B, n_tgt) -> logits (B, n_tgt, tgt_vocab), reading tgt left to right.

        ``src_pad`` is accepted for the interface of ``TinyTranslator.decode`` (the decoding
        loops pass it); the memory already holds the source padding."""
        states, final, pad = memory
        s, _ = self.decoder(self.tgt_embed(tgt), final)  # (B, n_tgt, hidden)
        if not self.attention:
            return self.output_proj(s)  # (B, n_tgt, tgt_vocab)
        mask = pad[:, None, :]  # (B, 1, n_src): hide the source padding from every step
        context, weights = scaled_dot_product_attention_torch(s, states, states, mask)  # (B, n_tgt, hidden)
        self.attention_weights = weights.detach()  # (B, n_tgt, n_src)
        return self.output_proj(torch.cat([s, context], dim=-1))  # (B, n_tgt, tgt_vocab)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.decode(tgt_in, self.encode(src))


# ---------------------------------------------------------------- training and measuring


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def train_translator(
    model: nn.Module,
    pairs: list[tuple[list[str], list[str]]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    steps: int = 400,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Teacher forcing with Adam and cross-entropy (padding ignored); returns the losses.

    Each step draws ``batch_size`` pairs at random (seeded) and trains the model to predict
    tgt_out from (src, tgt_in), every target position at once.
    """
    generator = torch.Generator().manual_seed(seed)
    src, tgt_in, tgt_out = to_batch(pairs, src_vocab, tgt_vocab)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)
    losses = []
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(pairs), (batch_size,), generator=generator)  # (batch,)
        s, t_in, t_out = src[rows], tgt_in[rows], tgt_out[rows]
        n_src, n_tgt = int((s != PAD).sum(1).max()), int((t_in != PAD).sum(1).max())
        s, t_in, t_out = s[:, :n_src], t_in[:, :n_tgt], t_out[:, :n_tgt]  # trim common padding
        logits = model(s, t_in)  # (batch, n_tgt, vocab)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), t_out.reshape(-1))
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    model.eval()
    return losses


def translate_batch(
    model: nn.Module,
    sentences: list[list[str]],
    src_vocab: Vocab,
    tgt_vocab: Vocab,
    max_len: int = 40,
) -> list[list[str]]:
    """Greedy translations of English token lists (one padded batch).

    ``model`` has encode(src), decode(tgt, memory, src_pad) and pad_id, as ``TinyTranslator``
    and :class:`GRUTranslator` do; the loop is chapter 8's plain (uncached) one, which is
    chapter 6's :func:`greedy_decode` with the source padding passed to ``decode``.
    """
    n = max(len(s) for s in sentences)
    src = torch.full((len(sentences), n), PAD, dtype=torch.long)
    for b, s in enumerate(sentences):
        src[b, : len(s)] = torch.tensor(src_vocab.encode(s))
    ids = greedy_decode(model, src, max_len, BOS, EOS, source_padding=True)  # (B, T)
    return [tgt_vocab.decode(row) for row in ids]
