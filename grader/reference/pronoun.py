"""What does "it" refer to? The course's running sentence, learned (chapter 6).

"The tired cat did not cross the street because it was too wide": "it" is the street. End
the sentence with "tired" and "it" is the cat. The generator below writes many such
sentences (other animals and places, adjectives before the nouns or not, and the same
content in the passive voice, "the street was not crossed by the cat because ...", so that
the referent is not always at the same place), each labelled with the position of the
noun that "it" refers to.

:class:`PronounResolver` is one attention layer followed by an attention readout:

    X  = embedding(tokens) + PE                    (n, d)      positions are injected
    H  = LN(X + SelfAttention(X, X, X))            (n, d)      one layer: "it" reads the context
    a  = softmax(q_it K^T / sqrt(d)),  q_it = H[it] W_q,  K = H W_k        (n,)

and ``a`` is trained (cross-entropy) to put its weight on the referent's position. Both
attentions of "it" can be plotted: what it reads in the layer, and where it points.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn

from grader.reference.multi_head import MultiHeadAttention
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.reference.translator import PAD, Vocab, positional_encoding

ANIMALS = ("cat", "dog", "horse", "fox", "goat")
PLACES = ("street", "road", "river", "bridge", "field")
# adjectives that can describe only the animal / only the place at the end of the sentence
ANIMAL_ENDINGS = ("tired", "scared", "slow", "weak")
PLACE_ENDINGS = ("wide", "busy", "long", "icy")
# optional adjectives before each noun (some also appear as endings: order must decide)
ANIMAL_BEFORE = ("tired", "old", "small", "young")
PLACE_BEFORE = ("wide", "old", "long", "new")


def pronoun_sentence(
    rng: np.random.Generator,
    animal: str,
    place: str,
    ending: str,
    passive: bool = False,
    animal_adjective: str | None = None,
    place_adjective: str | None = None,
) -> tuple[list[str], int]:
    """One sentence and the position of the noun that "it" refers to."""
    a = ["the"] + ([animal_adjective] if animal_adjective else []) + [animal]
    p = ["the"] + ([place_adjective] if place_adjective else []) + [place]
    if passive:
        words = p + ["was", "not", "crossed", "by"] + a
        animal_at, place_at = len(words) - 1, len(p) - 1
    else:
        words = a + ["did", "not", "cross"] + p
        animal_at, place_at = len(a) - 1, len(words) - 1
    words += ["because", "it", "was", "too", ending]
    return words, animal_at if ending in ANIMAL_ENDINGS else place_at


def make_pronoun_data(n: int, seed: int) -> list[tuple[list[str], int]]:
    """``n`` random labelled sentences (seeded): half end with an animal adjective."""
    rng = np.random.default_rng(seed)
    data = []
    for k in range(n):
        endings = ANIMAL_ENDINGS if k % 2 else PLACE_ENDINGS
        data.append(
            pronoun_sentence(
                rng,
                animal=str(rng.choice(ANIMALS)),
                place=str(rng.choice(PLACES)),
                ending=str(rng.choice(endings)),
                passive=bool(rng.random() < 0.5),
                animal_adjective=str(rng.choice(ANIMAL_BEFORE)) if rng.random() < 0.5 else None,
                place_adjective=str(rng.choice(PLACE_BEFORE)) if rng.random() < 0.5 else None,
            )
        )
    return data


def pronoun_vocab() -> Vocab:
    words = ["the", "did", "not", "cross", "was", "crossed", "by", "because", "it", "too"]
    words += list(ANIMALS + PLACES + ANIMAL_ENDINGS + PLACE_ENDINGS + ANIMAL_BEFORE + PLACE_BEFORE)
    return Vocab(words)


def pronoun_batch(
    data: list[tuple[list[str], int]], vocab: Vocab
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(tokens (B, n) padded with 0, position of "it" (B,), position of the referent (B,))."""
    n = max(len(w) for w, _ in data)
    tokens = torch.full((len(data), n), PAD, dtype=torch.long)
    for b, (words, _) in enumerate(data):
        tokens[b, : len(words)] = torch.tensor(vocab.encode(words))
    it = torch.tensor([words.index("it") for words, _ in data])
    referent = torch.tensor([r for _, r in data])
    return tokens, it, referent


class PronounResolver(nn.Module):
    """One self-attention layer, then an attention readout from "it" to every position.

    forward(tokens (B, n), it (B,)) -> (pointer logits (B, n), layer weights of "it"
    (B, h, n), pointer weights (B, n)); padding is hidden from both attentions.
    """

    pe: torch.Tensor  # the buffer registered in __init__

    def __init__(self, vocab: int, d_model: int = 32, num_heads: int = 2, max_len: int = 32) -> None:
        super().__init__()
        self.d_model = d_model
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=1.0)
        pe = torch.from_numpy(positional_encoding(max_len, d_model)).float()
        self.register_buffer("pe", pe, persistent=False)  # (max_len, d_model)
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.norm = nn.LayerNorm(d_model)
        self.W_q = nn.Linear(d_model, d_model)
        self.W_k = nn.Linear(d_model, d_model)

    def forward(
        self, tokens: torch.Tensor, it: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        B, n = tokens.shape
        real = tokens != PAD  # (B, n)
        x = self.embed(tokens) + self.pe[:n]  # (B, n, d)
        attended, weights = self.self_attn(x, x, x, real[:, None, None, :])  # weights (B, h, n, n)
        h = self.norm(x + attended)  # (B, n, d)
        rows = torch.arange(B)
        q = self.W_q(h[rows, it])[:, None, :]  # (B, 1, d): the query of "it"
        k = self.W_k(h)  # (B, n, d)
        logits = (q @ k.transpose(1, 2))[:, 0] / math.sqrt(self.d_model)  # (B, n)
        logits = logits.masked_fill(~real, float("-inf"))
        _, pointer = scaled_dot_product_attention_torch(q, k, k, real[:, None, :])  # (B, 1, n)
        return logits, weights[rows, :, it], pointer[:, 0]


def train_pronoun_resolver(
    model: PronounResolver,
    data: list[tuple[list[str], int]],
    vocab: Vocab,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
) -> list[float]:
    """Adam on the cross-entropy of the pointer's logits against the referent's position."""
    generator = torch.Generator().manual_seed(seed)
    tokens, it, referent = pronoun_batch(data, vocab)
    optimiser = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    model.train()
    for _ in range(steps):
        rows = torch.randint(len(data), (batch_size,), generator=generator)
        logits, _, _ = model(tokens[rows], it[rows])  # (batch, n)
        loss = nn.functional.cross_entropy(logits, referent[rows])
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    model.eval()
    return losses
