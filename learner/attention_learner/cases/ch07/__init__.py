"""Chapter 7 cases: online_softmax_attention (NumPy), KVCache and CachedSelfAttention (PyTorch).

- ``online_softmax_attention(Q, K, V, block_size, mask=None) -> out`` runs on block sizes that
  do and do not divide n_k, 1 and >= n_k, masks with a fully masked row, scores of order
  +-1000 and batch axes.
- ``KVCache`` is asked for what ``append`` returns after every step, ``len(cache)``, and
  its ``k`` and ``v`` at the end.
- ``CachedSelfAttention`` is fed a sequence in chunks (a prompt, then one token at a time);
  its outputs per chunk, the cache's length after each chunk and the cached keys and values
  are returned raw, for comparison with the full causal pass.

One module per job: ``online``, ``cache`` and ``cached``; this package lists the cases in
``CASES`` and re-exports every public name, so ``attention_learner.cases.ch07`` imports keep
working.
"""

from __future__ import annotations

from attention_learner.cases.ch07.cache import (
    CACHE_CONTRACT,
    cache_hints,
    cache_length,
    cache_where_wrong,
    call_cache,
    chunk_bounds,
    describe_cache,
    make_cache_inputs,
)
from attention_learner.cases.ch07.cached import (
    CACHED_ATOL,
    CACHED_CONTRACT,
    CACHED_RTOL,
    cached_hints,
    cached_where_wrong,
    call_cached,
    describe_cached,
    make_cached_inputs,
    wrong_heads,
)
from attention_learner.cases.ch07.online import (
    MEMORY_CASE_BUDGET,
    MODELLED_SCORES,
    ONLINE_ATOL,
    ONLINE_RTOL,
    call_online,
    describe_memory,
    describe_online,
    make_memory_inputs,
    make_online_inputs,
    online_hints,
    online_where_wrong,
)
from attention_learner.conventions import numpy_case
from attention_learner.spec import Case

__all__ = [
    "CACHED_ATOL",
    "CACHED_CONTRACT",
    "CACHED_RTOL",
    "CACHE_CONTRACT",
    "CASES",
    "MEMORY_CASE_BUDGET",
    "MODELLED_SCORES",
    "NUMPY_EXERCISES",
    "ONLINE_ATOL",
    "ONLINE_RTOL",
    "cache_hints",
    "cache_length",
    "cache_where_wrong",
    "cached_hints",
    "cached_where_wrong",
    "call_cache",
    "call_cached",
    "call_online",
    "chunk_bounds",
    "describe_cache",
    "describe_cached",
    "describe_memory",
    "describe_online",
    "make_cache_inputs",
    "make_cached_inputs",
    "make_memory_inputs",
    "make_online_inputs",
    "online_hints",
    "online_where_wrong",
    "wrong_heads",
]

CASES = [
    Case(
        name="online_softmax_attention",
        make_inputs=make_online_inputs,
        call=call_online,
        describe=describe_online,
        hints=online_hints,
        atol=ONLINE_ATOL,
        rtol=ONLINE_RTOL,
    ),
    Case(
        name="online_softmax_attention__memory",
        make_inputs=make_memory_inputs,
        call=call_online,
        describe=describe_memory,
        hints=online_hints,
        atol=ONLINE_ATOL,
        rtol=ONLINE_RTOL,
    ),
    Case(
        name="KVCache",
        make_inputs=make_cache_inputs,
        call=call_cache,
        describe=describe_cache,
        hints=cache_hints,
        atol=0.0,
        rtol=0.0,
    ),
    Case(
        name="CachedSelfAttention",
        make_inputs=make_cached_inputs,
        call=call_cached,
        describe=describe_cached,
        hints=cached_hints,
        atol=CACHED_ATOL,
        rtol=CACHED_RTOL,
    ),
    Case(
        name="CachedSelfAttention__torch",
        make_inputs=make_cached_inputs,
        call=call_cached,
        describe=lambda p: (
            "against nn.MultiheadAttention's full causal pass with the same weights, " + describe_cached(p)
        ),
        hints=cached_hints,
        atol=CACHED_ATOL,
        rtol=CACHED_RTOL,
    ),
]
# the NumPy exercises of this chapter keep the course's NumPy conventions (float64 results,
# inputs left unchanged), decided by the judge as in chapters 1 to 3
NUMPY_EXERCISES = ("online_softmax_attention", "online_softmax_attention__memory")
CASES = [numpy_case(c) if c.name in NUMPY_EXERCISES else c for c in CASES]
