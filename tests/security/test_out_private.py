"""OUT is private by default: no other user reads the source's hidden tests, a classmate's
notebook or the gradebook.

A class is graded (``tests/security/hostile_class.py``) as root and as uid 65534, under a
umask of 000 (the widest an instructor's shell could have), into an OUT that exists already
with what an earlier run under an older rule left: OUT itself 0755, a folder 0777 and a
file 0666. Afterwards every path under OUT (OUT itself, the source copy, the autograded and
feedback notebooks, gradebook.db, grades.csv, nbgrader_config.py, results.json) has no bit
for others or the group; with ``--group-readable`` folders are 0750 and files 0640 (the
group reads, others never; a group write already there stays, as a TA's gradebook needs),
and OUT's set-group-ID bit, which hands the TA group down, is kept.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest

from tests.security.hostile_class import IDENTITIES, build, grade

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

CASES = [(identity, shared) for identity in IDENTITIES for shared in (False, True)]


def _earlier_run(out: Path) -> None:
    """What a run under the old rule (the umask's modes) left in OUT."""
    out.mkdir()
    (out / "honest" / "tiny").mkdir(parents=True)
    os.chmod(out / "honest", 0o777)
    (out / "honest" / "tiny" / "old_notes.txt").write_text("an older run's file")
    os.chmod(out / "honest" / "tiny" / "old_notes.txt", 0o666)


@pytest.fixture(scope="module", params=CASES, ids=[f"{i}-{'group' if s else 'private'}" for i, s in CASES])
def graded(request):
    identity, shared = request.param
    root = Path(tempfile.mkdtemp(prefix="attention-private-"))
    os.chmod(root, 0o755)
    try:
        build(root)
        _earlier_run(root / "out")
        if shared:
            os.chmod(root / "out", 0o2755)  # chgrp ta OUT && chmod g+s OUT, as INSTRUCTORS.md says
        run, out = grade(root, identity, *(["--group-readable"] if shared else []), umask=0o000)
        yield {"identity": identity, "shared": shared, "run": run, "out": out}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _modes(out: Path) -> dict[str, int]:
    """Every path under OUT (and OUT) -> its lstat mode, walked without following links."""
    found = {".": os.lstat(out).st_mode}
    for base, folders, files in os.walk(out):
        for name in folders + files:
            path = Path(base) / name
            found[str(path.relative_to(out))] = os.lstat(path).st_mode
    return found


def test_the_class_is_graded(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    assert "2 graded" in graded["run"].stdout


def test_every_path_of_out_is_private_or_the_groups(graded):
    modes = _modes(graded["out"])
    for needed in (
        "source/tiny/tiny.ipynb",
        "gradebook.db",
        "grades.csv",
        "nbgrader_config.py",
        "autograded/hostile/tiny/tiny.ipynb",
        "hostile/tiny/results.json",
        "feedback/hostile/tiny/tiny.html",
        "honest/tiny/old_notes.txt",
    ):
        assert needed in modes, needed  # the walk saw the files that matter
    assert not [p for p, m in modes.items() if stat.S_ISLNK(m)]
    wide = {p: oct(m) for p, m in modes.items() if m & (0o007 if graded["shared"] else 0o077)}
    assert not wide, wide


EARLIER = ("honest", "honest/tiny/old_notes.txt")  # left 0777 and 0666 by the earlier run


def test_folders_and_files_get_exactly_their_modes(graded):
    folder, file = (0o750, 0o640) if graded["shared"] else (0o700, 0o600)
    modes = {p: m for p, m in _modes(graded["out"]).items() if p not in EARLIER}
    assert {stat.S_IMODE(m) & 0o777 for m in modes.values() if stat.S_ISDIR(m)} == {folder}
    assert {stat.S_IMODE(m) & 0o777 for m in modes.values() if stat.S_ISREG(m)} == {file}
    earlier = {p: stat.S_IMODE(os.lstat(graded["out"] / p).st_mode) & 0o777 for p in EARLIER}
    # shared, a group write given by hand stays (a TA's gradebook); for others, nothing ever
    assert earlier == (
        {"honest": 0o770, "honest/tiny/old_notes.txt": 0o660}
        if graded["shared"]
        else {"honest": 0o700, "honest/tiny/old_notes.txt": 0o600}
    )


def test_the_set_group_id_bit_of_a_shared_out_is_kept(graded):
    if not graded["shared"]:
        pytest.skip("only a group-readable OUT is given to a group")
    assert os.lstat(graded["out"]).st_mode & stat.S_ISGID
