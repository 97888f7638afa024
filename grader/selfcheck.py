"""``python -m grader check NOTEBOOK``: a learner's self-check before handing in.

Runs every code cell of the notebook in a fresh child process (as a kernel would, in the
notebook's own folder) and prints, for each test cell, whether it passed and, if not, the
message of its check. Only the tests in the learner's copy run; grading adds hidden ones.
The report reads as the learner package's own ``attention-check`` (the same outcome record
and report format), which runs the notebook in a plain Jupyter kernel instead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from attention_learner.cell_rules import TestStatus, cell_outcome, is_test_cell
from attention_learner.notebook_check import TestOutcome, format_report
from grader.autograde.child_report import read_report
from grader.autograde.sandbox import ChildJob, ForkServer, Isolation, Limits, ServerConfig, write_job_cells

__all__ = ["TestOutcome", "check_notebook", "format_report"]


def check_notebook(path: Path, timeout: float = 120.0) -> list[TestOutcome]:
    """Run ``path`` in a fresh child process; one outcome per test cell, in order.

    The learner's own code on their own machine: no confinement, only limits, and the same
    rules as the grader for deciding that a test cell passed (``attention_learner.cell_rules``).
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
        status, message = cell_outcome(line.outputs)
        passed = status is TestStatus.PASSED
        outcomes.append(TestOutcome(grade_id, max_points if passed else 0.0, max_points, passed, message))
    return outcomes
