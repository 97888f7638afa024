"""Padded batches of token ids, and the words the chapter 8 cases write about them.

A padded batch is int64 (B, n): row b holds its sentence's ids, then ``pad_id`` up to n.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def padded_ids(
    rng: np.random.Generator, lengths: Sequence[int], vocab: int, pad_id: int, first: int | None = None
) -> np.ndarray:
    """int64 (B, max(lengths)): row b holds lengths[b] random ids other than ``pad_id`` (the
    first one ``first`` when given), then padding."""
    drawn = rng.integers(vocab - 1, size=(len(lengths), max(lengths)))  # (B, n)
    ids = drawn + (drawn >= pad_id)  # every id but pad_id, equally likely
    ids[np.arange(max(lengths)) >= np.array(lengths)[:, None]] = pad_id
    if first is not None:
        ids[:, 0] = np.where(np.array(lengths) > 0, first, ids[:, 0])
    return ids.astype(np.int64)


def lengths_text(values: Sequence[int]) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def int_tensor(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.array(array, dtype=np.int64))


def count_text(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless n is 1: "1 query position", "3 steps"."""
    return f"{n} {noun}{'' if n == 1 else 's'}"
