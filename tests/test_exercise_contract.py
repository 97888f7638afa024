"""The decisions of ``docs/exercise_contract.md`` on the contract's open questions, each held.

For each decision: the reference keeps it, the notebook states it, a hidden test of the
source notebook exercises it, and an implementation that breaks it is not judged correct.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attention_learner.cases import ch06, ch07, get_case
from attention_learner.cell_rules import check_calls, is_test_cell, visible_part
from grader.exercises import get_exercise
from grader.paths import ROOT
from grader.reference import greedy_decode, online_softmax_attention, scaled_dot_product_attention
from tests.notebook_runner import source_notebook

DOC = " ".join((ROOT / "docs" / "exercise_contract.md").read_text(encoding="utf-8").split())


def hidden_checks(assignment: str, case: str) -> list[dict]:
    """The seed and params of every check(case, ...) call in the source's hidden tests."""
    return [
        {**params, "seed": seed}
        for cell in source_notebook(assignment).cells
        if is_test_cell(cell)
        for name, seed, params in check_calls(cell.source[len(visible_part(cell.source)) :])
        if name == case
    ]


def visible_checks_of(assignment: str, case: str) -> list[dict]:
    """The seed and params of every check(case, ...) call in the source's visible tests."""
    return [
        {**params, "seed": seed}
        for cell in source_notebook(assignment).cells
        if is_test_cell(cell)
        for name, seed, params in check_calls(visible_part(cell.source))
        if name == case
    ]


def notebook_text(assignment: str) -> str:
    return " ".join(
        " ".join(c.source.split()) for c in source_notebook(assignment).cells if c.cell_type == "markdown"
    )


def verdict(case_name: str, fn, **params) -> tuple[dict, dict]:
    """(expected, the function's outputs) of one case, as the judge compares them."""
    spec = get_exercise(case_name)
    inputs = spec.make_inputs(np.random.default_rng(params.pop("seed", 0)), **params)
    return spec.expected(inputs), get_case(case_name).call(fn, inputs)


def same(expected: dict, got: dict, case_name: str) -> bool:
    case = get_case(case_name)
    return all(
        np.allclose(np.asarray(got[k]), np.asarray(v), atol=case.atol, rtol=case.rtol)
        for k, v in expected.items()
    )


# ---------------------------------------------------------------- greedy_decode, max_len = 0


def test_greedy_decode_with_max_len_zero_returns_an_empty_int64_tensor():
    assert "`max_len = 0`" in DOC and "empty `(B, 0)` int64 tensor" in notebook_text("06_tiny_translator")
    params = next(p for p in hidden_checks("06_tiny_translator", "greedy_decode") if p["max_len"] == 0)
    expected, got = verdict("greedy_decode", greedy_decode, **params)
    assert np.shape(got["ids"]) == (len(params["stops"]), 0)
    assert bool(got["encode_at_most_once"]) and same(expected, got, "greedy_decode")
    # the stated rule has a visible case: the learner meets max_len = 0 before hand-in
    assert any(p.get("max_len") == 0 for p in visible_checks_of("06_tiny_translator", "greedy_decode"))
    inputs = get_exercise("greedy_decode").make_inputs(np.random.default_rng(0), max_len=0)
    ids = greedy_decode(
        ch06.toy_model(inputs), torch.from_numpy(inputs["src"]), 0, inputs["bos_id"], inputs["eos_id"]
    )
    assert ids.dtype == torch.int64 and ids.shape == (len(inputs["src"]), 0)


def test_greedy_decode_that_returns_a_list_is_told_the_type():
    def as_list(model, src, max_len, bos_id, eos_id):
        return greedy_decode(model, src, max_len, bos_id, eos_id).tolist()

    inputs = get_exercise("greedy_decode").make_inputs(np.random.default_rng(1))
    with pytest.raises(TypeError, match="int64 tensor of token ids, got a list"):
        ch06.call_decode(as_list, inputs)


def test_a_finished_sentence_feeds_back_eos():
    """The column fed back for a finished sentence is eos_id: the second decode call of a
    batch whose first sentence ended at once sees EOS after its BOS."""
    seen = []

    class Recorder:
        def encode(self, src):
            return src

        def decode(self, tgt, memory):
            seen.append(tgt.clone())
            logits = torch.zeros(*tgt.shape, 5, dtype=torch.float64)  # (B, t, V)
            logits[0, :, 4] = 1.0  # sentence 0: EOS (4) at once
            logits[1, :, 2] = 1.0  # sentence 1: token 2 for ever
            return logits

    ids = greedy_decode(Recorder(), torch.zeros(2, 3, dtype=torch.long), max_len=3, bos_id=0, eos_id=4)
    assert ids.tolist() == [[4, 4, 4], [2, 2, 2]]
    assert seen[1].tolist() == [[0, 4], [0, 2]]


# ---------------------------------------------------------------- masks with a last axis of 1


def test_online_softmax_takes_a_mask_whose_last_axis_is_one():
    assert "last axis of 1" in DOC and "np.broadcast_to(mask, (*mask.shape[:-1], n_k))" in notebook_text(
        "07_attention_at_scale"
    )
    params = next(
        p
        for p in hidden_checks("07_attention_at_scale", "online_softmax_attention")
        if p.get("mask") == "per_query"
    )
    spec = get_exercise("online_softmax_attention")
    inputs = spec.make_inputs(np.random.default_rng(params.pop("seed")), **params)
    mask = inputs["mask"]
    assert mask.shape[-1] == 1 and mask.any() and not mask.all()
    plain, _ = scaled_dot_product_attention(inputs["Q"], inputs["K"], inputs["V"], mask)
    blocked = online_softmax_attention(inputs["Q"], inputs["K"], inputs["V"], inputs["block_size"], mask)
    np.testing.assert_allclose(blocked, plain, atol=1e-12)

    def slices_the_mask(Q, K, V, block_size, mask=None):  # the notebook's earlier suggestion, as is
        outs, n_k = [], K.shape[-2]
        for start in range(0, n_k, block_size):
            s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2) / math.sqrt(Q.shape[-1])
            outs.append(np.where(mask[..., start : start + block_size], s, -np.inf))
        return online_softmax_attention(Q, K, V, block_size, mask) + 0 * sum(o.sum() for o in outs)

    with pytest.raises(ValueError):  # a slice of nothing beyond the first block does not broadcast
        ch07.call_online(slices_the_mask, dict(inputs))


def test_a_mask_whose_last_axis_is_one_has_a_visible_case_that_a_per_block_slice_fails():
    visible = [
        p
        for p in visible_checks_of("07_attention_at_scale", "online_softmax_attention")
        if p.get("mask") == "per_query"
    ]
    assert visible, "the stated rule (a mask's last axis may be 1) has no visible case"

    def sliced(Q, K, V, block_size, mask=None):  # correct but for the mask: sliced per key block
        n_k = K.shape[-2]
        m = np.full((*Q.shape[:-1], 1), -np.inf)  # (..., n_q, 1)
        total, acc = np.zeros_like(m), np.zeros((*Q.shape[:-1], V.shape[-1]))
        for start in range(0, n_k, block_size):
            s = Q @ np.swapaxes(K[..., start : start + block_size, :], -1, -2) / math.sqrt(Q.shape[-1])
            if mask is not None:
                s = np.where(mask[..., start : start + block_size], s, -np.inf)  # (..., n_q, b)
            m_new = np.maximum(m, s.max(-1, keepdims=True))
            shift = np.where(np.isfinite(m_new), m_new, 0.0)
            p, c = np.exp(s - shift), np.exp(np.where(np.isfinite(m), m - shift, 0.0))
            total, acc, m = (
                c * total + p.sum(-1, keepdims=True),
                c * acc + p @ V[..., start : start + block_size, :],
                m_new,
            )
        return np.divide(acc, total, out=np.zeros_like(acc), where=total > 0)

    from attention_learner.checks import check

    check("online_softmax_attention", sliced, seed=2, n_k=8, block_size=3, mask="random")  # passes
    params = dict(visible[0])
    with pytest.raises(AssertionError, match="online_softmax_attention raised ValueError"):
        check("online_softmax_attention", sliced, seed=params.pop("seed"), **params)


# ---------------------------------------------------------------- no (n_q, n_k) matrix, any library


def test_the_memory_rule_is_a_hidden_case_whose_matrix_exceeds_the_budget():
    assert "whatever the function computes with" in DOC
    assert "whatever you compute with" in notebook_text("07_attention_at_scale")
    assert hidden_checks("07_attention_at_scale", "online_softmax_attention__memory")
    inputs = get_exercise("online_softmax_attention__memory").make_inputs(np.random.default_rng(0))
    n_q, n_k = inputs["Q"].shape[-2], inputs["K"].shape[-2]
    assert n_q * n_k * 8 >= 2 * ch07.MEMORY_CASE_BUDGET  # the float64 score matrix cannot fit
    assert n_q * inputs["block_size"] * 8 < ch07.MEMORY_CASE_BUDGET / 8  # one block of scores can
