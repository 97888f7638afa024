"""The rules that decide points, as pure functions of what the parent holds: how a child
ended, each test cell's verdict, delegation, memory budgets. No sandbox is needed to run
them (``tests/test_scoring.py``): the pipeline feeds them a finished job's report.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from attention_learner.cell_rules import (
    Status,
    TestStatus,
    cell_outcome,
    cell_points,
    exercise_of,
    first_error,
    is_grade_cell,
    is_manual_cell,
    is_solution_cell,
    is_test_cell,
    nbgrader_meta,
)
from grader.autograde.child_report import CellReport, ReportTooLarge, read_report
from grader.autograde.delegation import Delegation, analyse
from grader.autograde.executor import Finished
from grader.autograde.judging import CaseAnswers, ExpectedCheck, rejudge
from grader.autograde.notebook_file import notebook_node
from grader.autograde.results import ChildExit, TestResult


def run_outcome(finished: Finished) -> tuple[Status, str, dict[int, CellReport]]:
    """How the child ended, from the server's waitpid (never from the child), and its report."""
    folder = Path(finished.job.folder)
    try:
        report = read_report(folder / "report")
    except ReportTooLarge as exc:
        return Status.CRASHED, str(exc), {}
    if finished.timed_out:
        return (
            Status.TIMEOUT,
            (
                f"stopped after {finished.seconds:.0f} s (the time limit for a "
                "submission); tests that finished before keep their points"
            ),
            report,
        )
    if finished.exitcode == 0:
        return Status.GRADED, "", report
    try:
        log = (folder / "log").read_text(errors="replace")[-400:].strip()
    except OSError:
        log = ""
    explained = None if finished.exitcode is None else ChildExit.explain(finished.exitcode)
    if finished.exitcode is not None and finished.exitcode < 0:
        name = signal.Signals(-finished.exitcode).name
        why = f"the process was killed by {name}"
        why += {"SIGSEGV": " (a segmentation fault)", "SIGXCPU": " (it used up its CPU time)"}.get(name, "")
    elif explained is not None:
        why = explained
    else:
        why = f"the process exited with status {finished.exitcode} (os._exit or sys.exit?)"
    return Status.CRASHED, why + (f"; last output: {log}" if log else ""), report


def memory_budgets(
    cells: dict[int, NotebookNode],
    expected: dict[str, list[ExpectedCheck]],
    known: dict[str, int | None] | None = None,
) -> dict[int, int]:
    """Cell index -> the bytes it may allocate: the smallest ``memory_budget`` among the
    exercises its checks judge (a test cell of the memory case), for the test cells with one.
    ``known``: exercise -> its budget, as the judge pool gave them (else the exercises are
    imported here)."""
    if not any(expected.values()):  # the solution run: nothing known yet, nothing imported
        return {}
    if known is None:
        from grader.exercises import all_exercises

        known = {name: spec.memory_budget for name, spec in all_exercises().items()}
    budgets = {}
    for index, cell in cells.items():
        if not is_test_cell(cell):
            continue
        checks = expected.get(cell.metadata.nbgrader["grade_id"], [])
        found = [budget for c in checks if (budget := known.get(c.exercise))]
        if found:
            budgets[index] = min(found)
    return budgets


def delegation_of(
    submitted: NotebookNode, source: NotebookNode, report: dict[int, CellReport] | None = None
) -> Delegation:
    """What the submission's editable cells hand to an implementation of their own exercise
    (``delegation.py``), read against the source's locked cells; with the child's ``report``,
    also what its test cells' checks reached at run time. Editable: the solution cells and
    every other code cell but the source's test cells (sanitizing restored them, and their
    hidden part is not in the learner's copy) and copies of its other locked cells."""
    solutions = {c.metadata.nbgrader["grade_id"]: c.source for c in submitted.cells if is_solution_cell(c)}
    given = [c.source for c in source.cells if c.cell_type == "code" and not is_solution_cell(c)]
    locked = {
        nbgrader_meta(c).get("grade_id"): c.source
        for c in source.cells
        if c.cell_type == "code" and not is_solution_cell(c)
    }
    tests = {
        nbgrader_meta(c).get("grade_id") for c in source.cells if c.cell_type == "code" and is_test_cell(c)
    }
    editable = {
        f"added cell {i}": c.source
        for i, c in enumerate(submitted.cells)
        if c.cell_type == "code"
        and not is_solution_cell(c)
        and nbgrader_meta(c).get("grade_id") not in tests
        and locked.get(nbgrader_meta(c).get("grade_id")) != c.source
    }
    delegation = analyse(solutions, given, editable=editable)
    if report is not None:
        test_cells = {
            i: c.metadata.nbgrader["grade_id"]
            for i, c in enumerate(submitted.cells)
            if c.cell_type == "code" and is_test_cell(c)
        }
        delegation.add_trace(report, test_cells)
    return delegation


def score_notebook(
    notebook: str,
    nb: NotebookNode,
    report: dict[int, CellReport],
    expected: dict[str, list[ExpectedCheck]],
    *,
    timed_out: bool = False,
    salt: int = 0,
    delegation: Delegation | None = None,
    answers: CaseAnswers | None = None,
) -> list[TestResult]:
    """Put the child's outputs into the notebook and decide every test cell's points here.

    A test cell earns its points only if it ran, raised nothing, wrote nothing to stderr,
    and every check the solution run made in it arrived and passed in this process; in a
    notebook of this course (one whose solution run made re-judged checks) a test cell that
    makes none earns nothing, and the tests of an exercise whose solution delegates it
    (``delegation``) earn nothing either. The
    outputs a test cell keeps are its streams and its error: no value or display the
    learner's code produced there can reach nbgrader's scoring (a number would be read as
    partial credit), and a failed test gets an error output so that nbgrader's
    determine_grade, and hence the gradebook, agree with the decision taken here.
    """
    course = any(expected.values())  # its checks go through attention_learner's channel
    tests = []
    for index, cell in enumerate(nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            if is_manual_cell(cell):  # a written answer, graded by hand as in nbgrader
                tests.append(_graded_by_hand(notebook, cell))
            continue
        line = report.get(index)
        outputs = line.outputs if line else []
        if not is_test_cell(cell):
            cell.outputs = [notebook_node(o) for o in outputs]
            if is_manual_cell(cell):  # a graded solution cell: manual, as in nbgrader
                tests.append(_graded_by_hand(notebook, cell))
            continue
        kept = [o for o in outputs if o["output_type"] in ("stream", "error")]
        cell.outputs = [notebook_node(o) for o in kept]
        status, message = test_verdict(
            line, kept, expected.get(meta["grade_id"], []), timed_out, salt, answers
        )
        checks = expected.get(meta["grade_id"])
        if status is TestStatus.PASSED and course and checks is not None and not any(c.earns for c in checks):
            status, message = (
                TestStatus.FAILED,
                (
                    "this test cell makes no check(...) that the "
                    "grader judges against its reference, so it earns nothing"
                ),
            )
        if delegation is not None and exercise_of(meta["grade_id"]) in delegation.delegated:
            status, message = TestStatus.FAILED, delegation.message(exercise_of(meta["grade_id"]))
        max_points = cell_points(cell)
        if status is not TestStatus.PASSED and first_error(kept) is None:
            cell.outputs.append(
                notebook_node(
                    {
                        "output_type": "error",
                        "ename": "GradingFailure",
                        "evalue": message,
                        "traceback": [message],
                    }
                )
            )
        tests.append(
            TestResult(
                notebook,
                meta["grade_id"],
                max_points if status is TestStatus.PASSED else 0.0,
                max_points,
                status,
                message,
            )
        )
    return tests


def _graded_by_hand(notebook: str, cell: NotebookNode) -> TestResult:
    """A manually graded cell's outcome: 0 of its points until an instructor grades it."""
    grade_id = str(nbgrader_meta(cell)["grade_id"])
    return TestResult(
        notebook, grade_id, 0.0, cell_points(cell), TestStatus.NEEDS_MANUAL_GRADE, "graded by hand"
    )


def test_verdict(
    line: CellReport | None,
    outputs: list[dict[str, Any]],
    expected: list[ExpectedCheck],
    timed_out: bool,
    salt: int = 0,
    answers: CaseAnswers | None = None,
) -> tuple[TestStatus, str]:
    if line is None:
        if timed_out:
            return TestStatus.TIMEOUT, "the submission ran out of time before this test"
        return TestStatus.NOT_RUN, "this test never ran (the process stopped before it)"
    failure = rejudge(expected, line.records, salt, answers)
    if failure is not None and not failure.missing:
        return TestStatus.FAILED, failure.message  # judged here, where no learner code runs
    if failure is not None and first_error(outputs) is None:
        # no error, yet a check never reported: tampering or a lost record
        return TestStatus.FAILED, failure.message
    return cell_outcome(outputs)


def zero_tests(nb: NotebookNode, name: str, message: str) -> list[TestResult]:
    return [
        TestResult(name, c.metadata.nbgrader["grade_id"], 0.0, cell_points(c), TestStatus.NOT_RUN, message)
        for c in nb.cells
        if is_grade_cell(c)
    ]
