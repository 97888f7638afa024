"""Chapter 7's reference: online softmax against chapter 3's attention and PyTorch's, the
KV cache against the full causal pass, and the classic mistakes against both."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.exercises.ch07_bugs import MISTAKES, online_softmax_with_mistake
from grader.reference import (
    CachedSelfAttention,
    KVCache,
    MultiHeadAttention,
    causal_mask,
    online_softmax_attention,
    scaled_dot_product_attention,
)
from grader.reference.at_scale import (
    chunk_causal_mask,
    decode_in_chunks,
)
from grader.reference.multi_head import to_torch_multihead, torch_attn_mask
from tests.strategies import attention_inputs, examples, layer_inputs, seeded_torch

pytestmark = pytest.mark.ch07


@given(attention_inputs(), st.integers(1, 8))
def test_online_softmax_equals_chapter_3_attention(inputs, block_size):
    Q, K, V, mask = inputs
    expected, _ = scaled_dot_product_attention(Q, K, V, mask)
    np.testing.assert_allclose(online_softmax_attention(Q, K, V, block_size, mask), expected, atol=1e-12)


@given(attention_inputs(with_mask=False), st.integers(1, 8))
def test_online_softmax_equals_torch_sdpa(inputs, block_size):
    Q, K, V, _ = inputs
    expected = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (Q, K, V))).numpy()
    np.testing.assert_allclose(online_softmax_attention(Q, K, V, block_size), expected, atol=1e-12)


@pytest.mark.parametrize("block_size", [1, 3, 4, 12, 13, 100])
def test_extreme_scores_broadcast_batch_and_masks(block_size):
    rng = np.random.default_rng(block_size)
    Q = rng.normal(size=(2, 3, 5, 4)) * 400  # scores of order +-1000
    K = rng.normal(size=(3, 13, 4))  # broadcast over the leading batch axis
    V = rng.normal(size=(2, 3, 13, 6))
    mask = rng.random((2, 1, 5, 13)) > 0.4
    mask[1, 0, 2] = False  # a fully masked query row
    out = online_softmax_attention(Q, K, V, block_size, mask)
    expected, _ = scaled_dot_product_attention(Q, K, V, mask)
    assert out.shape == (2, 3, 5, 6) and np.all(np.isfinite(out))
    np.testing.assert_allclose(out, expected, atol=1e-12)
    assert np.all(out[1, :, 2] == 0.0)


def test_peak_memory_grows_with_the_block_not_with_n_k():
    rng = np.random.default_rng(0)
    n_q, n_k, block = 256, 4096, 64
    Q, K, V = rng.normal(size=(n_q, 8)), rng.normal(size=(n_k, 8)), rng.normal(size=(n_k, 8))
    tracemalloc.start()
    online_softmax_attention(Q, K, V, block)
    _, blockwise_peak = tracemalloc.get_traced_memory()
    tracemalloc.reset_peak()
    scaled_dot_product_attention(Q, K, V)
    _, naive_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    score_matrix = n_q * n_k * 8
    assert naive_peak >= score_matrix
    assert blockwise_peak < score_matrix / 8


@pytest.mark.parametrize("mistake", MISTAKES)
def test_every_mistake_is_wrong_on_extreme_scores_with_a_partial_block(mistake):
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(4, 5)) * 1000, rng.normal(size=(11, 5)), rng.normal(size=(11, 3))
    expected, _ = scaled_dot_product_attention(Q, K, V)
    with np.errstate(all="ignore"):
        got = online_softmax_with_mistake(Q, K, V, 3, mistake)
    assert not np.allclose(got, expected, atol=1e-6, equal_nan=False)


def test_block_max_is_exact_on_mild_scores_and_breaks_on_extreme_ones():
    """Taking the block's max instead of the running max is still exact algebra; it only
    overflows once a later block's max is far below an earlier one."""
    rng = np.random.default_rng(2)
    Q, K, V = rng.normal(size=(4, 5)), rng.normal(size=(11, 5)), rng.normal(size=(11, 3))
    expected, _ = scaled_dot_product_attention(Q, K, V)
    np.testing.assert_allclose(online_softmax_with_mistake(Q, K, V, 3, "block_max"), expected, atol=1e-12)
    with np.errstate(all="ignore"):
        bad = online_softmax_with_mistake(Q * 1000, K, V, 3, "block_max")
    assert not np.all(np.isfinite(bad))


def test_bad_block_size_raises():
    with pytest.raises(ValueError):
        online_softmax_attention(np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), 0)
    with pytest.raises(ValueError):
        online_softmax_with_mistake(np.ones((2, 3)), np.ones((4, 3)), np.ones((4, 2)), 2, "typo")


# ---------------------------------------------------------------- the KV cache


def test_kv_cache_appends_along_the_sequence_axis():
    cache = KVCache()
    assert len(cache) == 0 and cache.k is None and cache.nbytes() == 0
    g = torch.Generator().manual_seed(0)
    k1, v1 = torch.randn(2, 3, 4, 5, generator=g), torch.randn(2, 3, 4, 7, generator=g)
    k2, v2 = torch.randn(2, 3, 1, 5, generator=g), torch.randn(2, 3, 1, 7, generator=g)
    cache.append(k1, v1)
    k, v = cache.append(k2, v2)
    assert len(cache) == 5 and k.shape == (2, 3, 5, 5) and v.shape == (2, 3, 5, 7)
    assert torch.equal(k[:, :, :4], k1) and torch.equal(v[:, :, 4:], v2)
    assert cache.nbytes() == 4 * (2 * 3 * 5 * 5 + 2 * 3 * 5 * 7)


def test_chunk_causal_mask():
    expected = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    assert torch.equal(chunk_causal_mask(2, 3), expected)
    assert torch.equal(chunk_causal_mask(0, 4), causal_mask(4))


def _layer_pair(d_model: int, h: int, seed: int):
    with seeded_torch(seed):
        cached = CachedSelfAttention(d_model, h).double()
        full = MultiHeadAttention(d_model, h).double()
    full.load_state_dict(cached.state_dict())
    return cached, full


@st.composite
def chunked_inputs(draw: st.DrawFn) -> tuple[int, list[int], torch.Tensor]:
    """(h, chunks, x): h heads in 1..3 of d_head in 1..4, 1 to 6 chunks of 1..4 tokens each,
    and x (batch, n, h * d_head) with batch in 1..3 and n the total of the chunks."""
    batch, h, d_head = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 4))
    chunks = draw(st.lists(st.integers(1, 4), min_size=1, max_size=6))
    return h, chunks, draw(layer_inputs((batch, sum(chunks), h * d_head)))


# Each example runs a full pass and one cached pass per chunk: fewer examples than the
# profile's. The layer's weights come from one of three seeds; Hypothesis shrinks the input.
@settings(max_examples=examples(12))
@given(weight_seed=st.integers(0, 2), inputs=chunked_inputs())
def test_cached_decoding_equals_the_full_causal_pass_at_every_step(weight_seed, inputs):
    h, chunks, x = inputs
    cached, full = _layer_pair(x.shape[-1], h, weight_seed)
    n = sum(chunks)
    with torch.no_grad():
        expected, _ = full(x, x, x, causal_mask(n))
        got = decode_in_chunks(cached, x, chunks)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=1e-10)
    assert len(cached.cache) == n


def test_cached_decoding_equals_torch_multihead_attention_and_resets():
    cached, full = _layer_pair(12, 3, 0)
    theirs = to_torch_multihead(full)
    x = torch.randn(2, 9, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        blocked = torch_attn_mask(causal_mask(9), 2, 3, 9, 9)  # (B*h, n, n), True = ignore
        expected, _ = theirs(x, x, x, attn_mask=blocked, need_weights=False)
        first = decode_in_chunks(cached, x, [4, 1, 1, 3])
        cached.reset()
        second = decode_in_chunks(cached, x, [1] * 9)
    torch.testing.assert_close(first, expected, atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(second, expected, atol=1e-12, rtol=1e-10)


def test_decode_in_chunks_rejects_chunks_that_do_not_cover_the_sequence():
    cached, _ = _layer_pair(4, 2, 0)
    with pytest.raises(ValueError):
        decode_in_chunks(cached, torch.zeros(1, 5, 4, dtype=torch.float64), [2, 2])
