"""The parent's verdict on each test cell: the child's outputs AND the checks re-judged here.

The child reports, per cell, its outputs and the raw arrays each ``check`` call received
from the learner's code. The parent knows from the solution run which checks each test cell
must make (exercise, seed, parameters), rebuilds those inputs and the expected outputs in its
own process, and judges the arrays again. A test cell passes only if nbgrader's rule passes
(no error, no stderr) and every expected check arrived and passes here: monkeypatching numpy,
torch or the check helpers in the child cannot turn a failure into a pass.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from grader.checks import judge
from grader.exercises import all_exercises


@dataclass(frozen=True)
class ExpectedCheck:
    exercise: str
    seed: int
    params: dict[str, Any]


def expected_checks(lines: list[dict], grade_id_of: dict[int, str]) -> dict[str, list[ExpectedCheck]]:
    """From the solution run's result lines: grade id -> the checks its test cell makes."""
    expected: dict[str, list[ExpectedCheck]] = {}
    for line in lines:
        grade_id = grade_id_of.get(line["index"])
        if grade_id is None:
            continue
        expected[grade_id] = [
            ExpectedCheck(r["exercise"], r["seed"], r["params"]) for r in line["records"]
        ]
    return expected


@dataclass(frozen=True)
class Verdict:
    message: str = ""  # "" = every expected check arrived and passed
    missing: bool = False  # True when the failure is a check that never reported

    def __bool__(self) -> bool:
        return bool(self.message)


def rejudge(expected: list[ExpectedCheck], records: list[dict], record_dir: Path) -> Verdict:
    """Judge again, in this process, every check the test cell must make."""
    exercises = all_exercises()
    for k, want in enumerate(expected):
        if k >= len(records):
            return Verdict(f"check {k + 1} of {len(expected)} ({want.exercise}) never reported a "
                           "result", missing=True)
        got = records[k]
        if got.get("exercise") != want.exercise:
            return Verdict(f"check {k + 1} reported {got.get('exercise')!r} instead of "
                           f"{want.exercise!r}", missing=True)
        if got.get("error"):
            return Verdict(str(got["error"]))
        spec = exercises.get(want.exercise)
        if spec is None:
            return Verdict(f"unknown exercise {want.exercise!r}", missing=True)
        arrays = _load(record_dir, got.get("file"))
        if arrays is None:
            return Verdict(f"check {k + 1} ({want.exercise}) sent no readable output", missing=True)
        inputs = spec.make_inputs(np.random.default_rng(want.seed), **want.params)
        message = judge(spec, want.params, inputs, arrays)
        if message:
            return Verdict(message)
    return Verdict()


def describe_error(ename: str, evalue: str) -> str:
    """A cell's error in words: an AssertionError is a check's message, the rest are named."""
    if ename == "AssertionError":
        return evalue or "an assertion failed"
    if ename == "NotImplementedError":
        return "not implemented yet: the solution cell still raises NotImplementedError"
    return f"{ename}: {evalue}"


def _load(record_dir: Path, name: Any) -> dict[str, np.ndarray] | None:
    if not isinstance(name, str) or "/" in name or not name.endswith(".npz"):
        return None
    try:
        with np.load(record_dir / name, allow_pickle=False) as data:
            return {k: np.asarray(data[k]) for k in data.files}
    except Exception:  # a forged or truncated file is a failed check, not a crash
        return None
