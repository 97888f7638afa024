"""``python -m grader export``: Canvas's and Moodle's import CSVs and the wide table, from an OUT.

The OUT here is written with the grader's own writers (results.json through
``reports.write_results``, grades.csv through ``reports.write_grades_csv``), so no grading
run is needed: two assignments, a late submission with a penalty, a student whose id and
name try to be spreadsheet formulas, a roster with a student who handed nothing in, and a
graded student who is not on the roster.
"""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from attention_learner.cell_rules import TestStatus
from grader.autograde.reports import write_grades_csv, write_results
from grader.autograde.results import SubmissionResult, TestResult
from grader.export import ExportError, export

A, B = "03_scaled_dot_product", "04_multi_head"


def _result(student: str, assignment: str, points: list[float], penalty: float = 0.0) -> SubmissionResult:
    tests = [
        TestResult(assignment, f"test_{i}", float(p), 2.0, TestStatus.PASSED if p else TestStatus.FAILED)
        for i, p in enumerate(points)
    ]
    return SubmissionResult(student, assignment, "", "", penalty=penalty, tests=tests)


@pytest.fixture
def out(tmp_path):
    out = tmp_path / "grading"
    results = [
        _result("ann", A, [2, 2]),
        _result("ann", B, [2, 0, 2]),
        _result("bob", A, [2, 2], penalty=1.5),
        _result("-1", A, [0, 2]),
        _result("eve", A, [2, 2]),
    ]
    for r in results:
        write_results(out, r)
    write_grades_csv(out, results)
    write_results(out, _result("gone", A, [2, 2]))  # graded once, no longer in grades.csv
    return out


@pytest.fixture
def roster(tmp_path):
    path = tmp_path / "roster.csv"
    path.write_text(  # Excel's byte-order mark, Canvas-like headers, a formula in a name
        "\ufeffstudent_id,Name,Email,Section,Canvas ID,SIS User ID,SIS Login ID,idnumber,"
        f"{A} (4711)\n"
        'ann,"Lovelace, Ada",ada@example.org,S1,101,U1,ada,N1,\n'
        "bob,Bob Byron,bob@example.org,S2,102,U2,bob,N2,\n"
        '-1,=HYPERLINK("http://x"),m@example.org,S1,103,U3,minus,N3,\n'
        'carl,"Gauss, Carl",carl@example.org,S2,104,U4,carl,N4,\n',
        encoding="utf-8",
    )
    return path


def _rows(path: Path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.reader(handle))


def test_canvas_import_layout(out, roster, tmp_path):
    report = export(out, "canvas", tmp_path / "canvas.csv", roster=roster)
    header, points, *rows = _rows(tmp_path / "canvas.csv")
    assert header == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", f"{A} (4711)", B]
    assert points == ["    Points Possible", "", "", "", "", "4", "6"]
    by_id = {r[1]: r for r in rows}
    assert by_id["101"] == ["Lovelace, Ada", "101", "U1", "ada", "S1", "4", "4"]
    assert by_id["102"][5:] == ["2.5", ""]  # after the late penalty; no submission of B: empty
    assert by_id["104"][5:] == ["", ""]  # on the roster, nothing handed in: never a silent 0
    assert report.not_on_roster == ["eve"] and "gone" not in str(report.lines())
    assert report.missing == {A: ["carl"], B: ["bob", "-1", "carl"]}
    assert any("not on the roster" in line and "eve" in line for line in report.lines())


def test_missing_as_zero_is_asked_for(out, roster, tmp_path):
    export(out, "canvas", tmp_path / "canvas.csv", roster=roster, missing_as_zero=True)
    rows = {r[1]: r for r in _rows(tmp_path / "canvas.csv")[2:]}
    assert rows["104"][5:] == ["0", "0"]


def test_no_cell_is_a_formula(out, roster, tmp_path):
    for fmt in ("canvas", "moodle", "wide"):
        export(out, fmt, tmp_path / f"{fmt}.csv", roster=roster)
        cells = [c for row in _rows(tmp_path / f"{fmt}.csv") for c in row]
        assert not [
            c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r") or (c.startswith("-") and not _number(c))
        ], fmt
    wide = _rows(tmp_path / "wide.csv")
    assert ["'-1", '\'=HYPERLINK("http://x")'] == wide[3][:2]


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def test_moodle_identifier_and_grade_columns(out, roster, tmp_path):
    export(out, "moodle", tmp_path / "moodle.csv", roster=roster)
    header, *rows = _rows(tmp_path / "moodle.csv")
    assert header == ["First name", "Last name", "ID number", "Email address", A, B]
    assert rows[0] == ["Ada", "Lovelace", "N1", "ada@example.org", "4", "4"]
    assert rows[1][:3] == ["Bob", "Byron", "N2"]


def test_moodle_without_id_numbers_uses_the_username(out, tmp_path):
    roster = tmp_path / "plain.csv"
    roster.write_text("student_id,first_name,last_name,email\nann,Ada,Lovelace,ada@example.org\n")
    export(out, "moodle", tmp_path / "moodle.csv", roster=roster)
    assert _rows(tmp_path / "moodle.csv") == [
        ["First name", "Last name", "Username", "Email address", A, B],
        ["Ada", "Lovelace", "ann", "ada@example.org", "4", "4"],
    ]


def test_wide_has_every_test_prefixed_by_its_assignment(out, tmp_path):
    export(out, "wide", tmp_path / "wide.csv")  # no roster: every graded student
    header, *rows = _rows(tmp_path / "wide.csv")
    assert header == [
        "student_id",
        A,
        B,
        f"{A}:test_0",
        f"{A}:test_1",
        f"{A}:penalty",
        f"{B}:test_0",
        f"{B}:test_1",
        f"{B}:test_2",
    ]
    by_id = {r[0]: r for r in rows}
    assert set(by_id) == {"ann", "bob", "'-1", "eve"}
    assert by_id["bob"] == ["bob", "2.5", "", "2", "2", "1.5", "", "", ""]
    assert by_id["ann"][1:3] == ["4", "4"]


def test_refusals_say_why(out, tmp_path):
    with pytest.raises(ExportError, match="no student_id column"):
        bad = tmp_path / "bad.csv"
        bad.write_text("name,email\nAda,a@x\n")
        export(out, "canvas", tmp_path / "x.csv", roster=bad)
    with pytest.raises(ExportError, match="twice"):
        twice = tmp_path / "twice.csv"
        twice.write_text("student_id\nann\nann\n")
        export(out, "wide", tmp_path / "x.csv", roster=twice)
    with pytest.raises(ExportError, match="no graded submissions"):
        (tmp_path / "empty").mkdir()
        export(tmp_path / "empty", "wide", tmp_path / "x.csv")


def test_command_line(out, roster, tmp_path):
    target = tmp_path / "grades_canvas.csv"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "export",
            str(out),
            "--format",
            "canvas",
            "--roster",
            str(roster),
            "-o",
            str(target),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert f"wrote {target} (canvas): 4 students, 2 assignments" in run.stdout
    assert "not on the roster, left out (1): eve" in run.stdout
    assert _rows(target)[0][0] == "Student"
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "grader",
            "export",
            str(tmp_path / "nope"),
            "--format",
            "wide",
            "-o",
            str(target),
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
