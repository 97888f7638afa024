"""Chapter 5: masks, encoder and decoder layers against torch's nn.TransformerEncoderLayer /
nn.TransformerDecoderLayer, causality and padding properties, and the exercise specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
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
from tests.strategies import examples, float_arrays, layer_inputs, permutations, seeded_torch

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
    with seeded_torch(seed):
        return EncoderLayer(d_model, h, d_ff).double()


def _decoder(seed: int, d_model=12, h=3, d_ff=11) -> DecoderLayer:
    with seeded_torch(seed):
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
    kwargs = {"dropout": 0.0, "batch_first": True, "dtype": torch.float64}
    with seeded_torch(9):
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


# The layers' weights come from one of three seeds (``weight_seed``): every property holds for
# any weights, and what Hypothesis should shrink is the input. Each example runs one or two
# layers twice, so these tests ask for fewer examples than the profile's.


@st.composite
def causal_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    """(y, memory, cut, y_changed): y (2, n_tgt, 8) with n_tgt in 2..7, memory (2, n_src, 8) with
    n_src in 1..6, and y_changed equal to y up to position cut, moved by 0.5 to 2 in every
    entry after it (so that the outputs after the cut must move)."""
    n_tgt, n_src = draw(st.integers(2, 7)), draw(st.integers(1, 6))
    cut = draw(st.integers(0, n_tgt - 2))
    y, memory = draw(layer_inputs((2, n_tgt, 8))), draw(layer_inputs((2, n_src, 8)))
    step = st.floats(0.5, 2.0, allow_nan=False, allow_infinity=False, width=64)
    sign = draw(st.sampled_from([-1.0, 1.0]))
    shift = torch.from_numpy(draw(arrays(np.float64, (2, n_tgt - cut - 1, 8), elements=step)))
    y_changed = y.clone()
    y_changed[:, cut + 1 :] += sign * shift
    return y, memory, cut, y_changed


@settings(max_examples=examples(25))
@given(weight_seed=st.integers(0, 2), inputs=causal_inputs())
def test_decoder_is_causal(weight_seed, inputs):
    """Changing target tokens after position t leaves outputs and cross weights 0..t unchanged."""
    y, memory, cut, y_changed = inputs
    layer = _decoder(weight_seed, 8, 2, 5)
    with torch.no_grad():
        out, weights = layer(y, memory)
        out2, weights2 = layer(y_changed, memory)
    torch.testing.assert_close(out2[:, : cut + 1], out[:, : cut + 1])
    torch.testing.assert_close(weights2[:, :, : cut + 1], weights[:, :, : cut + 1])
    assert not torch.allclose(out2[:, cut + 1 :], out[:, cut + 1 :])


@st.composite
def padded_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, ...]:
    """(lengths, x, x_noise, y): 3 sentences of n in 2..7 tokens with lengths in 1..n,
    x and x_noise (3, n, 8), a decoder input y (3, 4, 8)."""
    n = draw(st.integers(2, 7))
    lengths = torch.tensor(draw(st.lists(st.integers(1, n), min_size=3, max_size=3)))
    x, x_noise = draw(layer_inputs((3, n, 8))), draw(float_arrays((3, n, 8), 3.0))
    return lengths, x, torch.from_numpy(x_noise), draw(layer_inputs((3, 4, 8)))


@settings(max_examples=examples(25))
@given(weight_seed=st.integers(0, 2), inputs=padded_inputs())
def test_padding_tokens_do_not_move_real_outputs(weight_seed, inputs):
    lengths, x, x_noise, y = inputs
    n = x.shape[1]
    pad = padding_mask(lengths, n)  # (3, n)
    real = pad[..., None]  # (3, n, 1)
    x_changed = torch.where(real, x, x_noise)
    encoder, decoder = _encoder(weight_seed, 8, 2, 5), _decoder(weight_seed, 8, 2, 5)
    with torch.no_grad():
        torch.testing.assert_close(encoder(x_changed, pad)[pad], encoder(x, pad)[pad])
        torch.testing.assert_close(decoder(y, x_changed, None, pad), decoder(y, x, None, pad))


@st.composite
def tokens_and_permutation(draw: st.DrawFn) -> tuple[torch.Tensor, np.ndarray]:
    """(x, perm): x (2, n, 8) with n in 2..7, perm a permutation of its n tokens."""
    n = draw(st.integers(2, 7))
    return draw(layer_inputs((2, n, 8))), draw(permutations(n))


@settings(max_examples=examples(20))
@given(weight_seed=st.integers(0, 2), inputs=tokens_and_permutation())
def test_encoder_is_permutation_equivariant_without_mask(weight_seed, inputs):
    x, perm = inputs
    layer = _encoder(weight_seed, 8, 2, 5)
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
