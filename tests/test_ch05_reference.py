"""Chapter 5: masks, encoder and decoder layers against torch's nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer, causality and padding properties, and the exercise specs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from grader.checks import check
from grader.exercises.ch05 import EXERCISES
from grader.reference import DecoderLayer, EncoderLayer, causal_mask, padding_mask
from grader.reference.transformer import (
    from_torch_decoder_layer,
    from_torch_encoder_layer,
    to_torch_decoder_layer,
    to_torch_encoder_layer,
)
from tests.spec_helpers import assert_bugs_caught, notebook_checks

pytestmark = pytest.mark.ch05

REFERENCE = {
    "causal_mask": causal_mask,
    "padding_mask": padding_mask,
    "EncoderLayer": EncoderLayer,
    "DecoderLayer": DecoderLayer,
}


def _randn(seed: int, *shape: int, grad: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).requires_grad_(grad)


def _encoder(seed: int, d_model=12, h=3, d_ff=7) -> EncoderLayer:
    torch.manual_seed(seed)
    return EncoderLayer(d_model, h, d_ff).double()


def _decoder(seed: int, d_model=12, h=3, d_ff=11) -> DecoderLayer:
    torch.manual_seed(seed)
    return DecoderLayer(d_model, h, d_ff).double()


# ---------------------------------------------------------------- masks


def test_causal_mask():
    assert causal_mask(3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]
    assert causal_mask(1).dtype == torch.bool


def test_padding_mask():
    got = padding_mask(torch.tensor([2, 0, 3]), 3)
    assert got.tolist() == [[True, True, False], [False, False, False], [True, True, True]]
    assert got.dtype == torch.bool


# ---------------------------------------------------------------- against torch's layers


def test_encoder_matches_torch_with_key_padding_mask():
    ours = _encoder(0)
    theirs = to_torch_encoder_layer(ours)
    x, x2 = _randn(1, 3, 6, 12, grad=True), _randn(1, 3, 6, 12, grad=True)
    pad = padding_mask(torch.tensor([6, 4, 1]), 6)
    out, their_out = ours(x, pad), theirs(x2, src_key_padding_mask=~pad)
    torch.testing.assert_close(out, their_out)
    G = _randn(2, *out.shape)
    (out * G).sum().backward()
    (their_out * G).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_encoder_matches_torch_fast_path_at_real_tokens():
    """In eval mode without gradients torch may take its fused path, which zeroes padded rows;
    real tokens must agree either way."""
    ours = _encoder(3)
    theirs = to_torch_encoder_layer(ours).eval()
    x = _randn(4, 2, 5, 12)
    pad = padding_mask(torch.tensor([5, 2]), 5)
    with torch.no_grad():
        out, their_out = ours(x, pad), theirs(x, src_key_padding_mask=~pad)
    torch.testing.assert_close(out[pad], their_out[pad])


def test_decoder_matches_torch_with_masks():
    ours = _decoder(5)
    theirs = to_torch_decoder_layer(ours)
    y, memory = _randn(6, 3, 5, 12, grad=True), _randn(7, 3, 8, 12, grad=True)
    y2, memory2 = (t.detach().clone().requires_grad_(True) for t in (y, memory))
    tgt_pad = padding_mask(torch.tensor([5, 3, 1]), 5)
    memory_pad = padding_mask(torch.tensor([8, 2, 6]), 8)
    out, cross_weights = ours(y, memory, tgt_pad, memory_pad)
    their_out = theirs(
        y2,
        memory2,
        tgt_mask=~causal_mask(5),
        tgt_key_padding_mask=~tgt_pad,
        memory_key_padding_mask=~memory_pad,
    )
    torch.testing.assert_close(out, their_out)
    assert cross_weights.shape == (3, 3, 5, 8)
    assert torch.all(cross_weights[~memory_pad[:, None, None, :].expand_as(cross_weights)] == 0)
    G = _randn(8, *out.shape)
    (out * G).sum().backward()
    (their_out * G).sum().backward()
    torch.testing.assert_close(y.grad, y2.grad)
    torch.testing.assert_close(memory.grad, memory2.grad)


def test_from_torch_round_trips():
    torch.manual_seed(9)
    kwargs = {"dropout": 0.0, "batch_first": True, "dtype": torch.float64}
    enc = nn.TransformerEncoderLayer(10, 2, 6, **kwargs)
    dec = nn.TransformerDecoderLayer(10, 2, 6, **kwargs)
    x, m = _randn(10, 2, 4, 10), _randn(11, 2, 3, 10)
    torch.testing.assert_close(from_torch_encoder_layer(enc)(x), enc(x))
    torch.testing.assert_close(from_torch_decoder_layer(dec)(x, m)[0], dec(x, m, tgt_mask=~causal_mask(4)))


def test_gradcheck_float64():
    enc, dec = _encoder(12, 4, 2, 3), _decoder(13, 4, 2, 3)
    x, m = _randn(14, 2, 3, 4, grad=True), _randn(15, 2, 2, 4, grad=True)
    pad = padding_mask(torch.tensor([3, 2]), 3)
    assert torch.autograd.gradcheck(lambda a: enc(a, pad), (x,))
    assert torch.autograd.gradcheck(lambda a, b: dec(a, b, pad)[0], (x, m))


# ---------------------------------------------------------------- properties


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    n_tgt=st.integers(2, 7),
    n_src=st.integers(1, 6),
    data=st.data(),
)
def test_decoder_is_causal(seed, n_tgt, n_src, data):
    """Changing target tokens after position t leaves outputs and cross weights 0..t unchanged."""
    cut = data.draw(st.integers(0, n_tgt - 2))
    layer = _decoder(seed, 8, 2, 5)
    y, memory = _randn(seed, 2, n_tgt, 8), _randn(seed + 1, 2, n_src, 8)
    y_changed = y.clone()
    y_changed[:, cut + 1 :] = _randn(seed + 2, 2, n_tgt - cut - 1, 8)
    with torch.no_grad():
        out, weights = layer(y, memory)
        out2, weights2 = layer(y_changed, memory)
    torch.testing.assert_close(out2[:, : cut + 1], out[:, : cut + 1])
    torch.testing.assert_close(weights2[:, :, : cut + 1], weights[:, :, : cut + 1])
    assert not torch.allclose(out2[:, cut + 1 :], out[:, cut + 1 :])


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7), data=st.data())
def test_padding_tokens_do_not_move_real_outputs(seed, n, data):
    lengths = torch.tensor(data.draw(st.lists(st.integers(1, n), min_size=3, max_size=3)))
    pad = padding_mask(lengths, n)  # (3, n)
    real = pad[..., None]  # (3, n, 1)
    x, x_noise = _randn(seed, 3, n, 8), _randn(seed + 1, 3, n, 8)
    x_changed = torch.where(real, x, x_noise)
    encoder, decoder = _encoder(seed, 8, 2, 5), _decoder(seed, 8, 2, 5)
    y = _randn(seed + 2, 3, 4, 8)
    with torch.no_grad():
        torch.testing.assert_close(encoder(x_changed, pad)[pad], encoder(x, pad)[pad])
        torch.testing.assert_close(decoder(y, x_changed, None, pad), decoder(y, x, None, pad))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 7))
def test_encoder_is_permutation_equivariant_without_mask(seed, n):
    layer = _encoder(seed, 8, 2, 5)
    x = _randn(seed, 2, n, 8)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(layer(x[:, perm]), layer(x)[:, perm])


# ---------------------------------------------------------------- the exercise specs

CASES = notebook_checks("05_transformer_attention")


@pytest.mark.parametrize("name,seed,params", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_reference_passes_every_notebook_check(name, seed, params):
    check(name, REFERENCE[name.split("__")[0]], seed=seed, **params)


def test_every_classic_bug_is_named_by_some_notebook_case():
    assert_bugs_caught("05_transformer_attention", [e for e in EXERCISES if e.bugs])


def test_a_layer_with_wrong_submodule_names_is_told_the_contract():
    class Misnamed(nn.Module):
        def __init__(self, d_model, num_heads, d_ff):
            super().__init__()
            self.attention = nn.Linear(d_model, d_model)

    with pytest.raises(AssertionError, match="self_attn"):
        check("EncoderLayer", Misnamed, seed=0)
