"""The autograder end to end on chapter 3: honest, broken and hostile submissions.

One autograde run grades a whole class of crafted submissions (that is how the grader is
used, and it keeps the suite fast); each test then reads what that run wrote.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from grader.paths import SOLUTIONS
from tests.notebook_runner import grade_id, learner_notebook, solved_notebook, source_notebook, with_cell
from tests.results_roundtrip import round_trip_problems
from tests.security.grade_as import autograde_command

pytestmark = [pytest.mark.grading, pytest.mark.ch03, pytest.mark.xdist_group("grading")]

A = "03_scaled_dot_product"
FULL = 10.0
JACOBIAN = "def softmax_jacobian(p):\n    return np.diag(p) - np.outer(p, p)\n"  # correct


def _submissions() -> dict[str, object]:
    solved = solved_notebook(A)
    stub = learner_notebook(A)
    subs: dict[str, object] = {
        "correct": solved,
        "stub": stub,
        "partial": with_cell(
            solved, "softmax_jacobian", "def softmax_jacobian(p):\n    return np.outer(p, p) - np.diag(p)\n"
        ),
        "warns": with_cell(
            solved,
            "scaled_dot_product_attention",
            solved.cells[
                [grade_id(c) for c in solved.cells].index("scaled_dot_product_attention")
            ].source.replace(
                "    d_k = Q.shape[-1]",
                "    import warnings\n    warnings.warn('my own warning')\n    d_k = Q.shape[-1]",
                1,
            ),
        ),
        "infinite_loop": with_cell(solved, "softmax_jacobian", "while True:\n    pass\n"),
        "memory_hog": with_cell(
            solved, "softmax_jacobian", "hog = []\nwhile True:\n    hog.append(bytearray(10**8))\n"
        ),
        "os_exit": with_cell(solved, "softmax_jacobian", "import os\nos._exit(3)\n"),
        "segfault": with_cell(solved, "softmax_jacobian", "import ctypes\nctypes.string_at(0)\n"),
        "lingering_child": with_cell(
            solved,
            "softmax_jacobian",
            ("import subprocess\nsubprocess.Popen(['sleep', '1000'])\n" + JACOBIAN),
        ),
        "huge_output": with_cell(solved, "softmax_jacobian", ("print('x' * 5_000_000)\n" + JACOBIAN)),
        "monkeypatch": with_cell(
            stub,
            "softmax_jacobian",
            (
                "import numpy as np, torch, grader.checks as gc\n"
                "gc.judge = lambda *a, **k: ''\n"
                "gc.check = lambda *a, **k: None\n"
                "check = gc.check\n"
                "np.allclose = lambda *a, **k: True\n"
                "def check_close(*a, **k):\n    return None\n"
                "def softmax_jacobian(p):\n    return np.zeros((len(p), len(p)))\n"
            ),
        ),
        "uses_reference": with_cell(
            solved, "softmax_jacobian", ("from grader.reference import softmax_jacobian\n")
        ),
        "reads_solutions": with_cell(
            solved, "softmax_jacobian", ("import glob\nprint(glob.glob('/work/*/solutions/*'))\n" + JACOBIAN)
        ),
        "big_file": with_cell(
            solved,
            "softmax_jacobian",
            ("with open('big.bin', 'wb') as handle:\n    handle.write(b'0' * (200 * 2**20))\n"),
        ),
        "snoop": with_cell(
            solved,
            "softmax_jacobian",
            ("import os\nprint('CWD', os.getcwd(), sorted(os.listdir('.')))\n" + JACOBIAN),
        ),
    }
    deleted = nbformat.from_dict(solved)
    deleted.cells = [c for c in deleted.cells if grade_id(c) != "test_softmax_jacobian"]
    duplicated = nbformat.from_dict(solved)
    copy = next(c for c in duplicated.cells if grade_id(c) == "test_softmax_jacobian")
    duplicated.cells.insert(3, nbformat.from_dict(copy))
    retyped = nbformat.from_dict(stub)
    for cell in retyped.cells:
        if grade_id(cell) == "test_softmax_jacobian":
            cell.cell_type = "markdown"
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
    edited = with_cell(solved, "test_softmax_jacobian", "pass\n")
    emptied = with_cell(solved, "test_softmax_jacobian", "")
    stub_edited = with_cell(stub, "test_softmax_jacobian", "pass\n")
    subs.update(
        edited_tests=edited,
        emptied_tests=emptied,
        deleted_tests=deleted,
        duplicated_ids=duplicated,
        retyped_test_cell=retyped,
        stub_edited_tests=stub_edited,
    )
    return subs


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("class")
    submitted = root / "submitted"
    for student, nb in _submissions().items():
        folder = submitted / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
    for student, content in {"not_json": "{this is not json", "empty": ""}.items():
        folder = submitted / student / A
        folder.mkdir(parents=True)
        (folder / f"{A}.ipynb").write_text(content)
    (submitted / "no_notebook" / A).mkdir(parents=True)
    (submitted / "no_notebook" / A / "notes.txt").write_text("I forgot")
    (submitted / "renamed" / A).mkdir(parents=True)
    shutil.copyfile(submitted / "correct" / A / f"{A}.ipynb", submitted / "renamed" / A / "my work (1).ipynb")
    out = root / "out"
    command = autograde_command(submitted, out, timeout=20)
    phases = root / "phases.json"  # grader/autograde/phases.py: what the parent did, counted
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, "GRADER_PHASES": str(phases)}
    )
    assert run.returncode == 0, run.stderr
    return {
        "root": root,
        "submitted": submitted,
        "out": out,
        "command": command,
        "stdout": run.stdout,
        "phases": json.loads(phases.read_text()),
    }


def test_the_parent_computes_no_reference_answer(graded):
    """Issue 32's proxy for the parent's serial work: every job's references came from the
    judge pool, beside the workers; the parent's loop computed none (no timing here)."""
    phases = graded["phases"]
    assert phases["judge_pool.jobs"]["count"] >= 20  # a job per graded notebook
    assert phases["parent.references_computed"]["count"] == 0


def test_every_results_json_reads_back_as_written(graded):
    """The class's every results.json, read through ``SubmissionResult.from_json`` and written
    again with ``to_json``, is the file byte for byte (the one reader and the one writer agree;
    conftest's session hook checks every other grading of the run the same way)."""
    written = sorted(graded["out"].glob("*/*/results.json"))
    checked, problems = round_trip_problems(graded["out"])
    assert checked == len(written) >= 10
    assert problems == []


def result(graded, student) -> dict:
    return json.loads((graded["out"] / student / A / "results.json").read_text())


def by_id(res) -> dict[str, dict]:
    return {t["grade_id"]: t for t in res["tests"]}


def test_every_submission_has_a_row_and_results(graded):
    with open(graded["out"] / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    students = {p.name for p in graded["submitted"].iterdir()}
    assert set(rows) == students
    for student in students:
        assert (graded["out"] / student / A / "results.json").exists()
        assert (graded["out"] / student / A / "feedback.html").exists()
    assert "test_softmax_jacobian" in rows["correct"]


def test_solution_gets_full_marks_and_stub_zero(graded):
    assert result(graded, "correct")["score"] == FULL
    assert result(graded, "correct")["status"] == "graded"
    stub = result(graded, "stub")
    assert stub["score"] == 0 and stub["max_score"] == FULL and stub["status"] == "graded"
    assert all("not implemented" in t["message"] for t in stub["tests"])


def test_partial_and_warning_submissions(graded):
    partial = by_id(result(graded, "partial"))
    assert partial["test_softmax_jacobian"]["points"] == 0
    assert "sign is flipped" in partial["test_softmax_jacobian"]["message"]
    assert result(graded, "partial")["score"] == FULL - 2
    # A warning from the learner's code costs no points in this course's notebooks: it is
    # shown on stdout, in the autograded notebook and its feedback (nbgrader would score the
    # cell 0 if it reached stderr).
    warns = result(graded, "warns")
    assert warns["score"] == FULL, warns
    autograded = (graded["out"] / "autograded" / "warns" / A / f"{A}.ipynb").read_text()
    shown = "Your code warned (a warning costs no points in this course): UserWarning: my own warning"
    assert shown in autograded


@pytest.mark.parametrize(
    "student,status",
    [
        ("infinite_loop", "timeout"),
        ("os_exit", "crashed"),
        ("segfault", "crashed"),
    ],
)
def test_runaway_submissions_keep_earlier_points(graded, student, status):
    res = result(graded, student)
    assert res["status"] == status, res
    assert res["message"]
    tests = by_id(res)
    assert tests["test_scaled_dot_product_attention"]["points"] == 2  # ran before the crash
    assert tests["test_softmax_jacobian"]["points"] == 0


def test_memory_hog_is_contained(graded):
    res = result(graded, "memory_hog")
    assert res["status"] in ("graded", "timeout", "crashed")
    assert by_id(res)["test_scaled_dot_product_attention"]["points"] == 2
    assert by_id(res)["test_softmax_jacobian"]["points"] == 0


def test_lingering_children_are_killed(graded):
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 1000" not in ps
    assert result(graded, "lingering_child")["score"] == FULL


def test_huge_output_is_cut_not_fatal(graded):
    assert result(graded, "huge_output")["score"] == FULL
    autograded = graded["out"] / "autograded" / "huge_output" / A / f"{A}.ipynb"
    assert autograded.stat().st_size < 2_000_000


@pytest.mark.parametrize(
    "student,why",
    [
        ("not_json", "not valid notebook JSON"),
        ("empty", "empty"),
        ("no_notebook", "no notebook"),
    ],
)
def test_invalid_submissions(graded, student, why):
    res = result(graded, student)
    assert res["status"] == "invalid" and why in res["message"], res


def test_notebook_with_another_name_is_graded_with_a_note(graded):
    res = result(graded, "renamed")
    assert res["score"] == FULL
    assert any("another name" in n for n in res["notes"])


@pytest.mark.parametrize(
    "student,note",
    [
        ("edited_tests", "was edited"),
        ("emptied_tests", "was emptied"),
        ("deleted_tests", "was deleted"),
        ("duplicated_ids", "appeared 2 times"),
        ("retyped_test_cell", "type changed"),
    ],
)
def test_tampered_test_cells_are_restored(graded, student, note):
    res = result(graded, student)
    assert any(note in n for n in res["notes"]), res["notes"]
    if student != "retyped_test_cell":
        assert res["score"] == FULL  # restored tests run against a correct solution
    assert "test_softmax_jacobian" in by_id(res)


def test_emptying_tests_of_a_stub_gains_nothing(graded):
    assert result(graded, "stub_edited_tests")["score"] == 0


def test_monkeypatching_the_checks_gains_nothing(graded):
    res = result(graded, "monkeypatch")
    assert by_id(res)["test_softmax_jacobian"]["points"] == 0
    assert res["score"] == 0


def test_the_reference_cannot_be_imported_while_graded(graded):
    """The grading child has no grader package: the import is a plain error, the exercise 0."""
    res = result(graded, "uses_reference")
    jacobian = by_id(res)["test_softmax_jacobian"]
    assert jacobian["points"] == 0
    assert "softmax_jacobian" in jacobian["message"]
    assert res["score"] == FULL - 2
    nb = nbformat.read(graded["out"] / "autograded" / "uses_reference" / A / f"{A}.ipynb", as_version=4)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert any(o.ename == "ModuleNotFoundError" and "grader" in o.evalue for o in errors)


def test_the_solutions_folder_is_not_visible(graded):
    """Looking for solutions/ finds nothing: the function is the learner's own, full marks."""
    nb = nbformat.read(graded["out"] / "autograded" / "reads_solutions" / A / f"{A}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "[]" in printed and "solutions/" not in printed.replace("'/work/*/solutions/*'", "")
    assert result(graded, "reads_solutions")["score"] == FULL


def test_file_size_limit_fails_the_cell_not_the_run(graded):
    res = result(graded, "big_file")
    assert res["status"] == "graded"
    assert by_id(res)["test_scaled_dot_product_attention"]["points"] == 2
    assert by_id(res)["test_softmax_jacobian"]["points"] == 0
    assert not list(graded["root"].rglob("big.bin"))


def test_submission_runs_in_a_fresh_folder_without_grading_files(graded):
    nb = nbformat.read(graded["out"] / "autograded" / "snoop" / A / f"{A}.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    line = next(x for x in printed.splitlines() if x.startswith("CWD"))
    assert str(graded["out"]) not in line and str(graded["submitted"]) not in line
    assert "gradebook" not in line and "solutions" not in line and ".ipynb" not in line
    assert result(graded, "snoop")["score"] == FULL


def test_nbgrader_export_reads_our_gradebook(graded, tmp_path):
    env = dict(__import__("os").environ)
    env["PATH"] = str(Path(sys.executable).parent) + ":" + env.get("PATH", "")
    exported = tmp_path / "export.csv"
    run = subprocess.run(
        ["nbgrader", "export", f"--CourseDirectory.root={graded['out']}", f"--CsvExportPlugin.to={exported}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    with open(exported, newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert float(rows["correct"]["score"]) == FULL
    assert float(rows["partial"]["score"]) == FULL - 2


def test_gradebook_is_nbgraders(graded):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{graded['out'] / 'gradebook.db'}") as gb:
        assert gb.find_submission(A, "correct").score == FULL
        assert gb.find_submission(A, "partial").score == FULL - 2
    assert (graded["out"] / "autograded" / "correct" / A / f"{A}.ipynb").exists()


def test_rerun_is_idempotent_and_regrades_only_changes(graded, tmp_path):
    """On a copy of the run (the module's fixture stays as it was for the other tests)."""
    submitted, out = tmp_path / "submitted", tmp_path / "out"
    shutil.copytree(graded["submitted"], submitted, symlinks=True)
    shutil.copytree(graded["out"], out, symlinks=True)
    stamp = (out / "correct" / A / "results.json").stat().st_mtime_ns
    shutil.copyfile(submitted / "correct" / A / f"{A}.ipynb", submitted / "stub" / A / f"{A}.ipynb")
    command = [*graded["command"]]
    command[command.index(str(graded["submitted"]))] = str(submitted)
    command[command.index(str(graded["out"]))] = str(out)
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    before = [json.loads(p.read_text())["status"] for p in graded["out"].glob("*/*/results.json")]
    retried = sum(status in ("timeout", "crashed") for status in before)  # always re-tried
    assert f"{len(before) - 1 - retried} unchanged (kept)" in run.stdout, run.stdout
    assert (out / "correct" / A / "results.json").stat().st_mtime_ns == stamp
    assert json.loads((out / "stub" / A / "results.json").read_text())["score"] == FULL
    with open(out / "grades.csv", newline="") as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle)}
    assert float(rows["stub"]["score"]) == FULL and float(rows["correct"]["score"]) == FULL


def test_bad_usage_exits_2(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "grader", "autograde", str(tmp_path / "nope"), "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2
    run = subprocess.run([sys.executable, "-m", "grader", "autograde"], capture_output=True)
    assert run.returncode == 2


def test_check_command_reports_a_half_done_notebook(tmp_path):
    nb = with_cell(
        learner_notebook(A),
        "scaled_dot_product_attention",
        next(c.source for c in source_notebook(A).cells if grade_id(c) == "scaled_dot_product_attention"),
    )
    path = tmp_path / f"{A}.ipynb"
    nbformat.write(nb, path)
    run = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(path)], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 1
    assert "PASS  test_scaled_dot_product_attention " in run.stdout
    assert "FAIL  test_softmax_jacobian" in run.stdout
    assert "not implemented" in run.stdout
    assert SOLUTIONS.exists()


def test_interrupted_run_keeps_results_and_resumes(tmp_path):
    """Ctrl-C in the middle: results already written stay; the next run grades the rest."""
    import signal
    import time

    submitted = tmp_path / "submitted"
    solved = solved_notebook(A)
    slow = with_cell(solved, "softmax_jacobian", ("import time\ntime.sleep(3)\n" + JACOBIAN))
    for n in range(6):
        folder = submitted / f"s{n}" / A
        folder.mkdir(parents=True)
        nbformat.write(solved if n < 2 else slow, folder / f"{A}.ipynb")
    out = tmp_path / "out"
    command = autograde_command(submitted, out, workers=1)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list(out.glob("*/*/results.json"))) < 2:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    done = {p.parent.parent.name for p in out.glob("*/*/results.json")}
    assert 2 <= len(done) < 6
    stamps = {s: (out / s / A / "results.json").stat().st_mtime_ns for s in done}
    with open(out / "grades.csv", newline="") as handle:
        assert {r["student_id"] for r in csv.DictReader(handle)} == done
    run = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert f"{len(done)} unchanged (kept)" in run.stdout
    for student, stamp in stamps.items():
        assert (out / student / A / "results.json").stat().st_mtime_ns == stamp
    assert all(result({"out": out}, f"s{n}")["score"] == FULL for n in range(6))


def test_gradebook_url_is_honoured(tmp_path):
    submitted = tmp_path / "submitted" / "ann" / A
    submitted.mkdir(parents=True)
    nbformat.write(solved_notebook(A), submitted / f"{A}.ipynb")
    db = tmp_path / "elsewhere.db"
    run = subprocess.run(
        autograde_command(tmp_path / "submitted", tmp_path / "out", "--db", f"sqlite:///{db}", workers=None),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{db}") as gb:
        assert gb.find_submission(A, "ann").score == FULL
    assert not (tmp_path / "out" / "gradebook.db").exists()
