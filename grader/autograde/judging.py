"""The parent's verdict on each test cell's checks, from the raw arrays the child reported.

The solution run tells the parent which checks each test cell makes (exercise, seed,
parameters). For a submission, the parent rebuilds those inputs and the expected outputs in
its own process (the child never has the reference or an expected value) and judges the
learner's arrays again. Monkeypatching numpy, torch or the check helpers in the child, or
writing a forged report, cannot turn a failure into a pass. The inputs are drawn from a
per-job secret salt (:func:`attention_learner.recording.grading_seed`), so no answer can
be prepared for them; what can still pass without the learner's own implementation is
delegation, which ``delegation.py`` scores 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from attention_learner.checks import close_message, explain
from attention_learner.expected import Shipped, case_key
from attention_learner.recording import CLOSE_CHECK, grading_seed
from attention_learner.spec import Arrays, Inputs
from grader.autograde.child_report import CellReport, Record

if TYPE_CHECKING:
    from grader.autograde.judge_pool import JudgePool
    from grader.exercises.spec import Exercise


@dataclass(frozen=True)
class ExpectedCheck:
    """One check a test cell makes, as the source's own run made it."""

    exercise: str
    seed: int
    params: dict[str, Any]

    @property
    def earns(self) -> bool:
        """Whether passing this check can earn points: a ``check(...)`` of a case, judged
        against the parent's reference. A ``check_close`` compares two arrays of the
        learner's own process (often both computed from the learner's code: a hand-worked
        example, a self-consistency check), so it can only fail a cell, never earn one."""
        return self.exercise != CLOSE_CHECK


def expected_checks(
    cells: dict[int, CellReport], grade_id_of: dict[int, str]
) -> dict[str, list[ExpectedCheck]]:
    """From the solution run's report: grade id -> the checks its test cell makes."""
    return {
        grade_id_of[index]: [ExpectedCheck(r.exercise, r.seed, r.params) for r in cell.records]
        for index, cell in cells.items()
        if index in grade_id_of
    }


@dataclass(frozen=True)
class CheckFailure:
    """Why a test cell's checks did not pass; ``missing`` when a check never reported."""

    message: str
    missing: bool = False


def rejudge(
    expected: list[ExpectedCheck], records: list[Record], salt: int = 0, answers: CaseAnswers | None = None
) -> CheckFailure | None:
    """None when every check the test cell must make arrived and passes here, on the inputs
    the job's ``salt`` drew (the parent draws the same ones); ``answers``: the run's cache."""
    for k, want in enumerate(expected):
        if k >= len(records):
            return CheckFailure(
                f"check {k + 1} of {len(expected)} ({want.exercise}) never reported a result", missing=True
            )
        got = records[k]
        if got.exercise != want.exercise:
            return CheckFailure(
                f"check {k + 1} reported {got.exercise!r} instead of {want.exercise!r}", missing=True
            )
        if got.error:
            return CheckFailure(got.error)
        if got.arrays is None:
            return CheckFailure(f"check {k + 1} ({want.exercise}) sent no readable output", missing=True)
        message = (
            judge_close(want, got.arrays)
            if want.exercise == CLOSE_CHECK
            else judge_arrays(want, got.arrays, salt, answers)
        )
        if message:
            return CheckFailure(message)
    return None


def judge_close(want: ExpectedCheck, arrays: dict[str, np.ndarray]) -> str:
    """A ``check_close``, decided here with the source's description and tolerance (the
    child's are ignored) on the two arrays the child sent; see :attr:`ExpectedCheck.earns`."""
    got, expected = arrays.get("got"), arrays.get("expected")
    what = str(want.params.get("what", ""))
    if got is None or expected is None:
        return f"the check {what!r} sent no readable output"
    return close_message(
        got, expected, what, float(want.params.get("atol", 1e-6)), float(want.params.get("rtol", 1e-5))
    )


def judge_arrays(
    want: ExpectedCheck, arrays: dict[str, np.ndarray], salt: int = 0, answers: CaseAnswers | None = None
) -> str:
    """ "" when the learner's arrays are right for this case, else the explanation.

    The classic bugs' outputs only name a mistake, so they are computed only for a failing
    output: a passing check costs one reference run. ``answers`` is the run's cache (a
    fresh one when None)."""
    from grader.exercises import all_exercises

    spec = all_exercises().get(want.exercise)
    if spec is None:
        return f"unknown exercise {want.exercise!r}"
    answers = answers if answers is not None else CaseAnswers()
    seed = grading_seed(salt, want.exercise, want.seed, want.params)
    inputs, expected = answers.expected(spec, seed, want.params)
    message = explain(spec.case, want.params, inputs, arrays, expected, [])
    if message:
        inputs, shipped = answers.with_bugs(spec, seed, want.params)
        message = explain(spec.case, want.params, inputs, arrays, shipped.expected, shipped.bugs)
    return message


@dataclass
class CaseEntry:
    """One case's answers in :class:`CaseAnswers`: its inputs, its reference outputs and
    (None until a failing output needs them) its classic bugs' ``(description, outputs)``."""

    inputs: Inputs
    expected: Arrays
    bugs: list[tuple[str, Arrays]] | None = None


class CaseAnswers:
    """What verdicts compare with, computed once per case and kept for one run: a case's
    inputs, its reference outputs and, only once a failing output needs them, its classic
    bugs' outputs. A run owns one (``pipeline.Run.answers``).

    The seed is the one a job's salt drew (fresh per submission), so an entry serves the
    checks of one submission (a re-judged cell, a repeated check) and the unsalted runs (the
    learner's check, the tests). The arrays are made read-only, so that no verdict can change
    what the next one sees.
    """

    MAX_CASES = 4096

    def __init__(self, pool: JudgePool | None = None) -> None:
        self._cases: dict[tuple[str, str], CaseEntry] = {}  # (exercise, case key) -> its answers
        self.pool = pool  # with one, bug outputs are computed there (``judge_pool``)
        self.computed = 0  # reference computations made in this process (0 with a pool's answers)

    def fill(self, references: list[tuple[tuple[str, str], Inputs, Arrays]]) -> None:
        """Take a job's references, computed by the judge pool (``judge_pool.references``)."""
        for key, inputs, expected in references:
            if len(self._cases) >= self.MAX_CASES:
                self._cases.clear()
            _read_only(inputs, expected)
            self._cases[key] = CaseEntry(inputs, expected)

    def _entry(self, spec: Exercise, seed: int, params: dict[str, Any]) -> CaseEntry:
        key = (spec.name, case_key(seed, params))
        if key not in self._cases:
            if len(self._cases) >= self.MAX_CASES:
                self._cases.clear()
            self.computed += 1
            inputs = spec.make_inputs(np.random.default_rng(seed), **params)
            expected = spec.expected(inputs)
            _read_only(inputs, expected)
            self._cases[key] = CaseEntry(inputs, expected)
        return self._cases[key]

    def expected(self, spec: Exercise, seed: int, params: dict[str, Any]) -> tuple[Inputs, Arrays]:
        """The case's inputs and reference outputs."""
        entry = self._entry(spec, seed, params)
        return entry.inputs, entry.expected

    def with_bugs(self, spec: Exercise, seed: int, params: dict[str, Any]) -> tuple[Inputs, Shipped]:
        """The case's inputs, reference outputs and classic bugs' outputs."""
        entry = self._entry(spec, seed, params)
        if entry.bugs is None:
            entry.bugs = (
                spec.bug_outputs(entry.inputs)
                if self.pool is None
                else self.pool.bug_outputs((spec.name, seed, params))
            )
            _read_only(*(outputs for _, outputs in entry.bugs))
        return entry.inputs, Shipped(entry.expected, entry.bugs)


def _read_only(*groups: dict[str, Any]) -> None:
    for arrays in groups:
        for value in arrays.values():
            if isinstance(value, np.ndarray):
                value.setflags(write=False)
