"""Chapter 2: queries, keys and values against torch, their properties, and the exercise specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes, arrays

from attention_learner.cases import get_case
from attention_learner.recording import drawn_seed
from grader.checks import check
from grader.exercises.ch02 import EXERCISES
from grader.reference import softmax
from grader.reference.qkv import (
    attend,
    dot_product_attention,
    dot_scores,
    project_qkv,
    pronoun_example,
)
from tests.spec_helpers import assert_bugs_caught, notebook_checks
from tests.strategies import attention_inputs, bounded, permutations

pytestmark = pytest.mark.ch02

REFERENCE = {
    "dot_scores": dot_scores,
    "softmax": softmax,
    "attend": attend,
    "project_qkv": project_qkv,
    "dot_product_attention": dot_product_attention,
}

finite = bounded(1e3)


def _qkv(seed: int, n_q: int = 4, n_k: int = 6, d_k: int = 3, d_v: int = 5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n_q, d_k)), rng.normal(size=(n_k, d_k)), rng.normal(size=(n_k, d_v))


# ---------------------------------------------------------------- softmax


@given(z=arrays(np.float64, array_shapes(min_dims=1, max_dims=3, max_side=5), elements=finite))
def test_softmax_matches_torch_on_every_axis(z):
    for axis in range(-z.ndim, z.ndim):
        expected = torch.softmax(torch.tensor(z), dim=axis).numpy()
        np.testing.assert_allclose(softmax(z, axis=axis), expected, atol=1e-12)


@given(
    z=arrays(np.float64, array_shapes(min_dims=1, max_dims=3, max_side=5), elements=finite),
    shift=st.floats(-1e6, 1e6),
)
def test_softmax_is_a_distribution_and_shift_invariant(z, shift):
    p = softmax(z, axis=-1)
    assert np.all(p >= 0) and np.allclose(p.sum(axis=-1), 1.0)
    np.testing.assert_allclose(softmax(z + shift, axis=-1), p, atol=1e-6)


def test_softmax_survives_huge_and_tiny_logits_where_the_formula_fails():
    z = np.array([1000.0, 1001.0, 1002.0])
    with np.errstate(all="ignore"):
        naive = np.exp(z) / np.exp(z).sum()
    assert np.isnan(naive).all()
    np.testing.assert_allclose(softmax(z), softmax(z - 1000.0))
    np.testing.assert_allclose(softmax(-z), softmax(-z + 1000.0))


# ---------------------------------------------------------------- scores, attend, projections


def test_dot_scores_are_dot_products():
    q, K, _ = _qkv(0)
    np.testing.assert_allclose(dot_scores(q[0], K), [np.dot(q[0], k) for k in K])


def test_attend_matches_torch():
    Q, K, V = _qkv(1)
    context, weights = attend(Q[0], K, V)
    w = torch.softmax(torch.tensor(K) @ torch.tensor(Q[0]), dim=0)
    np.testing.assert_allclose(weights, w.numpy(), atol=1e-12)
    np.testing.assert_allclose(context, (w @ torch.tensor(V)).numpy(), atol=1e-12)


def test_project_qkv_matches_nn_linear_holding_the_transpose():
    rng = np.random.default_rng(2)
    X, W_q, W_k, W_v = (rng.normal(size=s) for s in ((5, 7), (7, 3), (7, 3), (7, 4)))
    for W, got in zip((W_q, W_k, W_v), project_qkv(X, W_q, W_k, W_v), strict=True):
        linear = torch.nn.Linear(7, W.shape[1], bias=False, dtype=torch.float64)
        with torch.no_grad():
            linear.weight.copy_(torch.tensor(W.T))  # nn.Linear computes x @ weight.T
            np.testing.assert_allclose(got, linear(torch.tensor(X)).numpy(), atol=1e-12)


def test_dot_product_attention_matches_torch_sdpa_with_scale_one():
    Q, K, V = _qkv(3, n_q=4, n_k=7, d_k=3, d_v=5)
    out, weights = dot_product_attention(Q, K, V)
    expected = F.scaled_dot_product_attention(*(torch.tensor(a) for a in (Q, K, V)), scale=1.0)
    np.testing.assert_allclose(out, expected.numpy(), atol=1e-12)
    assert weights.shape == (4, 7) and np.allclose(weights.sum(axis=-1), 1.0)


def test_dot_product_attention_rows_are_attend_per_query():
    Q, K, V = _qkv(4)
    out, weights = dot_product_attention(Q, K, V)
    for i, q in enumerate(Q):
        context, w = attend(q, K, V)
        np.testing.assert_allclose(out[i], context, atol=1e-12)
        np.testing.assert_allclose(weights[i], w, atol=1e-12)


@given(attention_inputs(with_mask=False, batched=False), st.data())
def test_dot_product_attention_is_permutation_equivariant(inputs, data):
    """Permuting the queries permutes the output rows; permuting key-value pairs changes nothing."""
    Q, K, V, _ = inputs  # (n_q, d_k), (n_k, d_k), (n_k, d_v)
    pq, pk = data.draw(permutations(len(Q)), "pq"), data.draw(permutations(len(K)), "pk")
    out, weights = dot_product_attention(Q, K, V)
    out_q, _ = dot_product_attention(Q[pq], K, V)
    out_k, weights_k = dot_product_attention(Q, K[pk], V[pk])
    np.testing.assert_allclose(out_q, out[pq], atol=1e-12)
    np.testing.assert_allclose(out_k, out, atol=1e-12)
    np.testing.assert_allclose(weights_k, weights[:, pk], atol=1e-12)


# ---------------------------------------------------------------- the pronoun example


@pytest.mark.parametrize(("adjective", "antecedent"), [("wide", "street"), ("tired", "cat")])
def test_the_pronoun_attends_most_to_its_antecedent(adjective, antecedent):
    ex = pronoun_example(adjective)
    Q, K, V = project_qkv(ex.X, ex.W_q, ex.W_k, ex.W_v)
    _, weights = attend(Q[ex.index("it")], K, V)
    assert ex.tokens[int(np.argmax(weights))] == antecedent
    assert weights[ex.index(antecedent)] > 0.5


# ---------------------------------------------------------------- the exercise specs


def _t(a: np.ndarray) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64))


def _torch_attention(Q, K, V):
    """softmax(Q K^T) V by torch's own scaled_dot_product_attention at scale 1, and its weights."""
    Q, K, V = _t(Q), _t(K), _t(V)
    return F.scaled_dot_product_attention(Q, K, V, scale=1.0).numpy(), torch.softmax(Q @ K.T, -1).numpy()


INDEPENDENT = {
    "dot_scores": lambda q, K: torch.mv(_t(K), _t(q)).numpy(),
    "softmax": lambda z, axis=-1: torch.softmax(_t(z), dim=axis).numpy(),
    "attend": lambda q, K, V: tuple(x[0] for x in _torch_attention(np.asarray(q)[None], K, V)),
    "project_qkv": lambda X, *Ws: tuple(F.linear(_t(X), _t(W).T).numpy() for W in Ws),
    "dot_product_attention": _torch_attention,
}


@pytest.mark.parametrize("name", list(REFERENCE))
def test_reference_passes_every_notebook_case(name):
    """On the inputs of every notebook case, the reference agrees with torch's own functions
    (softmax, mv, linear, scaled_dot_product_attention at scale 1), and passes the case itself."""
    case, compared = get_case(name), 0
    for exercise, seed, params in notebook_checks("02_queries_keys_values"):
        if exercise == name:
            inputs = case.make_inputs(np.random.default_rng(drawn_seed(name, seed, params)), **params)
            ours, theirs = case.call(REFERENCE[name], inputs), case.call(INDEPENDENT[name], inputs)
            assert ours.keys() == theirs.keys()
            for key in ours:
                np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-12, err_msg=key)
            check(name, REFERENCE[name], seed=seed, **params)
            compared += 1
    assert compared > 0, f"the notebook never checks {name}"


def test_every_listed_bug_is_caught_and_named_by_the_notebook_cases():
    assert_bugs_caught("02_queries_keys_values", EXERCISES)


def test_specs_cover_the_contract():
    assert [e.name for e in EXERCISES] == list(REFERENCE)
