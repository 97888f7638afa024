"""Chapter 9's cases of FlashAttention: ``FlashAttention.apply(Q, K, V, block_size, causal)``
forward only (``FlashAttention``), then forward and the gradients of sum(out * dO) from the
learner's own backward (``__gradients``), and a case too large for an (n_q, n_k) matrix
(``__memory``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attention_learner.bug_models import index_ranges, wrong_along, wrong_entries
from attention_learner.inputs import normal
from attention_learner.spec import Arrays
from attention_learner.torch_cases import tensor


def make_flash_inputs(
    rng: np.random.Generator,
    batch: Sequence[int] = (2,),
    n_q: int = 5,
    n_k: int = 7,
    d: int = 4,
    d_v: int = 3,
    block_size: int = 3,
    causal: bool = False,
    logit_scale: float = 1.0,
) -> dict[str, Any]:
    """Q (*batch, n_q, d) (times ``logit_scale``), K (*batch, n_k, d), V (*batch, n_k, d_v) and
    an upstream gradient dO (*batch, n_q, d_v)."""
    batch = tuple(batch)
    return {
        "Q": normal(rng, *batch, n_q, d, scale=logit_scale),
        "K": normal(rng, *batch, n_k, d),
        "V": normal(rng, *batch, n_k, d_v),
        "dO": normal(rng, *batch, n_q, d_v),
        "block_size": block_size,
        "causal": causal,
    }


def describe_flash(params: dict[str, Any]) -> str:
    n_q, n_k, b = params["n_q"], params["n_k"], params["block_size"]
    last = f", the last of {n_k % b}" if n_k % b else ""
    text = (
        f"batch {tuple(params['batch'])}, n_q={n_q}, n_k={n_k}, d={params['d']}, d_v={params['d_v']}, "
        f"block_size={b} ({-(-n_k // b)} key block(s){last})"
    )
    if params["causal"]:
        text += ", causal (query i at position n_k - n_q + i)"
        if n_q > n_k:
            text += f", so queries 0-{n_q - n_k - 1} see no key"
    if params["logit_scale"] != 1.0:
        text += f", scores of order +-{params['logit_scale']:g}"
    return text


def _flash_output(cls: Any, inputs: dict[str, Any], grad: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
    Q, K, V = (tensor(inputs[n], grad=grad) for n in ("Q", "K", "V"))
    out = cls.apply(Q, K, V, inputs["block_size"], inputs["causal"])
    if not isinstance(out, torch.Tensor):
        raise TypeError(
            f"FlashAttention.apply should return the output tensor alone, got {type(out).__name__}"
        )
    if grad and getattr(out.grad_fn, "_forward_cls", None) is not cls:
        raise TypeError(
            "FlashAttention.apply's output does not come from FlashAttention's own backward: "
            "FlashAttention must be a torch.autograd.Function whose forward returns the output"
        )
    return out, [Q, K, V]


def call_flash(cls: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    with torch.no_grad():
        out, _ = _flash_output(cls, inputs, grad=False)
    return {"output": out}


def call_flash_gradients(cls: Any, inputs: dict[str, Any]) -> dict[str, Any]:
    """The output and the gradients of sum(out * dO), from the learner's backward alone: the
    engine runs FlashAttention's backward node and nothing else."""
    out, leaves = _flash_output(cls, inputs, grad=True)
    dO = torch.from_numpy(inputs["dO"].copy())
    if tuple(out.shape) != tuple(dO.shape):
        return {"output": out}
    try:
        # autograd's engine called directly (what torch.autograd.grad runs): torch.autograd.grad
        # itself is what FlashAttention's backward may not call, and is traced as such
        grads = torch.autograd.Variable._execution_engine.run_backward(
            (out,), (dO,), False, False, tuple(leaves), True, False
        )
    except RuntimeError as exc:
        if "invalid gradient at index" in str(exc):
            raise RuntimeError(
                f"{exc}\n(backward returns one gradient per argument of forward, in order: dQ, "
                "dK, dV, then None for block_size and causal; are dK and dV swapped?)"
            ) from exc
        raise
    named = dict(zip(("dQ", "dK", "dV"), grads, strict=True))
    return {
        "output": out,
        **{
            k: torch.zeros_like(t) if g is None else g
            for (k, g), t in zip(named.items(), leaves, strict=True)
        },
    }


def flash_hints(inputs: dict[str, Any], expected: Arrays, got: Arrays) -> list[str]:
    hints: list[str] = []
    for key, what in (("output", "output"), ("dQ", "dQ"), ("dK", "dK"), ("dV", "dV")):
        mine, want = got.get(key), expected.get(key)
        if mine is None or want is None or mine.shape != want.shape:
            continue
        if not np.isfinite(mine).all():
            hints.append(
                f"{what} has NaN or infinite entries: a query that sees no key (L = -inf) must get "
                "a zero output and zero gradients; rows not yet seeing a key shift by 0."
            )
            break
        wrong = wrong_along(wrong_entries(mine, want, 1e-8, 1e-6), -2)
        if len(wrong):
            axis = "query" if key in ("output", "dQ") else "key"
            hints.append(
                f"The first wrong result is {what}, in {axis} rows {index_ranges(wrong)} "
                f"(of 0-{want.shape[-2] - 1})."
            )
            break
    return hints


#: what the memory case's test cell may allocate on top of what the job had when it started
FLASH_MEMORY_BUDGET = 256 * 2**20


def make_flash_memory_inputs(
    rng: np.random.Generator,
    n_q: int = 3072,
    n_k: int = 12288,
    distinct: int = 53,
    block_size: int = 512,
) -> dict[str, Any]:
    """A case whose (n_q, n_k) float64 matrix (288 MiB) exceeds :data:`FLASH_MEMORY_BUDGET`:
    keys and values are ``distinct`` rows repeated and shuffled, so that whoever judges computes
    the exact answer and gradients over the distinct rows."""
    K_rows, V_rows = normal(rng, distinct, 2), normal(rng, distinct, 3)
    which = rng.permutation(np.arange(n_k) % distinct)  # (n_k,) the row each key repeats
    return {
        "Q": normal(rng, n_q, 2),
        "K": K_rows[which],
        "V": V_rows[which],
        "dO": normal(rng, n_q, 3),
        "block_size": block_size,
        "causal": False,
        "K_rows": K_rows,
        "V_rows": V_rows,
        "which": which,
    }


def describe_flash_memory(params: dict[str, Any]) -> str:
    full = params["n_q"] * params["n_k"] * 8
    return (
        f"forward and backward with {params['n_q']} queries and {params['n_k']} keys in blocks of "
        f"{params['block_size']}: one (n_q, n_k) float64 matrix would take {full / 2**20:.0f} MiB, more "
        f"than the {FLASH_MEMORY_BUDGET // 2**20} MiB this test may allocate when graded"
    )
