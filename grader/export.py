"""``python -m grader export OUT --format canvas|moodle|wide [--roster ROSTER.csv] -o FILE``.

The grades of an autograde OUT (the submissions of its grades.csv) for a learning
management system. Scores are final, as ``nbgrader export`` reads them: from the gradebook
(OUT/gradebook.db, or ``db_url``), autograde plus any hand grade given in formgrader, minus
the late penalty (``grader.export_gradebook``); results.json supplies only what the gradebook
does not hold, and every disagreement between the two is a warning line of the report. Without
a gradebook the scores are results.json's, and the report says so. The formats:

- ``canvas``: the CSV Canvas's gradebook import reads, laid out as Canvas's own export:
  ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section``, then one column per
  assignment, and a first row ``Points Possible`` under the header. A column is named
  ``<assignment> (<Canvas assignment id>)`` when the roster's header carries such a column
  (a roster made from a Canvas export does), which Canvas matches to that assignment; a
  bare name makes Canvas offer to create the assignment or map it to one.
- ``moodle``: Moodle's "Import grades from CSV file": names, an identifier column to map
  to a user field (``ID number`` from the roster's ``idnumber``, else ``Username``), the
  ``Email address``, and one column per assignment to map to a grade item.
- ``wide``: one row per student, one column per assignment, then one per test named
  ``<assignment>:<grade id>``.

The roster (UTF-8 CSV, Excel's byte-order mark allowed) has a ``student_id`` column (the
grader's ids, the folders' names) and any of: ``name`` (or ``first_name``/``last_name``),
``email``, ``section``, ``canvas_id`` (or ``id``), ``sis_user_id``, ``sis_login_id``,
``idnumber``, ``username``. Every roster student gets a row: with no submission of an
assignment its cell is empty, never a silent 0, unless ``--missing-as-zero``. A graded
student who is not on the roster is left out and named in the report. Without a roster,
each graded student is a row, their student id standing for the LMS login (Canvas's
``SIS Login ID``, Moodle's ``Username``). Every cell goes through ``reports.write_csv``, so
no cell is a formula.

Ids are never read back from CSV text. A student is the raw name of their folder of OUT
(``OUT/<student>/<assignment>/results.json``), and grades.csv only says which of those
records are current: each record is escaped as ``write_grades_csv`` wrote it and compared
with the file's text, never the file unescaped into an id. Roster ids match exactly (no
case folding, trimming or Unicode normalisation: ``=e1``, ``'=e1``, ``е1`` in Cyrillic and
``e1`` are four students). Two students whose identifying cells would still read the same
in the file (a name that was not UTF-8 and one spelling its escape) are both left out and
named in the report, never merged.
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from grader.autograde.gradebook import GradebookUnavailable
from grader.autograde.reports import csv_cell, grade_column, printable, write_csv
from grader.autograde.results import SubmissionResult, read_result
from grader.export_gradebook import default_db_url, with_gradebook_scores

FORMATS = ("canvas", "moodle", "wide")
_ALIASES = {
    "student_id": "student_id",
    "student": "name",
    "name": "name",
    "full_name": "name",
    "first_name": "first_name",
    "last_name": "last_name",
    "email": "email",
    "email_address": "email",
    "section": "section",
    "canvas_id": "canvas_id",
    "id": "canvas_id",
    "sis_user_id": "sis_user_id",
    "sis_login_id": "sis_login_id",
    "idnumber": "idnumber",
    "id_number": "idnumber",
    "username": "username",
}
Person = dict[str, str]  # a roster row: field (canonical name) -> cell
_CANVAS_COLUMN = re.compile(r"(?P<name>.+) \((?P<id>\d+)\)")


class ExportError(ValueError):
    """OUT, the roster or FILE cannot be used; one line saying why."""


@dataclass
class ExportReport:
    path: Path
    fmt: str
    students: int
    assignments: list[str]
    missing: dict[str, list[str]] = field(default_factory=dict)  # assignment -> roster students
    not_on_roster: list[str] = field(default_factory=list)
    missing_as_zero: bool = False
    indistinct: list[str] = field(default_factory=list)  # students left out: their ids would read alike
    scores_from: str = ""  # the gradebook's URL, or "" for results.json
    warnings: list[str] = field(default_factory=list)  # results.json and the gradebook disagree

    def lines(self) -> list[str]:
        lines = [
            f"wrote {self.path} ({self.fmt}): {self.students} students, "
            f"{len(self.assignments)} assignments ({', '.join(self.assignments) or 'none'})",
            f"scores from the gradebook {self.scores_from}"
            if self.scores_from
            else "scores from results.json: OUT has no gradebook.db (give --db URL for another gradebook)",
        ]
        lines += self.warnings
        for assignment, students in sorted(self.missing.items()):
            how = "scored 0 (--missing-as-zero)" if self.missing_as_zero else "left empty"
            lines.append(
                f"no submission of {assignment} from {len(students)} roster students, {how}: "
                + _ids(students[:20])
                + (" ..." if len(students) > 20 else "")
            )
        if self.not_on_roster:
            lines.append(
                f"not on the roster, left out ({len(self.not_on_roster)}): " + _ids(self.not_on_roster)
            )
        if self.indistinct:
            lines.append(
                f"left out, their ids would read the same in the file ({len(self.indistinct)}): "
                + _ids(self.indistinct)
            )
        return lines


def _ids(students: list[str]) -> str:
    return ", ".join(printable(s) for s in students)


def export(
    out: Path,
    fmt: str,
    target: Path,
    roster: Path | None = None,
    missing_as_zero: bool = False,
    db_url: str | None = None,
) -> ExportReport:
    if fmt not in FORMATS:
        raise ExportError(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    results = graded_results(out)
    db_url = db_url or default_db_url(out)
    warnings: list[str] = []
    if db_url is not None:
        try:
            results, warnings = with_gradebook_scores(results, db_url)
        except GradebookUnavailable as exc:
            raise ExportError(str(exc)) from None
    people, canvas_ids = read_roster(roster) if roster is not None else (None, {})
    assignments = sorted({r.assignment for r in results})
    by_key = {(r.student_id, r.assignment): r for r in results}
    graded = sorted({r.student_id for r in results})
    if people is None:
        people = [{"student_id": s} for s in graded]
        not_on_roster = []
    else:
        listed = {p["student_id"] for p in people}
        not_on_roster = [s for s in graded if s not in listed]
    report = ExportReport(
        target,
        fmt,
        len(people),
        assignments,
        not_on_roster=not_on_roster,
        missing_as_zero=missing_as_zero,
        warnings=warnings,
        scores_from=_shown_url(db_url) if db_url else "",
    )
    for a in assignments:
        absent = [p["student_id"] for p in people if (p["student_id"], a) not in by_key]
        if absent:
            report.missing[a] = absent

    def score(student: str, assignment: str) -> Any:
        result = by_key.get((student, assignment))
        if result is None:
            return 0 if missing_as_zero else ""
        return _number(result.score)

    header, rows = {"canvas": _canvas, "moodle": _moodle, "wide": _wide}[fmt](
        people, assignments, results, score, canvas_ids, by_key, missing_as_zero
    )
    rows, report.indistinct = _distinct_rows(fmt, people, rows)
    report.students = len(people) - len(report.indistinct)
    try:
        write_csv(target, header, rows)
    except OSError as exc:
        raise ExportError(f"cannot write {target}: {exc.strerror or exc}") from None
    return report


def graded_results(out: Path) -> list[SubmissionResult]:
    """The results.json records of grades.csv's rows (all of OUT's if it has no grades.csv),
    each with ``student_id`` and ``assignment`` the raw names of its folders."""
    if not out.is_dir():
        raise ExportError(f"{out} is not a folder (give the --out folder of python -m grader autograde)")
    results = []
    for path in sorted(out.glob("*/*/results.json")):
        record = read_result(path)
        if record is not None:
            results.append(replace(record, student_id=path.parent.parent.name, assignment=path.parent.name))
    grades = out / "grades.csv"
    if grades.is_file():
        with open(grades, newline="", encoding="utf-8", errors="replace") as handle:
            rows = Counter(
                _row_key(r.get("student_id"), r.get("assignment"), r.get("status"), r.get("score"))
                for r in csv.DictReader(handle)
            )
        current = []
        for r in results:  # a row stands for one record: two that would write alike need two rows
            key = _row_key(csv_cell(r.student_id), csv_cell(r.assignment), csv_cell(str(r.status)), r.score)
            if rows[key] > 0:
                rows[key] -= 1
                current.append(r)
        results = current
    if not results:
        raise ExportError(f"{out} holds no graded submissions (no */*/results.json named in grades.csv)")
    return results


def _row_key(student: Any, assignment: Any, status: Any, score: Any) -> tuple[str, str, str, float | None]:
    """A grades.csv row as text (the record's fields escaped as ``write_grades_csv`` writes them)."""
    try:
        number = round(float(score), 4)
    except (TypeError, ValueError):
        number = None
    return str(student), str(assignment), str(status), number


def _distinct_rows(
    fmt: str, people: list[dict[str, str]], rows: list[list[Any]]
) -> tuple[list[list[Any]], list[str]]:
    """``rows`` (one per person, after Canvas's points row) less those whose identifying cells
    would read the same in the file as another's (both are left out, and returned)."""
    head = rows[:1] if fmt == "canvas" else []
    body = rows[len(head) :]
    columns = {"canvas": slice(1, 4), "moodle": slice(2, 3), "wide": slice(0, 1)}[fmt]
    idents = [tuple(str(csv_cell(c)) for c in row[columns]) for row in body]
    counts = Counter(ident for ident in idents if any(ident))  # no identifier at all: nothing to merge
    kept = [row for row, ident in zip(body, idents, strict=True) if counts[ident] <= 1]
    alike = [p["student_id"] for p, ident in zip(people, idents, strict=True) if counts[ident] > 1]
    return head + kept, alike


def read_roster(path: Path) -> tuple[list[dict[str, str]], dict[str, str]]:
    """The roster's people (fields by their canonical names) and any Canvas assignment ids
    its header carries (``<assignment> (<id>)``, as in Canvas's export)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            body = list(reader)
    except (OSError, UnicodeDecodeError) as exc:
        raise ExportError(f"cannot read the roster {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if not header:
        raise ExportError(f"the roster {path} is empty")
    names = [_ALIASES.get(re.sub(r"[\s-]+", "_", h.strip().lower())) for h in header]
    if "student_id" not in names:
        raise ExportError(f"the roster {path} has no student_id column (its columns: {', '.join(header)})")
    canvas_ids = {m["name"]: m["id"] for m in (_CANVAS_COLUMN.fullmatch(h.strip()) for h in header) if m}
    people, seen = [], set()
    for row in body:
        # the student id exactly as written (ids are folder names: a space is part of one)
        person = {
            n: (row[i] if n == "student_id" else row[i].strip()) if i < len(row) else ""
            for i, n in enumerate(names)
            if n
        }
        student = person.get("student_id", "")
        if not student or (student.strip() == "Points Possible" and not person.get("canvas_id")):
            continue  # Canvas's second row
        if student in seen:
            raise ExportError(f"the roster {path} lists the student id {student!r} twice")
        seen.add(student)
        people.append(person)
    return people, canvas_ids


def _display_name(person: dict[str, str]) -> str:
    if person.get("name"):
        return person["name"]
    last, first = person.get("last_name", ""), person.get("first_name", "")
    return f"{last}, {first}" if last and first else (last or first or person["student_id"])


def _max_scores(results: list[SubmissionResult]) -> dict[str, Any]:
    best: dict[str, float] = {}
    for r in results:
        best[r.assignment] = max(best.get(r.assignment, 0.0), r.max_score)
    return {a: _number(v) for a, v in best.items()}


def _canvas(
    people: list[Person],
    assignments: list[str],
    results: list[SubmissionResult],
    score: Callable[[str, str], Any],
    canvas_ids: dict[str, str],
    by_key: dict[tuple[str, str], SubmissionResult],
    missing_as_zero: bool,
) -> tuple[list[Any], list[list[Any]]]:
    columns = [f"{a} ({canvas_ids[a]})" if a in canvas_ids else a for a in assignments]
    header = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", *columns]
    points = _max_scores(results)
    rows = [["    Points Possible", "", "", "", "", *[points[a] for a in assignments]]]
    for p in people:
        # with no Canvas id at all, the student id stands for the login
        login = p.get("sis_login_id") or (
            "" if p.get("canvas_id") or p.get("sis_user_id") else p["student_id"]
        )
        rows.append(
            [
                _display_name(p),
                p.get("canvas_id", ""),
                p.get("sis_user_id", ""),
                login,
                p.get("section", ""),
                *[score(p["student_id"], a) for a in assignments],
            ]
        )
    return header, rows


def _moodle(
    people: list[Person],
    assignments: list[str],
    results: list[SubmissionResult],
    score: Callable[[str, str], Any],
    canvas_ids: dict[str, str],
    by_key: dict[tuple[str, str], SubmissionResult],
    missing_as_zero: bool,
) -> tuple[list[Any], list[list[Any]]]:
    use_idnumber = any(p.get("idnumber") for p in people)
    identifier = "ID number" if use_idnumber else "Username"
    header = ["First name", "Last name", identifier, "Email address", *assignments]
    rows = []
    for p in people:
        first, last = p.get("first_name", ""), p.get("last_name", "")
        if not first and not last and p.get("name"):  # "Last, First" (Canvas's) or "First Last"
            last, comma, first = p["name"].partition(",")
            if not comma:
                first, _, last = p["name"].partition(" ")
        first, last = first.strip(), last.strip()
        ident = p.get("idnumber", "") if use_idnumber else (p.get("username") or p["student_id"])
        scores = [score(p["student_id"], a) for a in assignments]
        rows.append([first, last, ident, p.get("email", ""), *scores])
    return header, rows


def _wide(
    people: list[Person],
    assignments: list[str],
    results: list[SubmissionResult],
    score: Callable[[str, str], Any],
    canvas_ids: dict[str, str],
    by_key: dict[tuple[str, str], SubmissionResult],
    missing_as_zero: bool,
) -> tuple[list[Any], list[list[Any]]]:
    tests: dict[str, list[str]] = {a: [] for a in assignments}
    for r in results:
        for t in r.tests:
            column = grade_column(t, r.assignment)
            if column not in tests[r.assignment]:
                tests[r.assignment].append(column)
    for r in results:  # the tests' points are before the late penalty, so show it where there is one
        if r.penalty and "penalty" not in tests[r.assignment]:
            tests[r.assignment].append("penalty")
    extra = [k for k in ("name", "email", "section") if any(p.get(k) for p in people)]
    header = ["student_id", *extra, *assignments, *[f"{a}:{c}" for a in assignments for c in tests[a]]]
    rows = []
    for p in people:
        cells: list[Any] = [p["student_id"], *[p.get(k, "") for k in extra]]
        cells += [score(p["student_id"], a) for a in assignments]
        for a in assignments:
            result = by_key.get((p["student_id"], a))
            points: dict[str, float] = (
                {} if result is None else {grade_column(t, a): t.points for t in result.tests}
            )
            if result is not None:
                points["penalty"] = result.penalty or 0
            empty = 0 if result is None and missing_as_zero else ""
            cells += [_number(points[c]) if c in points else empty for c in tests[a]]
        rows.append(cells)
    return header, rows


def _shown_url(db_url: str) -> str:
    import sqlalchemy

    try:
        return sqlalchemy.engine.make_url(db_url).render_as_string(hide_password=True)
    except Exception:
        return "(an unreadable URL)"


def _number(value: Any) -> int | float:
    value = float(value)
    return int(value) if value.is_integer() else round(value, 4)
