"""The parent's verdict on each test cell's checks, from the raw arrays the child reported.

The solution run tells the parent which checks each test cell makes (exercise, seed,
parameters). For a submission, the parent rebuilds those inputs and the expected outputs in
its own process (the child never has the reference or an expected value) and judges the
learner's arrays again. Monkeypatching numpy, torch or the check helpers in the child, or
writing a forged report, cannot turn a failure into a pass: only the right numbers can.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from grader.autograde.child_report import CellReport, Record


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
    from grader.checks import judge
    from grader.exercises import all_exercises

    spec = all_exercises().get(want.exercise)
    if spec is None:
        return f"unknown exercise {want.exercise!r}"
    inputs = spec.make_inputs(np.random.default_rng(want.seed), **want.params)
    return judge(spec, want.params, inputs, arrays)
