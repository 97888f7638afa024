"""Chapter 9's reference: RoPE by its properties and its two conventions, grouped-query
attention against PyTorch's ``enable_gqa``, the sliding window against explicit loops, the
rolling cache against full attention under the window, and FlashAttention's forward and
backward against autograd through plain attention (and gradcheck in float64)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from grader.reference import modern_attention as ma
from tests.strategies import examples, float_arrays, masks

pytestmark = pytest.mark.ch09


def t(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


# --------------------------------------------------------------------------- RoPE


@st.composite
def rope_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    d = 2 * draw(st.integers(1, 5))
    q = t(draw(float_arrays((d,), 3.0)))
    k = t(draw(float_arrays((d,), 3.0)))
    return q, k, draw(st.integers(-50, 5000)), draw(st.integers(-50, 5000))


@given(rope_inputs(), st.integers(-1000, 1000), st.sampled_from([10000.0, 500000.0, 10.0]))
@settings(max_examples=examples(60))
def test_rope_score_depends_only_on_the_offset(inputs, shift, base):
    q, k, m, p = inputs
    for rope in (ma.apply_rope, ma.apply_rope_interleaved):
        s1 = rope(q[None], torch.tensor([m]), base) @ rope(k[None], torch.tensor([p]), base).T
        s2 = rope(q[None], torch.tensor([m + shift]), base) @ rope(k[None], torch.tensor([p + shift]), base).T
        assert torch.allclose(s1, s2, atol=1e-9 * (1 + abs(m) + abs(p) + abs(shift)))


@given(st.integers(1, 6), st.integers(1, 5), st.integers(0, 3000))
@settings(max_examples=examples(30))
def test_rope_keeps_norms_shape_and_dtype(n, half, start):
    x = torch.randn(2, 3, n, 2 * half, dtype=torch.float64)
    positions = torch.arange(start, start + n)
    for rope in (ma.apply_rope, ma.apply_rope_interleaved):
        y = rope(x, positions)
        assert y.shape == x.shape and y.dtype == x.dtype
        torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    y32 = ma.apply_rope(x.float(), positions)
    assert y32.dtype == torch.float32


def test_rope_at_position_zero_is_the_identity_and_pairs_are_halves():
    x = torch.randn(4, 6, dtype=torch.float64)
    torch.testing.assert_close(ma.apply_rope(x, torch.zeros(4, dtype=torch.int64)), x)
    # d = 2: one pair rotated by the position itself (theta_0 = 1), in both conventions.
    e = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    for rope in (ma.apply_rope, ma.apply_rope_interleaved):
        torch.testing.assert_close(
            rope(e, torch.tensor([1])), torch.tensor([[math.cos(1), math.sin(1)]]).double()
        )
    # d = 4, halves: features 0 and 2 form pair 0 (angle m), features 1 and 3 pair 1 (angle m / 100).
    x = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    torch.testing.assert_close(
        ma.apply_rope(x, torch.tensor([2])), torch.tensor([[math.cos(2), 0, math.sin(2), 0]]).double()
    )
    torch.testing.assert_close(
        ma.apply_rope_interleaved(x, torch.tensor([2])),
        torch.tensor([[math.cos(2), math.sin(2), 0, 0]]).double(),
    )


def test_rope_conventions_differ_and_a_permutation_maps_one_onto_the_other():
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    pos = torch.arange(3, 8)
    assert (ma.apply_rope(x, pos) - ma.apply_rope_interleaved(x, pos)).abs().max() > 0.1
    torch.testing.assert_close(
        ma.apply_rope_interleaved(ma.halves_to_interleaved(x), pos),
        ma.halves_to_interleaved(ma.apply_rope(x, pos)),
    )


def test_rope_matches_an_explicit_rotation_loop():
    n, d, base = 5, 6, 100.0
    x = torch.randn(n, d, dtype=torch.float64)
    pos = torch.tensor([7, 0, 3, 11, 2])
    y = ma.apply_rope(x, pos, base)
    for m in range(n):
        for i in range(d // 2):
            a = pos[m].item() * base ** (-2 * i / d)
            x1, x2 = x[m, i].item(), x[m, i + d // 2].item()
            assert y[m, i].item() == pytest.approx(x1 * math.cos(a) - x2 * math.sin(a), abs=1e-12)
            assert y[m, i + d // 2].item() == pytest.approx(x1 * math.sin(a) + x2 * math.cos(a), abs=1e-12)


def test_rope_refuses_an_odd_d():
    with pytest.raises(ValueError, match="even"):
        ma.apply_rope(torch.randn(3, 5), torch.arange(3))


# --------------------------------------------------------------------------- grouped-query attention


@st.composite
def gqa_inputs(draw: st.DrawFn):
    B, g, r = draw(st.integers(1, 2)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    n_q, n_k, d, d_v = (draw(st.integers(1, 6)) for _ in range(4))
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0]))
    q = t(draw(float_arrays((B, g * r, n_q, d), scale)))
    k = t(draw(float_arrays((B, g, n_k, d), scale)))
    v = t(draw(float_arrays((B, g, n_k, d_v), 3.0)))
    shape = draw(st.sampled_from([(B, g * r, n_q, n_k), (B, 1, 1, n_k), (n_q, n_k), (B, 1, n_q, n_k)]))
    mask = t(draw(masks(shape))) if draw(st.booleans()) else None
    return q, k, v, mask


@given(gqa_inputs())
@settings(max_examples=examples(60))
def test_gqa_equals_torch_enable_gqa(inputs):
    q, k, v, mask = inputs
    out, weights = ma.gqa_attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-9)
    assert weights.shape == (*q.shape[:-1], k.shape[-2])
    sums = weights.sum(-1)
    assert torch.all(((sums - 1).abs() < 1e-9) | (sums == 0))  # a row sums to 1, or 0 when all masked
    assert not torch.isnan(out).any()


def test_gqa_head_mapping_is_consecutive_groups():
    q = torch.randn(1, 6, 3, 4, dtype=torch.float64)
    k, v = torch.randn(1, 2, 5, 4, dtype=torch.float64), torch.randn(1, 2, 5, 3, dtype=torch.float64)
    out, _ = ma.gqa_attention(q, k, v)
    for i in range(6):
        j = i // 3
        ref = torch.softmax(q[0, i] @ k[0, j].T / 2.0, -1) @ v[0, j]
        torch.testing.assert_close(out[0, i], ref)


def test_gqa_fully_masked_rows_are_zero_with_zero_gradients():
    q = torch.randn(2, 4, 3, 5, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 7, 5, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 1, 7, 2, dtype=torch.float64, requires_grad=True)
    mask = torch.ones(2, 4, 3, 7, dtype=torch.bool)
    mask[1, 2, 0] = False
    out, weights = ma.gqa_attention(q, k, v, mask)
    assert out[1, 2, 0].abs().max() == 0 and weights[1, 2, 0].abs().max() == 0
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and q.grad[1, 2, 0].abs().max() == 0
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, expected)
    assert torch.autograd.gradcheck(lambda a, b, c: ma.gqa_attention(a, b, c, mask)[0], (q, k, v))


def test_gqa_refuses_heads_that_do_not_divide():
    with pytest.raises(ValueError, match="multiple"):
        ma.gqa_attention(torch.randn(1, 4, 2, 3), torch.randn(1, 3, 2, 3), torch.randn(1, 3, 2, 3))


def test_kv_cache_bytes_counts_keys_and_values():
    assert ma.kv_cache_bytes(n_layers=2, n_kv_heads=3, d_head=4, seq_len=5, batch=1, bytes_per_value=2) == 480


# --------------------------------------------------------------------------- windows and the rolling cache


@given(st.integers(0, 9), st.integers(0, 9), st.integers(1, 10), st.integers(0, 4))
def test_sliding_window_mask_equals_explicit_loops(n_q, extra, window, sinks):
    n_k = n_q + extra
    mask = ma.sliding_window_mask(n_q, n_k, window, sinks)
    assert mask.shape == (n_q, n_k) and mask.dtype == torch.bool
    for i in range(n_q):
        pos = n_k - n_q + i
        for j in range(n_k):
            assert bool(mask[i, j]) == (j <= pos and (pos - j < window or j < sinks))


def test_a_window_of_one_sees_only_itself_and_sinks():
    mask = ma.sliding_window_mask(4, 6, window=1, sinks=1)
    expected = torch.zeros(4, 6, dtype=torch.bool)
    expected[:, 0] = True
    for i in range(4):
        expected[i, 2 + i] = True
    assert torch.equal(mask, expected)


def test_sliding_window_refuses_bad_arguments():
    for args in ((3, 2, 1, 0), (2, 3, 0, 0), (2, 3, 1, -1)):
        with pytest.raises(ValueError):
            ma.sliding_window_mask(*args)


@given(st.integers(1, 14), st.integers(1, 6), st.integers(0, 3), st.sampled_from([(2, 1), (2, 2), (4, 2)]))
@settings(max_examples=examples(40))
def test_rolling_cache_decoding_equals_full_attention_under_the_window(n, window, sinks, heads):
    h, g = heads
    q = torch.randn(2, h, n, 3, dtype=torch.float64)
    k, v = torch.randn(2, g, n, 3, dtype=torch.float64), torch.randn(2, g, n, 5, dtype=torch.float64)
    full, _ = ma.gqa_attention(q, k, v, ma.sliding_window_mask(n, n, window, sinks))
    torch.testing.assert_close(ma.decode_with_rolling_cache(q, k, v, window, sinks), full)


@pytest.mark.parametrize("chunk", [1, 2, 4, 7])
def test_rolling_cache_keeps_sinks_and_the_last_window_with_bounded_memory(chunk):
    cache = ma.RollingKVCache(window=3, sinks=2)
    k_all = torch.arange(40, dtype=torch.float64).reshape(1, 1, 40, 1)
    for start in range(0, 40, chunk):
        stop = min(start + chunk, 40)
        keys, values, positions = cache.append(k_all[..., start:stop, :], -k_all[..., start:stop, :])
        assert torch.equal(keys[0, 0, :, 0].long(), positions) and positions.dtype == torch.int64
        assert torch.equal(values, -keys)
        assert positions.tolist() == sorted({*range(min(2, stop)), *range(max(0, stop - 3), stop)})
        assert keys.shape[-2] <= 5
    assert len(cache) == 40


# --------------------------------------------------------------------------- FlashAttention


def _grads(fn, Q, K, V, dO):
    out = fn(Q, K, V)
    return (out, *torch.autograd.grad(out, (Q, K, V), dO))


@given(
    st.integers(1, 2),
    st.integers(1, 9),
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 5),
    st.booleans(),
    st.sampled_from([1e-3, 1.0, 10.0]),
)
@settings(max_examples=examples(40), deadline=None)
def test_flash_forward_and_backward_equal_autograd_through_plain_attention(
    B, n_q, n_k, d, d_v, block, causal, scale
):
    gen = torch.Generator().manual_seed(n_q * 100 + n_k * 10 + d)
    Q = (scale * torch.randn(B, 2, n_q, d, dtype=torch.float64, generator=gen)).requires_grad_()
    K = (scale * torch.randn(B, 2, n_k, d, dtype=torch.float64, generator=gen)).requires_grad_()
    V = torch.randn(B, 2, n_k, d_v, dtype=torch.float64, generator=gen).requires_grad_()
    dO = torch.randn(B, 2, n_q, d_v, dtype=torch.float64, generator=gen)
    got = _grads(lambda a, b, c: ma.FlashAttention.apply(a, b, c, block, causal), Q, K, V, dO)
    want = _grads(lambda a, b, c: ma.plain_attention(a, b, c, causal), Q, K, V, dO)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-9)


def test_plain_attention_equals_torch_sdpa_with_a_bottom_right_causal_mask():
    Q, K, V = torch.randn(3, 5, 4).double(), torch.randn(3, 8, 4).double(), torch.randn(3, 8, 2).double()
    mask = torch.ones(5, 8, dtype=torch.bool).tril(diagonal=3)
    torch.testing.assert_close(
        ma.plain_attention(Q, K, V, causal=True), F.scaled_dot_product_attention(Q, K, V, mask)
    )
    torch.testing.assert_close(
        ma.flash_attention(Q, K, V, 3, causal=True), F.scaled_dot_product_attention(Q, K, V, mask)
    )


@pytest.mark.parametrize(("block", "causal"), [(1, False), (3, True), (4, False), (16, True)])
def test_flash_gradcheck_float64(block, causal):
    Q = torch.randn(2, 7, 3, dtype=torch.float64, requires_grad=True)
    K = torch.randn(2, 5, 3, dtype=torch.float64, requires_grad=True)
    V = torch.randn(2, 5, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda a, b, c: ma.FlashAttention.apply(a, b, c, block, causal), (Q, K, V)
    )


def test_flash_fully_masked_rows_have_zero_output_and_zero_gradients():
    # Causal with n_q > n_k: the first n_q - n_k queries sit before every key.
    Q = torch.randn(1, 9, 4, dtype=torch.float64, requires_grad=True)
    K = torch.randn(1, 4, 4, dtype=torch.float64, requires_grad=True)
    V = torch.randn(1, 4, 3, dtype=torch.float64, requires_grad=True)
    out = ma.FlashAttention.apply(Q, K, V, 2, True)
    assert out[0, :5].abs().max() == 0
    out.pow(2).sum().backward()
    assert torch.isfinite(Q.grad).all() and Q.grad[0, :5].abs().max() == 0
    assert torch.isfinite(K.grad).all() and torch.isfinite(V.grad).all()


def test_flash_huge_logits_stay_finite():
    Q = torch.full((1, 3, 2), 40.0, dtype=torch.float64, requires_grad=True)
    K = torch.tensor([[[40.0, 40.0], [-40.0, 40.0], [40.0, -40.0]]], dtype=torch.float64, requires_grad=True)
    V = torch.randn(1, 3, 2, dtype=torch.float64, requires_grad=True)
    got = _grads(
        lambda a, b, c: ma.FlashAttention.apply(a, b, c, 2, False), Q, K, V, torch.ones(1, 3, 2).double()
    )
    want = _grads(ma.plain_attention, Q, K, V, torch.ones(1, 3, 2).double())
    for a, b in zip(got, want, strict=True):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)


def test_flash_saves_only_q_k_v_o_and_the_logsumexp():
    Q, K, V = (torch.randn(6, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = ma.FlashAttention.apply(Q, K, V, 4, False)
    saved = out.grad_fn.saved_tensors
    assert [tuple(s.shape) for s in saved] == [(6, 4)] * 4 + [(6,)]
    L = saved[-1]
    torch.testing.assert_close(L, torch.logsumexp(Q @ K.T / 2.0, dim=-1))


def test_flash_never_holds_an_nq_by_nk_tile():
    """The largest temporary of forward and backward is one tile: recorded by wrapping exp."""
    sizes: list[int] = []
    real_exp = torch.exp

    def spy(x, *args, **kwargs):
        sizes.append(x.numel())
        return real_exp(x, *args, **kwargs)

    Q, K, V = (torch.randn(64, 8, dtype=torch.float64, requires_grad=True) for _ in range(3))
    torch.exp = spy
    try:
        out = ma.FlashAttention.apply(Q, K, V, 8, True)
        out.sum().backward()
    finally:
        torch.exp = real_exp
    assert sizes and max(sizes) <= 8 * 8


def test_flash_refuses_a_bad_block_size():
    with pytest.raises(ValueError, match="block_size"):
        ma.FlashAttention.apply(torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2), 0, False)
