"""The instructor's look at a submission: ``python -m grader check`` confines like autograde.

INSTRUCTORS.md tells instructors to run ``python -m grader check submitted/<id>/<a>/<a>.ipynb``
to see a submission as its author did. The notebook is the student's, so its code is
attacked here the way a student who read the grader would: it rewrites its own results.json
and grades.csv row and the gradebook in the instructor's OUT, plants a file inside the grader
package and beside it, writes into the notebook's own folder (the submission, as the
instructor keeps it) and reads ``solutions/``. Run as root and as uid 65534 (through
``setpriv``, the instructor being that user and owning every file here); nothing may change
and nothing may be read. ``--unconfined`` is for one's own notebook: it runs in the
notebook's folder and may write there.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import uuid
from pathlib import Path

import nbformat
import pytest

import grader
from grader.paths import SOLUTIONS
from tests.security.grade_as import run_as
from tests.security.test_folders_round2 import _meta

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
A = "tiny"
GRADER = Path(grader.__file__).resolve().parent


def _notebook(solution: str) -> nbformat.NotebookNode:
    """The tiny assignment's one exercise: ``solution`` as its cell, then its test (a point)."""
    return nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(solution, metadata=_meta("answer", solution=True)),
            nbformat.v4.new_code_cell(
                "assert answer() == 42", metadata=_meta("test_answer", solution=False, points=1)
            ),
        ],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
    )


def _attack(targets: dict[str, str]) -> str:
    """A solution cell that tries every write and read, then answers 42 only if every read
    failed. Whether a write got out is judged on the real files afterwards, not by the cell:
    a path that lies under /tmp (a checkout there) names, inside the job, a folder of the job's
    own private /tmp, where a write succeeds and stays."""
    return textwrap.dedent(f"""
        import glob, os
        targets = {targets!r}
        got = []
        for name in ('results', 'grades', 'gradebook', 'in_grader', 'beside_grader', 'own_folder'):
            try:
                with open(targets[name], 'a') as handle:
                    handle.write('{{"score": 100}}')
            except OSError:
                pass
        try:
            with open('planted_here.txt', 'w') as handle:  # the folder it runs in
                handle.write('x')
        except OSError:
            pass
        for path in glob.glob(targets['solutions'] + '/*/*.ipynb'):
            try:
                open(path).read(10)
                got.append('read ' + path)
            except OSError:
                pass
        if os.path.exists(targets['grader_checks']):
            got.append('sees the grader package')
        def answer():
            if got:
                raise RuntimeError('ATTACK WORKED: ' + '; '.join(got))
            return 42
    """)


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(params=IDENTITIES)
def instructor(request):
    identity = request.param
    root = Path(tempfile.mkdtemp(prefix="attention-look-"))
    os.chmod(root, 0o755)
    submission = root / "submitted" / "mallory" / A
    submission.mkdir(parents=True)
    out = root / "grading" / "mallory" / A
    out.mkdir(parents=True)
    (out / "results.json").write_text(json.dumps({"student_id": "mallory", "score": 0.0}))
    (root / "grading" / "grades.csv").write_text("student_id,assignment,score\nmallory,tiny,0.0\n")
    (root / "grading" / "gradebook.db").write_bytes(b"SQLite format 3\0" + bytes(100))
    (submission / "data.txt").write_text("beside the notebook")
    tag = uuid.uuid4().hex[:12]
    targets = {
        "results": str(out / "results.json"),
        "grades": str(root / "grading" / "grades.csv"),
        "gradebook": str(root / "grading" / "gradebook.db"),
        "in_grader": str(GRADER / f"planted_{tag}.py"),
        "beside_grader": str(GRADER.parent / f"planted_{tag}.txt"),
        "own_folder": str(submission / "planted.txt"),
        "solutions": str(SOLUTIONS),
        "grader_checks": str(GRADER / "checks.py"),
    }
    nbformat.write(_notebook(_attack(targets)), submission / f"{A}.ipynb")
    command = [sys.executable, "-m", "grader", "check", str(submission / f"{A}.ipynb")]
    command, _ = run_as(identity, command, root)
    try:
        yield {"command": command, "root": root, "targets": targets, "submission": submission}
    finally:
        for name in ("in_grader", "beside_grader"):
            Path(targets[name]).unlink(missing_ok=True)
        shutil.rmtree(root, ignore_errors=True)


def test_a_checked_notebook_changes_and_reads_nothing(instructor):
    before = _digest(instructor["root"])
    run = subprocess.run(
        instructor["command"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=instructor["submission"],
        env=dict(os.environ, HOME=str(instructor["root"])),
    )
    assert _digest(instructor["root"]) == before, "the notebook changed the instructor's files"
    for name in ("in_grader", "beside_grader", "own_folder"):
        assert not Path(instructor["targets"][name]).exists(), name
    assert not (instructor["submission"] / "planted_here.txt").exists()
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert "PASS  test_answer" in run.stdout, run.stdout
    assert "ATTACK WORKED" not in run.stdout


@pytest.mark.parametrize("identity", IDENTITIES)
def test_unconfined_runs_ones_own_notebook_in_its_folder(identity):
    root = Path(tempfile.mkdtemp(prefix="attention-own-"))
    os.chmod(root, 0o755)
    (root / "data.txt").write_text("41")
    nbformat.write(
        _notebook(
            "with open('data.txt') as f:\n    value = int(f.read()) + 1\n"
            "with open('written.txt', 'w') as f:\n    f.write('mine')\n"
            "def answer():\n    return value\n"
        ),
        root / f"{A}.ipynb",
    )
    command = [sys.executable, "-m", "grader", "check", "--unconfined", str(root / f"{A}.ipynb")]
    command, _ = run_as(identity, command, root)
    try:
        run = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=300,
            cwd=root,
            env=dict(os.environ, HOME=str(root)),
        )
        assert run.returncode == 0, run.stdout + run.stderr[-2000:]
        assert "PASS  test_answer" in run.stdout
        assert (root / "written.txt").read_text() == "mine"
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_confined_check_gets_the_files_beside_the_notebook(tmp_path):
    """Data beside the notebook is copied into the job's home (symlinks are not followed)."""
    os.chmod(tmp_path, 0o755)
    (tmp_path / "data.txt").write_text("41")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "more.txt").write_text("1")
    (tmp_path / "link.txt").symlink_to("/etc/hostname")
    nbformat.write(
        _notebook(
            "import os\n"
            "value = int(open('data.txt').read()) + int(open('sub/more.txt').read())\n"
            "assert not os.path.lexists('link.txt')\n"
            "def answer():\n    return value\n"
        ),
        tmp_path / f"{A}.ipynb",
    )
    run = subprocess.run(
        [sys.executable, "-m", "grader", "check", str(tmp_path / f"{A}.ipynb")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr[-2000:]
    assert "PASS  test_answer" in run.stdout
