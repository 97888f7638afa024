"""Exports keep distinct student ids distinct (issue 29, round 3: exports).

The attack: a student named ``'=e1`` beside a classmate ``=e1``. The CSV guard writes
``=e1`` as ``'=e1``; when the export read grades.csv back by unescaping it, both became one
key, and the graded classmate's score was exported as "no submission". Here the ids that
escaping, spreadsheets or Unicode could merge are all graded, each with a score of its own,
and every format, with and without a roster, must give each one exactly its score:

- ``=e1`` and ``'=e1`` (and ``''=e1``), ``-1``, ``+x``, ``@1``, a tab in front;
- lookalikes: Latin ``e1``, Cyrillic ``е1``, fullwidth ``＝e1``, ``é`` composed and decomposed,
  ``ann`` and `` ann``; a roster's ``E1`` is not ``e1`` (matching is exact);
- a folder name that is not UTF-8 (``\\xff`` as a byte) and one that spells its escape
  (``\\xff`` as four characters): they would read the same in any CSV, so both are left
  out and named, never merged.

The export runs as the instructor does, through ``python -m grader export``, as root and as
uid 65534 owning OUT (``setpriv``).
"""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import tempfile
import unicodedata
from pathlib import Path

import pytest

from attention_learner.cell_rules import TestStatus
from grader.autograde.reports import write_grades_csv, write_results
from grader.autograde.results import SubmissionResult, TestResult
from grader.paths import ROOT
from tests.security.grade_as import hand_over, identity_prefix

pytestmark = [pytest.mark.security, pytest.mark.grading, pytest.mark.xdist_group("security")]

IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
A = "03_scaled_dot_product"
BYTE_ID = b"\xff".decode("utf-8", "surrogateescape")  # a folder name that is not UTF-8
IDS = [
    "=e1",
    "'=e1",
    "''=e1",
    "-1",
    "+x",
    "@1",
    "\tt",
    "e1",
    "\u0435" + "1",
    "\uff1de1",
    unicodedata.normalize("NFC", "caf\u00e9"),
    unicodedata.normalize("NFD", "caf\u00e9"),
    "ann",
    " ann",
]
ALIKE = [BYTE_ID, "\\xff"]  # read the same once written as text
SCORES = {student: float(n + 1) for n, student in enumerate([*IDS, *ALIKE])}


def _result(student: str, score: float) -> SubmissionResult:
    return SubmissionResult(
        student, A, "", "", tests=[TestResult(A, "test_sdpa", score, 100.0, TestStatus.PASSED)]
    )


def _text(cell: str) -> str:
    """What a cell says: the cell less the one leading quote the CSV guard adds."""
    return cell[1:] if cell.startswith("'") else cell


@pytest.fixture(scope="module", params=IDENTITIES)
def course(request):
    root = Path(tempfile.mkdtemp(prefix="attention-export-ids-"))
    os.chmod(root, 0o755)
    out = root / "out"
    results = [_result(student, score) for student, score in SCORES.items()]
    for result in results:
        write_results(out, result)
    write_grades_csv(out, results)
    roster = root / "roster.csv"
    with open(roster, "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["student_id", "name", "canvas_id", "sis_login_id", "idnumber"])
        for n, student in enumerate([*IDS, "\\xff", "E1"]):
            if student != "+x":  # graded, not on the roster
                writer.writerow([student, f"Student {n}", 1000 + n, f"login{n}", f"N{n}"])
    hand_over(request.param, root)
    prefix = identity_prefix(request.param)
    try:
        yield {"root": root, "out": out, "roster": roster, "prefix": prefix}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _export(course: dict, fmt: str, with_roster: bool) -> tuple[list[str], list[list[str]], str]:
    """The export's header, its students' rows and what the command printed."""
    target = course["root"] / f"{fmt}-{with_roster}.csv"
    command = [
        *course["prefix"],
        sys.executable,
        "-m",
        "grader",
        "export",
        str(course["out"]),
        "--format",
        fmt,
        "-o",
        str(target),
    ]
    if with_roster:
        command += ["--roster", str(course["roster"])]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        env={**os.environ, "HOME": str(course["root"])},
    )
    assert done.returncode == 0, done.stderr
    with open(target, newline="", encoding="utf-8") as handle:
        header, *rows = list(csv.reader(handle))
    return header, rows[1:] if fmt == "canvas" else rows, done.stdout  # Canvas's Points Possible row


# the column that names the student: the SIS login (canvas), the username (moodle), the id (wide)
LOGIN = {"canvas": 3, "moodle": 2, "wide": 0}
# with the roster's ids: the Canvas ID, Moodle's ID number, the student id
ROSTER_ID = {"canvas": 1, "moodle": 2, "wide": 0}


@pytest.mark.parametrize("fmt", ["canvas", "moodle", "wide"])
def test_every_distinct_id_keeps_its_own_score_without_a_roster(course, fmt):
    header, body, stdout = _export(course, fmt, with_roster=False)
    score = header.index(A)
    exported = [(_text(row[LOGIN[fmt]]), row[score]) for row in body]
    print(fmt, exported)
    assert sorted(exported) == sorted((student, f"{SCORES[student]:g}") for student in IDS)
    # the two that would read alike: both left out and named, never one row for two students
    assert "\\xff" not in {s for s, _ in exported}
    assert "their ids would read the same in the file (2)" in stdout


@pytest.mark.parametrize("fmt", ["canvas", "moodle", "wide"])
def test_every_distinct_id_keeps_its_own_score_with_a_roster(course, fmt):
    header, body, stdout = _export(course, fmt, with_roster=True)
    listed = [*IDS, "\\xff", "E1"]
    listed.remove("+x")
    score = header.index(A)
    by_key = {_text(row[ROSTER_ID[fmt]]): row[score] for row in body}
    assert len(by_key) == len(body) == len(listed)
    for n, student in enumerate([*IDS, "\\xff", "E1"]):
        if student == "+x":
            continue
        cell = {"canvas": str(1000 + n), "moodle": f"N{n}", "wide": student}[fmt]
        want = "" if student == "E1" else f"{SCORES[student]:g}"  # E1 is not e1: no submission
        assert by_key[cell] == want, (student, by_key[cell])
    assert (
        "not on the roster, left out (2): +x, \\xff" in stdout
        or "not on the roster, left out (2): \\xff, +x" in stdout
    )
    assert "no submission of" in stdout and "E1" in stdout
