"""``python -m grader check NOTEBOOK``: a learner's self-check before handing in.

Runs every code cell of the notebook in a fresh child process (as a kernel would, in the
notebook's own folder) and prints, for each test cell, whether it passed and, if not, the
message of its check. Only the tests in the learner's copy run; grading adds hidden ones.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from grader.autograde.cells import describe_error, first_error, is_test_cell, stderr_text
from grader.autograde.child_report import read_report
from grader.autograde.sandbox import ChildJob, ForkServer, Isolation, Limits, ServerConfig, write_job_cells


@dataclass(frozen=True)
class TestOutcome:
    __test__ = False  # not a pytest test class

    grade_id: str
    points: float
    max_points: float
    passed: bool
    message: str


def check_notebook(path: Path, timeout: float = 120.0) -> list[TestOutcome]:
    """Run ``path`` in a fresh child process; one outcome per test cell, in order.

    The learner's own code on their own machine: no confinement, only limits, and the same
    rules as the grader for deciding that a test cell passed (``grader.autograde.cells``).
    """
    server = ForkServer(ServerConfig(Isolation.NONE))  # imports torch while we read the notebook
    from grader.autograde.submissions import read_notebook

    try:
        nb = read_notebook(path)
    except Exception:
        server.close()
        raise
    cells = {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    folder = Path(tempfile.mkdtemp(prefix="attention-check-"))
    try:
        with server:
            write_job_cells(folder, [(i, c.source, False) for i, c in cells.items()])
            (folder / "home").rmdir()
            (folder / "home").symlink_to(path.resolve().parent)  # the notebook's own folder
            finished = server.run(ChildJob("check", str(folder),
                                           Limits(timeout=timeout, file_bytes=2**30), record=False))
            report = read_report(folder / "report")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    outcomes = []
    for index, cell in cells.items():
        if not is_test_cell(cell):
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        max_points = float(cell.metadata.nbgrader.get("points", 0))
        line = report.get(index)
        if line is None:
            why = "timed out" if finished.timed_out else "the notebook stopped before it"
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False, f"did not run: {why}"))
            continue
        error, stderr = first_error(line.outputs), stderr_text(line.outputs)
        if error is not None:
            message = describe_error(error["ename"], error["evalue"])
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False, message))
        elif stderr is not None:
            outcomes.append(TestOutcome(grade_id, 0.0, max_points, False,
                                        "wrote to stderr, which scores 0: " + stderr[:300]))
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
