"""Chapter 1: the RNN reference against torch, its properties, and the exercise specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from attention_learner.cases import get_case
from attention_learner.recording import drawn_seed
from grader.checks import check
from grader.exercises import get_exercise
from grader.exercises.ch01 import EXERCISES
from grader.reference.rnn import (
    GRUEncoderDecoder,
    jacobian_norms,
    random_rnn,
    random_rnn_jacobian_norms,
    rnn_forward,
    rnn_step,
    time_rnn_and_attention,
    train_copy_task,
)
from tests.spec_helpers import assert_bugs_caught, notebook_checks
from tests.strategies import float_arrays, seeded_torch

pytestmark = pytest.mark.ch01


# ---------------------------------------------------------------- the recurrence


def _random_rnn_inputs(seed: int, T: int = 6, d_in: int = 4, d_h: int = 5, gain: float = 1.0):
    rng = np.random.default_rng(seed)
    w = random_rnn(rng, d_in, d_h, gain)
    b = rng.normal(size=d_h)  # a non-zero bias, so that its convention is tested too
    return rng.normal(size=(T, d_in)), np.tanh(rng.normal(size=d_h)), w.W_xh, w.W_hh, b


def test_rnn_forward_matches_torch_rnn_with_copied_weights():
    X, h0, W_xh, W_hh, b = _random_rnn_inputs(0, T=9, d_in=3, d_h=7)
    rnn = torch.nn.RNN(3, 7, batch_first=True, dtype=torch.float64)
    with torch.no_grad():  # nn.RNN computes x W_ih^T + b_ih + h W_hh^T + b_hh
        rnn.weight_ih_l0.copy_(torch.tensor(W_xh.T))
        rnn.weight_hh_l0.copy_(torch.tensor(W_hh.T))
        rnn.bias_ih_l0.copy_(torch.tensor(b))
        rnn.bias_hh_l0.zero_()
        expected, _ = rnn(torch.tensor(X)[None], torch.tensor(h0)[None, None])  # (1, T, d_h)
    np.testing.assert_allclose(rnn_forward(X, h0, W_xh, W_hh, b), expected[0].numpy(), atol=1e-12)


def test_rnn_step_broadcasts_over_a_batch():
    X, h0, W_xh, W_hh, b = _random_rnn_inputs(1)
    H_prev = np.tanh(np.random.default_rng(2).normal(size=(6, 5)))  # (B, d_h)
    batched = rnn_step(X, H_prev, W_xh, W_hh, b)  # (B, d_h)
    rows = [rnn_step(x, h, W_xh, W_hh, b) for x, h in zip(X, H_prev, strict=True)]
    np.testing.assert_allclose(batched, np.stack(rows), atol=1e-14)


def test_rnn_forward_is_a_chain_of_steps():
    X, h0, W_xh, W_hh, b = _random_rnn_inputs(3)
    H = rnn_forward(X, h0, W_xh, W_hh, b)
    np.testing.assert_allclose(H[0], rnn_step(X[0], h0, W_xh, W_hh, b))
    for t in range(1, len(X)):
        np.testing.assert_allclose(H[t], rnn_step(X[t], H[t - 1], W_xh, W_hh, b))


# ---------------------------------------------------------------- the gradient through time


def _torch_jacobian_norms(X, h0, W_xh, W_hh, b) -> np.ndarray:
    """Spectral norms of d h_T / d h_{T-k} by autograd, re-running the last k steps from h_{T-k}."""
    X, W_xh, W_hh, b = (torch.tensor(a) for a in (X, W_xh, W_hh, b))
    states = [torch.tensor(h0)]
    for x_t in X:
        states.append(torch.tanh(x_t @ W_xh + states[-1] @ W_hh + b))
    T = len(X)

    def last_state_from(k: int):
        def run(h: torch.Tensor) -> torch.Tensor:
            for x_t in X[T - k :]:
                h = torch.tanh(x_t @ W_xh + h @ W_hh + b)
            return h

        return run

    norms = []
    for k in range(T):
        J = torch.autograd.functional.jacobian(last_state_from(k), states[T - k])  # (d_h, d_h)
        norms.append(torch.linalg.matrix_norm(J, ord=2).item())
    return np.array(norms)


@pytest.mark.parametrize("gain", [0.5, 1.0, 3.0])
def test_jacobian_norms_match_autograd(gain):
    X, h0, W_xh, W_hh, b = _random_rnn_inputs(4, T=10, d_in=3, d_h=6, gain=gain)
    H = rnn_forward(X, h0, W_xh, W_hh, b)
    np.testing.assert_allclose(
        jacobian_norms(H, W_hh), _torch_jacobian_norms(X, h0, W_xh, W_hh, b), rtol=1e-10
    )


@st.composite
def rnn_inputs(draw: st.DrawFn):
    """(X, h0, W_xh, W_hh, b) for T in 1..12 steps, d_in = 2, d_h in 1..6, as drawn arrays.

    W_hh's entries are bounded by a gain from a small set, so that both contracting and
    expanding recurrences appear; h0 lies in [-1, 1] like any tanh state.
    """
    T, d_h, d_in = draw(st.integers(1, 12)), draw(st.integers(1, 6)), 2
    gain = draw(st.sampled_from([0.1, 0.5, 1.0, 4.0]))
    return (
        draw(float_arrays((T, d_in), 3.0)),  # X (T, d_in)
        draw(float_arrays(d_h, 1.0)),  # h0 (d_h,)
        draw(float_arrays((d_in, d_h), 1.0)),  # W_xh (d_in, d_h)
        draw(float_arrays((d_h, d_h), gain)),  # W_hh (d_h, d_h)
        draw(float_arrays(d_h, 1.0)),  # b (d_h,)
    )


@given(rnn_inputs())
def test_jacobian_norms_are_bounded_by_powers_of_W_hh(inputs):
    """|tanh'| <= 1, so ||d h_T / d h_{T-k}|| <= ||W_hh||^k; entry 0 is exactly 1.

    Below float64's smallest normal number (2.2e-308) rounding is absolute, not relative (a
    norm of 3.3e-317 once came out 1.5e-7 of itself above its bound): that much is allowed."""
    X, h0, W_xh, W_hh, b = inputs
    T = len(X)
    norms = jacobian_norms(rnn_forward(X, h0, W_xh, W_hh, b), W_hh)
    bound = np.linalg.norm(W_hh, 2) ** np.arange(T)
    assert norms.shape == (T,) and norms[0] == 1.0
    assert np.all(norms >= 0) and np.all(norms <= bound * (1 + 1e-9) + np.finfo(np.float64).tiny)


def test_small_gains_vanish_and_large_gains_explode():
    small, large = random_rnn_jacobian_norms(0.5, T=30), random_rnn_jacobian_norms(3.0, T=30)
    assert small[-1] < 1e-6 < 1e3 < large[-1]


# ---------------------------------------------------------------- the page's measurements


def test_timings_are_positive_and_shaped():
    timings = time_rnn_and_attention([4, 8], d_model=8, repeats=1)
    assert timings.rnn.shape == timings.attention.shape == (2,)
    assert np.all(timings.rnn > 0) and np.all(timings.attention > 0)


def test_gru_encoder_decoder_shapes_and_a_short_training_run():
    with seeded_torch(0):
        model = GRUEncoderDecoder(vocab_size=5, d_embed=4, d_hidden=6)
    src = torch.randint(0, 5, (3, 7), generator=torch.Generator().manual_seed(1))  # (B, n)
    assert model(src, src).shape == (3, 7, 5)
    assert model.greedy(src, 4).shape == (3, 4)
    result = train_copy_task(max_length=4, vocab_size=3, d_hidden=8, steps=5, eval_size=8)
    assert result.accuracy.shape == (4,) and np.all((0 <= result.accuracy) & (result.accuracy <= 1))
    assert np.isfinite(result.losses).all()


# ---------------------------------------------------------------- the exercise specs


def _torch_rnn(W_xh: np.ndarray, W_hh: np.ndarray, b: np.ndarray) -> torch.nn.RNN:
    """torch's own tanh RNN holding these weights (torch computes x W_ih^T + h W_hh^T + b)."""
    rnn = torch.nn.RNN(W_xh.shape[0], W_xh.shape[1], nonlinearity="tanh", dtype=torch.float64)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(torch.tensor(W_xh).T)
        rnn.weight_hh_l0.copy_(torch.tensor(W_hh).T)
        rnn.bias_ih_l0.copy_(torch.tensor(b))
        rnn.bias_hh_l0.zero_()
    return rnn


def torch_rnn_step(x_t, h_prev, W_xh, W_hh, b):
    """One step of torch.nn.RNN, every leading batch dimension flattened into its batch."""
    batch = x_t.shape[:-1]
    x = torch.tensor(x_t).reshape(1, -1, x_t.shape[-1])  # (1 step, B, d_in)
    h = torch.tensor(h_prev).reshape(1, -1, h_prev.shape[-1])  # (1 layer, B, d_h)
    with torch.no_grad():
        _, h_next = _torch_rnn(W_xh, W_hh, b)(x, h)  # (1, B, d_h)
    return h_next.reshape(*batch, h_prev.shape[-1]).numpy()


def torch_rnn_forward(X, h0, W_xh, W_hh, b):
    """torch.nn.RNN over the whole sequence: H (T, d_h)."""
    with torch.no_grad():
        H, _ = _torch_rnn(W_xh, W_hh, b)(torch.tensor(X), torch.tensor(h0)[None])  # (T, d_h)
    return H.numpy()


def svd_jacobian_norms(H, W_hh):
    """||d h_T / d h_{T-k}||_2 by the chain rule written out (J_t = diag(1 - h_t^2) W_hh^T),
    each product built from the left and measured by torch's singular values."""
    H, W = torch.tensor(H), torch.tensor(W_hh)
    T, d_h = H.shape
    norms, product = [1.0], torch.eye(d_h, dtype=torch.float64)
    for k in range(1, T):
        product = product @ (torch.diag(1 - H[T - k] ** 2) @ W.T)  # (d_h, d_h)
        norms.append(float(torch.linalg.svdvals(product)[0]))
    return np.array(norms)


INDEPENDENT = {
    "rnn_step": torch_rnn_step,
    "rnn_forward": torch_rnn_forward,
    "jacobian_norms": svd_jacobian_norms,
}


@pytest.mark.parametrize("name", [e.name for e in EXERCISES])
def test_reference_passes_every_notebook_case(name):
    """On the inputs of every notebook case, the reference agrees with torch's RNN (or, for the
    norms, the chain rule measured by torch's SVD), and passes the case itself."""
    reference = {"rnn_step": rnn_step, "rnn_forward": rnn_forward, "jacobian_norms": jacobian_norms}
    case, compared = get_case(name), 0
    for exercise, seed, params in notebook_checks("01_rnn_bottlenecks"):
        if exercise == name:
            inputs = case.make_inputs(np.random.default_rng(drawn_seed(name, seed, params)), **params)
            ours, theirs = case.call(reference[name], inputs), case.call(INDEPENDENT[name], inputs)
            assert ours.keys() == theirs.keys()
            for key in ours:
                np.testing.assert_allclose(ours[key], theirs[key], rtol=1e-9, atol=1e-12)
            check(name, reference[name], seed=seed, **params)
            compared += 1
    assert compared > 0, f"the notebook never checks {name}"


def test_every_listed_bug_is_caught_and_named_by_the_notebook_cases():
    assert_bugs_caught("01_rnn_bottlenecks", EXERCISES)


def test_a_stub_is_reported_as_not_implemented():
    def rnn_step(*args):
        raise NotImplementedError()

    with pytest.raises(AssertionError, match="not implemented yet"):
        check("rnn_step", rnn_step, seed=0)


def test_specs_are_registered():
    assert {e.name for e in EXERCISES} == {"rnn_step", "rnn_forward", "jacobian_norms"}
    assert all(get_exercise(e.name) is e for e in EXERCISES)
