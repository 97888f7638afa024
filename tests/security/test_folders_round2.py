"""Attacks through the submission folder itself, on discovery, fingerprints and copies.

One student's folder must never stop the class: a name that is not UTF-8, 1,100 nested
folders, a 32 GiB sparse file (never read), more entries or bytes than a submission may
hold, and, with the grader as an ordinary user, files and folders it cannot read. Each gets
its own ``invalid`` row with a message, or is graded with a note when only a file beside the
notebook was left out; every classmate is graded; the run exits 0. Then the same class is
graded again after a file in ``__pycache__`` changed or was deleted: those submissions are
re-graded, the rest are kept. Student ids that look like spreadsheet formulas come out of
grades.csv as text.

The source is a two-test assignment of its own (plain asserts), so a run costs a few seconds;
the folders are built at test time, as root and as uid 65534, like ``test_attacks.py``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grader.autograde.folder_walk import SUBMISSION_LIMITS, copy_walked_file, walk_folder
from tests.security.grade_as import NOBODY, autograde_command, run_as, switches

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

A = "tiny"
FULL = 2.0
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
SPARSE = 32 * 2**30
DEEP = 1_100
NOT_UTF8_ID = b"\xff\xfestudent"
FORMULA_IDS = ["+1", "-1", "@SUM(A1)", "=1+2"]
# only as uid 65534 do these mean anything: root reads a file of mode 000
UNREADABLE = ["locked_file", "locked_subfolder", "locked_notebook", "locked_assignment", "locked_student"]


def _meta(grade_id: str, *, solution: bool, points: float = 0) -> dict:
    return {
        "nbgrader": {
            "grade": not solution,
            "grade_id": grade_id,
            "locked": not solution,
            "schema_version": 3,
            "solution": solution,
            "task": False,
            **({} if solution else {"points": points}),
        }
    }


def _notebook(value_body: str = "    return 42") -> nbformat.NotebookNode:
    """The source (and an honest submission): two exercises, one test each, a point each."""
    cells = [
        nbformat.v4.new_code_cell(
            "### BEGIN SOLUTION\ndef answer():\n    return 42\n### END SOLUTION",
            metadata=_meta("answer", solution=True),
        ),
        nbformat.v4.new_code_cell(
            "assert answer() == 42", metadata=_meta("test_answer", solution=False, points=1)
        ),
        nbformat.v4.new_code_cell(
            f"### BEGIN SOLUTION\ndef value():\n{value_body}\n### END SOLUTION",
            metadata=_meta("value", solution=True),
        ),
        nbformat.v4.new_code_cell(
            "assert value() == 42", metadata=_meta("test_value", solution=False, points=1)
        ),
    ]
    return nbformat.v4.new_notebook(
        cells=cells,
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


READS_PYCACHE = _notebook(
    "    with open('__pycache__/value.txt') as handle:\n        return int(handle.read())"
)


READS_ODD_NAME = _notebook(
    "    import os\n    return 42 if os.path.isfile(b'folder\\xfe/data\\xfd.txt') else 0"
)


def _hand_in(submitted: Path, student: str | bytes, nb=None) -> Path:
    folder = Path(os.fsdecode(os.path.join(os.fsencode(submitted), os.fsencode(student), A.encode())))
    folder.mkdir(parents=True)
    nbformat.write(nb or _notebook(), folder / f"{A}.ipynb")
    return folder


def _sparse(path: Path | bytes, size: int = SPARSE) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)


def _nest(folder: Path, levels: int, owner: int | None) -> None:
    """``levels`` folders ``d/d/...`` under ``folder`` through directory descriptors (their
    absolute paths would pass PATH_MAX), each owned by ``owner`` when given."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            if owner is not None:
                os.chown("d", owner, owner, dir_fd=fd, follow_symlinks=False)
            inner = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = inner
        with open(os.open("bottom.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as handle:
            handle.write("the bottom")
    finally:
        os.close(fd)


def _unnest(folder: Path) -> None:
    """Remove a ``d/d/...`` chain without recursion or long paths: lift d/d to d, repeatedly."""
    while (folder / "d").is_dir():
        for name in os.listdir(folder / "d"):
            if name != "d":
                os.unlink(folder / "d" / name)
        if (folder / "d" / "d").is_dir():
            os.rename(folder / "d" / "d", folder / "lifted")
            os.rmdir(folder / "d")
            os.rename(folder / "lifted", folder / "d")
        else:
            os.rmdir(folder / "d")


def _build_class(submitted: Path) -> dict[str, Path]:
    """Every attack, next to an honest classmate; returns folders to finish after chown."""
    _hand_in(submitted, "honest")
    for student in FORMULA_IDS:
        _hand_in(submitted, student)
    _sparse(_hand_in(submitted, "sparse_beside") / "big.bin")
    _sparse(_hand_in(submitted, "sparse_notebook") / f"{A}.ipynb")
    os.mkfifo(_hand_in(submitted, "fifo") / "pipe")  # opening it to read would block forever
    _hand_in(submitted, NOT_UTF8_ID)
    odd = os.fsencode(_hand_in(submitted, "odd_names", READS_ODD_NAME))
    os.mkdir(odd + b"/folder\xfe")
    Path(os.fsdecode(odd + b"/folder\xfe/data\xfd.txt")).write_text("copied, whatever its name")
    _sparse(odd + b"/huge\xff.bin")  # left out, so its name is in a note
    odd_notebook = _hand_in(submitted, "odd_notebook")
    os.rename(os.fsencode(odd_notebook / f"{A}.ipynb"), os.fsencode(odd_notebook) + b"/work\xff.ipynb")
    crowded = _hand_in(submitted, "crowded")
    for k in range(SUBMISSION_LIMITS.entries + 1):
        (crowded / f"f{k}").touch()
    heavy = _hand_in(submitted, "heavy")
    for name in ("a.bin", "b.bin"):
        _sparse(heavy / name, 40 * 2**20)  # 40 MB each as st_size: 80 MB, never read
    for student in ("pyc_changed", "pyc_deleted", "pyc_kept"):
        cache = _hand_in(submitted, student, READS_PYCACHE) / "__pycache__"
        cache.mkdir()
        (cache / "value.txt").write_text("42")
    later = {"deep": _hand_in(submitted, "deep")}
    for student in UNREADABLE:
        later[student] = _hand_in(submitted, student)
    (later["locked_file"] / "secret.txt").write_text("no one may read this")
    (later["locked_subfolder"] / "private").mkdir()
    (later["locked_subfolder"] / "private" / "x.txt").write_text("x")
    return later


def _lock(later: dict[str, Path], owner: int | None) -> list[Path]:
    """Deep nesting (after chown: a recursive walk could not chown it) and mode 000 entries."""
    _nest(later["deep"], DEEP, owner)
    locked = [
        later["locked_file"] / "secret.txt",
        later["locked_subfolder"] / "private",
        later["locked_notebook"] / f"{A}.ipynb",
        later["locked_assignment"],
        later["locked_student"].parent,
    ]
    for path in locked:
        os.chmod(path, 0)
    return locked


def _grade(command: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    started = time.monotonic()
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=cwd)
    run.seconds = time.monotonic() - started
    return run


@pytest.fixture(scope="module", params=IDENTITIES)
def graded(request):
    identity = request.param
    root = Path(tempfile.mkdtemp(prefix="attention-folders-"))
    os.chmod(root, 0o755)
    source, submitted, out = root / "source", root / "submitted", root / "out"
    (source / A).mkdir(parents=True)
    nbformat.write(_notebook(), source / A / f"{A}.ipynb")
    later = _build_class(submitted)
    command = autograde_command(submitted, out, source=source, timeout=20)
    command, env = run_as(identity, command, root, make=[out])
    owner = NOBODY if switches(identity) else None
    locked = _lock(later, owner)
    try:
        first = _grade(command, env, root)
        results = _results(out)
        cache = submitted / "pyc_changed" / A / "__pycache__" / "value.txt"
        cache.write_text("41")
        os.unlink(submitted / "pyc_deleted" / A / "__pycache__" / "value.txt")
        second = _grade(command, env, root)
        yield {
            "identity": identity,
            "out": out,
            "first": first,
            "second": second,
            "results": results,
            "rerun": _results(out),
        }
    finally:
        for path in locked:
            os.chmod(path, 0o755)
        _unnest(later["deep"])
        shutil.rmtree(root, ignore_errors=True)


def _results(out: Path) -> dict[str, dict]:
    found = {}
    for path in out.glob(f"*/{A}/results.json"):
        found[path.parent.parent.name] = json.loads(path.read_text(encoding="utf-8"))
    return found


def _grades_csv(out: Path) -> dict[str, dict]:
    with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def _everything(res: dict) -> str:
    return res["message"] + " " + " ".join(res["notes"])


def test_both_runs_finish_and_the_class_is_graded(graded):
    for run in (graded["first"], graded["second"]):
        assert run.returncode == 0, run.stderr[-3000:]
        assert run.seconds < 120, run.seconds  # nothing read 32 GiB
    assert graded["results"]["honest"]["score"] == FULL
    assert graded["results"]["honest"]["status"] == "graded"


def test_a_folder_nested_1100_deep_is_graded_without_its_depths(graded):
    res = graded["results"]["deep"]
    assert (res["status"], res["score"]) == ("graded", FULL), res
    assert f"more than {SUBMISSION_LIMITS.depth} levels deep" in _everything(res)


def test_a_32_gib_sparse_file_beside_the_notebook_is_left_out_unread(graded):
    res = graded["results"]["sparse_beside"]
    assert (res["status"], res["score"]) == ("graded", FULL), res
    assert "big.bin: 32,768 MB, over the 50 MB limit" in _everything(res)


def test_a_fifo_beside_the_notebook_is_left_out(graded):
    res = graded["results"]["fifo"]
    assert (res["status"], res["score"]) == ("graded", FULL), res
    assert "pipe: not a regular file" in _everything(res)


def test_a_32_gib_sparse_notebook_is_invalid(graded):
    res = graded["results"]["sparse_notebook"]
    assert (res["status"], res["score"]) == ("invalid", 0), res
    assert "over the 50 MB limit" in res["message"]


def test_too_many_entries_or_bytes_make_the_submission_invalid(graded):
    crowded, heavy = graded["results"]["crowded"], graded["results"]["heavy"]
    assert crowded["status"] == "invalid" and "more than 10,000 files and folders" in crowded["message"]
    assert heavy["status"] == "invalid" and "more than 64 MB" in heavy["message"]


def test_a_student_folder_name_that_is_not_utf8_is_an_escaped_invalid_row(graded):
    rows = _grades_csv(graded["out"])
    row = rows[r"\xff\xfestudent"]
    assert row["status"] == "invalid"
    assert rows["honest"]["status"] == "graded"


def test_file_names_that_are_not_utf8_are_copied_and_written_escaped(graded):
    res = graded["results"]["odd_names"]
    assert (res["status"], res["score"]) == ("graded", FULL), res
    assert r"huge\xff.bin: 32,768 MB" in _everything(res)
    feedback = (graded["out"] / "odd_names" / A / "feedback.html").read_text(encoding="utf-8")
    assert r"huge\xff.bin" in feedback
    renamed = graded["results"]["odd_notebook"]
    assert (renamed["status"], renamed["score"]) == ("graded", FULL), renamed
    assert r"graded work\xff.ipynb as tiny.ipynb" in _everything(renamed)


def test_formula_student_ids_are_text_in_grades_csv(graded):
    text = (graded["out"] / "grades.csv").read_text(encoding="utf-8")
    rows = _grades_csv(graded["out"])
    for student in FORMULA_IDS:
        assert rows["'" + student]["status"] == "graded", rows.keys()
        assert rows["'" + student]["score"] == "2"  # the grader's numbers stay numbers
        assert not re.search(rf'(^|,)"?{re.escape(student)}', text, re.M), student


@pytest.mark.parametrize("student", UNREADABLE)
def test_unreadable_entries_cost_that_submission_only(graded, student):
    res = graded["results"][student]
    if graded["identity"] == "root":  # root reads anything: nothing to refuse
        assert (res["status"], res["score"]) == ("graded", FULL), res
        return
    if student in ("locked_file", "locked_subfolder"):  # beside the notebook: left out, noted
        assert (res["status"], res["score"]) == ("graded", FULL), res
        name = "secret.txt" if student == "locked_file" else "private"
        assert f"{name}: " in _everything(res) and "could not be read" in _everything(res), res
    else:
        assert (res["status"], res["score"]) == ("invalid", 0), res
        assert "could not be read" in res["message"], res


def test_a_rerun_regrades_after_a_pycache_file_changed_or_was_deleted(graded):
    first, rerun = graded["results"], graded["rerun"]
    for student in ("pyc_changed", "pyc_deleted", "pyc_kept"):
        assert first[student]["score"] == FULL, first[student]
    assert rerun["pyc_changed"]["score"] == 1.0, rerun["pyc_changed"]
    assert rerun["pyc_deleted"]["score"] == 1.0, rerun["pyc_deleted"]
    assert rerun["pyc_kept"] == first["pyc_kept"]
    assert rerun["honest"] == first["honest"]
    assert " 2 graded, " in " " + graded["second"].stdout, graded["second"].stdout


def test_the_walk_never_reads_a_sparse_file(tmp_path, monkeypatch):
    """Sizes are judged from lstat: the 32 GiB file is never opened, let alone read."""
    _sparse(tmp_path / "big.bin")
    (tmp_path / "small.txt").write_text("read")
    opened = []
    real_open = os.open
    monkeypatch.setattr(
        os, "open", lambda path, *a, **k: opened.append(str(path)) or real_open(path, *a, **k)
    )
    walk = walk_folder(tmp_path)
    assert [str(f.relative) for f in walk.files] == ["small.txt"]
    assert [str(s.relative) for s in walk.skipped] == ["big.bin"]
    assert not any(p.endswith("big.bin") for p in opened), opened


def test_the_job_gets_the_bytes_that_were_fingerprinted_or_nothing(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "data.txt").write_text("as walked")
    (walked,) = walk_folder(tmp_path / "in").files
    copy_walked_file(walked, tmp_path / "copy.txt")
    assert (tmp_path / "copy.txt").read_text() == "as walked"
    (tmp_path / "in" / "data.txt").write_text("changed after")
    with pytest.raises(ValueError, match="changed while it was being graded"):
        copy_walked_file(walked, tmp_path / "second.txt")
    assert not (tmp_path / "second.txt").exists()
