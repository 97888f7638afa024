"""Chapter 4: multi-head attention against torch's nn.MultiheadAttention, its properties, and
the exercise specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from grader.checks import check
from grader.exercises.ch04 import EXERCISES
from grader.reference import MultiHeadAttention, merge_heads, split_heads
from grader.reference.multi_head import (
    copy_weights_from_torch,
    to_torch_multihead,
    torch_attn_mask,
)
from tests.spec_helpers import assert_bugs_caught, notebook_checks
from tests.strategies import examples, float_arrays, layer_inputs, permutations, seeded_torch

pytestmark = pytest.mark.ch04

REFERENCE = {"split_heads": split_heads, "merge_heads": merge_heads}


def _module(seed: int, d_model: int = 12, num_heads: int = 3) -> MultiHeadAttention:
    with seeded_torch(seed):
        return MultiHeadAttention(d_model, num_heads).double()


def _qkv(seed: int, B: int = 2, n_q: int = 5, n_k: int = 7, d_model: int = 12, grad=False):
    g = torch.Generator().manual_seed(seed)
    return tuple(
        torch.randn(B, n, d_model, generator=g, dtype=torch.float64).requires_grad_(grad)
        for n in (n_q, n_k, n_k)
    )


# ---------------------------------------------------------------- against nn.MultiheadAttention


@pytest.mark.parametrize("mask_kind", [None, "causal", "random_per_head", "padding"])
def test_matches_nn_multihead_attention(mask_kind):
    B, n_q, n_k, h, d_model = 2, 5, 7, 3, 12
    ours = _module(0, d_model, h)
    theirs = to_torch_multihead(ours)
    q, k, v = _qkv(1, B, n_q, n_k, d_model, grad=True)
    q2, k2, v2 = (t.detach().clone().requires_grad_(True) for t in (q, k, v))
    mask, kwargs = None, {}
    if mask_kind == "causal":
        mask = torch.ones(n_q, n_k, dtype=torch.bool).tril()
        kwargs = {"attn_mask": ~mask}
    elif mask_kind == "random_per_head":
        mask = torch.rand(B, h, n_q, n_k, generator=torch.Generator().manual_seed(2)) > 0.3
        mask[..., 0] = True
        kwargs = {"attn_mask": torch_attn_mask(mask, B, h, n_q, n_k)}
    elif mask_kind == "padding":
        real = torch.arange(n_k) < torch.tensor([7, 4])[:, None]  # (B, n_k)
        mask = real[:, None, None, :]
        kwargs = {"key_padding_mask": ~real}  # torch: True = ignore
    out, weights = ours(q, k, v, mask)
    their_out, their_weights = theirs(q2, k2, v2, average_attn_weights=False, **kwargs)
    torch.testing.assert_close(out, their_out)
    torch.testing.assert_close(weights, their_weights)
    G = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=out.dtype)
    (out * G).sum().backward()
    (their_out * G).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad)


def test_copy_from_torch_round_trip():
    with seeded_torch(3):
        theirs = nn.MultiheadAttention(10, 5, batch_first=True, dtype=torch.float64)
    ours = _module(4, 10, 5)
    copy_weights_from_torch(theirs, ours)
    q, k, v = _qkv(5, 3, 2, 4, 10)
    torch.testing.assert_close(ours(q, k, v)[0], theirs(q, k, v)[0])
    # nn.Linear holds W.T: the row-vector projection X @ W equals W_q(X) with W = weight.T
    W_q = theirs.in_proj_weight[:10].T
    torch.testing.assert_close(ours.W_q(q), q @ W_q + theirs.in_proj_bias[:10])


def test_fully_masked_query_gives_zero_attention_and_torch_gives_nan():
    """Ours: all-zero weights and output = W_o's bias. nn.MultiheadAttention (need_weights=True
    path): NaN. The chapter's page demonstrates this pitfall; this test says if it goes away."""
    ours = _module(6, 8, 2)
    theirs = to_torch_multihead(ours)
    q, k, v = _qkv(7, 1, 3, 4, 8)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may see nothing
    out, weights = ours(q, k, v, mask)
    assert torch.all(weights[:, :, 1] == 0)
    torch.testing.assert_close(out[0, 1], ours.W_o.bias.detach())
    assert torch.isfinite(out).all()
    with torch.no_grad():
        their_out, _ = theirs(q, k, v, attn_mask=~mask, need_weights=True)
    assert torch.isnan(their_out[0, 1]).all()
    torch.testing.assert_close(their_out[0, [0, 2]], out[0, [0, 2]].detach())


def test_gradcheck_float64_with_a_fully_masked_row():
    ours = _module(8, 6, 2)
    q, k, v = _qkv(9, 2, 3, 4, 6, grad=True)
    mask = torch.rand(2, 1, 3, 4, generator=torch.Generator().manual_seed(1)) > 0.4
    mask[:, :, 0] = False
    mask[:, :, 1:, 0] = True
    assert torch.autograd.gradcheck(lambda a, b, c: ours(a, b, c, mask)[0], (q, k, v))


# ---------------------------------------------------------------- properties

sizes = st.integers(1, 5)


@st.composite
def split_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, int]:
    """(X, h): X (B, n, h * d_head) with sizes in 1..5."""
    B, n, h, d_head = (draw(sizes) for _ in range(4))
    return torch.from_numpy(draw(float_arrays((B, n, h * d_head), 1.0))), h


@given(split_inputs())
def test_split_then_merge_is_the_identity(inputs):
    X, h = inputs
    B, n, d_model = X.shape
    d_head = d_model // h
    heads = split_heads(X, h)
    assert heads.shape == (B, h, n, d_head)
    for i in range(h):  # head i holds the contiguous block of columns i*d_head ...
        assert torch.equal(heads[:, i], X[..., i * d_head : (i + 1) * d_head])
    assert torch.equal(merge_heads(heads), X)


@st.composite
def self_attention_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, np.ndarray]:
    """(x, perm): x (2, n, 8) with n in 2..7, perm a permutation of its n tokens."""
    n = draw(st.integers(2, 7))
    return draw(layer_inputs((2, n, 8))), draw(permutations(n))


# each example runs a layer four times: fewer examples
@settings(max_examples=examples(25))
@given(weight_seed=st.integers(0, 2), h=st.sampled_from([1, 2, 4]), inputs=self_attention_inputs())
def test_self_attention_is_permutation_equivariant(weight_seed, h, inputs):
    """Without a mask, permuting the tokens permutes the outputs and nothing else.

    The layer's weights come from one of three seeds: the property holds for any weights, and
    what Hypothesis should shrink is the input and the permutation.
    """
    x, perm = inputs
    ours = _module(weight_seed, 8, h)
    with torch.no_grad():
        out, weights = ours(x, x, x)
        out_p, weights_p = ours(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(weights_p, weights[:, :, perm][..., perm])


@pytest.mark.parametrize("d_model", [8, 24, 60])
def test_parameter_count_does_not_depend_on_the_number_of_heads(d_model):
    counts = {
        h: sum(p.numel() for p in MultiHeadAttention(d_model, h).parameters())
        for h in (1, 2, 4)
        if d_model % h == 0
    }
    assert set(counts.values()) == {4 * d_model * d_model + 4 * d_model}


def test_rejects_a_d_model_not_divisible_by_the_heads():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------- the exercise specs

CASES = notebook_checks("04_multi_head")


@pytest.mark.parametrize("name,seed,params", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_reference_passes_every_notebook_check(name, seed, params):
    learner = REFERENCE.get(name.split("__")[0], MultiHeadAttention)
    check(name, learner, seed=seed, **params)


def test_every_classic_bug_is_named_by_some_notebook_case():
    assert_bugs_caught("04_multi_head", [e for e in EXERCISES if e.bugs])


def test_a_wrong_module_fails_with_the_contract_in_the_message():
    class NoOutputProjection(nn.Module):
        def __init__(self, d_model, num_heads, bias=True):
            super().__init__()
            self.W_q = nn.Linear(d_model, d_model)

    with pytest.raises(AssertionError, match="output projection"):
        check("MultiHeadAttention", NoOutputProjection, seed=0)
