"""Chapter 8's reference against PyTorch's own pieces and by its properties: the padded loss
against F.cross_entropy, the assembled translator against nn.Transformer, one training step
against a step written with torch's loss, cached decoding against the uncached loop, and
sampling against its limits and its distribution."""

from __future__ import annotations

import ast
import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from attention_learner.cases import ch08 as cases
from attention_learner.cases.ch08 import language
from grader.reference import translator as chapter6
from grader.reference.seq2seq import (
    TinyTranslator,
    greedy_decode,
    greedy_decode_cached,
    parameter_counts,
    sample_next_token,
    shift_right,
    torch_transformer_logits,
    train_step,
    translation_loss,
    warmup_inverse_sqrt,
)
from tests.strategies import examples, seeded_torch

pytestmark = pytest.mark.ch08

# ---------------------------------------------------------------- strategies


@st.composite
def padded_batches(
    draw: st.DrawFn, vocab: int, pad_id: int, max_n: int = 7, batch: int | None = None
) -> torch.Tensor:
    """int64 (B, n): each row some ids other than pad_id, then padding (row 0 never padded)."""
    batch = draw(st.integers(1, 4)) if batch is None else batch
    lengths = [draw(st.integers(1, max_n))] + [draw(st.integers(1, max_n)) for _ in range(batch - 1)]
    lengths[0] = max(lengths)
    n = lengths[0]
    ids = draw(arrays(np.int64, (batch, n), elements=st.integers(0, vocab - 2)))
    ids = ids + (ids >= pad_id)  # never pad_id
    ids[np.arange(n) >= np.array(lengths)[:, None]] = pad_id
    return torch.from_numpy(ids)


def random_translator(seed: int, src_vocab=11, tgt_vocab=13, d_model=12, num_heads=3, d_ff=20, num_layers=2,
                      pad_id=0) -> TinyTranslator:  # fmt: skip
    """A float64 reference translator whose weights (LayerNorms and biases included) are all
    drawn from ``seed``, so that no parameter sits at a value that hides a mistake. It never
    predicts padding (a trained model never learns to): the uncached loop would read a
    predicted pad_id as padding, which no decoder input ever holds."""
    with seeded_torch(seed):
        model = TinyTranslator(src_vocab, tgt_vocab, d_model, num_heads, d_ff, num_layers, pad_id).double()
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "norm" in name and name.endswith("weight"):
                    p.copy_(1 + 0.2 * torch.randn_like(p))
                elif name.endswith("bias"):
                    p.copy_(0.1 * torch.randn_like(p))
            model.output_proj.bias[pad_id] = -1e4
    return model.eval()


# ---------------------------------------------------------------- shift_right


@given(padded_batches(vocab=9, pad_id=0), st.integers(0, 8))
def test_shift_right_puts_bos_first_and_drops_the_last_token(tgt, bos_id):
    out = shift_right(tgt, bos_id)
    assert out.shape == tgt.shape and out.dtype == torch.int64
    assert (out[:, 0] == bos_id).all()
    torch.testing.assert_close(out[:, 1:], tgt[:, :-1])


# ---------------------------------------------------------------- the loss


@st.composite
def loss_inputs(draw: st.DrawFn) -> tuple[torch.Tensor, torch.Tensor, int]:
    vocab = draw(st.integers(2, 9))
    pad_id = draw(st.integers(0, vocab - 1))
    targets = draw(padded_batches(vocab=vocab, pad_id=pad_id))
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0, 1000.0]))
    logits = draw(arrays(np.float64, (*targets.shape, vocab), elements=st.floats(-scale, scale)))
    return torch.from_numpy(logits), targets, pad_id


@given(loss_inputs(), st.sampled_from([0.0, 0.1, 0.5, 1.0]))
def test_the_loss_equals_torch_cross_entropy_value_and_gradient(inputs, eps):
    logits, targets, pad_id = inputs
    ours_in, theirs_in = logits.clone().requires_grad_(), logits.clone().requires_grad_()
    ours = translation_loss(ours_in, targets, pad_id, eps)
    flat = theirs_in.reshape(-1, logits.shape[-1])
    theirs = F.cross_entropy(flat, targets.reshape(-1), ignore_index=pad_id, label_smoothing=eps)
    assert ours.shape == () and torch.isfinite(ours)
    torch.testing.assert_close(ours, theirs, atol=1e-9, rtol=1e-9)
    ours.backward()
    theirs.backward()
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, atol=1e-12, rtol=1e-9)


@given(loss_inputs())
def test_padded_positions_do_not_count(inputs):
    logits, targets, pad_id = inputs
    moved = logits.clone()
    moved[targets == pad_id] = 1e3 * torch.randn_like(moved[targets == pad_id])
    torch.testing.assert_close(
        translation_loss(moved, targets, pad_id), translation_loss(logits, targets, pad_id)
    )


def test_the_loss_passes_gradcheck():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5, dtype=torch.float64, requires_grad=True)
    targets = torch.tensor([[1, 2, 3, 0], [4, 0, 0, 0]])
    assert torch.autograd.gradcheck(lambda z: translation_loss(z, targets, 0, 0.1), (logits,))


# ---------------------------------------------------------------- the assembled model


@settings(max_examples=examples(15), deadline=None)
@given(
    st.integers(0, 10**6),
    st.sampled_from([(8, 2), (12, 3), (12, 4), (10, 1)]),
    st.integers(1, 3),
    st.integers(0, 3),
    st.data(),
)
def test_the_translator_equals_nn_transformer(seed, sizes, num_layers, pad_id, data):
    d_model, num_heads = sizes
    model = random_translator(
        seed, d_model=d_model, num_heads=num_heads, num_layers=num_layers, pad_id=pad_id
    )
    src = data.draw(padded_batches(vocab=11, pad_id=pad_id))
    tgt_in = data.draw(padded_batches(vocab=13, pad_id=pad_id, batch=src.shape[0]))
    with torch.no_grad():
        ours = model(src, tgt_in)
        theirs = torch_transformer_logits(model, src, tgt_in)
        decoded = model.decode(tgt_in, model.encode(src), src != pad_id)
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=1e-8)
    torch.testing.assert_close(decoded, ours)


def test_padding_at_the_end_of_the_source_changes_nothing_and_the_future_is_unseen():
    model = random_translator(1)
    src = torch.tensor([[4, 5, 6, 7]])
    tgt_in = torch.tensor([[1, 3, 4, 5, 6]])
    with torch.no_grad():
        logits = model(src, tgt_in)
        padded = model(torch.tensor([[4, 5, 6, 7, 0, 0]]), tgt_in)
        target_padded = model(src, torch.tensor([[1, 3, 4, 5, 6, 0, 0]]))
        later_changed = model(src, torch.tensor([[1, 3, 4, 9, 9]]))
    torch.testing.assert_close(padded, logits)
    torch.testing.assert_close(target_padded[:, :5], logits)
    torch.testing.assert_close(later_changed[:, :3], logits[:, :3])
    assert not torch.allclose(later_changed[:, 3:], logits[:, 3:])


def test_embeddings_are_scaled_and_positions_added():
    model = random_translator(2)
    ids = torch.tensor([[3, 3, 3]])
    x = model.embed(model.tgt_embed, ids)
    row = model.tgt_embed.weight[3] * math.sqrt(model.d_model)
    pe = torch.from_numpy(chapter6.positional_encoding(3, model.d_model))
    torch.testing.assert_close(x[0], row + pe)


def test_parameter_counts_add_up_and_follow_the_formulas():
    d, h, d_ff, L, V_s, V_t = 32, 4, 64, 2, 29, 36
    model = TinyTranslator(V_s, V_t, d, h, d_ff, L, pad_id=0)
    counts = parameter_counts(model)
    assert sum(counts.values()) == sum(p.numel() for p in model.parameters())
    attention = 4 * (d * d + d)
    assert counts["encoder self-attention"] == L * attention == counts["decoder cross-attention"]
    assert counts["encoder feed-forward"] == L * (d * d_ff + d_ff + d_ff * d + d)
    assert counts["decoder LayerNorms"] == L * 3 * 2 * d
    assert counts["output projection"] == d * V_t + V_t
    assert counts["source embedding"] == V_s * d


# ---------------------------------------------------------------- one training step


def torch_step(model, optimizer, src, tgt, pad_id, bos_id):
    """The same step with torch's loss and the shift written out."""
    optimizer.zero_grad()
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], bos_id), tgt[:, :-1]], dim=1)
    logits = model(src, tgt_in)
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=pad_id)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss.item()


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_train_step_equals_a_step_with_torchs_loss(optimizer):
    inputs = cases.make_train_inputs(np.random.default_rng(3), optimizer=optimizer, lr=0.1)
    ours, theirs = cases.toy_model(inputs), cases.toy_model(inputs)
    opt_ours = cases.make_optimizer(optimizer, ours.parameters(), 0.1)
    opt_theirs = cases.make_optimizer(optimizer, theirs.parameters(), 0.1)
    for src, tgt in inputs["batches"]:
        src, tgt = torch.from_numpy(src.copy()), torch.from_numpy(tgt.copy())
        a = train_step(ours, opt_ours, src, tgt, inputs["pad_id"], inputs["bos_id"])
        b = torch_step(theirs, opt_theirs, src, tgt, inputs["pad_id"], inputs["bos_id"])
        assert isinstance(a, float) and math.isclose(a, b, rel_tol=1e-12)
    torch.testing.assert_close(cases.flat_parameters(ours), cases.flat_parameters(theirs))


def test_training_lowers_the_loss_of_a_translator_and_is_deterministic():
    task = cases.translation_task(n_train=64, n_test=4)
    runs = []
    for _ in range(2):
        with seeded_torch(0):
            model = TinyTranslator(len(task.source), len(task.target), 16, 2, 32, 1, cases.PAD).double()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        generator = torch.Generator().manual_seed(0)
        runs.append([train_step(model, optimizer, *task.random_batch(16, generator), cases.PAD, cases.BOS)
                     for _ in range(15)])  # fmt: skip
    assert runs[0] == runs[1]
    assert np.mean(runs[0][-3:]) < 0.8 * np.mean(runs[0][:3])


def test_warmup_rises_linearly_then_decays_as_one_over_sqrt_step():
    factors = [warmup_inverse_sqrt(s, 100) for s in range(1, 1001)]
    assert factors[0] == pytest.approx(0.01) and factors[99] == pytest.approx(1.0) and max(factors) == 1.0
    assert factors[399] == pytest.approx(0.5)  # sqrt(100 / 400)
    assert all(a < b for a, b in zip(factors[:99], factors[1:100], strict=True))


# ---------------------------------------------------------------- cached decoding


@settings(max_examples=examples(12), deadline=None)
@given(st.integers(0, 10**6), st.integers(1, 3), st.integers(0, 2), st.integers(1, 12), st.data())
def test_cached_decoding_equals_the_uncached_loop(seed, num_layers, pad_id, max_len, data):
    model = random_translator(seed, num_layers=num_layers, pad_id=pad_id)
    src = data.draw(padded_batches(vocab=11, pad_id=pad_id))
    bos, eos = (pad_id + 1) % 13, (pad_id + 2) % 13
    torch.testing.assert_close(greedy_decode_cached(model, src, max_len, bos, eos),
                               greedy_decode(model, src, max_len, bos, eos), atol=0, rtol=0)  # fmt: skip


def test_a_trained_model_decodes_the_same_with_and_without_the_cache():
    task = cases.translation_task(n_train=200, n_test=20)
    with seeded_torch(0):
        model = TinyTranslator(len(task.source), len(task.target), 16, 2, 32, 2, cases.PAD).double()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        train_step(model, optimizer, *task.random_batch(32, generator), cases.PAD, cases.BOS)
    src, _ = task.batch(task.test_pairs)
    model.eval()
    cached = greedy_decode_cached(model, src, 30, cases.BOS, cases.EOS)
    assert torch.equal(cached, greedy_decode(model, src, 30, cases.BOS, cases.EOS))


def test_the_reference_makes_the_counts_the_case_expects():
    inputs = cases.make_cached_decode_inputs(np.random.default_rng(0), num_layers=3, max_len=6)
    model = cases.stand_in_model(inputs)
    counts = cases.count_calls(model)
    ids = greedy_decode_cached(model, torch.from_numpy(inputs["src"]), 6, inputs["bos_id"], inputs["eos_id"])
    assert counts.encode_calls == 1 and counts.cross_keys == counts.cross_values == [1, 1, 1]
    assert counts.query_rows == [ids.shape[1]] * 3


def test_uncached_decoding_through_the_layers_is_counted_as_such():
    inputs = cases.make_cached_decode_inputs(np.random.default_rng(1), num_layers=2, max_len=5)
    model = cases.stand_in_model(inputs)
    counts = cases.count_calls(model)
    src = torch.from_numpy(inputs["src"])
    memory, src_pad = model.encode(src), src != model.pad_id
    tgt = torch.full((src.shape[0], 1), inputs["bos_id"])
    pe = torch.from_numpy(chapter6.positional_encoding(6, model.d_model))
    with torch.no_grad():
        for _ in range(5):
            y = model.tgt_embed(tgt) * math.sqrt(model.d_model) + pe[: tgt.shape[1]]
            for layer in model.decoder_layers:
                y, _ = layer(y, memory, None, src_pad)
            tgt = torch.cat([tgt, model.output_proj(y[:, -1:]).argmax(-1)], dim=1)
    assert counts.encode_calls == 1
    assert counts.cross_keys == counts.cross_values == [5, 5]
    assert counts.query_rows == [1 + 2 + 3 + 4 + 5] * 2


# ---------------------------------------------------------------- sampling


@given(arrays(np.float64, st.tuples(st.integers(1, 5), st.integers(2, 7)), elements=st.floats(-30, 30)),
       st.integers(0, 2**31 - 1))  # fmt: skip
def test_sampling_limits(logits, seed):
    logits = torch.from_numpy(logits)
    V = logits.shape[-1]
    argmax = logits.argmax(-1)

    def draw(temperature, top_k):
        return sample_next_token(logits, temperature, top_k, torch.Generator().manual_seed(seed))

    assert torch.equal(draw(0.0, None), argmax) and torch.equal(draw(0.0, 2), argmax)
    top1 = draw(1.7, 1)
    assert torch.equal(logits.gather(-1, top1[:, None]), logits.max(-1, keepdim=True).values)
    assert torch.equal(draw(0.8, V), draw(0.8, None))
    ids = draw(1.0, 2)
    rank = (logits > logits.gather(-1, ids[:, None])).sum(-1)
    assert (rank < 2).all() and ids.dtype == torch.int64 and ids.shape == (logits.shape[0],)


def test_sampling_follows_softmax_of_the_scaled_and_filtered_logits():
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5]], dtype=torch.float64).repeat(40000, 1)
    for temperature, top_k in ((1.0, None), (0.5, 3), (2.0, 2)):
        ids = sample_next_token(logits, temperature, top_k, torch.Generator().manual_seed(1))
        z = logits[0] / temperature
        if top_k is not None:
            z = torch.where(
                z >= torch.topk(z, top_k).values[-1], z, torch.tensor(float("-inf"), dtype=z.dtype)
            )
        expected = torch.softmax(z, -1)
        frequencies = torch.bincount(ids, minlength=5).double() / len(ids)
        assert (frequencies - expected).abs().max() < 0.01, (temperature, top_k, frequencies, expected)


def test_sampling_draws_from_the_generator_given_only():
    logits = torch.randn(50, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        a = sample_next_token(logits, 1.0, None, torch.Generator().manual_seed(5))
        torch.manual_seed(2)
        b = sample_next_token(logits, 1.0, None, torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    drawn = torch.multinomial(torch.softmax(logits, -1), 1, generator=torch.Generator().manual_seed(5))
    assert torch.equal(a, drawn.squeeze(-1))


# ---------------------------------------------------------------- the notebook's task


LANGUAGE_NAMES = {"NOUNS", "ADJECTIVES", "ARTICLES", "VERBS", "CONJUNCTION", "SPECIAL_TOKENS", "Vocab",
                  "translate", "translate_with_alignment", "random_sentence", "make_pairs",
                  "source_vocab", "target_vocab", "token_accuracy"}  # fmt: skip


def defined_at_top_level(path) -> set[str]:
    """The names a module defines itself (assignments, functions, classes), imports aside."""
    names = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def test_the_toy_language_is_defined_once():
    """The toy language pair has one definition, ``attention_learner.cases.ch08.language``: no
    other module of the project defines any of its names, and the book's chapter-6 module
    hands out those very objects."""
    root = Path(__file__).resolve().parents[1]
    home = root / "learner" / "attention_learner" / "cases" / "ch08" / "language.py"
    assert LANGUAGE_NAMES <= defined_at_top_level(home)
    others = {str(path.relative_to(root)): found
              for folder in ("grader", "learner/attention_learner", "book_figures")
              for path in sorted((root / folder).rglob("*.py")) if path != home
              if (found := defined_at_top_level(path) & LANGUAGE_NAMES)}  # fmt: skip
    assert not others, f"a second definition of the toy language: {others}"
    for name in LANGUAGE_NAMES:
        assert getattr(chapter6, name) is getattr(language, name), name


def test_the_notebook_batches_are_chapter_6s():
    """The notebook's task holds chapter 6's pairs (seeds 1 and 2, the held-out ones unseen),
    and its target batch is chapter 6's tgt_out (the French ids, then <eos>, padded)."""
    task = cases.translation_task()
    assert task.train_pairs == language.make_pairs(3000, seed=1)
    seen = {tuple(e) for e, _ in task.train_pairs}
    assert task.test_pairs == language.make_pairs(200, seed=2, exclude=seen)
    assert not seen & {tuple(e) for e, _ in task.test_pairs}
    src, tgt = task.batch(task.train_pairs[:5])
    vocabularies = language.source_vocab(), language.target_vocab()
    src6, _, tgt_out = chapter6.to_batch(task.train_pairs[:5], *vocabularies)
    torch.testing.assert_close(tgt, tgt_out)
    torch.testing.assert_close(src, src6)


def test_the_training_budget_is_zero_when_graded_and_outside_a_kernel(monkeypatch):
    from attention_learner import recording

    monkeypatch.delenv(cases.BUDGET_VARIABLE, raising=False)
    assert cases.training_budget(60) == 0.0  # pytest runs no Jupyter kernel
    monkeypatch.setenv(cases.BUDGET_VARIABLE, "7")
    assert cases.training_budget(60) == 7.0
    monkeypatch.setattr(recording, "_recorder", recording.Recorder())
    assert cases.training_budget(60) == 0.0  # graded: never trains, whatever the variable says


@pytest.mark.parametrize(
    "kind,theirs",
    [
        ("sgd", lambda p: torch.optim.SGD(p, lr=0.1)),
        ("momentum", lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
        ("adam", lambda p: torch.optim.Adam(p, lr=0.1)),
    ],
)
def test_the_cases_optimizers_compute_what_torch_optim_computes(kind, theirs):
    inputs = cases.make_train_inputs(np.random.default_rng(7), optimizer=kind, lr=0.1, steps=4)
    ours_model, theirs_model = cases.toy_model(inputs), cases.toy_model(inputs)
    ours = cases.make_optimizer(kind, ours_model.parameters(), 0.1)
    reference = theirs(theirs_model.parameters())
    for src, tgt in inputs["batches"]:
        src, tgt = torch.from_numpy(src.copy()), torch.from_numpy(tgt.copy())
        train_step(ours_model, ours, src, tgt, inputs["pad_id"], inputs["bos_id"])
        train_step(theirs_model, reference, src, tgt, inputs["pad_id"], inputs["bos_id"])
    torch.testing.assert_close(cases.flat_parameters(ours_model), cases.flat_parameters(theirs_model))
