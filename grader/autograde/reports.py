"""What an autograde run leaves behind: results.json, feedback.html, grades.csv."""

from __future__ import annotations

import csv
import html
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that a reader sees the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
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
    path = out / "grades.csv"
    fd, tmp = tempfile.mkstemp(dir=out, prefix=".grades.csv.")
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, quoting=csv.QUOTE_NONNUMERIC)
        writer.writerow(["student_id", "assignment", "score", "max_score", "status", *test_ids])
        writer.writerows(rows)
    os.replace(tmp, path)
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


def feedback_html(result: dict[str, Any]) -> str:
    """A self-contained page the learner can read: score, notes, and one row per test."""
    e = html.escape
    rows = []
    for test in result["tests"]:
        colour = STATUS_COLOURS.get(test["status"], "#24292f")
        rows.append(
            "<tr>"
            f"<td><code>{e(test['grade_id'])}</code><br><small>{e(test['notebook'])}</small></td>"
            f"<td style='color:{colour};font-weight:600'>{e(test['status'].replace('_', ' '))}</td>"
            f"<td class='num'>{_number(test['points'])} / {_number(test['max_points'])}</td>"
            f"<td><pre>{e(test['message'])}</pre></td>"
            "</tr>"
        )
    notes = "".join(f"<li>{e(n)}</li>" for n in result.get("notes", []))
    flags = "".join(f"<li>{e(f)}</li>" for f in result.get("flags", []))
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>Feedback: {e(result['assignment'])} ({e(result['student_id'])})</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; color: #24292f; }}
table {{ border-collapse: collapse; width: 100%; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: .5rem; text-align: left; vertical-align: top; }}
td.num {{ white-space: nowrap; }}
pre {{ white-space: pre-wrap; margin: 0; font-size: .85rem; }}
.score {{ font-size: 1.6rem; font-weight: 700; }}
.flags {{ color: #cf222e; }}
</style></head><body>
<h1>{e(result['assignment'])}</h1>
<p>Student: <code>{e(result['student_id'])}</code> &middot; status: <b>{e(result['status'])}</b></p>
<p class="score">{_number(result['score'])} / {_number(result['max_score'])}</p>
<p>{e(result.get('message', ''))}</p>
{f'<h2>Flags</h2><ul class="flags">{flags}</ul>' if flags else ''}
{f'<h2>Notes</h2><ul>{notes}</ul>' if notes else ''}
<h2>Tests</h2>
<table><tr><th>test</th><th>status</th><th>points</th><th>what was checked</th></tr>
{''.join(rows)}
</table>
<p><small>Hidden tests are described by what they checked; their code is not shown.</small></p>
</body></html>
"""
