"""The parent's verdict on each test cell's checks, from the raw arrays the child reported.

The solution run tells the parent which checks each test cell makes (exercise, seed,
parameters). For a submission, the parent rebuilds those inputs and the expected outputs in
its own process (the child never has the reference or an expected value) and judges the
learner's arrays again. Monkeypatching numpy, torch or the check helpers in the child, or
writing a forged report, cannot turn a failure into a pass: only the right numbers can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attention_learner.expected import Shipped, case_key
from attention_learner.spec import Inputs
from grader.autograde.child_report import CellReport, Record

if TYPE_CHECKING:
    from grader.exercises.spec import Exercise


@dataclass(frozen=True)
class ExpectedCheck:
    exercise: str
    seed: int
    params: dict[str, Any]


def expected_checks(cells: dict[int, CellReport],
                    grade_id_of: dict[int, str]) -> dict[str, list[ExpectedCheck]]:
    """From the solution run's report: grade id -> the checks its test cell makes."""
    return {
        grade_id_of[index]: [ExpectedCheck(r.exercise, r.seed, r.params) for r in cell.records]
        for index, cell in cells.items() if index in grade_id_of
    }


@dataclass(frozen=True)
class CheckFailure:
    """Why a test cell's checks did not pass; ``missing`` when a check never reported."""

    message: str
    missing: bool = False


def rejudge(expected: list[ExpectedCheck], records: list[Record]) -> CheckFailure | None:
    """None when every check the test cell must make arrived and passes here."""
    for k, want in enumerate(expected):
        if k >= len(records):
            return CheckFailure(f"check {k + 1} of {len(expected)} ({want.exercise}) never reported "
                                "a result", missing=True)
        got = records[k]
        if got.exercise != want.exercise:
            return CheckFailure(f"check {k + 1} reported {got.exercise!r} instead of "
                                f"{want.exercise!r}", missing=True)
        if got.error:
            return CheckFailure(got.error)
        if got.arrays is None:
            return CheckFailure(f"check {k + 1} ({want.exercise}) sent no readable output", missing=True)
        message = judge_arrays(want, got.arrays)
        if message:
            return CheckFailure(message)
    return None


def judge_arrays(want: ExpectedCheck, arrays: dict[str, np.ndarray]) -> str:
    """"" when the learner's arrays are right for this case, else the explanation."""
    from grader.exercises import all_exercises

    spec = all_exercises().get(want.exercise)
    if spec is None:
        return f"unknown exercise {want.exercise!r}"
    inputs, answers = case_answers(spec, want.seed, want.params)
    return spec.judge(want.params, inputs, arrays, answers)


# (exercise, case key) -> the case's inputs and answers; see case_answers
_ANSWERS: dict[tuple[str, str], tuple[Inputs, Shipped]] = {}
MAX_CACHED_CASES = 4096


def case_answers(spec: Exercise, seed: int, params: dict[str, Any]) -> tuple[Inputs, Shipped]:
    """The inputs of one case and what its verdict compares with, computed once per process
    (one grading run).

    Every submission of an assignment makes the same checks (their seeds and params come
    from the source's test cells, never from the submission), so the parent would otherwise
    rebuild the same inputs and run the same reference and bug implementations once per
    submission: measured, that was about half of the parent's time per submission. The
    arrays are made read-only, so that no verdict can change what the next one sees.
    """
    key = (spec.name, case_key(seed, params))
    if key not in _ANSWERS:
        if len(_ANSWERS) >= MAX_CACHED_CASES:
            _ANSWERS.clear()
        inputs = spec.make_inputs(np.random.default_rng(seed), **params)
        answers = spec.answers(inputs)
        for arrays in (inputs, answers.expected, *(outputs for _, outputs in answers.bugs)):
            for value in arrays.values():
                if isinstance(value, np.ndarray):
                    value.setflags(write=False)
        _ANSWERS[key] = (inputs, answers)
    return _ANSWERS[key]
