"""The solution run's answer, kept across runs of one course: which checks each test cell makes.

It depends on nothing secret and on nothing a submission holds: only on the source folder's
bytes and the grader's code (and the learner package's). So it is stored in
``OUT/.cache/solution-<hash>.json``, named by the hash of both, written by the parent alone
with OUT's file mode, and read back by a later run of the same course instead of running the
source again. Any change to the source or to the grader names another file; a file that does
not read back as the checks it should hold is ignored (the source is run again).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from grader.autograde import reports
from grader.autograde.judging import ExpectedCheck
from grader.autograde.sources import SourceAssignment

FOLDER = ".cache"


def _path(out: Path, src: SourceAssignment, code: str) -> Path:
    key = hashlib.sha256(f"{src.name}\0{src.fingerprint}\0{code}".encode()).hexdigest()[:32]
    return out / FOLDER / f"solution-{key}.json"


def load(out: Path, src: SourceAssignment, code: str) -> bool:
    """Fill ``src.expected`` and its warnings from an earlier run; False when there is none."""
    path = _path(out, src, code)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        expected = {
            notebook: {
                grade_id: [ExpectedCheck(c["exercise"], c["seed"], c["params"]) for c in checks]
                for grade_id, checks in cells.items()
            }
            for notebook, cells in data["expected"].items()
        }
        warnings = [str(w) for w in data["warnings"]]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False
    if set(expected) != set(src.notebooks):
        return False
    src.expected, src.warnings = expected, src.warnings + warnings
    return True


def store(out: Path, src: SourceAssignment, code: str, warnings: list[str]) -> None:
    """Keep what the solution run found (``warnings``: the ones it added)."""
    data = {
        "expected": {
            notebook: {
                grade_id: [{"exercise": c.exercise, "seed": c.seed, "params": c.params} for c in checks]
                for grade_id, checks in cells.items()
            }
            for notebook, cells in src.expected.items()
        },
        "warnings": warnings,
    }
    reports.write_atomically(_path(out, src, code), json.dumps(data, sort_keys=True) + "\n")
