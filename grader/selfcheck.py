"""``python -m grader check NOTEBOOK``: a learner's self-check before handing in.

Runs every code cell of the notebook in a fresh child process (as a kernel would, in the
notebook's own folder) and prints, for each test cell, whether it passed and, if not, the
message of its check. Only the tests in the learner's copy run; grading adds hidden ones.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.autograde.judging import describe_error
from grader.autograde.sandbox import ChildJob, ForkServer, Limits


@dataclass(frozen=True)
class TestOutcome:
    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str


def _is_test(cell: dict) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader") or {}
    return bool(meta.get("grade")) and not meta.get("solution")


def check_notebook(path: Path, timeout: float = 120.0) -> list[TestOutcome]:
    """Run ``path`` in a fresh child process; one outcome per test cell, in order."""
    server = ForkServer()  # starts importing torch while we read the notebook
    from grader.autograde.submissions import read_notebook

    try:
        nb = read_notebook(path)
    except Exception:
        server.close()
        raise
    cells = {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    with tempfile.TemporaryDirectory(prefix="attention-check-") as tmp, server:
        results = Path(tmp) / "results.jsonl"
        server.submit(ChildJob(
            key="check", cells=[(i, c.source) for i, c in cells.items()],
            workdir=str(path.resolve().parent), results_file=str(results), record_dir=None,
            log_file=str(Path(tmp) / "child.log"),
            limits=Limits(timeout=timeout, file_bytes=2**30),
        ))
        finished = []
        while not finished:
            finished = server.wait()
        lines = {}
        if results.exists():
            for raw in results.read_text(encoding="utf-8").splitlines():
                line = json.loads(raw)
                lines[line["index"]] = line
    outcomes = []
    for index, cell in cells.items():
        if not _is_test(cell):
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        max_points = float(cell.metadata.nbgrader.get("points", 0))
        line = lines.get(index)
        if line is None:
            why = "timed out" if finished[0].timed_out else "the notebook stopped before it"
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False, f"did not run: {why}"))
            continue
        cell.outputs = line["outputs"]
        error = next((o for o in line["outputs"] if o["output_type"] == "error"), None)
        stderr = next((o for o in line["outputs"] if o["output_type"] == "stream"
                       and o["name"] == "stderr"), None)
        if error is not None:
            message = describe_error(error["ename"], error["evalue"])
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False, message))
        elif stderr is not None:
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False,
                                        "wrote to stderr, which scores 0: " + stderr["text"][:300]))
        else:
            outcomes.append(TestOutcome(grade_id, max_points, max_points, True, ""))
    return outcomes


def format_report(path: Path, outcomes: list[TestOutcome]) -> str:
    lines = [f"Checking {path.name} (visible tests only; grading adds hidden ones)", ""]
    for o in outcomes:
        mark = "PASS" if o.passed else "FAIL"
        lines.append(f"  {mark}  {o.grade_id}  ({o.points:g}/{o.max_points:g})")
        if o.message:
            lines += [f"        {m}" for m in o.message.splitlines()]
    score = sum(o.points for o in outcomes)
    total = sum(o.max_points for o in outcomes)
    passed = sum(o.passed for o in outcomes)
    lines += ["", f"{passed} of {len(outcomes)} visible tests pass: {score:g} of {total:g} points"]
    return "\n".join(lines)
