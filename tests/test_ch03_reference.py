"""Chapter 3's reference against PyTorch's own attention, and by its properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from grader.reference import (
    masked_softmax,
    scaled_dot_product_attention,
    scaled_dot_product_attention_torch,
    softmax,
    softmax_jacobian,
)
from tests.strategies import attention_inputs, bounded, examples, float_arrays, permutations

pytestmark = pytest.mark.ch03


def _t(a):
    return None if a is None else torch.tensor(a)


@given(attention_inputs())
def test_numpy_reference_equals_torch_sdpa(inputs):
    Q, K, V, mask = inputs
    out, weights = scaled_dot_product_attention(Q, K, V, mask)
    expected = F.scaled_dot_product_attention(_t(Q), _t(K), _t(V), attn_mask=_t(mask)).numpy()
    np.testing.assert_allclose(out, expected, atol=1e-10)
    assert np.all(np.isfinite(weights))


# a forward and a backward pass through two implementations per example: fewer examples
@settings(max_examples=examples(40))
@given(attention_inputs(), st.data())
def test_torch_reference_equals_torch_sdpa_with_gradients(inputs, data):
    Q, K, V, mask = inputs
    g = torch.from_numpy(data.draw(float_arrays((*Q.shape[:-1], V.shape[-1]), 1.0), "upstream"))
    ours = [torch.tensor(a, requires_grad=True) for a in (Q, K, V)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (Q, K, V)]
    out, _ = scaled_dot_product_attention_torch(*ours, _t(mask))
    ref = F.scaled_dot_product_attention(*theirs, attn_mask=_t(mask))
    (out * g).sum().backward()
    (ref * g).sum().backward()
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-8)
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-9, rtol=1e-7)


def test_torch_reference_passes_gradcheck_with_a_fully_masked_row():
    rng = np.random.default_rng(0)
    q, k, v = (torch.tensor(rng.normal(size=s), requires_grad=True) for s in ((3, 4), (5, 4), (5, 2)))
    mask = torch.tensor(rng.random((3, 5)) > 0.4)
    mask[1] = False
    assert torch.autograd.gradcheck(
        lambda a, b, c: scaled_dot_product_attention_torch(a, b, c, mask)[0], (q, k, v)
    )


@given(attention_inputs())
def test_weights_rows_sum_to_one_or_zero_and_respect_the_mask(inputs):
    Q, K, V, mask = inputs
    _, weights = scaled_dot_product_attention(Q, K, V, mask)
    sums = weights.sum(-1)
    visible = mask.any(-1)
    np.testing.assert_allclose(sums[visible], 1.0, atol=1e-12)
    np.testing.assert_allclose(sums[~visible], 0.0)
    assert np.all(weights[~mask] == 0.0)


@given(attention_inputs(with_mask=False), st.data())
def test_permuting_keys_and_values_together_changes_nothing(inputs, data):
    Q, K, V, _ = inputs
    perm = data.draw(permutations(K.shape[-2]), "perm")
    out, weights = scaled_dot_product_attention(Q, K, V)
    out_p, weights_p = scaled_dot_product_attention(Q, K[:, perm], V[:, perm])
    np.testing.assert_allclose(out, out_p, atol=1e-12)
    np.testing.assert_allclose(weights[..., perm], weights_p, atol=1e-12)


def test_default_scale_is_one_over_sqrt_dk():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(2, 9)), rng.normal(size=(3, 9)), rng.normal(size=(3, 4))
    a, _ = scaled_dot_product_attention(Q, K, V)
    b, _ = scaled_dot_product_attention(Q, K, V, scale=1 / math.sqrt(9))
    np.testing.assert_array_equal(a, b)


@given(arrays(np.float64, st.integers(1, 8), elements=bounded(1e300)), bounded(1e3))
def test_softmax_is_stable_and_shift_invariant(z, shift):
    p = softmax(z)
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-12 and np.all(p >= 0)
    if np.abs(z).max() < 1e6:
        np.testing.assert_allclose(softmax(z + shift), p, atol=1e-9)


def test_softmax_matches_torch_on_other_axes():
    z = np.random.default_rng(2).normal(size=(3, 4, 5)) * 30
    for axis in (0, 1, -1):
        np.testing.assert_allclose(softmax(z, axis=axis), torch.softmax(_t(z), dim=axis).numpy())


def test_masked_softmax_of_a_fully_masked_row_is_zero():
    p = masked_softmax(np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[True, False], [False, False]]))
    np.testing.assert_array_equal(p, [[1.0, 0.0], [0.0, 0.0]])


@given(st.sampled_from([0.1, 1.0, 50.0]).flatmap(lambda scale: float_arrays(st.integers(1, 7), scale)))
def test_softmax_jacobian_equals_autograd(z):
    z = torch.from_numpy(z)  # (n,)
    expected = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, 0), z).numpy()
    jac = softmax_jacobian(softmax(z.numpy()))
    np.testing.assert_allclose(jac, expected, atol=1e-12)
    np.testing.assert_allclose(jac.sum(0), 0.0, atol=1e-12)
    np.testing.assert_allclose(jac, jac.T)


def test_softmax_jacobian_rejects_matrices():
    with pytest.raises(ValueError, match="vector"):
        softmax_jacobian(np.eye(2))


def test_every_classic_bug_is_named_by_a_hidden_case():
    from grader.exercises.ch03 import EXERCISES
    from tests.spec_helpers import assert_bugs_caught

    assert_bugs_caught("03_scaled_dot_product", EXERCISES)
