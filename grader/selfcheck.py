"""``python -m grader check NOTEBOOK``: a learner's self-check, or an instructor's look at a submission.

Runs every code cell of the notebook in a fresh child process and prints, for each test cell,
whether it passed and, if not, the message of its check. Only the tests in the notebook run;
grading adds hidden ones. The report reads as the learner package's own ``attention-check``
(the same outcome record and report format), which runs the notebook in a plain Jupyter
kernel instead.

The child is confined exactly as ``python -m grader autograde`` confines a submission (the
same ``choose_isolation``, the same view, limits and identity; a few milliseconds): the
notebook may be anyone's, and its code must not write the caller's files (results, grades,
the gradebook, the grader package) or read what grading hides (``solutions/``, the grader's
code). It runs in ``/home/learner`` on a copy of the files beside it (regular files only,
symlinks never followed, within a submission's limits: :func:`copy_beside`), so whatever it
writes there is gone with it. ``unconfined`` (the command's ``--unconfined``) is for one's own
notebook: limits only, in its own folder.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from attention_learner.cell_rules import TestResult, TestStatus, cell_outcome, cell_points, is_test_cell
from attention_learner.notebook_check import format_report
from grader.autograde.child_report import read_report
from grader.autograde.folder_walk import SUBMISSION_LIMITS, FolderWalk, copy_walked_files, walk_folder
from grader.autograde.fork_client import ForkServer, choose_isolation, grading_config
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, ServerConfig, write_job_cells

__all__ = ["FolderRefused", "TestResult", "check_notebook", "format_report"]


class FolderRefused(ValueError):
    """The notebook's folder holds more than a submission may (autograde would refuse it)."""


def check_notebook(path: Path, timeout: float = 120.0, *, unconfined: bool = False) -> list[TestResult]:
    """Run ``path`` in a fresh child process; one outcome per test cell, in order.

    Confined as autograde confines a submission, unless ``unconfined`` (one's own notebook:
    limits only, in its own folder); raises ``IsolationUnavailable`` where the machine cannot
    confine. The same rules as the grader decide that a test cell passed
    (``attention_learner.cell_rules``).
    """
    isolation = Isolation.NONE if unconfined else choose_isolation(accept_weak=False)
    folder = Path(tempfile.mkdtemp(prefix="attention-check-"))
    try:
        config = ServerConfig(Isolation.NONE) if unconfined else grading_config(isolation, [folder])
        server = ForkServer(config)  # imports torch while we read the notebook
        try:
            cells, finished, report = _run(server, path, folder, timeout, unconfined)
        finally:
            server.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    outcomes = []
    for index, cell in cells.items():
        if not is_test_cell(cell):
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        max_points = cell_points(cell)
        line = report.get(index)
        if line is None:
            why = "timed out" if finished.timed_out else "the notebook stopped before it"
            outcomes.append(
                TestResult(path.stem, grade_id, 0.0, max_points, TestStatus.NOT_RUN, f"did not run: {why}")
            )
            continue
        status, message = cell_outcome(line.outputs)
        points = max_points if status is TestStatus.PASSED else 0.0
        outcomes.append(TestResult(path.stem, grade_id, points, max_points, status, message))
    return outcomes


def _run(server: ForkServer, path: Path, folder: Path, timeout: float, unconfined: bool):
    from grader.autograde.notebook_file import read_notebook

    nb = read_notebook(path)
    cells = {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    write_job_cells(folder, [(i, c.source, False) for i, c in cells.items()])
    if unconfined:  # the learner's own notebook, in its own folder
        (folder / "home").rmdir()
        (folder / "home").symlink_to(path.resolve().parent)
        limits = Limits(timeout=timeout, file_bytes=2**30)
    else:
        copy_beside(path.resolve().parent, folder / "home")
        limits = Limits(timeout=timeout)
    finished = server.run(ChildJob("check", str(folder), limits, record=False))
    return cells, finished, read_report(folder / "report")


def copy_beside(source: Path, home: Path) -> FolderWalk:
    """Copy the regular files under ``source`` into ``home`` as autograde gives a job the files
    beside its notebook: walked by the one walker (``folder_walk.walk_folder``, symlinks never
    followed) at autograde's own :data:`~grader.autograde.folder_walk.SUBMISSION_LIMITS`, so
    a check sees what grading would, and copied with the bytes the walk hashed. What was left
    out is in the walk's ``skipped`` and ``symlinks``; a folder grading would refuse (over the
    entries or bytes a submission may hold) raises :class:`FolderRefused`."""
    walk = walk_folder(source, SUBMISSION_LIMITS)
    if walk.problem:
        raise FolderRefused(f"{source}: {walk.problem}")
    copy_walked_files(walk.files, home)
    return walk
