"""What an autograde run leaves behind: results.json, feedback.html, grades.csv.

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
from collections.abc import Iterable
from functools import cache
from pathlib import Path
from typing import Any

from grader.autograde import permissions

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


def write_results(out: Path, result: dict[str, Any]) -> Path:
    folder = out / result["student_id"] / result["assignment"]
    result = printable_tree(result)
    write_atomically(folder / "feedback.html", feedback_html(result))
    path = folder / "results.json"
    write_atomically(path, json.dumps(result, indent=1))  # last: it marks the job as done
    return path


def read_results(out: Path) -> list[dict[str, Any]]:
    results = []
    for path in sorted(out.glob("*/*/results.json")):
        try:
            results.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return results


# after the tests, before the flags (which stay the last column): when it was handed in
DEADLINE_COLUMNS = ["timestamp", "late_by_seconds", "penalty"]


def write_grades_csv(out: Path, results: list[dict[str, Any]], extra_rows: list[dict[str, Any]] = ()) -> Path:
    """One row per student and assignment: student_id, assignment, score, max_score, status,
    one column per test grade id, timestamp, late_by_seconds, penalty, then the result's
    flags (joined by "; "), quoted for Excel/LMS.

    ``extra_rows`` are results that have no folder in OUT (a student id that cannot name one).
    """
    results = [*results, *extra_rows]
    test_ids: list[str] = []
    for result in results:
        for test in result.get("tests", []):
            column = _column(test, result["assignment"])
            if column not in test_ids:
                test_ids.append(column)
    rows = []
    for result in sorted(results, key=lambda r: (str(r["assignment"]), str(r["student_id"]))):
        points = {_column(t, result["assignment"]): t["points"] for t in result.get("tests", [])}
        late = result.get("late_by_seconds")
        rows.append(
            [
                result["student_id"],
                result["assignment"],
                _number(result["score"]),
                _number(result["max_score"]),
                result["status"],
            ]
            + [_number(points[c]) if c in points else "" for c in test_ids]
            + [
                result.get("timestamp") or "",
                "" if late is None else _number(late),
                _number(result.get("penalty") or 0),
            ]
            + ["; ".join(result.get("flags", []))]
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


def _column(test: dict[str, Any], assignment: str) -> str:
    """The grade id, prefixed by its notebook unless that is the assignment's own notebook."""
    if test["notebook"] == assignment:
        return test["grade_id"]
    return f"{test['notebook']}:{test['grade_id']}"


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


def feedback_html(result: dict[str, Any], notebook: str = "", queued: str = "") -> str:
    """A self-contained page the learner can read: score, lateness, notes, one row per test.

    ``notebook``: the page of one notebook (its tests only); ``queued``: a newer submission
    waits to be graded, and why (``grader.watch``)."""
    from grader.deadlines import describe_lateness

    late = describe_lateness(result.get("late_by_seconds"))
    return _feedback_template().render(
        result=result, colours=STATUS_COLOURS, number=_number, notebook=notebook, queued=queued, late=late
    )
