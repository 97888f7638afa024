"""Chapter 6: positional encoding (values and properties), greedy decoding, the toy language
pair, the tiny Transformer against nn.Transformer with the same weights, the GRU baselines,
and the exercise specs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention_learner.cases.ch06 import ToyTranslator, make_decode_inputs
from grader.checks import check
from grader.exercises.ch06 import EXERCISES
from grader.reference import greedy_decode, positional_encoding
from grader.reference.seq2seq import TinyTranslator, to_torch_transformer
from grader.reference.seq2seq import greedy_decode as greedy_decode_with_padding
from grader.reference.transformer import causal_mask
from grader.reference.translator import (
    BOS,
    EOS,
    PAD,
    GRUTranslator,
    make_pairs,
    source_vocab,
    target_vocab,
    to_batch,
    token_accuracy,
    train_translator,
    translate,
)
from tests.spec_helpers import assert_bugs_caught, notebook_checks
from tests.strategies import examples

pytestmark = pytest.mark.ch06

REFERENCE = {"positional_encoding": positional_encoding, "greedy_decode": greedy_decode}


@pytest.fixture(autouse=True)
def one_thread():
    """These models are tiny: on a busy 2-core machine one thread is several times faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


# ---------------------------------------------------------------- positional encoding


def test_positional_encoding_values():
    pe = positional_encoding(3, 4)
    expected = np.array(
        [
            [0.0, 1.0, 0.0, 1.0],
            [np.sin(1), np.cos(1), np.sin(0.01), np.cos(0.01)],
            [np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)],
        ]
    )
    np.testing.assert_allclose(pe, expected, atol=1e-15)
    assert pe.dtype == np.float64


def test_odd_d_model_ends_with_a_sine():
    pe = positional_encoding(9, 5)  # pairs (0, 1), (2, 3) and a lone column 4
    p = np.arange(9)
    np.testing.assert_allclose(pe[:, 4], np.sin(p * 10000.0 ** (-4 / 5)), atol=1e-15)
    np.testing.assert_allclose(pe[:, 2], np.sin(p * 10000.0 ** (-2 / 5)), atol=1e-15)
    np.testing.assert_allclose(pe[:, 3], np.cos(p * 10000.0 ** (-2 / 5)), atol=1e-15)


def _rotation(k: int, d_model: int) -> np.ndarray:
    """The block-diagonal R(k) with PE[p + k] = PE[p] @ R(k) (row vectors), even d_model."""
    R = np.zeros((d_model, d_model))
    for i in range(d_model // 2):
        a = k * 10000.0 ** (-2 * i / d_model)
        # (sin x, cos x) @ [[cos a, -sin a], [sin a, cos a]] = (sin(x + a), cos(x + a))
        R[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]]
    return R


@given(n=st.integers(1, 80), half=st.integers(1, 24))
def test_entries_are_bounded_and_pairs_lie_on_unit_circles(n, half):
    pe = positional_encoding(n, 2 * half)
    assert np.abs(pe).max() <= 1.0
    np.testing.assert_allclose(pe[:, 0::2] ** 2 + pe[:, 1::2] ** 2, 1.0, atol=1e-12)


@given(p=st.integers(0, 200), k=st.integers(0, 60), half=st.integers(1, 16))
def test_a_shift_is_a_rotation_that_does_not_depend_on_the_position(p, k, half):
    d = 2 * half
    pe = positional_encoding(p + k + 1, d)
    np.testing.assert_allclose(pe[p + k], pe[p] @ _rotation(k, d), atol=1e-9)


@given(k=st.integers(0, 30), half=st.integers(1, 16))
def test_dot_products_depend_on_the_offset_only(k, half):
    d = 2 * half
    pe = positional_encoding(60 + k, d)
    dots = np.einsum("pd,pd->p", pe[:60], pe[k : 60 + k])  # (60,) PE[p] . PE[p + k]
    expected = np.cos(k * 10000.0 ** (-np.arange(0, d, 2) / d)).sum()
    np.testing.assert_allclose(dots, expected, atol=1e-9)


# ---------------------------------------------------------------- greedy decoding


def _one_by_one(model, src: torch.Tensor, max_len: int, bos: int, eos: int) -> list[list[int]]:
    """Each sentence decoded alone, with Python lists: the obvious, slow way."""
    out = []
    for b in range(src.shape[0]):
        memory = model.encode(src[b : b + 1])
        tokens = [bos]
        for _ in range(max_len):
            logits = model.decode(torch.tensor([tokens]), memory)  # (1, t, vocab)
            tokens.append(int(logits[0, -1].argmax()))
            if tokens[-1] == eos:
                break
        out.append(tokens[1:])
    return out


def _padded(rows: list[list[int]], eos: int) -> list[list[int]]:
    T = max(len(r) for r in rows)
    return [r + [eos] * (T - len(r)) for r in rows]


# The toy model's weights and sources come from the exercise's own case builder, from a seed, on
# purpose: it is the model the notebook's checks use. Each example decodes every sentence alone
# as well as together, so this test asks for fewer examples than the profile's.
@settings(max_examples=examples(25))
@given(
    seed=st.integers(0, 10**6),
    stops=st.lists(st.one_of(st.none(), st.integers(0, 7)), min_size=1, max_size=5),
    max_len=st.integers(1, 8),
)
def test_greedy_decode_equals_decoding_each_sentence_alone(seed, stops, max_len):
    inputs = make_decode_inputs(np.random.default_rng(seed), stops=stops, max_len=max_len)
    model = ToyTranslator(inputs["W_next"], inputs["W_pos"], inputs["W_src"])
    src = torch.from_numpy(inputs["src"])
    got = greedy_decode(model, src, max_len, inputs["bos_id"], inputs["eos_id"])
    expected = _padded(_one_by_one(model, src, max_len, inputs["bos_id"], inputs["eos_id"]), 2)
    assert got.dtype == torch.long
    assert got.tolist() == expected
    for row, stop in zip(got.tolist(), stops, strict=True):  # the toy ends where it was told
        if stop is not None and stop < max_len:
            assert row[stop] == 2 and 2 not in row[:stop]


def test_greedy_decode_of_a_transformer_does_not_depend_on_the_batch():
    torch.manual_seed(0)
    sv, tv = source_vocab(), target_vocab()
    model = TinyTranslator(len(sv), len(tv), 32, 4, 64, 1, PAD).eval()  # the book's translator
    pairs = make_pairs(6, seed=3)
    src, _, _ = to_batch(pairs, sv, tv)  # (6, n_src), sentences padded to the longest
    together = greedy_decode_with_padding(model, src, 12, BOS, EOS)
    for b in range(len(pairs)):
        n = int((src[b] != PAD).sum())
        alone = greedy_decode_with_padding(model, src[b : b + 1, :n], 12, BOS, EOS)[0]  # no padding at all
        assert together[b, : len(alone)].tolist() == alone.tolist()


# ---------------------------------------------------------------- the toy language pair


def test_translation_rules():
    assert translate("the street".split()) == ["la", "rue"]
    assert translate("the cat".split()) == ["le", "chat"]
    assert translate("the red car".split()) == ["la", "voiture", "rouge"]
    assert translate("a black cat sees the white house and the girl likes a green book".split()) == (
        "un chat noir voit la maison blanche et la fille aime un livre vert".split()
    )


def test_pairs_are_distinct_seeded_and_held_out():
    train = make_pairs(200, seed=1)
    assert make_pairs(200, seed=1) == train
    english = {tuple(e) for e, _ in train}
    assert len(english) == 200
    test = make_pairs(50, seed=2, exclude=english)
    assert not english & {tuple(e) for e, _ in test}


def test_teacher_forcing_shifts_the_target_right_by_one():
    sv, tv = source_vocab(), target_vocab()
    pairs = [("the cat sees the red car".split(), translate("the cat sees the red car".split()))]
    src, tgt_in, tgt_out = to_batch(pairs + make_pairs(3, seed=0), sv, tv)
    french = tv.encode(pairs[0][1])
    assert tgt_in[0, : len(french) + 1].tolist() == [BOS] + french
    assert tgt_out[0, : len(french) + 1].tolist() == french + [EOS]
    assert sv.decode(src[0]) == pairs[0][0]
    assert tv.decode(tgt_out[0]) == pairs[0][1]


def test_token_accuracy():
    assert token_accuracy(["le", "chat"], ["le", "chat"]) == 1.0
    assert token_accuracy(["le", "chien"], ["le", "chat"]) == 2 / 3
    assert token_accuracy(["le"], ["le", "chat"]) == 1 / 3


# ---------------------------------------------------------------- the models


def test_tiny_transformer_equals_nn_transformer_with_the_same_weights():
    torch.manual_seed(1)
    sv, tv = source_vocab(), target_vocab()
    model = (
        TinyTranslator(len(sv), len(tv), d_model=12, num_heads=4, d_ff=20, num_layers=2, pad_id=PAD)
        .double()
        .eval()
    )
    src, tgt_in, _ = to_batch(make_pairs(4, seed=5), sv, tv)  # padded batches
    theirs = to_torch_transformer(model).eval()
    n_tgt = tgt_in.shape[1]
    with torch.no_grad():
        ours = model(src, tgt_in)  # (B, n_tgt, vocab)
        out = theirs(
            model.embed(model.src_embed, src),
            model.embed(model.tgt_embed, tgt_in),
            tgt_mask=~causal_mask(n_tgt),
            src_key_padding_mask=src == PAD,
            tgt_key_padding_mask=tgt_in == PAD,
            memory_key_padding_mask=src == PAD,
        )
        logits = model.output_proj(out)
    real = tgt_in != PAD  # torch's fast paths may differ at padded positions only
    torch.testing.assert_close(logits[real], ours[real], atol=1e-10, rtol=1e-10)


def test_tiny_transformer_decoder_is_causal():
    torch.manual_seed(2)
    model = TinyTranslator(20, 15, 32, 4, 64, 1, PAD).double().eval()
    src = torch.randint(3, 20, (2, 6))
    tgt = torch.randint(3, 15, (2, 7))
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(3, 15, (2, 3))
    with torch.no_grad():
        memory, src_pad = model.encode(src), src != PAD
        before, after = model.decode(tgt, memory, src_pad), model.decode(changed, memory, src_pad)
    torch.testing.assert_close(after[:, :4], before[:, :4])
    assert model.cross_weights[0].shape == (2, 4, 7, 6)


@pytest.mark.parametrize("attention", [False, True])
def test_gru_translator_ignores_source_padding_and_reads_left_to_right(attention):
    torch.manual_seed(3)
    model = GRUTranslator(20, 15, hidden=8, attention=attention).double().eval()
    src = torch.tensor([[5, 6, 7, PAD, PAD], [8, 9, 10, 11, 12]])
    tgt = torch.randint(3, 15, (2, 6))
    with torch.no_grad():
        full = model.decode(tgt, model.encode(src))
        alone = model.decode(tgt[:1], model.encode(src[:1, :3]))  # sentence 0 without padding
        prefix = model.decode(tgt[:, :3], model.encode(src))
    torch.testing.assert_close(full[:1], alone)
    torch.testing.assert_close(full[:, :3], prefix)
    if attention:
        w = model.attention_weights  # (B, n_tgt, n_src) of the last call
        torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, dtype=torch.float64))
        assert float(w[0, :, 3:].abs().max()) == 0.0


@pytest.mark.slow
def test_training_is_deterministic_and_lowers_the_loss():
    sv, tv = source_vocab(), target_vocab()
    pairs = make_pairs(64, seed=4, clauses=(1,))
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = TinyTranslator(len(sv), len(tv), d_model=16, num_heads=2, d_ff=32, num_layers=1, pad_id=PAD)
        runs.append(train_translator(model, pairs, sv, tv, steps=12, batch_size=16, lr=1e-2))
    assert runs[0] == runs[1]
    assert np.mean(runs[0][-3:]) < np.mean(runs[0][:3])


# ---------------------------------------------------------------- the exercise specs

CASES = notebook_checks("06_tiny_translator")


@pytest.mark.parametrize("name,seed,params", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_reference_passes_every_notebook_check(name, seed, params):
    check(name, REFERENCE[name.split("__")[0]], seed=seed, **params)


def test_every_classic_bug_is_named_by_some_notebook_case():
    assert_bugs_caught("06_tiny_translator", [e for e in EXERCISES if e.bugs])


def test_the_hidden_cases_cover_the_edges():
    stops = [p.get("stops") for name, _, p in CASES if name == "greedy_decode"]
    flat = [s for case in stops if case for s in case]
    assert None in flat and 0 in flat  # max_len reached without EOS; EOS first
    assert any(case and len({s for s in case}) > 1 for case in stops)  # different ends
    sizes = [(p.get("n"), p.get("d_model")) for name, _, p in CASES if name == "positional_encoding"]
    assert any(d and d % 2 for _, d in sizes) and any(n == 1 for n, _ in sizes)
