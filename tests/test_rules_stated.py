"""Every rule that can cost a point is stated in the exercise's own markdown, from one table.

``attention_learner.rules`` is the table; ``python -m grader release`` writes it into a marked
block of each exercise's markdown cell. These tests hold the block of every exercise, in the
source notebook and in the learner's copy, to the table, and the table to what is judged: the
delegation table of ``attention_learner.forbidden``, the NumPy conventions of the cases, the graded memory
budgets, chapter 2's row counter and chapter 6's counted model.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attention_learner import forbidden, rules
from attention_learner.cases import all_cases
from attention_learner.conventions import reports_conventions
from grader.exercises import get_exercise
from grader.release import exercise_cells, with_rules
from tests.notebook_runner import assignments, learner_notebook, source_notebook

#: the chapters whose notebooks state the table: all of them
STATED = assignments()


def _exercise_texts(nb) -> dict[str, str]:
    return {exercise: nb.cells[index].source for exercise, index in exercise_cells(nb)}


@pytest.mark.parametrize("assignment", STATED)
@pytest.mark.parametrize("side", ["solutions", "chapters"])
def test_every_exercise_states_its_rules_as_the_table_has_them(assignment, side):
    nb = source_notebook(assignment) if side == "solutions" else learner_notebook(assignment)
    texts = _exercise_texts(nb)
    assert texts, f"{assignment}: no exercise cell found"
    for exercise, text in texts.items():
        for rule in rules.exercise_rules(exercise):
            assert rule.sentence in text, f"{side}/{assignment}, {exercise}: not stated: {rule.sentence}"
        assert text.count(rules.BEGIN) == 1 and text.count(rules.END) == 1, (side, assignment, exercise)
        # nothing stated by hand inside the block: it is exactly what release writes
        assert with_rules(text, _introduced_with(nb, exercise)) == text, f"{side}/{assignment}: {exercise}"


def _introduced_with(nb, exercise: str) -> list[str]:
    cells = exercise_cells(nb)
    index = dict(cells)[exercise]
    return [ex for ex, i in cells if i == index]


def test_every_delegation_table_is_worded_and_every_forbidden_object_is_named():
    assert set(rules.DELEGATES) == rules.judged_exercises()
    for exercise in forbidden.FORBIDDEN:
        sentence = rules.delegation_sentence(exercise)
        for path in forbidden.objects_of(exercise):
            assert path.rsplit(".", 1)[-1] in sentence, f"{exercise}: {path} is forbidden but not named"


def test_every_numpy_exercise_states_the_conventions_and_no_other_does():
    numpy = {c.function for c in all_cases().values() if reports_conventions(c)}
    for function in {c.function for c in all_cases().values()}:
        kinds = {r.kind for r in rules.exercise_rules(function)}
        assert ({"dtype", "inputs"} <= kinds) == (function in numpy) or function == "greedy_decode", function


def test_every_graded_memory_budget_and_counter_has_its_rule():
    budgets = {c.function for c in all_cases().values() if get_exercise(c.name).memory_budget}
    for function in budgets:
        assert "memory" in {r.kind for r in rules.exercise_rules(function)}, function
    assert "loops" in {r.kind for r in rules.exercise_rules("dot_product_attention")}
    assert "rows_taken_one_at_a_time" in get_exercise("dot_product_attention").expected(
        get_exercise("dot_product_attention").make_inputs(np.random.default_rng(0))
    )
    counted = [r.sentence for r in rules.exercise_rules("greedy_decode") if r.kind == "counted"]
    assert any("at most once" in s for s in counted) and any("whole batch" in s for s in counted)


def test_the_rules_block_is_replaced_not_repeated():
    text = "## An exercise\n\nSome words."
    once = with_rules(text, ["softmax"])
    assert with_rules(once, ["softmax"]) == once
    assert with_rules(once.replace("earns 0", "earns nothing"), ["softmax"]) == once


# ---------------------------------------------------------------- counted rules at their edges


def _decode_outputs(decode, **params):
    exercise = get_exercise("greedy_decode")
    inputs = exercise.make_inputs(np.random.default_rng(3), **params)
    got = {k: np.asarray(v) for k, v in exercise.call(decode, inputs).items()}
    return exercise.judge(params, inputs, got)


def _reference_decode(model, src, max_len, bos_id, eos_id, encode_when_empty=True):
    if max_len == 0:
        if encode_when_empty:
            model.encode(src)
        return torch.zeros((len(src), 0), dtype=torch.int64)
    memory = model.encode(src)
    tgt = torch.full((len(src), 1), bos_id, dtype=torch.int64)  # (B, 1)
    finished = torch.zeros(len(src), dtype=torch.bool)  # (B,)
    for _ in range(max_len):
        nxt = model.decode(tgt, memory)[:, -1].argmax(-1)  # (B,)
        nxt = torch.where(finished, torch.full_like(nxt, eos_id), nxt)
        tgt, finished = torch.cat([tgt, nxt[:, None]], 1), finished | (nxt == eos_id)
        if finished.all():
            break
    return tgt[:, 1:]


def test_max_len_zero_may_encode_once_or_not_at_all():
    for encode in (True, False):

        def decode(model, src, max_len, bos_id, eos_id, encode=encode):
            return _reference_decode(model, src, max_len, bos_id, eos_id, encode_when_empty=encode)

        assert _decode_outputs(decode, stops=(1, None), max_len=0) == "", encode


def test_encoding_twice_or_at_every_step_fails_with_the_rule():
    def twice(model, src, max_len, bos_id, eos_id):
        model.encode(src)
        return _reference_decode(model, src, max_len, bos_id, eos_id)

    message = _decode_outputs(twice, stops=(2, 4, 1))
    assert "at most once" in message and "encode the source once" in message
    assert "at most once" in _decode_outputs(twice, stops=(1, None), max_len=0)


def test_a_batch_of_one_is_whole_and_a_loop_over_sentences_is_not():
    def per_sentence(model, src, max_len, bos_id, eos_id):
        memory = model.encode(src)  # (B, n_src, V), once for the whole batch
        rows = []
        for b in range(len(src)):  # the loop over sentences the rule forbids
            tgt = torch.full((1, 1), bos_id, dtype=torch.int64)  # (1, 1)
            for _ in range(max_len):
                nxt = model.decode(tgt, memory[b : b + 1])[:, -1].argmax(-1)  # (1,)
                tgt = torch.cat([tgt, nxt[:, None]], 1)
                if nxt.item() == eos_id:
                    break
            rows.append(tgt[0, 1:])
        width = max(len(r) for r in rows)
        return torch.stack([torch.cat([r, r.new_full((width - len(r),), eos_id)]) for r in rows])

    assert _decode_outputs(per_sentence, stops=(3,)) == ""
    assert "whole batch" in _decode_outputs(per_sentence, stops=(None, None), max_len=3)
