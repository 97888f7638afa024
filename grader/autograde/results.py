"""The typed results of a grading run: one test, one submission, the run's summary, and how
a grading child can end. ``autograde``, the reports and the tests share these records;
``SubmissionResult.to_json`` writes results.json and ``from_json`` reads it back.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

from attention_learner.cell_rules import Status, TestStatus, exercise_of

__all__ = ["ChildExit", "Status", "SubmissionResult", "Summary", "TestResult", "unchanged"]


class ChildExit(IntEnum):
    """Exit statuses a grading child's own code gives (anything else came from the learner's
    code, a signal or a limit)."""

    OK = 0
    CELL_LOOP_FAILED = 70  # the grader's cell loop raised: a grader bug, not the learner's
    JOB_NOT_STARTED = 71  # the sandbox could not enter the job's confinement
    CHILD_NOT_STARTED = 72  # the forked child failed before it could run anything

    @classmethod
    def explain(cls, code: int) -> str | None:
        """What the grader says about ``code`` when it is one of its own; None otherwise."""
        return {
            cls.CELL_LOOP_FAILED: "the grader failed while running this notebook (not your code)",
            cls.JOB_NOT_STARTED: "the grading sandbox could not start this notebook",
            cls.CHILD_NOT_STARTED: "the grading sandbox could not start this notebook",
        }.get(code)


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    notebook: str
    grade_id: str
    points: float
    max_points: float
    status: TestStatus
    message: str = ""

    @property
    def exercise(self) -> str:
        return exercise_of(self.grade_id)

    def to_json(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "grade_id": self.grade_id, "exercise": self.exercise,
                "points": self.points, "max_points": self.max_points, "status": str(self.status),
                "message": self.message}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestResult:
        return cls(str(data["notebook"]), str(data["grade_id"]), float(data["points"]),
                   float(data["max_points"]), TestStatus(data["status"]), str(data.get("message", "")))


@dataclass
class SubmissionResult:
    student_id: str
    assignment: str
    fingerprint: str
    isolation: str
    status: Status = Status.GRADED
    message: str = ""
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: list[TestResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(sum(t.points for t in self.tests), 6)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_points for t in self.tests), 6)

    def to_json(self) -> dict[str, Any]:
        return {"student_id": self.student_id, "assignment": self.assignment, "score": self.score,
                "max_score": self.max_score, "status": str(self.status), "message": self.message,
                "flags": self.flags, "notes": self.notes, "isolation": self.isolation,
                "tests": [t.to_json() for t in self.tests], "fingerprint": self.fingerprint}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubmissionResult:
        """A results.json read back (the grader's own file: OUT is out of every child's reach)."""
        return cls(str(data["student_id"]), str(data["assignment"]), str(data.get("fingerprint", "")),
                   str(data.get("isolation", "")), Status(data["status"]), str(data.get("message", "")),
                   list(data.get("flags", [])), list(data.get("notes", [])),
                   [TestResult.from_json(t) for t in data.get("tests", [])])


@dataclass
class Summary:
    graded: int = 0
    skipped: int = 0
    failed_tests: int = 0
    timeouts: int = 0
    crashes: int = 0
    invalid: int = 0

    def line(self) -> str:
        return (
            f"{self.graded} graded, {self.skipped} unchanged (kept), {self.failed_tests} failed "
            f"tests, {self.timeouts} timeouts, {self.crashes} crashes, {self.invalid} invalid"
        )

    def count(self, result: SubmissionResult) -> None:
        attribute = {Status.GRADED: "graded", Status.TIMEOUT: "timeouts", Status.CRASHED: "crashes",
                     Status.INVALID: "invalid"}[result.status]
        setattr(self, attribute, getattr(self, attribute) + 1)
        self.failed_tests += sum(t.status in (TestStatus.FAILED, TestStatus.ERROR, TestStatus.TIMEOUT,
                                              TestStatus.NOT_RUN) for t in result.tests)


def unchanged(previous: Path, fingerprint: str) -> bool:
    """Kept only when graded (or invalid) from the very same files, source and grader code."""
    try:
        data = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("fingerprint") == fingerprint and data.get("status") in (Status.GRADED, Status.INVALID)
