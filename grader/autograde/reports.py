"""What an autograde run leaves behind: results.json, feedback.html, grades.csv.

Everything here takes the typed results (:class:`~grader.autograde.results.SubmissionResult`);
results.json is the one place they become JSON (:func:`write_results_json`), and
:func:`read_results` reads them back (``results.read_result``, ``SubmissionResult.from_json``).

Two rules hold for everything written here. Text that came from outside (student ids, file
names, messages) may hold names that were not UTF-8 (surrogate escapes): they are written
escaped, one byte as ``\\xNN`` (:func:`printable`), so no writer can fail on them. Every CSV
goes through :func:`write_csv`, whose cells cannot be formulas (:func:`csv_cell`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

from attention_learner.cell_rules import grade_label
from grader.autograde import permissions
from grader.autograde.results import SubmissionResult, TestResult, read_result

_SURROGATE = re.compile("[\ud800-\udfff]")
# OWASP's list: a spreadsheet reads a cell that begins with one of these as a formula
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    # U+DC80..U+DCFF: one byte of a name that was not UTF-8 (os.fsdecode's surrogateescape)
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with each byte of a non-UTF-8 name as ``\\xNN`` (any other lone surrogate as
    ``\\uNNNN``): always encodable as UTF-8."""
    return _SURROGATE.sub(_escape, text)


def printable_tree(value: Any) -> Any:
    """``value`` (JSON-like: dicts, lists, strings, numbers) with every string :func:`printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable_tree(k): printable_tree(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [printable_tree(v) for v in value]
    return value


def printable_result(result: SubmissionResult) -> SubmissionResult:
    """``result`` with every text :func:`printable` (what the feedback pages show)."""

    def maybe(text: str | None) -> str | None:
        return None if text is None else printable(text)

    tests = [
        replace(
            t, notebook=printable(t.notebook), grade_id=printable(t.grade_id), message=printable(t.message)
        )
        for t in result.tests
    ]
    return replace(
        result,
        student_id=printable(result.student_id),
        assignment=printable(result.assignment),
        fingerprint=printable(result.fingerprint),
        isolation=printable(result.isolation),
        message=printable(result.message),
        flags=[printable(f) for f in result.flags],
        notes=[printable(n) for n in result.notes],
        tests=tests,
        timestamp=maybe(result.timestamp),
        arrived_at=maybe(result.arrived_at),
        claimed_at=maybe(result.claimed_at),
    )


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half.

    A lone surrogate left in ``text`` is written as ``\\udcxx`` rather than failing (in JSON
    that is the very escape that reads back as the same string)."""
    permissions.make_folders(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    os.fchmod(fd, permissions.file_mode())  # mkstemp's is 600, whatever the umask
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace", newline="") as handle:
        handle.write(text)
    os.replace(tmp, path)


def results_path(out: Path, result: SubmissionResult) -> Path:
    """OUT/<student>/<assignment>/results.json (the raw names: the folders')."""
    return out / result.student_id / result.assignment / "results.json"


def write_results(out: Path, result: SubmissionResult) -> Path:
    """The submission's feedback.html, then its results.json (last: it marks the job as done)."""
    path = results_path(out, result)
    write_atomically(path.parent / "feedback.html", feedback_html(printable_result(result)))
    return write_results_json(out, result)


def write_results_json(out: Path, result: SubmissionResult) -> Path:
    """results.json, the one place a result becomes JSON (every text :func:`printable`)."""
    path = results_path(out, result)
    write_atomically(path, json.dumps(printable_tree(result.to_json()), indent=1))
    return path


def read_results(out: Path) -> list[SubmissionResult]:
    """Every OUT/<student>/<assignment>/results.json that reads back as a result, by path."""
    results = []
    for path in sorted(out.glob("*/*/results.json")):
        result = read_result(path)
        if result is not None:
            results.append(result)
    return results


# after the tests, before the flags (which stay the last column): when it was handed in
DEADLINE_COLUMNS = ["timestamp", "late_by_seconds", "penalty"]


def write_grades_csv(
    out: Path, results: Sequence[SubmissionResult], extra_rows: Sequence[SubmissionResult] = ()
) -> Path:
    """One row per student and assignment: student_id, assignment, score, max_score, status,
    one column per test grade id, timestamp, late_by_seconds, penalty, then the result's
    flags (joined by "; "), quoted for Excel/LMS.

    ``extra_rows`` are results that have no folder in OUT (a student id that cannot name one).
    """
    results = [*results, *extra_rows]
    test_ids: list[str] = []
    for result in results:
        for test in result.tests:
            column = grade_column(test, result.assignment)
            if column not in test_ids:
                test_ids.append(column)
    rows: list[list[Any]] = []
    for result in sorted(results, key=lambda r: (r.assignment, r.student_id)):
        points = {grade_column(t, result.assignment): t.points for t in result.tests}
        late = result.late_by_seconds
        rows.append(
            [
                result.student_id,
                result.assignment,
                _number(result.score),
                _number(result.max_score),
                str(result.status),
            ]
            + [_number(points[c]) if c in points else "" for c in test_ids]
            + [
                result.timestamp or "",
                "" if late is None else _number(late),
                _number(result.penalty or 0),
            ]
            + ["; ".join(result.flags)]
        )
    # flags last (delegation, review, weak isolation), so that the test columns stay in place
    header = [
        "student_id",
        "assignment",
        "score",
        "max_score",
        "status",
        *test_ids,
        *DEADLINE_COLUMNS,
        "flags",
    ]
    path = out / "grades.csv"
    write_csv(path, header, rows)
    return path


def csv_cell(value: Any) -> Any:
    """A cell no spreadsheet will run: the rule for every CSV the grader writes.

    Numbers (int, float: scores, the grader's own) are written as numbers, a negative one
    included. Anything else is text: made :func:`printable`, and when it begins with ``=``,
    ``+``, ``-``, ``@``, a tab or a carriage return (OWASP's CSV-injection list) prefixed
    with a single quote, so ``=HYPERLINK(...)`` or a student id ``-1`` stays text. A text
    that begins with a quote gets one too, so no two printable texts make one cell (``=e1`` is
    ``'=e1``, ``'=e1`` is ``''=e1``): the text is the cell less one leading quote.
    """
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    text = printable("" if value is None else str(value))
    return "'" + text if text.startswith((*FORMULA_STARTS, "'")) else text


def write_csv(path: Path, header: list[Any], rows: Iterable[list[Any]]) -> None:
    """A CSV for spreadsheets and LMS imports: text quoted, numbers bare, every cell :func:`csv_cell`."""
    text = io.StringIO(newline="")
    writer = csv.writer(text, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow([csv_cell(c) for c in header])
    writer.writerows([csv_cell(c) for c in row] for row in rows)
    write_atomically(path, text.getvalue())


def grade_column(test: TestResult, assignment: str) -> str:
    """A test's column label (grades.csv, the export's wide format): ``grade_label``."""
    return grade_label(assignment, test.notebook, test.grade_id)


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 4)


STATUS_COLOURS = {
    "passed": "#1a7f37",
    "failed": "#cf222e",
    "error": "#cf222e",
    "timeout": "#9a6700",
    "needs_manual_grade": "#0969da",
    "not_run": "#6e7781",
}


@cache
def _feedback_template() -> Any:
    from jinja2 import Environment, PackageLoader, select_autoescape

    environment = Environment(
        loader=PackageLoader("grader.autograde", "templates"), autoescape=select_autoescape(["html", "j2"])
    )
    return environment.get_template("feedback.html.j2")


def feedback_html(
    result: SubmissionResult, notebook: str = "", queued: str = "", tests: Sequence[TestResult] | None = None
) -> str:
    """A self-contained page the learner can read: score, lateness, notes, one row per test.

    ``result`` is shown as it is (give it :func:`printable_result`). ``notebook``: the page
    of one notebook, whose ``tests`` are shown (the score stays the whole result's);
    ``queued``: a newer submission waits to be graded, and why (:func:`waiting_html`)."""
    from grader.deadlines import describe_lateness

    late = describe_lateness(result.late_by_seconds)
    return str(
        _feedback_template().render(
            result=result,
            status="waiting" if queued else str(result.status),
            tests=result.tests if tests is None else tests,
            colours=STATUS_COLOURS,
            number=_number,
            notebook=notebook,
            queued=queued,
            late=late,
        )
    )


def waiting_html(student: str, assignment: str, message: str) -> str:
    """The page of a submission that waits to be graded (``grader.watch``): ``message`` says
    why and until when."""
    waiting = SubmissionResult(student, assignment, fingerprint="", isolation="")
    return feedback_html(printable_result(waiting), queued=message)
