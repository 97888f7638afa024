"""Our autograder against plain ``nbgrader autograde``, on nbgrader's own test scenarios.

The scenarios and notebooks come from nbgrader's test suite
(``nbgrader/tests/apps/test_nbgrader_autograde.py`` and ``nbgrader/tests/apps/files/``):
unchanged and changed submissions, cheat attempts (the showtraceback exploit, an edited
grade cell, an edited locked cell), hidden tests (plain and AUTOTEST), several notebooks in
one assignment, a missing notebook, an extra notebook, a data file beside the notebook
(the source's copy wins), side effects, an infinite loop stopped by a timeout, and manually
graded cells. They are all put into ONE nbgrader course, one assignment ``ps1`` with six
notebooks and several students who each hand in some of them, so that nbgrader and our
grader each run once. Then every grade cell of every student is compared between the two
gradebooks (nbgrader's in the course root, ours in OUT/gradebook.db).

Where we differ on purpose (README.md, "Where we differ from plain nbgrader autograde"),
the test asserts OUR documented behaviour and says so: a deleted test cell is restored and
graded, a timeout applies to the whole submission, and a manually graded cell is
``needs_manual_grade`` with 0 points in results.json.

One deliberate change to nbgrader's setups: nbgrader's tests often use a notebook whose
solutions are stubs (submitted-unchanged.ipynb, test-hidden-tests.ipynb) as the SOURCE. Our
grader runs the source once to learn what each test checks; a test that fails in the source
can only be graded by nbgrader's own rule (did the cell raise), with a note, so here the
sources are versions that pass (submitted-changed.ipynb; the hidden-tests notebook with
test.ipynb's solutions). ``test_source_failing_its_own_tests`` records what happens with
nbgrader's original setup.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.grading, pytest.mark.slow]

nbgrader_pkg = pytest.importorskip("nbgrader")
from nbgrader.api import Gradebook  # noqa: E402

FILES = Path(nbgrader_pkg.__file__).parent / "tests" / "apps" / "files"
BIN = Path(sys.executable).parent
ASSIGNMENT = "ps1"
NBGRADER_CELL_TIMEOUT = 5  # nbgrader: seconds per cell
OUR_TIMEOUT = 10  # ours: seconds per submission (all its notebooks)

# What nbgrader's own tests assert, per (student, notebook): our setup must reproduce them,
# or the comparison below would prove little.
NBGRADER_EXPECTS = {
    ("unchanged", "p1"): 1,  # test_grade: foo
    ("changed", "p1"): 2,  # test_grade: bar
    ("cheat", "p1"): 1,  # test_showtraceback_exploit: spam
    ("cheat_alt", "p1"): 1,  # test_showtraceback_exploit: eggs
    ("hidden", "p5"): 1.5,  # test_hidden_tests_single_notebook
    ("autotest_unchanged", "p6"): 0,  # test_hidden_tests_autotest: foo
    ("autotest_wrong", "p6"): 0,  # bar
    ("autotest_right", "p6"): 1,  # baz
    ("missing", "p2"): 0,  # test_grade_missing_notebook
}


def _env() -> dict[str, str]:
    # nbgrader runs `alembic` by name: this interpreter's scripts come first
    return dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, cwd=cwd, env=_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{' '.join(map(str, cmd))} exited with {proc.returncode}\n"
        f"--- stdout\n{proc.stdout[-4000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )
    return proc


def _nbgrader(root: Path, *args: str) -> subprocess.CompletedProcess:
    return _run([str(BIN / "nbgrader"), *args, f"--CourseDirectory.root={root}"], cwd=root)


def _ours(root: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    return _run(
        [
            sys.executable,
            "-m",
            "grader",
            "autograde",
            "submitted",
            "--out",
            str(out),
            "--source",
            "source",
            "--quiet",
            *extra,
        ],
        cwd=root,
    )


def _read(name: str) -> nbformat.NotebookNode:
    return nbformat.read(FILES / name, as_version=4)


def _write(nb: nbformat.NotebookNode, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, path)


def _copy(name: str, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(FILES / name, path)


def _cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


def _hidden_source() -> nbformat.NotebookNode:
    """test-hidden-tests.ipynb with test.ipynb's (correct) solutions: it passes its tests."""
    nb, solved = _read("test-hidden-tests.ipynb"), _read("test.ipynb")
    for grade_id in ("squares", "sum_of_squares"):
        _cell(nb, grade_id).source = _cell(solved, grade_id).source
    return nb


def _hidden_submission() -> nbformat.NotebookNode:
    """What nbgrader releases from test-hidden-tests.ipynb: hard-coded answers that pass the
    visible tests and fail the hidden ones (its solution regions are empty)."""
    nb = _read("test-hidden-tests.ipynb")
    for cell in nb.cells:
        cell.source = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n", "", cell.source)
    return nb


def _build_course(root: Path) -> dict[str, list[str]]:
    """source/ps1/p1..p6 and submitted/<student>/ps1/; returns student -> notebooks handed in."""
    src = root / "source" / ASSIGNMENT
    _copy("submitted-changed.ipynb", src / "p1.ipynb")  # nbgrader uses -unchanged (see above)
    _copy("test.ipynb", src / "p2.ipynb")  # solutions, manually graded markdown and code
    _copy("open_relative_file.ipynb", src / "p3.ipynb")  # reads data.txt beside it
    _copy("data.txt", src / "data.txt")
    _copy("side-effects.ipynb", src / "p4.ipynb")  # writes side-effect.txt in its cwd
    _write(_hidden_source(), src / "p5.ipynb")  # ### BEGIN HIDDEN TESTS
    _copy("autotest-hidden.ipynb", src / "p6.ipynb")  # ### AUTOTEST inside hidden tests
    _copy("autotests.yml", src / "autotests.yml")  # nbgrader reads it beside the notebook

    sub = root / "submitted"
    students: dict[str, list[str]] = {}

    def hand_in(
        student: str, notebook: str, name: str | None = None, nb: nbformat.NotebookNode | None = None
    ) -> None:
        path = sub / student / ASSIGNMENT / f"{notebook}.ipynb"
        if nb is not None:
            _write(nb, path)
        else:
            _copy(name, path)
        students.setdefault(student, []).append(notebook)

    # test_grade, test_side_effects, test_grade_overwrite_files, several notebooks
    hand_in("unchanged", "p1", "submitted-unchanged.ipynb")
    hand_in("unchanged", "p2", "test.ipynb")
    hand_in("unchanged", "p3", "open_relative_file.ipynb")  # no data.txt: the source's is used
    hand_in("unchanged", "p4", "side-effects.ipynb")
    hand_in("changed", "p1", "submitted-changed.ipynb")
    hand_in("changed", "p3", "open_relative_file.ipynb")
    (sub / "changed" / ASSIGNMENT / "data.txt").write_text("only one line\n")  # source wins
    # test_showtraceback_exploit and the edited cells
    hand_in("cheat", "p1", "submitted-cheat-attempt.ipynb")
    hand_in("cheat_alt", "p1", "submitted-cheat-attempt-alternative.ipynb")
    hand_in("grade_cell_changed", "p1", "submitted-grade-cell-changed.ipynb")
    hand_in("locked_cell_changed", "p1", "submitted-locked-cell-changed.ipynb")
    # test_hidden_tests_single_notebook, test_hidden_tests_autotest
    hand_in("hidden", "p5", nb=_hidden_submission())
    hand_in("autotest_unchanged", "p6", "autotest-hidden-unchanged.ipynb")
    hand_in("autotest_wrong", "p6", "autotest-hidden-changed-wrong.ipynb")
    hand_in("autotest_right", "p6", "autotest-hidden-changed-right.ipynb")
    # test_grade_missing_notebook (p2 is missing), test_skip_extra_notebooks
    hand_in("missing", "p1", "submitted-changed.ipynb")
    _copy("submitted-unchanged.ipynb", sub / "missing" / ASSIGNMENT / "p1 copy.ipynb")
    # test_infinite_loop: the loop of infinite-loop.ipynb in the solution cell of p1
    loop = _read("submitted-changed.ipynb")
    _cell(loop, "set_a").source = _read("infinite-loop.ipynb").cells[0].source
    hand_in("loop", "p1", nb=loop)
    # a deleted test cell (nbgrader's default: not restored, scored 0)
    deleted = _read("submitted-changed.ipynb")
    deleted.cells = [c for c in deleted.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "bar"]
    hand_in("deleted_test", "p1", nb=deleted)
    return students


def _grades(db_path: Path, students) -> dict[tuple[str, str, str], dict]:
    """(student, notebook, grade_id) -> auto_score, score and needs_manual_grade."""
    grades = {}
    with Gradebook(f"sqlite:///{db_path}") as gb:
        for student in students:
            submission = gb.find_submission(ASSIGNMENT, student)
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    grades[(student, notebook.name, grade.name)] = {
                        "auto_score": grade.auto_score,
                        "score": float(grade.score),
                        "needs_manual_grade": bool(grade.needs_manual_grade),
                    }
    return grades


def _notebook_scores(db_path: Path, students) -> dict[tuple[str, str], float]:
    with Gradebook(f"sqlite:///{db_path}") as gb:
        return {
            (s, nb.name): float(nb.score)
            for s in students
            for nb in gb.find_submission(ASSIGNMENT, s).notebooks
        }


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("conformance")
    students = _build_course(root)
    _nbgrader(root, "generate_assignment", ASSIGNMENT)
    _nbgrader(root, "autograde", ASSIGNMENT, f"--Execute.timeout={NBGRADER_CELL_TIMEOUT}")
    out = root / "OUT"
    _ours(root, out, "--timeout", str(OUR_TIMEOUT), "--workers", "2")
    results = {s: json.loads((out / s / ASSIGNMENT / "results.json").read_text()) for s in students}
    return {
        "root": root,
        "out": out,
        "students": students,
        "results": results,
        "theirs": _grades(root / "gradebook.db", students),
        "ours": _grades(out / "gradebook.db", students),
        "their_notebooks": _notebook_scores(root / "gradebook.db", students),
        "our_notebooks": _notebook_scores(out / "gradebook.db", students),
    }


# Cells where we differ from nbgrader on purpose: (student, notebook, grade_id) -> our score.
DOCUMENTED_DIFFERENCES = {
    # README.md: a timeout applies to the whole submission. nbgrader interrupts the looping
    # cell after Execute.timeout and runs the rest (`foo` prints "Success!": 1 point); we stop
    # the submission, and tests that had not run by then get 0.
    ("loop", "p1", "foo"): 0.0,
    # README.md: deleted test cells are restored from the source and graded. nbgrader's
    # default leaves the grade without a score (0); we run the restored `assert a == 1`.
    ("deleted_test", "p1", "bar"): 1.0,
}


def test_setup_reproduces_nbgraders_own_expectations(graded):
    for key, score in NBGRADER_EXPECTS.items():
        assert graded["their_notebooks"][key] == score, key


def test_every_grade_cell_scores_as_in_nbgrader(graded):
    theirs, ours = graded["theirs"], graded["ours"]
    assert set(theirs) == set(ours), "the two gradebooks hold different grade cells"
    differences = []
    for key in sorted(theirs):
        want = DOCUMENTED_DIFFERENCES.get(key, theirs[key]["score"])
        if ours[key]["score"] != pytest.approx(want):
            differences.append(
                f"{key}: nbgrader {theirs[key]['score']} (expected here {want}), ours {ours[key]['score']}"
            )
    assert not differences, "\n".join(differences)


def test_results_json_agrees_with_nbgrader(graded):
    """results.json (what the instructor reads) carries the same points per test."""
    for student, result in graded["results"].items():
        for test in result["tests"]:
            key = (student, test["notebook"], test["grade_id"])
            want = DOCUMENTED_DIFFERENCES.get(key, graded["theirs"][key]["score"])
            assert test["points"] == pytest.approx(want), (key, test)


def test_manually_graded_cells(graded):
    """nbgrader's grade + solution cells, code and markdown, in submitted notebooks: the same
    auto_score and needs_manual_grade as nbgrader in the gradebook; in results.json,
    needs_manual_grade and 0 points (README.md), so max_score is nbgrader's too."""
    manual = {
        ("p1", "baz"),
        ("p1", "quux"),
        ("p2", "sum_of_squares_equation"),
        ("p2", "sum_of_squares_application"),
    }
    for student, notebooks in graded["students"].items():
        for notebook, grade_id in manual:
            if notebook not in notebooks:
                continue  # missing notebooks: test_missing_notebook_scores_zero
            key = (student, notebook, grade_id)
            theirs, ours = graded["theirs"][key], graded["ours"][key]
            assert ours["needs_manual_grade"] == theirs["needs_manual_grade"], key
            assert ours["auto_score"] == theirs["auto_score"], key
    # `changed` answered baz (markdown) and quux (code): both wait for the instructor
    tests = {(t["notebook"], t["grade_id"]): t for t in graded["results"]["changed"]["tests"]}
    assert graded["theirs"][("changed", "p1", "quux")]["needs_manual_grade"]
    assert tests[("p1", "quux")]["status"] == "needs_manual_grade"
    assert tests[("p1", "quux")]["points"] == 0
    assert graded["theirs"][("changed", "p1", "baz")]["needs_manual_grade"]
    assert ("p1", "baz") in tests, "the markdown answer cell is missing from results.json"
    assert tests[("p1", "baz")]["status"] == "needs_manual_grade"
    assert tests[("p1", "baz")]["points"] == 0


def test_max_score_as_in_nbgrader(graded):
    with Gradebook(f"sqlite:///{graded['root'] / 'gradebook.db'}") as gb:
        for student, result in graded["results"].items():
            want = gb.find_submission(ASSIGNMENT, student).max_score
            assert result["max_score"] == pytest.approx(want), student


def test_missing_notebook_scores_zero(graded):
    """nbgrader gives every grade cell of a notebook that was not handed in auto_score 0 and
    needs_manual_grade False (converters/autograde.py); its test_grade_missing_notebook
    asserts `not nb2.needs_manual_grade`."""
    for key, theirs in graded["theirs"].items():
        student, notebook, _ = key
        if notebook in graded["students"][student]:
            continue
        ours = graded["ours"][key]
        assert theirs["auto_score"] == 0 and not theirs["needs_manual_grade"], key
        assert ours["auto_score"] == theirs["auto_score"], key
        assert ours["needs_manual_grade"] == theirs["needs_manual_grade"], key


def test_cheat_attempts_gain_nothing(graded):
    """submitted-cheat-attempt*.ipynb replace IPython's showtraceback so that errors vanish;
    nbgrader reads the kernel's execute reply and still scores `assert a == 1` as 0."""
    for student in ("cheat", "cheat_alt", "grade_cell_changed", "locked_cell_changed"):
        tests = {t["grade_id"]: t for t in graded["results"][student]["tests"] if t["notebook"] == "p1"}
        assert tests["bar"]["points"] == 0, (student, tests["bar"])  # `a` is never set
        assert tests["foo"]["points"] == 1, (student, tests["foo"])
    notes = " ".join(graded["results"]["grade_cell_changed"]["notes"])
    assert "'bar'" in notes and "edited" in notes


def test_hidden_tests_are_graded(graded):
    hidden = {t["grade_id"]: t for t in graded["results"]["hidden"]["tests"] if t["notebook"] == "p5"}
    assert hidden["correct_squares"]["points"] == 0
    assert hidden["correct_sum_of_squares"]["points"] == 0
    assert graded["our_notebooks"][("hidden", "p5")] == 1.5
    for student, score in (("autotest_unchanged", 0), ("autotest_wrong", 0), ("autotest_right", 1)):
        assert graded["our_notebooks"][(student, "p6")] == score, student
    # the autograded notebook holds the hidden tests again, as nbgrader's does
    autograded = graded["out"] / "autograded" / "hidden" / ASSIGNMENT / "p5.ipynb"
    assert "BEGIN HIDDEN TESTS" in autograded.read_text()


def test_data_file_beside_the_notebook(graded):
    """The source's data.txt is used, whether or not the student sent another one."""
    for student in ("unchanged", "changed"):
        assert graded["ours"][(student, "p3", "open_file")]["score"] == 10, student


def test_several_notebooks_missing_and_extra(graded):
    result = graded["results"]["missing"]
    p2 = [t for t in result["tests"] if t["notebook"] == "p2"]
    assert p2 and all(t["points"] == 0 and t["status"] == "not_run" for t in p2)
    assert any("p2.ipynb" in n for n in result["notes"])
    assert not (graded["out"] / "autograded" / "missing" / ASSIGNMENT / "p1 copy.ipynb").exists()
    assert result["score"] == 2  # p1 as submitted-changed; the extra notebook is ignored
    assert graded["our_notebooks"][("missing", "p1")] == graded["their_notebooks"][("missing", "p1")]


def test_side_effects_stay_out_of_the_course(graded):
    root = graded["root"]
    # nbgrader runs in (and leaves the file in) its autograded folder, never in submitted/
    assert (root / "autograded" / "unchanged" / ASSIGNMENT / "side-effect.txt").exists()
    for folder in (
        root / "submitted" / "unchanged" / ASSIGNMENT,
        root / "source" / ASSIGNMENT,
        root,
        graded["out"],
    ):
        assert not (folder / "side-effect.txt").exists(), folder


def test_infinite_loop_stops_at_the_timeout(graded):
    result = graded["results"]["loop"]
    assert result["status"] == "timeout"  # README.md: the whole submission stops
    assert "time" in result["message"]
    tests = {t["grade_id"]: t for t in result["tests"] if t["notebook"] == "p1"}
    assert tests["foo"]["status"] == "timeout" and tests["foo"]["points"] == 0
    assert tests["bar"]["points"] == 0
    # the other submissions of the same run were graded as usual
    assert graded["results"]["changed"]["status"] == "graded"


def test_deleted_test_cell_is_restored(graded):
    result = graded["results"]["deleted_test"]
    assert any("'bar'" in n and "deleted" in n for n in result["notes"])
    bar = next(t for t in result["tests"] if t["grade_id"] == "bar")
    assert bar["status"] == "passed" and bar["points"] == 1


def test_source_failing_its_own_tests(tmp_path):
    """nbgrader's test_grade exactly: source and foo's submission are submitted-unchanged,
    whose test `bar` fails in the source itself. Like nbgrader we grade anyway (by nbgrader's
    rule alone for that test) and say so in a note."""
    _copy("submitted-unchanged.ipynb", tmp_path / "source" / ASSIGNMENT / "p1.ipynb")
    _copy("submitted-unchanged.ipynb", tmp_path / "submitted" / "foo" / ASSIGNMENT / "p1.ipynb")
    _copy("submitted-changed.ipynb", tmp_path / "submitted" / "bar" / ASSIGNMENT / "p1.ipynb")
    _ours(tmp_path, tmp_path / "OUT")
    with Gradebook(f"sqlite:///{tmp_path / 'OUT' / 'gradebook.db'}") as gb:
        assert gb.find_submission_notebook("p1", ASSIGNMENT, "foo").score == 1
        assert gb.find_submission_notebook("p1", ASSIGNMENT, "bar").score == 2
    notes = json.loads((tmp_path / "OUT" / "foo" / ASSIGNMENT / "results.json").read_text())["notes"]
    assert any("the source's own tests fail" in n for n in notes)
