"""Chapter 9 cases: rotary positions (both pairings), grouped-query attention, the sliding
window mask with sinks, the rolling KV cache and FlashAttention's forward and backward.

- ``apply_rope(x, positions, base)`` and ``apply_rope_interleaved``: x (*batch, n, d), positions
  that may start anywhere (a cache offset) or come in any order; float32 inputs must stay
  float32 (``same_dtype``).
- ``gqa_attention(q, k, v, mask)``: h query heads over g key/value heads, every axis of its
  own size, masks of several shapes (one with a fully masked row).
- ``sliding_window_mask(n_q, n_k, window, sinks)``: the boolean mask itself.
- ``RollingKVCache(window, sinks)``: chunks appended one by one; what each append returns
  (keys, values, positions) and ``len(cache)`` after it.
- ``FlashAttention``: ``FlashAttention.apply(Q, K, V, block_size, causal)`` forward only
  (``FlashAttention``), then forward and the gradients of sum(out * dO) from the learner's
  own backward (``__gradients``), and a case too large for an (n_q, n_k) matrix (``__memory``).

One module per job: ``rope``, ``gqa``, ``window``, ``rolling`` and ``flash``; this package
lists the cases in ``CASES`` and re-exports every public name, so ``attention_learner.cases.ch09``
imports keep working.
"""

from __future__ import annotations

from attention_learner.cases.ch09.flash import (
    FLASH_MEMORY_BUDGET,
    call_flash,
    call_flash_gradients,
    describe_flash,
    describe_flash_memory,
    flash_hints,
    make_flash_inputs,
    make_flash_memory_inputs,
)
from attention_learner.cases.ch09.gqa import call_gqa, describe_gqa, gqa_hints, make_gqa_inputs
from attention_learner.cases.ch09.rolling import (
    call_rolling,
    describe_rolling,
    make_rolling_inputs,
    rolling_bounds,
    rolling_hints,
)
from attention_learner.cases.ch09.rope import (
    call_rope,
    describe_rope,
    make_rope_inputs,
    rope_case,
    rope_hints,
)
from attention_learner.cases.ch09.window import call_window, make_window_inputs, window_hints
from attention_learner.spec import Case

__all__ = [
    "CASES",
    "FLASH_MEMORY_BUDGET",
    "call_flash",
    "call_flash_gradients",
    "call_gqa",
    "call_rolling",
    "call_rope",
    "call_window",
    "describe_flash",
    "describe_flash_memory",
    "describe_gqa",
    "describe_rolling",
    "describe_rope",
    "flash_hints",
    "gqa_hints",
    "make_flash_inputs",
    "make_flash_memory_inputs",
    "make_gqa_inputs",
    "make_rolling_inputs",
    "make_rope_inputs",
    "make_window_inputs",
    "rolling_bounds",
    "rolling_hints",
    "rope_case",
    "rope_hints",
    "window_hints",
]

CASES = [
    rope_case("apply_rope"),
    rope_case("apply_rope_interleaved"),
    Case(
        name="gqa_attention",
        make_inputs=make_gqa_inputs,
        call=call_gqa,
        describe=describe_gqa,
        hints=gqa_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="gqa_attention__torch",
        make_inputs=make_gqa_inputs,
        call=call_gqa,
        describe=lambda p: "against F.scaled_dot_product_attention(enable_gqa=True), " + describe_gqa(p),
        hints=gqa_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="sliding_window_mask",
        make_inputs=make_window_inputs,
        call=call_window,
        hints=window_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="RollingKVCache",
        make_inputs=make_rolling_inputs,
        call=call_rolling,
        describe=describe_rolling,
        hints=rolling_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="FlashAttention",
        make_inputs=make_flash_inputs,
        call=call_flash,
        describe=describe_flash,
        hints=flash_hints,
        atol=1e-9,
        rtol=1e-7,
    ),
    Case(
        name="FlashAttention__gradients",
        make_inputs=make_flash_inputs,
        call=call_flash_gradients,
        describe=describe_flash,
        hints=flash_hints,
        atol=1e-9,
        rtol=1e-7,
        labels={
            "dQ": "the gradient with respect to Q",
            "dK": "the gradient with respect to K",
            "dV": "the gradient with respect to V",
        },
    ),
    Case(
        name="FlashAttention__memory",
        make_inputs=make_flash_memory_inputs,
        call=call_flash_gradients,
        describe=describe_flash_memory,
        atol=1e-8,
        rtol=1e-6,
    ),
]
