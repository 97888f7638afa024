"""results.json reads back as it was written (issue 33 item 3): the check behind the session
hook in ``conftest.py`` (every results.json under the run's temporary folders) and
``test_grading``'s ``test_every_results_json_reads_back_as_written``.

The grader makes JSON in one place (``reports.write_results_json``: ``SubmissionResult.to_json``)
and reads it back in one (``results.read_result``: ``SubmissionResult.from_json``), so a file
it wrote must come back byte for byte: ``json.dumps(from_json(x).to_json(), indent=1)`` is the
file's text. A key the reader drops, a value it changes (a string for a number, an int for a
float) or a key the writer adds that the reader ignores fails here.

A results.json counts as the grader's when it is a JSON object with ``tests`` and
``fingerprint`` (``to_json`` always writes both); a file some test planted by hand (an
attacker's forgery, a stand-in with two keys) is not checked.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grader.autograde.results import SubmissionResult

# folders no grading writes a results.json into, and large ones (a fresh venv, a built book)
PASSED_OVER = {"site-packages", "_build", "node_modules", "__pycache__", ".git"}


def round_trip_problems(root: Path) -> tuple[int, list[str]]:
    """(how many of the grader's results.json under ``root`` were checked, one line per file
    that does not read back as written). Unreadable folders and files are passed over."""
    checked, problems = 0, []
    for folder, dirs, files in os.walk(root, onerror=lambda error: None):
        dirs[:] = [d for d in dirs if d not in PASSED_OVER]
        if "results.json" not in files:
            continue
        path = Path(folder) / "results.json"
        try:
            text = path.read_text(encoding="utf-8")
            data = json.loads(text)
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict) or "tests" not in data or "fingerprint" not in data:
            continue
        checked += 1
        try:
            again = json.dumps(SubmissionResult.from_json(data).to_json(), indent=1)
        except (KeyError, TypeError, ValueError) as exc:
            problems.append(f"{path}: from_json refused it: {type(exc).__name__}: {exc}")
            continue
        if again != text:
            back = json.loads(again)
            changed = sorted(
                k for k in data.keys() | back.keys() if json.dumps(data.get(k)) != json.dumps(back.get(k))
            )
            problems.append(f"{path}: to_json(from_json(x)) != x (keys {changed or 'in another order'})")
    return checked, problems
