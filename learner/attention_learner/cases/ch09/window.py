"""Chapter 9's case of the sliding window: ``sliding_window_mask(n_q, n_k, window, sinks)``,
the boolean mask itself."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attention_learner.spec import Arrays


def make_window_inputs(
    rng: np.random.Generator, n_q: int = 4, n_k: int = 6, window: int = 3, sinks: int = 0
) -> dict[str, Any]:
    return {"n_q": n_q, "n_k": n_k, "window": window, "sinks": sinks}


def call_window(fn: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    mask = fn(inputs["n_q"], inputs["n_k"], inputs["window"], inputs["sinks"])
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        raise TypeError(
            f"sliding_window_mask should return a bool tensor, got "
            f"{getattr(mask, 'dtype', type(mask).__name__)}"
        )
    return {"mask": mask}


def window_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    mask, want = got.get("mask"), expected["mask"]
    if mask is None or mask.shape != want.shape:
        return []
    hints: list[str] = []
    extra, missing = np.argwhere(mask & ~want), np.argwhere(~mask & want)
    offset = inputs["n_k"] - inputs["n_q"]
    for what, where in (("visible but should not be", extra), ("hidden but should be visible", missing)):
        if len(where):
            i, j = where[0]
            hints.append(
                f"{len(where)} entr{'y is' if len(where) == 1 else 'ies are'} {what}, e.g. query {i} "
                f"(at position {i + offset}) and key {j}."
            )
    return hints
