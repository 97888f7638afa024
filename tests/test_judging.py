"""The parent's re-judging of reported arrays (grader/autograde/judging.py), without a child.

What a learner's kernel would have computed is made here with the reference (right) or with
a classic bug (wrong); the parent's verdict must match the learner-side checks', once per
submission and again from its cache of each case's answers.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from attention_learner.conventions import AFTER, reports_conventions
from attention_learner.spec import to_numpy
from grader.autograde.child_report import Record
from grader.autograde.judging import CaseAnswers, ExpectedCheck, judge_arrays, rejudge
from grader.exercises import all_exercises, get_exercise

WANT = ExpectedCheck("scaled_dot_product_attention", 3, {"n_k": 5})


def reported(want: ExpectedCheck, outputs: dict) -> Record:
    """A record as the child sends it: the raw arrays of one check."""
    return Record(exercise=want.exercise, seed=want.seed, params=want.params, error="",
                  arrays={k: to_numpy(v) for k, v in outputs.items()})  # fmt: skip


def outputs_of(want: ExpectedCheck, implementation) -> dict:
    """What a child sends for ``implementation``: its outputs and, for a NumPy case, each input
    array as the call left it (``after_<name>``, see attention_learner.conventions)."""
    spec = get_exercise(want.exercise)
    inputs = spec.make_inputs(np.random.default_rng(want.seed), **want.params)
    outputs = implementation(inputs)
    if reports_conventions(spec.case):
        outputs = {**outputs, **{AFTER + k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}}
    return outputs


def test_right_arrays_pass_and_a_classic_bug_is_named():
    spec = get_exercise(WANT.exercise)
    assert rejudge([WANT], [reported(WANT, outputs_of(WANT, spec.reference))]) is None
    description, bug = next(iter(spec.bugs.items()))
    failure = rejudge([WANT], [reported(WANT, outputs_of(WANT, bug))])
    assert failure is not None and description in failure.message


def test_answers_are_computed_once_per_case_and_cannot_be_changed(monkeypatch):
    spec = get_exercise(WANT.exercise)
    calls = []

    def counted(inputs):
        calls.append(1)
        return spec.reference(inputs)

    counting = dataclasses.replace(spec, reference=counted)
    monkeypatch.setattr("grader.exercises.all_exercises", lambda: {WANT.exercise: counting})
    right = {k: to_numpy(v) for k, v in outputs_of(WANT, spec.reference).items()}
    run = CaseAnswers()  # the run's cache
    for _ in range(3):  # three checks of the same case
        assert judge_arrays(WANT, right, answers=run) == ""
    assert len(calls) == 1
    other = dataclasses.replace(WANT, seed=4)  # another case is its own entry
    judge_arrays(other, right, answers=run)
    assert len(calls) == 2
    judge_arrays(WANT, right, answers=CaseAnswers())  # another run computes its own
    assert len(calls) == 3
    inputs, answers = run.with_bugs(counting, WANT.seed, WANT.params)
    with pytest.raises(ValueError, match="read-only"):
        next(iter(answers.expected.values()))[...] = 0.0
    with pytest.raises(ValueError, match="read-only"):
        inputs["Q"][...] = 0.0


@pytest.mark.parametrize("name", sorted(all_exercises()))
def test_cached_verdicts_equal_fresh_ones(name):
    """For every exercise, on the right outputs and on each classic bug's: the cache (and its
    read-only arrays, which every message and hint must only read) changes when answers are
    computed, never what a verdict says."""
    spec = all_exercises()[name]
    want = ExpectedCheck(name, 5, {})
    inputs = spec.make_inputs(np.random.default_rng(want.seed))
    for implementation in [spec.reference, *spec.bugs.values()]:
        try:
            got = {k: to_numpy(v) for k, v in implementation(inputs).items()}
        except Exception:  # a bug that does not apply to this case
            continue
        fresh = spec.judge(want.params, inputs, got)
        run = CaseAnswers()
        assert judge_arrays(want, got, answers=run) == fresh
        assert judge_arrays(want, got, answers=run) == fresh  # from the cache
