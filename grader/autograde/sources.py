"""The source assignments a run grades against: their notebooks, the files beside them, and
what their own run (the solution run) tells the parent: the checks each test cell makes.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from nbformat import NotebookNode

from attention_learner.cell_rules import first_error, is_test_cell
from grader.autograde.child_report import read_report
from grader.autograde.folder_walk import folder_fingerprint
from grader.autograde.judging import ExpectedCheck, expected_checks
from grader.autograde.notebook_file import read_notebook

if TYPE_CHECKING:
    from grader.autograde.pipeline import Run


@dataclass
class SourceAssignment:
    name: str
    folder: Path
    notebooks: dict[str, NotebookNode]  # name -> the source notebook (solutions, hidden tests)
    fingerprint: str
    expected: dict[str, dict[str, list[ExpectedCheck]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class SourceError(RuntimeError):
    """The source cannot be graded against (it does not run); nothing was graded."""


def load_sources(source: Path) -> dict[str, SourceAssignment]:
    """Every assignment folder of ``source`` that holds a notebook (symlinks not followed)."""
    return {
        p.name: SourceAssignment(
            p.name, p, {nb.stem: read_notebook(nb) for nb in sorted(p.glob("*.ipynb"))}, folder_fingerprint(p)
        )
        for p in sorted(source.iterdir())
        if p.is_dir() and not p.is_symlink() and any(p.glob("*.ipynb"))
    }


def code_cells(nb: NotebookNode) -> dict[int, NotebookNode]:
    """The notebook's code cells by their index among all cells."""
    return {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def solution_run(run: Run, src: SourceAssignment) -> None:
    """Run each source notebook once, confined like any submission, to learn each test's checks."""
    for name, nb in src.notebooks.items():
        cells = code_cells(nb)
        finished = run.server.run(run.new_job(cells, run.beside_files(src.folder)))
        report = read_report(Path(finished.job.folder) / "report")
        grade_id_of = {i: c.metadata.nbgrader["grade_id"] for i, c in cells.items() if is_test_cell(c)}
        if finished.timed_out or len(report) < len(cells):
            log = (Path(finished.job.folder) / "log").read_text(errors="replace")[-1500:]
            raise SourceError(
                f"the source notebook {src.name}/{name}.ipynb did not run to the end "
                f"in the grader; fix the source first{': ' + log if log else ''}"
            )
        failing = sorted(
            grade_id_of[i] for i, cell in report.items() if i in grade_id_of and first_error(cell.outputs)
        )
        if failing:  # nbgrader grades such a source anyway; so do we, on its rule alone
            src.warnings.append(
                f"{name}.ipynb: the source's own tests fail ({', '.join(failing)})"
                "; those tests are graded by nbgrader's rule only"
            )
        src.expected[name] = expected_checks(
            {i: c for i, c in report.items() if grade_id_of.get(i) not in failing}, grade_id_of
        )
        shutil.rmtree(finished.job.folder, ignore_errors=True)
