"""Grading on submit reads only what its student handed in, as that student (issue 29, items 2-3).

A watcher (``autograde --watch``, as tests/test_watch.py runs it) runs as root and as uid
65534 owning the course (``setpriv``); attacks are dropped into its inbound folder the way a
student who has read the grader's source would write them:

- the swap race: a folder whose listing is followed by 9,800 symlinks sorting first, swapped
  for a symlink to the source assignment (``renameat2(RENAME_EXCHANGE)``) the moment the
  watcher has listed it (an inotify watch on the folder says when);
- a classmate's id in a folder owned by another unix user; five made-up ids of one owner,
  under ``--max-per-hour 2``; a hard link to a file its owner could not read;
- a ``submission_secret.txt`` that is a symlink to 192 MiB, a ``timestamp.txt`` that is a
  symlink to a date before the deadline;
- a 14 MB notebook of 300,000 empty cells handed in with a classmate's.

Folders owned by other users need root to make them; as an ordinary user those tests skip.
"""

from __future__ import annotations

import base64
import csv
import ctypes
import io
import json
import os
import select
import shutil
import struct
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest

from tests.notebook_runner import learner_notebook, solved_notebook
from tests.security.test_exchange_hidden import WatchAs
from tests.test_watch import FULL

pytestmark = [pytest.mark.security, pytest.mark.grading, pytest.mark.slow, pytest.mark.xdist_group("watch")]

A = "03_scaled_dot_product"
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
ROOT_ONLY = pytest.mark.skipif(os.getuid() != 0, reason="folders owned by other users need root to make")
DAEMON, BIN, SYS = 1, 2, 3  # system users of every Debian/Ubuntu image, none of them a student
SOLUTION_MARKS = ("BEGIN SOLUTION", "BEGIN HIDDEN TESTS")
IN_CLOSE_NOWRITE = 0x10
RENAME_EXCHANGE = 2
AT_FDCWD = -100


def _course(identity: str, options: list[str] | None = None):
    root = Path(tempfile.mkdtemp(prefix="attention-watch3-"))
    os.chmod(root, 0o755)
    watch = WatchAs(root, identity)
    if options is not None:
        watch.options = options
    watch.start()
    return watch, root


def _stop(watch, root: Path) -> None:
    if watch.process is not None:
        watch.stop()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module", params=IDENTITIES)
def watch(request):
    watch, root = _course(request.param)
    try:
        yield watch
    finally:
        _stop(watch, root)


def _stage(
    watch, student: str, notebook, *, at: datetime | None = None, secret: bool = True, timestamp: bool = True
) -> Path:
    """An nbgrader submission folder, written outside INBOUND (moved in by :func:`_hand_in`)."""
    stamp = (at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S.%f UTC")
    random = base64.urlsafe_b64encode(os.urandom(9)).decode()
    folder = Path(tempfile.mkdtemp(dir=watch.root)) / f"{student}+{A}+{stamp}+{random}"
    folder.mkdir()
    os.chmod(folder.parent, 0o755)
    if isinstance(notebook, str):
        (folder / f"{A}.ipynb").write_text(notebook)
    else:
        nbformat.write(notebook, folder / f"{A}.ipynb")
    if timestamp:
        (folder / "timestamp.txt").write_text(stamp)
    if secret:
        (folder / "submission_secret.txt").write_text(os.urandom(64).hex())
    return folder


def _give(folder: Path, owner: int) -> None:
    """``folder`` and everything in it to the unix user ``owner`` (root only)."""
    for base, dirs, files in os.walk(folder):
        for name in [base, *(os.path.join(base, n) for n in dirs + files)]:
            os.chown(name, owner, owner, follow_symlinks=False)


def _hand_in(watch, folder: Path, owner: int | None = None) -> Path:
    """Give ``folder`` to ``owner`` if given, then move it into INBOUND at once."""
    if owner is not None:
        _give(folder, owner)
    target = watch.inbound / folder.name
    os.rename(folder, target)
    return target


def _result(watch, student: str) -> dict | None:
    try:
        return json.loads((watch.out / student / A / "results.json").read_text())
    except FileNotFoundError:
        return None


def _grades(watch) -> dict[str, dict[str, str]]:
    rows = csv.DictReader(io.StringIO((watch.out / "grades.csv").read_text()))
    return {row["student_id"]: row for row in rows if row["assignment"] == A}


def _marker(watch, student: str) -> None:
    """A classmate's ordinary submission, waited for: every arrival before it was looked at."""
    secret, _ = watch.drop(student, solved_notebook(A))
    assert "10 / 10" in watch.feedback(secret)
    time.sleep(2 * 0.5)  # two more looks at INBOUND


def _solution_text(folder: Path) -> list[str]:
    found = []
    for path in folder.rglob("*") if folder.exists() else []:
        if path.is_file() and not path.is_symlink():
            text = path.read_bytes().decode("utf-8", "replace")
            found += [f"{path}: {mark}" for mark in SOLUTION_MARKS if mark in text]
    return found


# ------------------------------------------------------------------ (a) the swap race


def _watch_listing(folder: Path) -> int:
    """An inotify descriptor that reports each close of ``folder`` opened for reading (the
    watch is on its inode, so it follows the folder wherever it is moved)."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_CLOEXEC)
    assert fd >= 0, os.strerror(ctypes.get_errno())
    watched = libc.inotify_add_watch(fd, os.fsencode(folder), IN_CLOSE_NOWRITE)
    assert watched >= 0, os.strerror(ctypes.get_errno())
    return fd


def _swap_when_listed(
    events: int, folder: Path, link: Path, swapped: threading.Event, stop: threading.Event
) -> None:
    """Exchange ``folder`` and ``link`` as soon as someone has read ``folder`` (``events``:
    :func:`_watch_listing`'s descriptor)."""
    libc = ctypes.CDLL(None, use_errno=True)
    while not stop.is_set():
        if not select.select([events], [], [], 0.1)[0]:
            continue
        data = os.read(events, 65536)
        closed = False
        while data:
            _wd, mask, _cookie, size = struct.unpack_from("iIII", data)
            closed |= bool(mask & IN_CLOSE_NOWRITE) and size == 0  # the folder itself, not a file in it
            data = data[16 + size :]
        if closed:
            done = libc.renameat2(AT_FDCWD, os.fsencode(folder), AT_FDCWD, os.fsencode(link), RENAME_EXCHANGE)
            if done == 0:
                swapped.set()
            return


def test_a_folder_swapped_for_a_symlink_while_it_is_walked_is_never_read_through_it(watch):
    staged = _stage(watch, "mallory", learner_notebook(A))  # a stub: 0 points if read as handed in
    for n in range(9_800):  # sort before everything else: the walker looks at them first
        os.symlink("nowhere", staged / f"!{n:04d}")
    link = watch.inbound / ".swap-mallory"
    os.symlink(watch.source / A, link)  # the source assignment: solutions and hidden tests
    swapped, stop = threading.Event(), threading.Event()
    events = _watch_listing(staged)
    folder = watch.inbound / staged.name
    thread = threading.Thread(
        target=_swap_when_listed, args=(events, folder, link, swapped, stop), daemon=True
    )
    thread.start()
    try:
        _hand_in(watch, staged)
        watch.wait_for(swapped.is_set, "the watcher to list the folder (and the swap)")
        assert folder.is_symlink()
        _marker(watch, "mallory-classmate")
    finally:
        stop.set()
        thread.join(5)
        os.close(events)
    result = _result(watch, "mallory")
    assert result is None or result["score"] < FULL, result
    kept = watch.out / ".watch" / "submitted" / "mallory"
    assert not _solution_text(kept), _solution_text(kept)


# ------------------------------------------------------------------ (b), (c), hard links: identity


@ROOT_ONLY
def test_a_classmates_id_in_another_users_folder_is_flagged_and_keeps_the_grade(watch):
    secret, _ = watch.drop("carol", solved_notebook(A))
    assert "10 / 10" in watch.feedback(secret)
    later = datetime.now(UTC) + timedelta(minutes=5)  # newer than carol's own: it would win by name
    attack = _hand_in(watch, _stage(watch, "carol", learner_notebook(A), at=later), owner=BIN)
    watch.wait_for(
        lambda: attack.name in watch.log() or _result(watch, "carol")["score"] != FULL,
        "the watcher to look at the forged folder",
    )
    _marker(watch, "carol-classmate")
    result = _result(watch, "carol")
    assert result["score"] == FULL and result["status"] == "graded", result
    assert any("owned by unix user 'bin'" in flag for flag in result["flags"]), result["flags"]
    row = _grades(watch)["carol"]
    assert float(row["score"]) == FULL and "owned by unix user 'bin'" in row["flags"], row
    # carol hands in again (older than the forged folder's name): graded, the flag stays
    secret, _ = watch.drop("carol", learner_notebook(A))
    assert "0 / 10" in watch.feedback(secret)
    assert any("'bin'" in flag for flag in _result(watch, "carol")["flags"])


@ROOT_ONLY
def test_made_up_ids_of_one_owner_count_as_that_owner_for_max_per_hour(watch):
    ids = [f"maker{n}" for n in range(5)]
    folders = [_hand_in(watch, _stage(watch, i, solved_notebook(A)), owner=DAEMON) for i in ids]
    watch.wait_for(lambda: all(f"{i}+{A}" in watch.log() for i in ids), "the five made-up ids")
    _marker(watch, "maker-classmate")
    results = {i: _result(watch, i) for i in ids}
    assert not [r for r in results.values() if r and r["status"] == "graded"], results
    assert sum(r is not None for r in results.values()) <= 2, results  # --max-per-hour 2, one owner
    assert all(f"{f.name}: refused" in watch.log() for f in folders)
    # the owner's own id is over its hour too
    own = _hand_in(watch, _stage(watch, "daemon", solved_notebook(A)), owner=DAEMON)
    watch.wait_for(lambda: f"daemon+{A}: waits until" in watch.log(), "daemon's own submission to wait")
    assert _result(watch, "daemon") is None and own.is_dir()


@ROOT_ONLY
def test_a_hard_link_to_a_file_its_owner_cannot_read_is_not_copied(watch):
    private = watch.root / "instructor-only.txt"
    private.write_text("the instructor's answers")
    os.chmod(private, 0o600)
    staged = _stage(watch, "sys", solved_notebook(A))
    _give(staged, SYS)
    os.link(private, staged / "answers.txt")  # root's file, in sys's folder
    _hand_in(watch, staged)
    kept = watch.out / ".watch" / "submitted" / "sys" / A
    # results.json is written by the grading, the watcher keeps its copy just after: wait for both
    watch.wait_for(lambda: _result(watch, "sys") and (kept / f"{A}.ipynb").is_file(), "sys's grading")
    assert _result(watch, "sys")["score"] == FULL, _result(watch, "sys")
    assert (kept / f"{A}.ipynb").is_file() and not (kept / "answers.txt").exists()


# ------------------------------------------------------------------ (d) symlinked secret, timestamp


def test_a_symlinked_secret_to_192_mib_is_neither_followed_nor_read(watch):
    big = watch.root / "big.bin"
    with open(big, "wb") as handle:
        handle.truncate(192 * 2**20)
    day_ago = time.time() - 2 * 86400
    os.utime(big, (day_ago, time.time()))  # relatime: the first read would move atime
    staged = _stage(watch, "sid", solved_notebook(A), secret=False)
    os.symlink(big, staged / "submission_secret.txt")
    _hand_in(watch, staged)
    _marker(watch, "sid-classmate")
    assert _result(watch, "sid") is None  # not complete: a symlink is not a secret
    assert abs(big.stat().st_atime - day_ago) < 1, "the 192 MiB file was read"


@pytest.fixture(scope="module", params=IDENTITIES)
def late_watch(request):
    due = f"{A}={datetime.now(UTC) - timedelta(days=1):%Y-%m-%d %H:%M} UTC"  # the real arrivals are late
    watch, root = _course(request.param, ["--due", due, "--late-policy", "zero"])
    try:
        yield watch
    finally:
        _stop(watch, root)


def test_a_symlinked_timestamp_is_not_a_timestamp_the_arrival_time_counts(late_watch):
    watch = late_watch
    early = f"{datetime.now(UTC) - timedelta(days=45):%Y-%m-%d %H:%M:%S.%f} UTC"  # before the due date
    (watch.root / "early.txt").write_text(early)
    honest = _stage(watch, "tam", solved_notebook(A))  # nbgrader's own timestamp.txt, now
    _hand_in(watch, honest)
    linked = _stage(watch, "tim", solved_notebook(A), timestamp=False)
    os.symlink(watch.root / "early.txt", linked / "timestamp.txt")
    arrived = datetime.now(UTC)
    _hand_in(watch, linked)
    watch.wait_for(lambda: _result(watch, "tim") and _result(watch, "tam"), "both gradings")
    tam, tim = _result(watch, "tam"), _result(watch, "tim")
    assert tam["late_by_seconds"] > 86400 and tam["score"] == 0, tam  # handed in a day late
    assert tam["claimed_at"] and not any("server received it" in f for f in tam["flags"]), tam
    assert tim["late_by_seconds"] and tim["late_by_seconds"] > 86400 and tim["score"] == 0, tim
    handed = datetime.fromisoformat(tim["timestamp"])
    assert abs((handed - arrived).total_seconds()) < 60, (tim["timestamp"], arrived)
    assert abs((datetime.fromisoformat(tim["arrived_at"]) - arrived).total_seconds()) < 60, tim
    assert any("no regular timestamp.txt" in note for note in tim["notes"]), tim["notes"]


def test_a_forged_timestamp_45_days_early_is_flagged_and_moves_no_lateness(late_watch):
    """A one-line patch of nbgrader submit: timestamp.txt 45 days early, before the due date.
    The server's clock (the folder's arrival) decides; the claim is kept, flagged in
    results.json, grades.csv and the gradebook (formgrader's flag)."""
    from nbgrader.api import Gradebook

    watch = late_watch
    forged = datetime.now(UTC) - timedelta(days=45)
    staged = _stage(watch, "fay", solved_notebook(A))
    (staged / "timestamp.txt").write_text(forged.strftime("%Y-%m-%d %H:%M:%S.%f UTC"))
    arrived = datetime.now(UTC)
    _hand_in(watch, staged)
    fay = watch.wait_for(lambda: _result(watch, "fay"), "fay's grading")
    assert fay["late_by_seconds"] > 86400 and fay["score"] == 0, fay  # late by a day, not on time
    assert abs((datetime.fromisoformat(fay["arrived_at"]) - arrived).total_seconds()) < 60, fay
    assert fay["timestamp"] == fay["arrived_at"], fay
    assert abs((datetime.fromisoformat(fay["claimed_at"]) - forged).total_seconds()) < 1, fay
    flag = [f for f in fay["flags"] if "server received it" in f]
    assert flag and "45 d" in flag[0] and "before" in flag[0], fay["flags"]
    # grades.csv is rewritten just after results.json: wait for fay's row as well
    rows = watch.wait_for(lambda: "fay" in _grades(watch) and _grades(watch), "fay's row in grades.csv")
    assert "server received it" in rows["fay"]["flags"], rows["fay"]
    with Gradebook(f"sqlite:///{watch.out / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(A, "fay")
        assert abs((submission.timestamp - arrived.replace(tzinfo=None)).total_seconds()) < 60
        assert all(notebook.flagged for notebook in submission.notebooks)


# ------------------------------------------------------------------ (e) 300,000 cells


def test_a_notebook_of_300000_cells_is_refused_quickly_and_holds_up_no_classmate(watch):
    secret, arrived = watch.drop("base", solved_notebook(A))
    watch.feedback(secret)
    alone = time.monotonic() - arrived
    cell = '{"cell_type": "raw", "metadata": {}, "source": ""}'
    hog = (
        '{"cells": [' + ", ".join([cell] * 300_000) + '], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
    )
    assert len(hog) > 14 * 2**20
    staged = _stage(watch, "hog", hog)
    classmate = _stage(watch, "kim", solved_notebook(A))
    kim_secret = (classmate / "submission_secret.txt").read_text()
    started = time.monotonic()
    _hand_in(watch, staged)
    _hand_in(watch, classmate)
    assert "10 / 10" in watch.feedback(kim_secret)
    held = time.monotonic() - started
    hog_result = watch.wait_for(lambda: _result(watch, "hog"), "hog's result")
    print(f"\nclassmate's feedback: {held:.2f} s beside a 300,000-cell notebook, {alone:.2f} s alone")
    assert hog_result["status"] == "invalid" and "2,000 cells" in hog_result["message"], hog_result
    assert held < alone + 4.0, (held, alone)


def test_the_cell_bound_holds_for_keys_spelt_with_escapes(tmp_path):
    """The fast count of ``"cell_type"`` can be dodged by an escaped key; the bound after the
    parse still refuses the notebook (and an ordinary notebook passes both)."""
    from grader.autograde.notebook_file import MAX_CELLS, InvalidNotebook, read_notebook

    cell = '{"cell\\u005ftype": "raw", "metadata": {}, "source": ""}'
    path = tmp_path / "escaped.ipynb"

    def notebook(cells: int) -> str:
        tail = '], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}'
        return '{"cells": [' + ", ".join([cell] * cells) + tail

    path.write_text(notebook(MAX_CELLS + 1))
    with pytest.raises(InvalidNotebook, match=f"has {MAX_CELLS + 1:,} cells, over the limit"):
        read_notebook(path)
    path.write_text(notebook(40))
    assert len(read_notebook(path).cells) == 40
