"""``python -m grader export`` reads the gradebook's final scores, as ``nbgrader export`` does.

An OUT written with the grader's own writers (results.json, grades.csv) beside a gradebook
made through nbgrader's own API with the same auto scores. A hand grade is then given as
formgrader gives it (nbgrader.api.Gradebook: find the grade, set ``manual_score``), and every
export format must carry it, with a warning line naming the disagreement with results.json.
"""

from __future__ import annotations

import csv
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from nbgrader.api import Gradebook

from attention_learner.cell_rules import TestStatus
from grader.autograde.nbgrader_adapters import alembic_head_in_process
from grader.autograde.reports import write_grades_csv, write_results
from grader.autograde.results import SubmissionResult, TestResult
from grader.export import FORMATS, export

A = "03_scaled_dot_product"
POINTS = {"ann": [2.0, 2.0], "bob": [2.0, 0.0]}  # test_0, test_1, out of 2 each


def _result(student: str) -> SubmissionResult:
    tests = [
        TestResult(A, f"test_{i}", p, 2.0, TestStatus.PASSED if p else TestStatus.FAILED)
        for i, p in enumerate(POINTS[student])
    ]
    return SubmissionResult(student, A, "", "", tests=tests)


@pytest.fixture(scope="module")
def made_gradebook(tmp_path_factory) -> Path:
    """The gradebook, made once (nbgrader's migrations take seconds); each test gets a copy."""
    path = tmp_path_factory.mktemp("gradebook") / "gradebook.db"
    with alembic_head_in_process():
        gradebook = Gradebook(f"sqlite:///{path}")
    try:
        gradebook.update_or_create_assignment(A)
        gradebook.add_notebook(A, A)
        for i in range(2):
            gradebook.add_grade_cell(f"test_{i}", A, A, max_score=2.0, cell_type="code")
        for student, points in POINTS.items():
            gradebook.add_student(student)
            gradebook.add_submission(A, student)
            for i, p in enumerate(points):
                gradebook.find_grade(f"test_{i}", A, A, student).auto_score = p
        gradebook.db.commit()
    finally:
        gradebook.close()
    return path


@pytest.fixture
def out(tmp_path: Path, made_gradebook: Path) -> Path:
    out = tmp_path / "grading"
    results = [_result(s) for s in POINTS]
    for r in results:
        write_results(out, r)
    write_grades_csv(out, results)
    shutil.copyfile(made_gradebook, out / "gradebook.db")
    return out


def _open(out: Path) -> Gradebook:
    with alembic_head_in_process():
        return Gradebook(f"sqlite:///{out / 'gradebook.db'}")


def _hand_grade(out: Path, student: str, grade_id: str, score: float) -> None:
    gradebook = _open(out)
    try:
        gradebook.find_grade(grade_id, A, A, student).manual_score = score
        gradebook.db.commit()
    finally:
        gradebook.close()


def _cells(path: Path, student_column: str, student: str, column: str) -> str:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r[student_column] == student]
    assert len(rows) == 1, rows
    return rows[0][column]


def test_agreeing_sources_export_without_a_warning(out, tmp_path):
    report = export(out, "wide", tmp_path / "wide.csv")
    assert report.warnings == [] and "gradebook.db" in report.scores_from
    assert _cells(tmp_path / "wide.csv", "student_id", "bob", A) == "2"


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_hand_grade_reaches_every_format_with_a_warning(out, tmp_path, fmt):
    _hand_grade(out, "bob", "test_1", 1.5)  # bob: 2 + 0 -> 2 + 1.5
    target = tmp_path / f"{fmt}.csv"
    report = export(out, fmt, target)
    student_column, student = {
        "canvas": ("SIS Login ID", "bob"),
        "moodle": ("Username", "bob"),
        "wide": ("student_id", "bob"),
    }[fmt]
    assert _cells(target, student_column, student, A) == "3.5"
    assert _cells(target, student_column, "ann", A) == "4"
    if fmt == "wide":
        assert _cells(target, "student_id", "bob", f"{A}:test_1") == "1.5"
    (line,) = [w for w in report.lines() if w.startswith("warning:")]
    assert "bob/03_scaled_dot_product" in line and "3.5" in line and "results.json 2" in line


def test_the_gradebook_penalty_is_taken(out, tmp_path):
    gradebook = _open(out)
    try:  # a late penalty recorded by nbgrader's AssignLatePenalties after results.json was written
        gradebook.find_submission_notebook(A, A, "ann").late_submission_penalty = 1.0
        gradebook.db.commit()
    finally:
        gradebook.close()
    report = export(out, "wide", tmp_path / "wide.csv")
    assert _cells(tmp_path / "wide.csv", "student_id", "ann", A) == "3"
    assert _cells(tmp_path / "wide.csv", "student_id", "ann", f"{A}:penalty") == "1"
    assert any("ann/03_scaled_dot_product" in w for w in report.warnings)


def test_results_without_a_gradebook_entry_are_named(out, tmp_path):
    extra = replace(_result("ann"), student_id="cleo")
    write_results(out, extra)
    write_grades_csv(out, [_result("ann"), _result("bob"), extra])
    gradebook = _open(out)
    try:  # and one the gradebook has that OUT never graded
        gradebook.add_student("dan")
        gradebook.add_submission(A, "dan")
    finally:
        gradebook.close()
    report = export(out, "wide", tmp_path / "wide.csv")
    assert _cells(tmp_path / "wide.csv", "student_id", "cleo", A) == "4"  # from its results.json
    assert any("cleo/03_scaled_dot_product is not in the gradebook" in w for w in report.warnings)
    assert any("left out (1): dan/03_scaled_dot_product" in w for w in report.warnings)
    with open(tmp_path / "wide.csv", encoding="utf-8") as handle:
        assert "dan" not in handle.read()


def test_without_a_gradebook_the_report_says_where_scores_came_from(out, tmp_path):
    (out / "gradebook.db").unlink()
    report = export(out, "wide", tmp_path / "wide.csv")
    assert report.scores_from == "" and "scores from results.json" in report.lines()[1]
