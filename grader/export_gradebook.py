"""The gradebook's final scores for ``python -m grader export``, as ``nbgrader export`` reads them.

For each submission of OUT (a results.json named in grades.csv), nbgrader's gradebook holds
the grades formgrader shows and changes: a grade's score is its ``manual_score`` when a
grader set one, else its ``auto_score``; the submission's raw score is their sum, and its
final score is ``max(0, raw - late_submission_penalty)``, nbgrader's CsvExportPlugin's rule.
That final score, the penalty and each grade's score replace what results.json recorded at
grading time; results.json keeps what the gradebook does not hold (status, flags, notes).

Every disagreement is a warning line of the export's report: a submission whose results.json
score differs from the gradebook's (a hand grade, a penalty changed since), one the gradebook
does not have (its results.json score is exported), and a gradebook submission with no
results.json in OUT (left out: the export's students are OUT's folders).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from attention_learner.cell_rules import TestStatus
from grader.autograde.reports import printable
from grader.autograde.results import SubmissionResult, TestResult

TOLERANCE = 1e-6  # scores are sums of a few floats


def default_db_url(out: Path) -> str | None:
    """OUT's own gradebook (``sqlite:///OUT/gradebook.db``) when it exists, else None."""
    path = out / "gradebook.db"
    return f"sqlite:///{path.resolve()}" if path.is_file() else None


def with_gradebook_scores(
    results: list[SubmissionResult], db_url: str
) -> tuple[list[SubmissionResult], list[str]]:
    """``results`` with the penalty and each test's points from the gradebook at ``db_url``
    (so their score, raw_score and max_score are the gradebook's), and one warning line per
    disagreement.

    Raises :class:`grader.autograde.gradebook.GradebookUnavailable` when it cannot be opened.
    """
    from nbgrader.api import MissingEntry

    from grader.autograde.gradebook import open_gradebook

    gradebook = open_gradebook(db_url)
    try:
        merged, warnings = [], []
        for record in results:
            name = f"{printable(record.student_id)}/{printable(record.assignment)}"
            try:
                submission = gradebook.find_submission(record.assignment, record.student_id)
            except MissingEntry:
                warnings.append(
                    f"warning: {name} is not in the gradebook; exported its results.json "
                    f"score {_shown(record.score)}"
                )
                merged.append(record)
                continue
            final = max(
                0.0, float(submission.score or 0.0) - float(submission.late_submission_penalty or 0.0)
            )
            if abs(final - record.score) > TOLERANCE:
                warnings.append(
                    f"warning: {name}: the gradebook says {_shown(final)}, its "
                    f"results.json {_shown(record.score)} (graded by hand or re-penalised "
                    "since); exported the gradebook's"
                )
            penalty = float(submission.late_submission_penalty or 0.0)
            merged.append(replace(record, penalty=penalty, tests=_tests(record, submission)))
        known = {(r.student_id, r.assignment) for r in results}
        extra = sorted(
            (s.student_id, s.assignment.name)
            for a in gradebook.assignments
            for s in a.submissions
            if (s.student_id, s.assignment.name) not in known
        )
        if extra:
            named = ", ".join(f"{printable(s)}/{printable(a)}" for s, a in extra)
            warnings.append(
                f"warning: in the gradebook but with no results.json in OUT, left out ({len(extra)}): {named}"
            )
        return merged, warnings
    finally:
        gradebook.close()


def _tests(record: SubmissionResult, submission: Any) -> list[TestResult]:
    """results.json's tests with the gradebook's points (a hand grade's), then any graded cell
    the gradebook has and results.json does not (a manually graded answer): their points sum
    to the gradebook's raw score, and their maximum to its max_score."""
    grades = {(nb.name, g.name): g for nb in submission.notebooks for g in nb.grades}
    tests = []
    for test in record.tests:
        grade = grades.pop((test.notebook, test.grade_id), None)
        tests.append(test if grade is None else replace(test, points=float(grade.score or 0.0)))
    for (notebook, grade_id), grade in sorted(grades.items()):
        points, max_points = float(grade.score or 0.0), float(grade.max_score or 0.0)
        tests.append(TestResult(notebook, grade_id, points, max_points, TestStatus.NEEDS_MANUAL_GRADE))
    return tests


def _shown(value: Any) -> str:
    number = float(value)
    return str(int(number)) if number.is_integer() else f"{number:.4g}"
