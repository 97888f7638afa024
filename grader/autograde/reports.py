"""What an autograde run leaves behind: results.json, feedback.html, grades.csv."""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from functools import cache
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    os.replace(tmp, path)


def write_results(out: Path, result: dict[str, Any]) -> Path:
    folder = out / result["student_id"] / result["assignment"]
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


def write_grades_csv(out: Path, results: list[dict[str, Any]], extra_rows: list[dict[str, Any]] = ()) -> Path:
    """One row per student and assignment, one column per test grade id, quoted for Excel/LMS.

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
        rows.append(
            [result["student_id"], result["assignment"], _number(result["score"]),
             _number(result["max_score"]), result["status"]]
            + [_number(points[c]) if c in points else "" for c in test_ids]
        )
    text = io.StringIO(newline="")
    writer = csv.writer(text, quoting=csv.QUOTE_NONNUMERIC)
    writer.writerow(["student_id", "assignment", "score", "max_score", "status", *test_ids])
    writer.writerows(rows)
    path = out / "grades.csv"
    write_atomically(path, text.getvalue())
    return path


def _column(test: dict[str, Any], assignment: str) -> str:
    """The grade id, prefixed by its notebook unless that is the assignment's own notebook."""
    if test["notebook"] == assignment:
        return test["grade_id"]
    return f"{test['notebook']}:{test['grade_id']}"


def _number(value: float) -> float | int:
    return int(value) if float(value).is_integer() else round(float(value), 4)


STATUS_COLOURS = {"passed": "#1a7f37", "failed": "#cf222e", "error": "#cf222e",
                  "timeout": "#9a6700", "needs_manual_grade": "#0969da", "not_run": "#6e7781"}


@cache
def _feedback_template() -> Any:
    from jinja2 import Environment, PackageLoader, select_autoescape

    environment = Environment(loader=PackageLoader("grader.autograde", "templates"),
                              autoescape=select_autoescape(["html", "j2"]))
    return environment.get_template("feedback.html.j2")


def feedback_html(result: dict[str, Any]) -> str:
    """A self-contained page the learner can read: score, notes, and one row per test."""
    return _feedback_template().render(result=result, colours=STATUS_COLOURS, number=_number)
