"""The pure scoring rules and the typed results (grader/autograde/scoring.py, results.py),
without a sandbox: how a child's end reads, each test cell's verdict, a notebook's points,
results.json written and read back. Each test runs in milliseconds."""

from __future__ import annotations

import json
import signal

import nbformat
import numpy as np
import pytest

from attention_learner.cell_rules import Status, TestStatus, cell_outcome
from attention_learner.recording import grading_seed
from grader.autograde.child_report import CellReport, Record
from grader.autograde.executor import Finished
from grader.autograde.fork_protocol import ChildJob
from grader.autograde.judging import ExpectedCheck
from grader.autograde.reports import write_results_json
from grader.autograde.results import ChildExit, SubmissionResult, Summary, TestResult, read_result, unchanged
from grader.autograde.scoring import run_outcome, score_notebook, zero_tests
from grader.autograde.scoring import test_verdict as verdict_of
from grader.exercises import get_exercise

CASE = ExpectedCheck("softmax_jacobian", 3, {})


def finished(tmp_path, exitcode: int | None = 0, timed_out: bool = False, log: str = "") -> Finished:
    (tmp_path / "report").write_text("")
    (tmp_path / "log").write_text(log)
    return Finished(ChildJob("j1", str(tmp_path)), exitcode, timed_out, 12.0)


@pytest.mark.parametrize(
    "exitcode,timed_out,status,words",
    [
        (0, False, Status.GRADED, ""),
        (0, True, Status.TIMEOUT, "stopped after 12 s"),
        (-signal.SIGSEGV, False, Status.CRASHED, "a segmentation fault"),
        (-signal.SIGXCPU, False, Status.CRASHED, "used up its CPU time"),
        (3, False, Status.CRASHED, "exited with status 3"),
        (ChildExit.CELL_LOOP_FAILED, False, Status.CRASHED, "the grader failed"),
        (ChildExit.JOB_NOT_STARTED, False, Status.CRASHED, "could not start"),
    ],
)
def test_how_a_child_ended_is_read_from_the_exit_code(tmp_path, exitcode, timed_out, status, words):
    got, message, report = run_outcome(finished(tmp_path, exitcode, timed_out, log="last words"))
    assert got is status and words in message and report == {}
    if status is Status.CRASHED:
        assert "last words" in message


def test_a_grader_failure_is_never_blamed_on_the_learner():
    assert "not your code" in ChildExit.explain(ChildExit.CELL_LOOP_FAILED)
    assert ChildExit.explain(1) is None


def outputs_of(answer: tuple[np.ndarray, np.ndarray], sign: float = 1.0) -> Record:
    """A child's record of the case: the Jacobian, and the input p as the call left it."""
    jacobian, p = answer
    return Record("softmax_jacobian", 3, {}, "", {"jacobian": sign * jacobian, "after_p": p})


def right_jacobian(salt: int = 0) -> tuple[np.ndarray, np.ndarray]:
    spec = get_exercise("softmax_jacobian")
    inputs = spec.make_inputs(np.random.default_rng(grading_seed(salt, CASE.exercise, CASE.seed, {})))
    return spec.expected(inputs)["jacobian"], inputs["p"]


def test_a_test_cell_passes_only_with_its_checks_passing_here():
    line = CellReport(5, [], [outputs_of(right_jacobian())])
    assert verdict_of(line, [], [CASE], timed_out=False) == (TestStatus.PASSED, "")
    wrong = CellReport(5, [], [outputs_of(right_jacobian(), sign=-1.0)])
    status, message = verdict_of(wrong, [], [CASE], timed_out=False)
    assert status is TestStatus.FAILED and "softmax_jacobian is wrong" in message
    missing = CellReport(5, [], [])
    assert verdict_of(missing, [], [CASE], timed_out=False)[0] is TestStatus.FAILED
    assert verdict_of(None, [], [CASE], timed_out=True)[0] is TestStatus.TIMEOUT
    assert verdict_of(None, [], [CASE], timed_out=False)[0] is TestStatus.NOT_RUN


def test_the_salt_draws_the_inputs_the_parent_judges_on():
    line = CellReport(5, [], [outputs_of(right_jacobian(salt=77))])
    assert verdict_of(line, [], [CASE], timed_out=False, salt=77)[0] is TestStatus.PASSED
    assert verdict_of(line, [], [CASE], timed_out=False, salt=78)[0] is TestStatus.FAILED


def test_stderr_and_errors_fail_a_cell_with_nbgraders_rule():
    stderr = {"output_type": "stream", "name": "stderr", "text": "x" * 900}
    assert cell_outcome([stderr])[1].endswith("x" * 500)
    error = {"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}
    assert cell_outcome([error]) == (TestStatus.ERROR, "ValueError: bad")
    stdout = {"output_type": "stream", "name": "stdout", "text": "hi"}
    assert cell_outcome([stdout]) == (TestStatus.PASSED, "")


def notebook(*cells: nbformat.NotebookNode) -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = list(cells)
    return nb


def graded_cell(grade_id: str, points: float = 2.0) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell("check(...)")
    cell.metadata["nbgrader"] = {
        "grade": True,
        "grade_id": grade_id,
        "locked": True,
        "points": points,
        "schema_version": 3,
        "solution": False,
    }
    return cell


def test_score_notebook_decides_every_cells_points_here():
    nb = notebook(
        nbformat.v4.new_markdown_cell("# t"), graded_cell("test_softmax_jacobian"), graded_cell("test_plain")
    )
    report = {1: CellReport(1, [], [outputs_of(right_jacobian())]), 2: CellReport(2, [], [])}
    expected = {"test_softmax_jacobian": [CASE], "test_plain": []}
    tests = score_notebook("nb", nb, report, expected)
    assert [(t.grade_id, t.points, t.status) for t in tests] == [
        ("test_softmax_jacobian", 2.0, TestStatus.PASSED),
        ("test_plain", 0.0, TestStatus.FAILED),  # a course cell with no check(...) earns nothing
    ]
    assert nb.cells[2].outputs[-1]["ename"] == "GradingFailure"  # so that nbgrader's grade agrees


def test_a_delegated_exercise_scores_zero():
    from grader.autograde.delegation import Delegation

    nb = notebook(graded_cell("test_softmax_jacobian"))
    report = {0: CellReport(0, [], [outputs_of(right_jacobian())])}
    delegation = Delegation({"softmax_jacobian": ["torch.autograd.functional.jacobian"]})
    (test,) = score_notebook("nb", nb, report, {"test_softmax_jacobian": [CASE]}, delegation=delegation)
    assert test.points == 0 and "torch.autograd.functional.jacobian" in test.message


def test_results_are_written_and_read_back_as_the_same_record(tmp_path):
    result = SubmissionResult(
        "ada",
        "03_scaled_dot_product",
        "f" * 8,
        "namespaces",
        flags=["review: x"],
        tests=[TestResult("nb", "test_softmax_jacobian", 2.0, 2.0, TestStatus.PASSED)],
    )
    path = write_results_json(tmp_path, result)  # the one writer
    assert path == tmp_path / "ada" / "03_scaled_dot_product" / "results.json"
    back = read_result(path)  # the one reader
    assert back == result and back.score == 2.0 and back.tests[0].exercise == "softmax_jacobian"
    assert json.loads(path.read_text())["tests"][0]["exercise"] == "softmax_jacobian"
    assert unchanged(path, "f" * 8)
    assert not unchanged(path, "g" * 8)
    assert not unchanged(tmp_path / "missing.json", "f" * 8)


def test_summary_counts_each_status_and_failed_test():
    summary = Summary()
    failing = TestResult("nb", "t", 0.0, 1.0, TestStatus.FAILED)
    summary.count(SubmissionResult("a", "x", "", "", tests=[failing]))
    summary.count(SubmissionResult("b", "x", "", "", status=Status.TIMEOUT))
    assert (summary.graded, summary.timeouts, summary.failed_tests) == (1, 1, 1)
    assert summary.line().startswith("1 graded, 0 unchanged")
    kept = SubmissionResult("c", "x", "", "", status=Status.INVALID)  # a row graded by an earlier run
    summary.tally([SubmissionResult("a", "x", "", "", tests=[failing, failing]), kept])
    assert (summary.rows, summary.invalid, summary.timeouts, summary.failed_tests) == (2, 1, 0, 2)
    assert "grades.csv: 2 rows, 1 graded, 0 timeouts, 0 crashes, 1 invalid, 2 failed tests" in summary.line()


def test_a_missing_notebook_scores_zero_on_every_graded_cell():
    nb = notebook(graded_cell("test_a", 1.0), graded_cell("test_b", 3.0))
    tests = zero_tests(nb, "nb", "the notebook is missing")
    assert [(t.points, t.max_points, t.status) for t in tests] == [
        (0.0, 1.0, TestStatus.NOT_RUN),
        (0.0, 3.0, TestStatus.NOT_RUN),
    ]
