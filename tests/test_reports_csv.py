"""The CSV the grader writes: cells cannot be formulas, the grader's numbers stay numbers, and
names that were not UTF-8 are written escaped (reports.csv_cell, reports.write_csv)."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from attention_learner.cell_rules import Status, TestStatus
from grader.autograde import reports
from grader.autograde.results import SubmissionResult, TestResult

pytestmark = [pytest.mark.grading, pytest.mark.security]

GRADER = Path(reports.__file__).resolve().parents[1]
FORMULAS = ['=HYPERLINK("http://x")', "+1", "-1", "@SUM(A1)", "\tTAB", "\rCR"]


def _result(student: str, points: float, grade_id: str = "test_a") -> SubmissionResult:
    return SubmissionResult(
        student, "a1", "", "", tests=[TestResult("a1", grade_id, points, 2.0, TestStatus.PASSED)]
    )


def _rows(path: Path, **options) -> list[list]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle, **options))


def test_student_ids_that_look_like_formulas_come_out_as_text(tmp_path):
    results = [_result(s, 1.0) for s in [*FORMULAS, "alice"]]
    path = reports.write_grades_csv(tmp_path, results)
    cells = {row[0] for row in _rows(path)[1:]}
    assert cells == {"'" + s for s in FORMULAS} | {"alice"}
    for row in _rows(path)[1:]:
        for cell in row:
            assert not cell.startswith(reports.FORMULA_STARTS), row


def test_scores_stay_numbers_a_negative_one_included(tmp_path):
    """Only text is neutralised: the grader's numbers are written bare, so a spreadsheet (and
    csv with QUOTE_NONNUMERIC) reads them as numbers, -1.5 as well (a test's points; a score
    is never below 0)."""
    path = reports.write_grades_csv(tmp_path, [_result("-1", -1.5), _result("bob", 2.0)])
    header, *rows = _rows(path, quoting=csv.QUOTE_NONNUMERIC)
    assert header[:6] == ["student_id", "assignment", "score", "max_score", "status", "test_a"]
    assert [row[:6] for row in rows] == [
        ["'-1", "a1", 0, 2.0, "graded", -1.5],
        ["bob", "a1", 2.0, 2.0, "graded", 2.0],
    ]


def test_a_column_named_like_a_formula_is_text_too(tmp_path):
    path = reports.write_grades_csv(tmp_path, [_result("bob", 1.0, grade_id="=cmd|' /C calc'!A0")])
    assert "'=cmd|' /C calc'!A0" in _rows(path)[0]


def test_names_that_are_not_utf8_are_escaped_in_grades_csv_and_results(tmp_path):
    student = b"\xff\xfebob".decode("utf-8", "surrogateescape")
    extra = SubmissionResult(student, "a1", "", "", Status.INVALID)
    path = reports.write_grades_csv(tmp_path, [], [extra])
    assert _rows(path)[1][0] == r"\xff\xfebob"
    result = _result("bob", 1.0)
    result.notes = ["not copied: " + b"huge\xff.bin".decode("utf-8", "surrogateescape")]
    written = reports.write_results(tmp_path, result)
    assert json.loads(written.read_text(encoding="utf-8"))["notes"] == [r"not copied: huge\xff.bin"]
    assert r"huge\xff.bin" in (written.parent / "feedback.html").read_text(encoding="utf-8")


def test_the_cell_rule(tmp_path):
    assert [reports.csv_cell(v) for v in (-1, -1.5, 0, "-1", "a-b", " =1", "", None, True)] == [
        -1,
        -1.5,
        0,
        "'-1",
        "a-b",
        " =1",
        "",
        "",
        "True",
    ]


def test_every_csv_writer_of_the_grader_is_write_csv():
    """One helper decides what a cell may be: no other csv.writer under grader/."""
    writers = []
    for path in GRADER.rglob("*.py"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"csv\.(writer|DictWriter)\(", line):
                writers.append(f"{path.relative_to(GRADER)}:{number}")
    assert len(writers) == 1 and writers[0].startswith("autograde/reports.py:"), writers
    source = Path(reports.__file__).read_text(encoding="utf-8")
    assert re.search(r"def write_csv\(.*\n(.*\n){0,3}.*csv\.writer\(", source)
