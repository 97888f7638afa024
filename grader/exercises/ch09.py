"""Chapter 9 exercises, the judging half: references and classic bugs of apply_rope,
apply_rope_interleaved, gqa_attention, sliding_window_mask, RollingKVCache and FlashAttention
(the cases are in ``attention_learner.cases.ch09``, the bug models in ``ch09_bugs``).

- RoPE, grouped-query attention, the window and the cache are judged against
  ``grader.reference.modern_attention``; ``gqa_attention__torch`` against
  ``F.scaled_dot_product_attention(enable_gqa=True)``;
- ``FlashAttention`` (forward) and ``__gradients`` against autograd through the reference's
  plain attention; ``__memory`` against the exact answer over the case's distinct key rows.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from attention_learner.cases.ch09 import FLASH_MEMORY_BUDGET, rolling_bounds
from grader.exercises.ch09_bugs import GQA_BUGS, ROLLING_BUGS, WINDOW_BUGS, flash_bugs, gqa_tensors, rope_bugs
from grader.exercises.spec import exercise
from grader.reference.modern_attention import (
    RollingKVCache,
    apply_rope,
    apply_rope_interleaved,
    gqa_attention,
    plain_attention,
    sliding_window_mask,
)


def _rope_reference(rope):
    def reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor | np.ndarray]:
        x = torch.tensor(inputs["x"], dtype=getattr(torch, inputs["dtype"]))
        out = rope(x, torch.from_numpy(inputs["positions"].copy()), inputs["base"])
        return {"output": out, "same_dtype": np.array([True])}

    return reference


def gqa_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    out, weights = gqa_attention(*gqa_tensors(inputs))
    return {"output": out, "weights": weights}


def gqa_torch_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """torch's own, with the weights from the reference (torch does not return them)."""
    q, k, v, mask = gqa_tensors(inputs)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return {"output": out, "weights": gqa_attention(q, k, v, mask)[1]}


def window_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    return {"mask": sliding_window_mask(inputs["n_q"], inputs["n_k"], inputs["window"], inputs["sinks"])}


def rolling_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor | np.ndarray]:
    cache = RollingKVCache(inputs["window"], inputs["sinks"])
    k, v = torch.from_numpy(inputs["k"]), torch.from_numpy(inputs["v"])
    steps = [cache.append(k[:, :, a:b], v[:, :, a:b]) for a, b in rolling_bounds(inputs["chunks"])]
    return {
        "keys": torch.cat([s[0] for s in steps], dim=-2),
        "values": torch.cat([s[1] for s in steps], dim=-2),
        "positions": torch.cat([s[2] for s in steps]).double(),
        "kept": np.array([len(s[2]) for s in steps], dtype=np.float64),
        "lengths": np.cumsum(inputs["chunks"]).astype(np.float64),
    }


def _plain(inputs: dict[str, Any], gradients: bool) -> dict[str, torch.Tensor]:
    Q, K, V = (torch.tensor(inputs[n], dtype=torch.float64, requires_grad=gradients) for n in ("Q", "K", "V"))
    out = plain_attention(Q, K, V, inputs["causal"])
    if not gradients:
        return {"output": out}
    dQ, dK, dV = torch.autograd.grad(out, (Q, K, V), torch.from_numpy(inputs["dO"].copy()))
    return {"output": out, "dQ": dQ, "dK": dK, "dV": dV}


def flash_memory_reference(inputs: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Exact output and gradients from the distinct rows: a row repeated c times adds log(c)
    to its score; the gradient of one copy is the row's gradient divided by c."""
    which = inputs["which"]
    counts = torch.from_numpy(np.bincount(which, minlength=len(inputs["K_rows"])).astype(np.float64))
    Q = torch.tensor(inputs["Q"], requires_grad=True)
    K_r = torch.tensor(inputs["K_rows"], requires_grad=True)
    V_r = torch.tensor(inputs["V_rows"], requires_grad=True)
    scores = Q @ K_r.T / Q.shape[-1] ** 0.5 + torch.log(counts)  # (n_q, m)
    out = torch.softmax(scores, dim=-1) @ V_r  # (n_q, d_v)
    dQ, dK_r, dV_r = torch.autograd.grad(out, (Q, K_r, V_r), torch.from_numpy(inputs["dO"].copy()))
    per_copy = torch.from_numpy(which)
    return {
        "output": out,
        "dQ": dQ,
        "dK": (dK_r / counts[:, None])[per_copy],
        "dV": (dV_r / counts[:, None])[per_copy],
    }


EXERCISES = [
    exercise("apply_rope", _rope_reference(apply_rope), rope_bugs(interleaved=False)),
    exercise("apply_rope_interleaved", _rope_reference(apply_rope_interleaved), rope_bugs(interleaved=True)),
    exercise("gqa_attention", gqa_reference, GQA_BUGS),
    exercise("gqa_attention__torch", gqa_torch_reference, GQA_BUGS),
    exercise("sliding_window_mask", window_reference, WINDOW_BUGS),
    exercise("RollingKVCache", rolling_reference, ROLLING_BUGS),
    exercise("FlashAttention", lambda i: _plain(i, gradients=False), flash_bugs(gradients=False)),
    exercise("FlashAttention__gradients", lambda i: _plain(i, gradients=True), flash_bugs(gradients=True)),
    # no classic bugs on this one: its point is the memory limit
    dataclasses.replace(
        exercise("FlashAttention__memory", flash_memory_reference), memory_budget=FLASH_MEMORY_BUDGET
    ),
]
