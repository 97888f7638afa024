"""Fingerprints of a token stream: hashed k-grams, winnowed (Schleimer, Wilkerson and Aiken,
"Winnowing: local algorithms for document fingerprinting", SIGMOD 2003, the idea behind MOSS).

Every run of ``K`` consecutive tokens is hashed; in each window of ``W`` consecutive hashes
the smallest (the rightmost of equals) is kept. Any match of at least ``W + K - 1`` tokens
therefore shares at least one fingerprint, and a stream of n tokens keeps about
``2 n / (W + 1)`` of them. Hashes are stable across runs and machines (token hashes from
BLAKE2b, k-grams combined with wrapping 64-bit arithmetic), so a report can be repeated.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache

import numpy as np

from grader.similarity.normalise import Tokens

K = 6  # tokens per k-gram: about one short statement (``d_k = Q.shape[-1]`` is 6 tokens)
W = 4  # window: every match of W + K - 1 = 9 tokens or more is seen

_BASE = np.uint64(0x9E3779B97F4A7C15)  # an odd multiplier (the 64-bit golden ratio)


@cache
def _token_hash(token: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little"
    )


def _mix(h: np.ndarray) -> np.ndarray:
    """A bijective scramble of 64-bit values (splitmix64's finaliser): minima become uniform."""
    h = h ^ (h >> np.uint64(30))
    h = h * np.uint64(0xBF58476D1CE4E5B9)
    h = h ^ (h >> np.uint64(27))
    h = h * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


def kgram_hashes(tokens: list[str], k: int = K) -> np.ndarray:
    """The hash of every k-gram of ``tokens`` (uint64, one per start position); a stream
    shorter than ``k`` is one k-gram of its own (an empty one has none)."""
    if not tokens:
        return np.zeros(0, dtype=np.uint64)
    ids = np.fromiter((_token_hash(t) for t in tokens), dtype=np.uint64, count=len(tokens))
    n = max(len(ids) - k + 1, 1)
    h = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for j in range(min(k, len(ids))):
            h = h * _BASE + ids[j : j + n]
        return _mix(h)


def winnow(hashes: np.ndarray, w: int = W) -> np.ndarray:
    """The positions kept: the rightmost minimum of every window of ``w`` hashes."""
    if len(hashes) == 0:
        return np.zeros(0, dtype=np.int64)
    if len(hashes) <= w:
        return np.array([len(hashes) - 1 - int(np.argmin(hashes[::-1]))])
    windows = np.lib.stride_tricks.sliding_window_view(hashes, w)
    rightmost = w - 1 - np.argmin(windows[:, ::-1], axis=1)
    return np.unique(rightmost + np.arange(len(windows)))


@dataclass(frozen=True)
class Fingerprints:
    """A cell's fingerprints (hash -> where its k-grams start in the token stream), with the
    stream itself, to show the matches: each token's cell line, and whether it is the cell's
    own (no k-gram of the given code covers it)."""

    positions: dict[int, list[int]]
    tokens: list[str]
    lines: list[int]
    own: list[bool]

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def code_lines(self) -> set[int]:
        """Every line that holds a token (not a comment, a blank line or a print)."""
        return set(self.lines)


def fingerprint(
    stream: Tokens, given: set[int] | frozenset[int] = frozenset(), k: int = K, w: int = W
) -> Fingerprints:
    """The winnowed fingerprints of ``stream``, leaving out every k-gram in ``given``."""
    hashes = kgram_hashes(stream.tokens, k)
    values = hashes.tolist()
    is_given = np.array([h in given for h in values], dtype=bool)
    covered = np.zeros(len(stream.tokens) + 1, dtype=np.int64)  # difference array of given k-grams
    for start in np.flatnonzero(is_given).tolist():
        covered[start] += 1
        covered[min(start + k, len(stream.tokens))] -= 1
    own = (np.cumsum(covered)[: len(stream.tokens)] == 0).tolist()
    positions: dict[int, list[int]] = {}
    for position in winnow(hashes, w).tolist():
        if any(own[position : position + k]):  # a k-gram made only of given code counts for nothing
            positions.setdefault(values[position], []).append(position)
    return Fingerprints(positions, stream.tokens, stream.lines, own)


def all_hashes(stream: Tokens, k: int = K) -> set[int]:
    """Every k-gram hash of ``stream`` (not winnowed): what a cell must not be credited with."""
    return set(kgram_hashes(stream.tokens, k).tolist())
