"""The recurrent neural network and the three bottlenecks of chapter 1.

A vanilla (Elman) RNN reads a sequence one token at a time and keeps one fixed-size state:

    h_t = tanh(x_t W_xh + h_{t-1} W_hh + b),    t = 1, ..., T

with row vectors x_t (d_in,), h_t (d_h,), W_xh (d_in, d_h), W_hh (d_h, d_h), b (d_h,).

Three measurements follow from it:

- the gradient through time: d h_T / d h_{T-k} is a product of k step Jacobians
  diag(1 - h_t^2) W_hh^T, whose norm shrinks or grows geometrically in k
  (:func:`jacobian_norms`, :func:`random_rnn_jacobian_norms`);
- the sequential cost: step t cannot start before step t-1 has finished
  (:func:`time_rnn_and_attention`);
- the fixed-size state: a GRU encoder-decoder without attention must squeeze a whole source
  sentence into one vector (:class:`GRUEncoderDecoder`, :func:`train_copy_task`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch

# ---------------------------------------------------------------- the recurrence (NumPy)


def rnn_step(
    x_t: np.ndarray, h_prev: np.ndarray, W_xh: np.ndarray, W_hh: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """One step of the recurrence, h_t = tanh(x_t W_xh + h_{t-1} W_hh + b).

    x_t (..., d_in) and h_prev (..., d_h) may carry leading batch dimensions; returns
    h_t (..., d_h).
    """
    return np.tanh(x_t @ W_xh + h_prev @ W_hh + b)  # (..., d_h)


def rnn_forward(
    X: np.ndarray, h0: np.ndarray, W_xh: np.ndarray, W_hh: np.ndarray, b: np.ndarray
) -> np.ndarray:
    """Run the recurrence over X (T, d_in) from h0 (d_h,); returns H (T, d_h) = h_1 .. h_T.

    The initial state h0 is not part of the output: row t - 1 of H is h_t.
    """
    X = np.asarray(X, dtype=np.float64)
    h = np.asarray(h0, dtype=np.float64)  # (d_h,)
    states = []
    for x_t in X:  # step t needs h_{t-1}: no way to run these in parallel
        h = rnn_step(x_t, h, W_xh, W_hh, b)  # (d_h,)
        states.append(h)
    return np.stack(states)  # (T, d_h)


def step_jacobian(h_t: np.ndarray, W_hh: np.ndarray) -> np.ndarray:
    """d h_t / d h_{t-1} = diag(1 - h_t^2) W_hh^T, shape (d_h, d_h).

    Entry (i, j) is d h_t[i] / d h_{t-1}[j]: tanh'(a) = 1 - tanh(a)^2 = 1 - h_t^2 scales
    row i, and a_t[i] = sum_j h_{t-1}[j] W_hh[j, i] brings in the transpose.
    """
    return (1.0 - h_t**2)[:, None] * W_hh.T  # (d_h, d_h)


def jacobian_norms(H: np.ndarray, W_hh: np.ndarray) -> np.ndarray:
    """Spectral norms of d h_T / d h_{T-k} for k = 0 .. T-1, from the states H (T, d_h).

    By the chain rule d h_T / d h_{T-k} = J_T J_{T-1} ... J_{T-k+1}, with J_t the step
    Jacobian at h_t (:func:`step_jacobian`); k = 0 is the identity, norm 1. Row t - 1 of H
    holds h_t, so J_t needs only H[t - 1]. Returns (T,).
    """
    H = np.asarray(H, dtype=np.float64)
    T, d_h = H.shape
    norms = np.empty(T)
    norms[0] = 1.0
    product = np.eye(d_h)  # d h_T / d h_T
    for k in range(1, T):
        product = product @ step_jacobian(H[T - k], W_hh)  # d h_T / d h_{T-k}
        norms[k] = np.linalg.norm(product, ord=2)  # largest singular value
    return norms


@dataclass(frozen=True)
class RNNWeights:
    """The parameters of one vanilla RNN: W_xh (d_in, d_h), W_hh (d_h, d_h), b (d_h,)."""

    W_xh: np.ndarray
    W_hh: np.ndarray
    b: np.ndarray


def random_rnn(rng: np.random.Generator, d_in: int, d_h: int, gain: float) -> RNNWeights:
    """An RNN with W_hh entries N(0, gain^2 / d_h), so that W_hh's spectral radius is about gain.

    W_xh has entries N(0, 1 / d_in) and b is zero. Gains below 1 shrink a perturbation of the
    state at every step; gains above 1 stretch it (until tanh saturates).
    """
    return RNNWeights(
        W_xh=rng.normal(0.0, 1.0 / np.sqrt(d_in), size=(d_in, d_h)),
        W_hh=rng.normal(0.0, gain / np.sqrt(d_h), size=(d_h, d_h)),
        b=np.zeros(d_h),
    )


def random_rnn_jacobian_norms(
    gain: float, T: int = 60, d_in: int = 8, d_h: int = 64, seeds: Sequence[int] = (0, 1, 2)
) -> np.ndarray:
    """Geometric mean over ``seeds`` of :func:`jacobian_norms` for random RNNs of one gain.

    Each seed draws the weights (:func:`random_rnn`) and an input sequence X (T, d_in) of
    standard normal entries, runs the RNN from h_0 = 0 and measures the norms; returns (T,).
    """
    logs = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        w = random_rnn(rng, d_in, d_h, gain)
        X = rng.normal(size=(T, d_in))  # (T, d_in)
        H = rnn_forward(X, np.zeros(d_h), w.W_xh, w.W_hh, w.b)  # (T, d_h)
        logs.append(np.log(jacobian_norms(H, w.W_hh)))
    return np.exp(np.mean(logs, axis=0))  # (T,)


# ---------------------------------------------------------------- the sequential cost (PyTorch)


@dataclass(frozen=True)
class Timings:
    """Wall-clock seconds of one forward pass per sequence length (best of the repeats)."""

    lengths: np.ndarray  # (L,)
    rnn: np.ndarray  # (L,) torch.nn.RNN over the whole sequence
    attention: np.ndarray  # (L,) one attention over all positions
    d_model: int
    threads: int


def _best_time(fn, repeats: int) -> float:
    fn()  # warm up (allocations, kernel selection)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def time_rnn_and_attention(
    lengths: Sequence[int], d_model: int = 64, repeats: int = 5, seed: int = 0
) -> Timings:
    """Time a ``torch.nn.RNN`` forward pass and one attention over all positions, on CPU.

    Both read the same (1, T, d_model) float32 sequence X without gradients. The RNN makes T
    dependent steps; the attention computes softmax(Q K^T / sqrt(d)) V with Q, K, V = X W_q,
    X W_k, X W_v as three matrix products over all T positions at once (T^2 d work, but no
    step waits for another). Uses torch's current number of threads.
    """
    generator = torch.Generator().manual_seed(seed)
    rnn = nn.RNN(d_model, d_model, batch_first=True)
    W_q, W_k, W_v = (torch.randn(d_model, d_model, generator=generator) for _ in range(3))
    rnn_times, attention_times = [], []
    with torch.no_grad():
        for T in lengths:
            X = torch.randn(1, T, d_model, generator=generator)  # (1, T, d_model)

            def attention(X: torch.Tensor = X) -> torch.Tensor:
                return scaled_dot_product_attention_torch(X @ W_q, X @ W_k, X @ W_v)[0]

            rnn_times.append(_best_time(lambda X=X: rnn(X), repeats))
            attention_times.append(_best_time(attention, repeats))
    return Timings(
        np.asarray(lengths),
        np.asarray(rnn_times),
        np.asarray(attention_times),
        d_model,
        torch.get_num_threads(),
    )


# ---------------------------------------------------------------- the fixed-size state


class GRUEncoderDecoder(nn.Module):
    """A sequence-to-sequence GRU without attention (Cho et al., 2014; Sutskever et al., 2014).

    The encoder reads the source and keeps only its last hidden state, one vector of size
    d_hidden; the decoder starts from that vector and sees nothing else of the source.
    Token ids 0 .. vocab_size - 1 are symbols; id vocab_size is the beginning-of-sequence
    token that starts the decoder.
    """

    def __init__(self, vocab_size: int, d_embed: int = 32, d_hidden: int = 64) -> None:
        super().__init__()
        self.vocab_size = vocab_size
        self.bos_id = vocab_size
        self.embed = nn.Embedding(vocab_size + 1, d_embed)
        self.encoder = nn.GRU(d_embed, d_hidden, batch_first=True)
        self.decoder = nn.GRU(d_embed, d_hidden, batch_first=True)
        self.out = nn.Linear(d_hidden, vocab_size)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """src (B, T) -> the source summary h (1, B, d_hidden)."""
        _, h = self.encoder(self.embed(src))  # h: (1, B, d_hidden)
        return h

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T_tgt, vocab_size) for the decoder inputs tgt_in (B, T_tgt)."""
        y, _ = self.decoder(self.embed(tgt_in), self.encode(src))  # (B, T_tgt, d_hidden)
        return self.out(y)  # (B, T_tgt, vocab_size)

    @torch.no_grad()
    def greedy(self, src: torch.Tensor, length: int) -> torch.Tensor:
        """Decode ``length`` tokens, each time feeding back the most likely one; (B, length)."""
        h = self.encode(src)  # (1, B, d_hidden)
        token = torch.full((src.shape[0], 1), self.bos_id, dtype=torch.long)  # (B, 1)
        outputs = []
        for _ in range(length):
            y, h = self.decoder(self.embed(token), h)  # y: (B, 1, d_hidden)
            token = self.out(y).argmax(dim=-1)  # (B, 1)
            outputs.append(token)
        return torch.cat(outputs, dim=1)  # (B, length)


def copy_batch(
    generator: torch.Generator, batch_size: int, length: int, vocab_size: int, bos_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of the copy task: (src, decoder input, target), each (batch_size, length).

    The target is the source itself; the decoder input is the target shifted right by one,
    starting with the beginning-of-sequence token (teacher forcing).
    """
    src = torch.randint(0, vocab_size, (batch_size, length), generator=generator)  # (B, T)
    bos = torch.full((batch_size, 1), bos_id, dtype=torch.long)  # (B, 1)
    tgt_in = torch.cat([bos, src[:, :-1]], dim=1)  # (B, T)
    return src, tgt_in, src


@dataclass
class CopyTaskResult:
    """What :func:`train_copy_task` returns: the model, its loss curve and its accuracy."""

    model: GRUEncoderDecoder
    losses: np.ndarray  # (steps,) training cross-entropy per step
    lengths: np.ndarray  # (L,) the evaluated source lengths
    accuracy: np.ndarray  # (L,) fraction of target tokens decoded correctly, per length
    seconds: float  # training and evaluation wall time


def train_copy_task(
    max_length: int = 16,
    vocab_size: int = 8,
    d_hidden: int = 48,
    steps: int = 1500,
    batch_size: int = 64,
    lr: float = 3e-3,
    eval_size: int = 256,
    seed: int = 0,
) -> CopyTaskResult:
    """Train a :class:`GRUEncoderDecoder` to copy random sequences of 1 .. max_length symbols.

    Every training step draws one length uniformly from 1 .. max_length and a batch of
    sequences of that length, so every evaluated length was seen in training: a falling
    accuracy measures what the fixed-size state can hold, not generalisation to unseen
    lengths. Evaluation decodes greedily, exactly as many tokens as the source has.
    """
    start = time.perf_counter()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    model = GRUEncoderDecoder(vocab_size, d_hidden=d_hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    losses = np.empty(steps)
    for step in range(steps):
        length = int(torch.randint(1, max_length + 1, (1,), generator=generator))
        src, tgt_in, tgt = copy_batch(generator, batch_size, length, vocab_size, model.bos_id)
        logits = model(src, tgt_in)  # (B, T, vocab_size)
        loss = loss_fn(logits.reshape(-1, vocab_size), tgt.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses[step] = loss.item()
    lengths = np.arange(1, max_length + 1)
    accuracy = np.empty(len(lengths))
    model.eval()
    for i, eval_length in enumerate(lengths):
        src, _, tgt = copy_batch(generator, eval_size, int(eval_length), vocab_size, model.bos_id)
        accuracy[i] = (model.greedy(src, int(eval_length)) == tgt).double().mean().item()
    return CopyTaskResult(model, losses, lengths, accuracy, time.perf_counter() - start)
