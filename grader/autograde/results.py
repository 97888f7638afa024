"""The typed results of a grading run: one test, one submission, the run's summary, and how
a grading child can end. ``autograde``, the reports, feedback, the export, the watcher and
the tests share these records; JSON is made only where results.json is written
(``SubmissionResult.to_json``, in ``reports``) and read back only through
:func:`read_result` (``SubmissionResult.from_json``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum
from pathlib import Path
from typing import Any

from attention_learner.cell_rules import Status, TestResult, TestStatus

__all__ = [
    "ChildExit",
    "Status",
    "SubmissionResult",
    "Summary",
    "TestResult",
    "read_result",
    "timeout_attempts",
    "unchanged",
]


class ChildExit(IntEnum):
    """Exit statuses a grading child's own code gives (anything else came from the learner's
    code, a signal or a limit)."""

    OK = 0
    CELL_LOOP_FAILED = 70  # the grader's cell loop raised: a grader bug, not the learner's
    JOB_NOT_STARTED = 71  # the sandbox could not enter the job's confinement
    CHILD_NOT_STARTED = 72  # the forked child failed before it could run anything
    SERVER_GONE = 75  # the keeper saw the fork server die: it killed the job and went (no one reads it)

    @staticmethod
    def killed_by(sig: int) -> int:
        """The shell's status for a death by signal ``sig``, ``128 + sig``: what a process that
        re-raised ``sig`` exits with if the signal does not end it."""
        return 128 + sig

    @classmethod
    def explain(cls, code: int) -> str | None:
        """What the grader says about ``code`` when it is one of its own; None otherwise."""
        said: dict[int, str] = {  # keyed by int: an IntEnum member hashes as its value
            cls.CELL_LOOP_FAILED: "the grader failed while running this notebook (not your code)",
            cls.JOB_NOT_STARTED: "the grading sandbox could not start this notebook",
            cls.CHILD_NOT_STARTED: "the grading sandbox could not start this notebook",
        }
        return said.get(code)


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
    timestamp: str | None = None  # lateness counts from it (ISO 8601, UTC): arrived_at or timestamp.txt
    late_by_seconds: float | None = None  # None: no timestamp or no due date
    penalty: float = 0.0  # the late penalty nbgrader's rule gave, summed over the notebooks
    attempts: int = 1  # gradings of these very files in a row that ended in a timeout
    arrived_at: str | None = None  # grade on submit: when the server saw it arrive (ISO 8601, UTC)
    claimed_at: str | None = None  # then timestamp.txt's time, the student's claim only

    @property
    def raw_score(self) -> float:
        """The tests' points before any late penalty."""
        return round(sum(t.points for t in self.tests), 6)

    @property
    def score(self) -> float:
        """The points after the late penalty (never below 0), as nbgrader's export has them."""
        return round(max(0.0, self.raw_score - self.penalty), 6)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_points for t in self.tests), 6)

    def to_json(self) -> dict[str, Any]:
        return {
            "student_id": self.student_id,
            "assignment": self.assignment,
            "score": self.score,
            "max_score": self.max_score,
            "status": str(self.status),
            "message": self.message,
            "flags": self.flags,
            "notes": self.notes,
            "isolation": self.isolation,
            "timestamp": self.timestamp,
            "late_by_seconds": self.late_by_seconds,
            "penalty": self.penalty,
            "raw_score": self.raw_score,
            "attempts": self.attempts,
            "arrived_at": self.arrived_at,
            "claimed_at": self.claimed_at,
            "tests": [t.to_json() for t in self.tests],
            "fingerprint": self.fingerprint,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SubmissionResult:
        """A results.json read back (the grader's own file: OUT is out of every child's reach)."""
        return cls(
            str(data["student_id"]),
            str(data["assignment"]),
            str(data.get("fingerprint", "")),
            str(data.get("isolation", "")),
            Status(data["status"]),
            str(data.get("message", "")),
            [str(flag) for flag in data.get("flags", [])],
            [str(note) for note in data.get("notes", [])],
            [TestResult.from_json(t) for t in data.get("tests", [])],
            _text_or_none(data.get("timestamp")),
            _number_or_none(data.get("late_by_seconds")),
            float(data.get("penalty") or 0.0),
            int(data.get("attempts") or 1),
            _text_or_none(data.get("arrived_at")),
            _text_or_none(data.get("claimed_at")),
        )


def _number_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def _text_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def read_result(path: Path) -> SubmissionResult | None:
    """The results.json at ``path`` read back, or None when there is none or it cannot be
    read as one: the one reader of the file."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return SubmissionResult.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


FAILING = (TestStatus.FAILED, TestStatus.ERROR, TestStatus.TIMEOUT, TestStatus.NOT_RUN)


@dataclass
class Summary:
    """What one run did, and then (:meth:`tally`) what the grades.csv it wrote holds.

    ``graded`` and ``skipped`` are this run's (graded now with status ``graded``; unchanged
    and kept). The status counts and failed tests are this run's until :meth:`tally` counts
    the rows of grades.csv, kept ones included, so that the line and the file agree.
    """

    graded: int = 0
    skipped: int = 0
    failed_tests: int = 0
    timeouts: int = 0
    crashes: int = 0
    invalid: int = 0
    rows: int | None = None  # grades.csv's rows, once tallied
    statuses: dict[str, int] = field(default_factory=dict)  # grades.csv's, once tallied

    def line(self) -> str:
        head = f"{self.graded} graded, {self.skipped} unchanged (kept)"
        if self.rows is None:
            return (
                f"{head}, {self.failed_tests} failed tests, {self.timeouts} timeouts, "
                f"{self.crashes} crashes, {self.invalid} invalid"
            )
        count = {s: self.statuses.get(str(s), 0) for s in Status}
        return (
            f"{head}; grades.csv: {self.rows} rows, {count[Status.GRADED]} graded, "
            f"{count[Status.TIMEOUT]} timeouts, {count[Status.CRASHED]} crashes, "
            f"{count[Status.INVALID]} invalid, {self.failed_tests} failed tests"
        )

    def count(self, result: SubmissionResult) -> None:
        attribute = {
            Status.GRADED: "graded",
            Status.TIMEOUT: "timeouts",
            Status.CRASHED: "crashes",
            Status.INVALID: "invalid",
        }[result.status]
        setattr(self, attribute, getattr(self, attribute) + 1)
        self.failed_tests += sum(t.status in FAILING for t in result.tests)

    def tally(self, rows: list[SubmissionResult]) -> None:
        """Count the rows written to grades.csv (one result each): every status and failed
        test in the file, whether graded now or kept."""
        self.rows = len(rows)
        self.statuses = {}
        for row in rows:
            self.statuses[str(row.status)] = self.statuses.get(str(row.status), 0) + 1
        self.timeouts = self.statuses.get(str(Status.TIMEOUT), 0)
        self.crashes = self.statuses.get(str(Status.CRASHED), 0)
        self.invalid = self.statuses.get(str(Status.INVALID), 0)
        self.failed_tests = sum(t.status in FAILING for row in rows for t in row.tests)


TIMEOUT_ATTEMPTS = 2  # a timeout is graded again once; after that it is kept like a grade


def unchanged(previous: Path, fingerprint: str, retry_timeouts: bool = False) -> bool:
    """Kept only when graded (or invalid) from the very same files, source and grader code,
    or when these very files timed out twice in a row (unless ``retry_timeouts``); a crash
    is always graded again."""
    result = read_result(previous)
    if result is None or result.fingerprint != fingerprint:
        return False
    if result.status is Status.TIMEOUT:
        return not retry_timeouts and result.attempts >= TIMEOUT_ATTEMPTS
    return result.status in (Status.GRADED, Status.INVALID)


def timeout_attempts(previous: Path, fingerprint: str) -> int:
    """How many gradings in a row of these very files timed out, before this one."""
    result = read_result(previous)
    if result is None or result.fingerprint != fingerprint or result.status is not Status.TIMEOUT:
        return 0
    return result.attempts
