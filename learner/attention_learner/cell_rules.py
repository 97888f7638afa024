"""The rules about notebook cells and their outcomes, in one place for every side.

What a test cell is, which exercise it belongs to, whether a cell failed, how an error reads
in words, the names of every status, and the one record of a test's outcome
(:class:`TestResult`). The learner's ``attention-check``, the grader's
``python -m grader check`` and the autograde pipeline all decide with these, so a learner's
check and the grade cannot disagree on them. They live in the learner package because the
learner's check has nothing else; the grader imports them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Status(StrEnum):
    """What happened to a whole submission."""

    GRADED = "graded"
    TIMEOUT = "timeout"
    CRASHED = "crashed"
    INVALID = "invalid"


class TestStatus(StrEnum):
    """What happened to one test cell (or manually graded cell)."""

    __test__ = False  # not a pytest test class

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"
    TIMEOUT = "timeout"
    NOT_RUN = "not_run"
    NEEDS_MANUAL_GRADE = "needs_manual_grade"


def nbgrader_meta(cell: Any) -> dict[str, Any]:
    """The cell's nbgrader metadata, or {} (a submitted cell's metadata may be anything)."""
    metadata = cell.get("metadata") if isinstance(cell, dict) else None
    meta = metadata.get("nbgrader") if isinstance(metadata, dict) else None
    return meta if isinstance(meta, dict) else {}


def is_grade_cell(cell: Any) -> bool:
    """A cell that carries points (nbgrader's ``grade`` flag): a test, or a hand-graded cell."""
    return bool(nbgrader_meta(cell).get("grade"))


def is_solution_cell(cell: Any) -> bool:
    """A code cell the learner fills in (nbgrader's ``solution`` flag)."""
    return cell.get("cell_type") == "code" and bool(nbgrader_meta(cell).get("solution"))


def is_locked_cell(cell: Any) -> bool:
    """nbgrader's rule (``utils.is_locked``) for a SOURCE cell: a solution cell never is, a grade
    cell that is not a solution (a test) always is, any other as its ``locked`` flag says."""
    meta = nbgrader_meta(cell)
    if meta.get("solution"):
        return False
    return bool(meta.get("grade")) or bool(meta.get("locked"))


def cell_points(cell: Any) -> float:
    """The points a grade cell is worth (its ``points``; 0 when it names none)."""
    return float(nbgrader_meta(cell).get("points", 0))


def is_test_cell(cell: Any) -> bool:
    """An autograded test: a grade cell of code that is not also a solution."""
    meta = nbgrader_meta(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("grade")) and not meta.get("solution")


def is_manual_cell(cell: Any) -> bool:
    """A grade cell an instructor marks by hand (a written answer, or a graded solution)."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade")) and (cell.get("cell_type") != "code" or bool(meta.get("solution")))


HIDDEN_TESTS = "### BEGIN HIDDEN TESTS"


def visible_part(source: str) -> str:
    """A test cell's source above its hidden tests (what a learner's copy holds)."""
    return source.split(HIDDEN_TESTS, 1)[0]


def check_calls(source: str) -> list[tuple[str, int, dict[str, Any]]]:
    """(exercise, seed, params) of every ``check("name", fn, seed=..., **params)`` call in a
    cell's source, in order; raises ValueError when an argument is not a literal (or is a
    ``**mapping``, which names no parameter)."""
    import ast

    calls: list[tuple[str, int, dict[str, Any]]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "check":
            if not node.args:
                raise ValueError("check() needs the exercise's name as its first argument")
            exercise = ast.literal_eval(node.args[0])
            params: dict[str, Any] = {}
            for k in node.keywords:
                value = ast.literal_eval(k.value)
                if k.arg is None:  # check(..., **{...}): a literal, but no parameter name
                    raise ValueError("check() takes its parameters as name=literal, not **mapping")
                params[k.arg] = value
            calls.append((exercise, int(params.pop("seed", 0)), params))
    return calls


def exercise_of(grade_id: str) -> str:
    """test_<name> or test_<name>__<aspect> -> <name>; other ids are their own exercise."""
    name = grade_id[len("test_") :] if grade_id.startswith("test_") else grade_id
    return name.split("__", 1)[0]


def grade_label(assignment: str, notebook: str, grade_id: str) -> str:
    """A grade cell's label across an assignment (a column of grades.csv and of the wide
    export, an exercise of the similarity report): the grade id, prefixed by its notebook
    (``notebook:grade_id``) unless that is the assignment's own notebook."""
    return grade_id if notebook == assignment else f"{notebook}:{grade_id}"


@dataclass
class TestResult:
    """One test cell's outcome: the one record for it on every side (the learner's
    ``attention-check``, ``python -m grader check``, autograde's results.json).

    ``notebook``: the notebook's name without ``.ipynb`` (for autograde, the source notebook
    the cell belongs to); ``message``: why it did not pass ("" when it did)."""

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

    @property
    def passed(self) -> bool:
        return self.status is TestStatus.PASSED

    def to_json(self) -> dict[str, Any]:
        """The test's entry in results.json."""
        return {
            "notebook": self.notebook,
            "grade_id": self.grade_id,
            "exercise": self.exercise,
            "points": self.points,
            "max_points": self.max_points,
            "status": str(self.status),
            "message": self.message,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TestResult:
        """An entry of results.json read back (``exercise`` follows from the grade id)."""
        return cls(
            str(data["notebook"]),
            str(data["grade_id"]),
            float(data["points"]),
            float(data["max_points"]),
            TestStatus(data["status"]),
            str(data.get("message", "")),
        )


def first_error(outputs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The cell's error output, if it raised (nbgrader's rule for a failed cell)."""
    return next((o for o in outputs if o.get("output_type") == "error"), None)


def stderr_text(outputs: list[dict[str, Any]]) -> str | None:
    """What the cell wrote to stderr (nbgrader scores such a test cell 0), or None."""
    parts = [
        o.get("text", "") for o in outputs if o.get("output_type") == "stream" and o.get("name") == "stderr"
    ]
    return "".join(parts) if parts else None


#: how much of a cell's stderr a message quotes
STDERR_QUOTE = 500


def cell_outcome(outputs: list[dict[str, Any]]) -> tuple[TestStatus, str]:
    """nbgrader's verdict on a test cell that ran, from its outputs alone: FAILED with the
    check's message if it raised an AssertionError, ERROR if it raised anything else, FAILED
    if it wrote to stderr (nbgrader scores such a cell 0), else PASSED."""
    error = first_error(outputs)
    if error is not None:
        status = TestStatus.FAILED if error.get("ename") == "AssertionError" else TestStatus.ERROR
        return status, describe_error(error.get("ename", ""), error.get("evalue", ""))
    stderr = stderr_text(outputs)
    if stderr is not None:
        quoted = stderr[:STDERR_QUOTE]
        return TestStatus.FAILED, "the test wrote to stderr (nbgrader scores that 0): " + quoted
    return TestStatus.PASSED, ""


def describe_error(ename: str, evalue: str) -> str:
    """A cell's error in words: an AssertionError is a check's message, the rest are named."""
    if ename == "AssertionError":
        return evalue or "an assertion failed"
    if ename == "NotImplementedError":
        return "not implemented yet: the solution cell still raises NotImplementedError"
    return f"{ename}: {evalue}"
