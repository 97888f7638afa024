"""A small decoder-only language model with today's attention, for the pages of chapter 9.

Chapter 8's ``DecoderOnlyLM`` adds sinusoidal positions to the embeddings and gives every
query head its own keys and values. The model here can do that too (``positions="sinusoidal"``,
``num_kv_heads=num_heads``), and it can do what Llama- and Mistral-style models do instead:

- rotate each head's queries and keys by their positions (RoPE,
  :func:`grader.reference.modern_attention.apply_rope`, or the interleaved pairing of
  :func:`~grader.reference.modern_attention.apply_rope_interleaved`), and add no positions to
  the embeddings;
- share each key/value head among ``num_heads / num_kv_heads`` query heads
  (:func:`~grader.reference.modern_attention.gqa_attention`), which shrinks the KV cache;
- let each query see only the last ``window`` positions and the first ``sinks`` ones
  (:func:`~grader.reference.modern_attention.sliding_window_mask`), decoded through a
  :class:`~grader.reference.modern_attention.RollingKVCache`.

Blocks are pre-norm, as in those models: x = x + Attention(LayerNorm(x)), then
x = x + FFN(LayerNorm(x)), with a final LayerNorm before the output layer.

The text is a stream: chapter 6's toy English sentences one after the other, each ended by
``<eos>`` (:func:`english_stream`), cut into windows of a fixed length at random places
(:func:`stream_batch`), so that a window's first token is any token, as in a language
model's pre-training on chunked text. Every function here is the book's, not an exercise.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from grader.reference import modern_attention as ma
from grader.reference.decoder_only import english_sentences, english_vocab
from grader.reference.translator import EOS, positional_encoding

ROTATIONS: dict[str, Callable[..., torch.Tensor]] = {
    "rope": lambda x, positions: ma.apply_rope(x, positions),
    "rope_interleaved": lambda x, positions: ma.apply_rope_interleaved(x, positions),
}
POSITIONS = ("sinusoidal", *ROTATIONS)


class GrowingKVCache:
    """A plain KV cache with the interface of ``RollingKVCache``: ``append(k, v)`` with
    (B, g, t, d) chunks returns every key, value and absolute position so far, and ``kept()``
    the same; nothing is evicted."""

    def __init__(self) -> None:
        self.k: torch.Tensor | None = None
        self.v: torch.Tensor | None = None

    def append(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.k = k if self.k is None else torch.cat([self.k, k], dim=-2)  # (B, g, t, d)
        self.v = v if self.v is None else torch.cat([self.v, v], dim=-2)  # (B, g, t, d_v)
        return self.k, self.v, torch.arange(self.k.shape[-2])

    def kept(self) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor]:
        n = 0 if self.k is None else self.k.shape[-2]
        return self.k, self.v, torch.arange(n)


def cache_bytes(keys: torch.Tensor, values: torch.Tensor) -> int:
    """Bytes held by one layer's cached keys and values."""
    return keys.element_size() * keys.nelement() + values.element_size() * values.nelement()


class ModernAttention(nn.Module):
    """Causal self-attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value
    heads, positions by rotation (or none, for sinusoidal embeddings), and an optional window
    with sinks. ``positions`` may be changed after training (the pairing-convention test)."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, positions: str) -> None:
        super().__init__()
        if d_model % num_heads or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must divide d_model={d_model}, "
                             f"num_kv_heads={num_kv_heads} num_heads")  # fmt: skip
        self.h, self.g, self.d_head, self.positions = num_heads, num_kv_heads, d_model // num_heads, positions
        self.W_q = nn.Linear(d_model, num_heads * self.d_head, bias=False)
        self.W_k = nn.Linear(d_model, num_kv_heads * self.d_head, bias=False)
        self.W_v = nn.Linear(d_model, num_kv_heads * self.d_head, bias=False)
        self.W_o = nn.Linear(num_heads * self.d_head, d_model, bias=False)

    def project(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Queries (B, h, n, d_head), keys and values (B, g, n, d_head) of x (B, n, d_model),
        queries and keys rotated by their absolute ``positions`` (n,)."""
        B, n, _ = x.shape
        q = self.W_q(x).view(B, n, self.h, self.d_head).transpose(1, 2)  # (B, h, n, d_head)
        k = self.W_k(x).view(B, n, self.g, self.d_head).transpose(1, 2)  # (B, g, n, d_head)
        v = self.W_v(x).view(B, n, self.g, self.d_head).transpose(1, 2)  # (B, g, n, d_head)
        if self.positions in ROTATIONS:
            rotate = ROTATIONS[self.positions]
            q, k = rotate(q, positions), rotate(k, positions)
        return q, k, v

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """x (B, n, d_model), mask bool (n, n) True = visible -> (B, n, d_model)."""
        q, k, v = self.project(x, torch.arange(x.shape[1]))
        heads, _ = ma.gqa_attention(q, k, v, mask)  # (B, h, n, d_head)
        return self.W_o(heads.transpose(1, 2).flatten(2))

    def step(self, x_new: torch.Tensor, position: int, cache: GrowingKVCache) -> torch.Tensor:
        """One new position: x_new (B, 1, d_model) at absolute ``position``; its key and value
        join ``cache``, and the query attends to every key the cache keeps."""
        q, k, v = self.project(x_new, torch.tensor([position]))
        keys, values, kept = cache.append(k, v)  # (B, g, kept, d_head) each, kept (kept,) positions
        mask = None
        if isinstance(cache, ma.RollingKVCache):  # what it returns still holds the positions it evicts now
            mask = ma.window_visible(torch.tensor([position]), kept, cache.window, cache.sinks)  # (1, kept)
        heads, _ = ma.gqa_attention(q, keys, values, mask)  # (B, h, 1, d_head)
        return self.W_o(heads.transpose(1, 2).flatten(2))


class ModernBlock(nn.Module):
    """Pre-norm block: x + attention(norm1(x)), then + FFN(norm2(x)) (ReLU, width d_ff)."""

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int, d_ff: int, positions: str) -> None:
        super().__init__()
        self.attn = ModernAttention(d_model, num_heads, num_kv_heads, positions)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), mask)  # (B, n, d_model)
        return x + self.ff(self.norm2(x))

    def step(self, x_new: torch.Tensor, position: int, cache: GrowingKVCache) -> torch.Tensor:
        x = x_new + self.attn.step(self.norm1(x_new), position, cache)  # (B, 1, d_model)
        return x + self.ff(self.norm2(x))


class ModernLM(nn.Module):
    """Embedding, ``num_layers`` pre-norm blocks, final LayerNorm, output layer:
    forward(ids (B, n)) -> logits (B, n, vocab) of the next token.

    ``positions``: "rope" (halves), "rope_interleaved" or "sinusoidal" (chapter 6's encoding
    added to the embeddings). ``window`` / ``sinks``: the attention of every layer sees the
    last ``window`` positions and the first ``sinks`` (``window=None``: every earlier one).
    Both may be changed after training, to evaluate one trained model in several ways.
    """

    pe: torch.Tensor  # the buffer registered in __init__

    def __init__(self, vocab: int, d_model: int = 32, num_heads: int = 4, num_kv_heads: int | None = None,
                 d_ff: int = 64, num_layers: int = 2, positions: str = "rope",
                 max_len: int = 1024) -> None:  # fmt: skip
        super().__init__()
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, not {positions!r}")
        self.d_model, self.window, self.sinks = d_model, None, 0
        self.embed = nn.Embedding(vocab, d_model)
        nn.init.normal_(self.embed.weight, std=d_model**-0.5)
        pe = torch.from_numpy(positional_encoding(max_len, d_model)).float()  # (max_len, d_model)
        self.register_buffer("pe", pe, persistent=False)
        kv = num_heads if num_kv_heads is None else num_kv_heads
        self.blocks = nn.ModuleList(ModernBlock(d_model, num_heads, kv, d_ff, positions)
                                    for _ in range(num_layers))  # fmt: skip
        self.norm = nn.LayerNorm(d_model)
        self.output_proj = nn.Linear(d_model, vocab)
        self.set_positions(positions)

    def set_positions(self, positions: str) -> None:
        """Use ``positions`` from now on (every layer), e.g. evaluate a "rope" model as "rope_interleaved"."""
        if positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, not {positions!r}")
        self.positions = positions
        for block in cast(Iterable[ModernBlock], self.blocks):
            block.attn.positions = positions

    def embed_at(self, ids: torch.Tensor, start: int = 0) -> torch.Tensor:
        x = self.embed(ids) * math.sqrt(self.d_model)  # (B, n, d_model)
        if self.positions == "sinusoidal":
            x = x + self.pe[start : start + ids.shape[1]]
        return x

    def mask(self, n: int) -> torch.Tensor:
        """bool (n, n): causal, or the sliding window with sinks when ``window`` is set."""
        if self.window is None:
            return torch.ones(n, n, dtype=torch.bool).tril()
        return ma.sliding_window_mask(n, n, self.window, self.sinks)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x, mask = self.embed_at(ids), self.mask(ids.shape[1])
        for block in self.blocks:
            x = block(x, mask)
        return self.output_proj(self.norm(x))  # (B, n, vocab)

    def new_caches(self) -> list:
        """One cache per layer: a ``RollingKVCache(window, sinks)`` when ``window`` is set, else growing."""
        if self.window is None:
            return [GrowingKVCache() for _ in self.blocks]
        return [ma.RollingKVCache(self.window, self.sinks) for _ in self.blocks]

    @torch.no_grad()
    def step(self, ids_new: torch.Tensor, position: int, caches: list) -> torch.Tensor:
        """Logits (B, vocab) of the token after ids_new (B, 1) at absolute ``position``."""
        x = self.embed_at(ids_new, position)  # (B, 1, d_model)
        for block, cache in zip(cast(Iterable[ModernBlock], self.blocks), caches, strict=True):
            x = block.step(x, position, cache)
        return self.output_proj(self.norm(x))[:, -1]


# --------------------------------------------------------------------------- the text


def english_stream(n_sentences: int, seed: int, clauses: tuple[int, ...] = (1, 2)) -> torch.Tensor:
    """int64 (T,): ``n_sentences`` sentences of chapter 6's grammar, each followed by <eos>."""
    vocab = english_vocab()
    ids = [token for sentence in english_sentences(n_sentences, seed, clauses)
           for token in [*vocab.encode(sentence), EOS]]  # fmt: skip
    return torch.tensor(ids, dtype=torch.int64)


def stream_entropy(n_sentences: int, seed: int, clauses: tuple[int, ...] = (1, 2)) -> float:
    """Nats per token of :func:`english_stream`: the lowest mean loss any model can reach.

    The grammar draws every choice uniformly: the number of clauses, an article of two, an
    adjective half of the time (then one of six), a noun, a verb. The log-probability of a
    sentence is the sum of its choices' logs (chapter 8 derives it); divided by the tokens
    predicted (the words and the <eos>).
    """
    from grader.reference.translator import ADJECTIVES, ARTICLES, NOUNS, VERBS

    total, tokens = 0.0, 0
    for words in english_sentences(n_sentences, seed, clauses):
        phrases = sum(w in ARTICLES for w in words)
        adjectives = sum(w in ADJECTIVES for w in words)
        total += math.log(1 / len(clauses)) + phrases * math.log(1 / len(ARTICLES))
        total += adjectives * math.log(0.5 / len(ADJECTIVES)) + (phrases - adjectives) * math.log(0.5)
        total += phrases * math.log(1 / len(NOUNS)) + (words.count("and") + 1) * math.log(1 / len(VERBS))
        tokens += len(words) + 1
    return -total / tokens


def stream_batch(stream: torch.Tensor, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
    """int64 (batch, length + 1): windows of ``stream`` starting at random places (input and target)."""
    starts = torch.randint(len(stream) - length - 1, (batch,), generator=generator)  # (batch,)
    return stream[starts[:, None] + torch.arange(length + 1)]  # (batch, length + 1)


def train_lm(model: ModernLM, stream: torch.Tensor, steps: int, batch: int, length: int, lr: float,
             seed: int) -> list[float]:  # fmt: skip
    """Adam (gradient norm clipped at 1) on ``steps`` batches of windows of ``length`` tokens,
    every token predicted from the ones before it; returns each step's mean cross-entropy."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    model.train()
    for _ in range(steps):
        window = stream_batch(stream, batch, length, generator)  # (batch, length + 1)
        logits = model(window[:, :-1])  # (batch, length, vocab)
        loss = F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
    model.eval()
    return losses


def train_seeds(make_model: Callable[[], ModernLM], seeds: list[int], stream: torch.Tensor, steps: int,
                batch: int, length: int, lr: float) -> tuple[list[ModernLM], torch.Tensor]:  # fmt: skip
    """:func:`train_lm` for one model per seed, all trained at once (``torch.func.vmap`` over
    the seeds' stacked weights): model s is ``make_model()`` after ``torch.manual_seed(s)``,
    and draws its batches from ``Generator().manual_seed(s)``. Adam is elementwise, and the
    gradient is clipped to norm 1 per seed, so each model is trained exactly as alone.
    Returns the trained models and the losses (steps, seeds)."""
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(make_model())
    params, buffers = torch.func.stack_module_state(models)  # name -> (seeds, ...) each
    template = make_model().to("meta")

    def loss_of(p: dict, b: dict, window: torch.Tensor) -> torch.Tensor:
        logits = torch.func.functional_call(template, (p, b), (window[:, :-1],))  # (batch, length, vocab)
        return F.cross_entropy(logits.flatten(0, 1), window[:, 1:].flatten())

    losses_of = torch.func.vmap(loss_of)
    optimizer = torch.optim.Adam(params.values(), lr=lr)
    generators = [torch.Generator().manual_seed(seed) for seed in seeds]
    losses = []
    for _ in range(steps):
        windows = torch.stack([stream_batch(stream, batch, length, g) for g in generators])  # (S, batch, n+1)
        loss = losses_of(params, buffers, windows)  # (S,)
        optimizer.zero_grad()
        loss.sum().backward()
        with torch.no_grad():  # clip each seed's gradient to norm 1, as clip_grad_norm_ does for one model
            squares = torch.stack([p.grad.flatten(1).pow(2).sum(1) for p in params.values()])  # (params, S)
            norms = squares.sum(0).sqrt()  # (S,)
            scale = (1.0 / (norms + 1e-6)).clamp(max=1.0)  # (S,)
            for p in params.values():
                p.grad.mul_(scale.view(-1, *[1] * (p.dim() - 1)))
        optimizer.step()
        losses.append(loss.detach())
    with torch.no_grad():
        for s, model in enumerate(models):
            model.load_state_dict({name: value[s] for name, value in params.items()}, strict=False)
            model.eval()
    return models, torch.stack(losses)  # (steps, S)


@torch.no_grad()
def loss_by_position(model: ModernLM, windows: torch.Tensor) -> torch.Tensor:
    """float (n,): the mean cross-entropy at each position of windows (B, n + 1), over the batch."""
    logits = model(windows[:, :-1])  # (B, n, vocab)
    losses = F.cross_entropy(logits.transpose(1, 2), windows[:, 1:], reduction="none")  # (B, n)
    return losses.mean(0)


@torch.no_grad()
def decode_loss(model: ModernLM, windows: torch.Tensor) -> torch.Tensor:
    """float (n,): the same as :func:`loss_by_position`, computed one token at a time through
    the model's caches (``new_caches``), as a decoder runs."""
    caches, losses = model.new_caches(), []
    for t in range(windows.shape[1] - 1):
        logits = model.step(windows[:, t : t + 1], t, caches)  # (B, vocab)
        losses.append(F.cross_entropy(logits, windows[:, t + 1], reduction="none").mean())
    return torch.stack(losses)


# --------------------------------------------------------------------------- memory


class LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of the tensors that torch operations create while the mode is on, and
    that are still referenced: each new storage is added when the operation that made it
    returns and subtracted when its tensor is freed; ``peak`` is the largest total. The
    backward pass's operations are counted too (autograd runs them under the same mode).
    Tensors made before the mode (the inputs) are not counted; a view shares its base's storage
    and is counted once."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, int] = {}  # storage address -> bytes
        self.current = self.peak = 0

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204 (torch's signature)
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                storage = t.untyped_storage()
                key = storage.data_ptr()
                if key and key not in self.live:
                    self.live[key] = storage.nbytes()
                    self.current += storage.nbytes()
                    self.peak = max(self.peak, self.current)
                    weakref.finalize(t, self._free, key)
        return out


def peak_tensor_bytes(fn: Callable[[], object]) -> int:
    """The peak of :class:`LiveTensorBytes` while ``fn()`` runs (its result is dropped)."""
    with LiveTensorBytes() as counter:
        fn()
    return counter.peak
