"""Run a source notebook's cells in this process, with solution cells swapped for other code.

Used by the bug zoo and the notebook tests: fast (no kernel, no fork), and each run gets a
fresh namespace. Global state a setup cell changes (torch's default dtype) is restored.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import nbformat
import torch
from IPython.core.inputtransformer2 import TransformerManager
from nbformat import NotebookNode

from attention_learner.cell_rules import is_test_cell
from grader.paths import CHAPTERS, SOLUTIONS

__all__ = ["is_test_cell"]  # re-exported for the tests that read notebooks

_TRANSFORMER = TransformerManager()  # the notebooks' install cell uses %pip, as Jupyter runs it


def source_notebook(assignment: str) -> NotebookNode:
    return nbformat.read(SOLUTIONS / assignment / f"{assignment}.ipynb", as_version=4)


def learner_notebook(assignment: str) -> NotebookNode:
    return nbformat.read(CHAPTERS / assignment / f"{assignment}.ipynb", as_version=4)


def grade_id(cell: NotebookNode) -> str | None:
    meta = cell.metadata.get("nbgrader")
    return meta.get("grade_id") if meta else None


def solved_notebook(assignment: str) -> NotebookNode:
    """The learner's notebook with every solution cell filled in from the source (no hidden tests)."""
    learner = learner_notebook(assignment)
    solved = {
        grade_id(c): c.source
        for c in source_notebook(assignment).cells
        if c.metadata.get("nbgrader", {}).get("solution")
    }
    for cell in learner.cells:
        if grade_id(cell) in solved:
            cell.source = solved[grade_id(cell)]
    return learner


def with_cell(nb: NotebookNode, cell_id: str, code: str) -> NotebookNode:
    """A copy of ``nb`` whose cell with grade id ``cell_id`` holds ``code``."""
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if grade_id(cell) == cell_id:
            cell.source = code
    return nb


def run_cells(nb: NotebookNode, replace: dict[str, str] | None = None) -> dict[str, str]:
    """Execute every code cell; return {test grade_id: "" if it passed, else its error}.

    A test cell also fails if it wrote to stderr (nbgrader scores that 0).
    """
    replace = replace or {}
    namespace: dict = {"__name__": "__main__"}
    outcome: dict[str, str] = {}
    dtype = torch.get_default_dtype()
    try:
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            source = _TRANSFORMER.transform_cell(replace.get(grade_id(cell) or "", cell.source))
            stderr = io.StringIO()
            error = ""
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                try:
                    exec(compile(source, f"<cell {grade_id(cell)}>", "exec"), namespace)
                except Exception as exc:  # noqa: BLE001 - we report every failure
                    error = f"{type(exc).__name__}: {exc}"
            if is_test_cell(cell):
                if not error and stderr.getvalue():
                    error = "wrote to stderr: " + stderr.getvalue()
                outcome[grade_id(cell)] = error
    finally:
        torch.set_default_dtype(dtype)
    return outcome


#: salts standing for the grader's fresh per-submission ones (fixed, so that a run repeats)
FRESH_SALTS = (11, 12, 13, 14, 15)


def fresh_draw_failures(nb: NotebookNode, replace: dict[str, str], salt: int) -> list[str]:
    """Run ``nb`` (solution cells swapped as in :func:`run_cells`) as the grader runs a
    submission under ``salt``: its checks draw fresh inputs and only record the raw outputs,
    which are then judged here against the reference. The failures, in words."""
    from attention_learner import recording
    from grader.autograde.judging import CaseAnswers, ExpectedCheck, judge_arrays, judge_close

    recorder = recording.start_recording(salt)
    try:
        run_cells(nb, replace)
    finally:
        recording.stop_recording()
    answers, failures = CaseAnswers(), []
    for records in recorder.records.values():
        for r in records:
            want = ExpectedCheck(r.exercise, r.seed, r.params)
            if r.outputs is None:
                message = r.error or "no output"
            elif r.exercise == recording.CLOSE_CHECK:
                message = judge_close(want, r.outputs)
            else:
                message = judge_arrays(want, r.outputs, salt, answers)
            if message:
                failures.append(f"salt {salt}, {r.exercise} {r.params}: {message}")
    return failures


def exercise_of(test_id: str) -> str:
    name = test_id.removeprefix("test_")
    return name.split("__", 1)[0]


def assignments() -> list[str]:
    return sorted(p.parent.name for p in Path(SOLUTIONS).glob("*/*.ipynb") if p.stem == p.parent.name)
