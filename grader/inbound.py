"""The exchange's inbound folder, read without trusting it: arrivals, their owners, their secrets.

``nbgrader submit`` puts ``<student>+<assignment>+<timestamp>[+<random>]/`` into INBOUND,
written by the student's own unix user. Everything here reads it through descriptors
(``grader.autograde.safe_open``): INBOUND is opened once a look, each arrival's folder is
judged by ``fstatat`` on that descriptor (never through a symlink) and later reopened with
``O_NOFOLLOW`` and checked to be the very folder judged (same inode, same owner), so a swap
of it for a symlink (or another folder) between the look and the read is refused.

**Identity.** A submission's student is the unix user who owns its folder: the name in the
folder is only a claim. As nbgrader's ``CollectApp.check_owner`` does, the claim must be
the owner's user name (``pwd``: the unix user name is the student id, nbgrader's
exchange's own assumption). Where nbgrader only warns, a mismatch here is *refused*: the
arrival is not graded, and the claimed student's row is flagged (:func:`claim_problem`).
Folders owned by root or by the watcher's own user are the one exception (the instructor
drops them by hand, or a single-user course): whoever can write as those users can write
OUT itself, so the claim stands. The rate limit counts owners (:attr:`Arrival.rate_key`).

**Complete** means what the copy will hold: a regular, non-empty ``submission_secret.txt``
(nbgrader submit writes it last) of at most :data:`MAX_SECRET_BYTES`; a symlinked one is not
a secret, so the arrival is not complete, and is never opened.
"""

from __future__ import annotations

import os
import pwd
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from grader.autograde.safe_open import lstat_at, open_folder, read_small

SECRET = "submission_secret.txt"
MAX_SECRET_BYTES = 4096  # nbgrader's secret is 128 hex digits
INBOUND_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


@dataclass(frozen=True)
class Arrival:
    folder: Path
    student: str  # claimed, by the folder's name
    assignment: str
    submitted_at: datetime  # naive UTC, from the folder's name
    uid: int  # the folder's owner when it was judged
    inode: tuple[int, int]  # (st_dev, st_ino) of that folder
    arrived_at: float  # when it became complete (ctimes: the kernel's clock, see _judge)

    @property
    def key(self) -> str:
        return f"{self.student}+{self.assignment}"

    @property
    def rate_key(self) -> str:
        """Who ``--max-per-hour`` counts: the owner; the claimed id only for trusted owners."""
        return f"id:{self.student}" if self.uid in trusted_uids() else f"uid:{self.uid}"


def trusted_uids() -> set[int]:
    """Owners whose folders' claims stand: root and the watcher's own user."""
    return {0, os.geteuid()}


def user_name(uid: int) -> str | None:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return None


def claim_problem(arrival: Arrival) -> str:
    """ "" when the folder's owner may hand in as the student it names, else the flag."""
    if arrival.uid in trusted_uids():
        return ""
    name = user_name(arrival.uid)
    if name == arrival.student:
        return ""
    owner = f"unix user {name!r} (uid {arrival.uid})" if name else f"uid {arrival.uid} (no user name)"
    return (
        f"a submission claiming to be {arrival.student!r}'s ({arrival.folder.name}) is owned by "
        f"{owner}: not graded, this student's grade kept"
    )


def parse_inbound_name(name: str) -> tuple[str, str, datetime] | None:
    """``<student>+<assignment>+<timestamp>[+<random>]``, split as nbgrader collect does
    (from the right, so a student id may hold a ``+``)."""
    from nbgrader.utils import parse_utc

    parts = name.rsplit("+", 3)
    if len(parts) < 3 or name.startswith("."):
        return None
    student, assignment, stamp = parts[0], parts[1], parts[2]
    try:
        return student, assignment, parse_utc(stamp)
    except (ValueError, OverflowError):
        return None


def complete(fd: int) -> bool:
    """The folder open on ``fd`` holds a regular, non-empty secret of a bounded size."""
    return _secret_stat(fd) is not None


def _secret_stat(fd: int) -> os.stat_result | None:
    """The secret's ``lstat`` if the folder open on ``fd`` is complete, else None."""
    try:
        st = lstat_at(SECRET, fd)
    except OSError:
        return None
    return st if stat.S_ISREG(st.st_mode) and 0 < st.st_size <= MAX_SECRET_BYTES else None


def scan(inbound: Path, assignments: set[str]) -> tuple[dict[str, Arrival], list[Arrival]]:
    """INBOUND's complete arrivals: the newest of each student and assignment whose owner may
    claim it (by the timestamp in its name, as ``nbgrader collect`` orders), and every one
    whose owner may not (refused: they never compete with the student's own)."""
    newest: dict[str, Arrival] = {}
    refused: list[Arrival] = []
    try:
        top = os.open(inbound, INBOUND_FLAGS)
    except OSError:
        return newest, refused
    try:
        with os.scandir(top) as listing:
            names = [entry.name for entry in listing]
        for name in names:
            arrival = _judge(top, inbound, name, assignments)
            if arrival is None:
                continue
            if claim_problem(arrival):
                refused.append(arrival)
                continue
            old = newest.get(arrival.key)
            if old is None or (arrival.submitted_at, name) > (old.submitted_at, old.folder.name):
                newest[arrival.key] = arrival
    except OSError:
        pass
    finally:
        os.close(top)
    return newest, sorted(refused, key=lambda a: a.folder.name)


def _judge(top: int, inbound: Path, name: str, assignments: set[str]) -> Arrival | None:
    parsed = parse_inbound_name(name)
    if parsed is None or parsed[1] not in assignments:
        return None
    try:
        st = lstat_at(name, top)
        if not stat.S_ISDIR(st.st_mode):
            return None
        fd = open_folder(name, top, expect=st)
    except OSError:
        return None
    try:
        secret = _secret_stat(fd)
    finally:
        os.close(fd)
    if secret is None:
        return None
    # complete when its secret was written (nbgrader submit's last file) or the folder moved
    # in, whichever came last: ctimes, the kernel's clock, which no student can set back
    return Arrival(
        inbound / name, *parsed, st.st_uid, (st.st_dev, st.st_ino), max(st.st_ctime, secret.st_ctime)
    )


@contextmanager
def opened(arrival: Arrival) -> Iterator[int]:
    """A descriptor on the arrival's folder, if it is still the folder judged (same inode,
    same owner, not a symlink) and still complete; ``OSError`` otherwise."""
    top = os.open(arrival.folder.parent, INBOUND_FLAGS)
    try:
        fd = open_folder(arrival.folder.name, top)
    finally:
        os.close(top)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != arrival.inode or st.st_uid != arrival.uid:
            raise OSError(f"{arrival.folder.name} was replaced since it was found")
        if not complete(fd):
            raise OSError(f"{arrival.folder.name} no longer holds a regular {SECRET}")
        yield fd
    finally:
        os.close(fd)


def read_secret(fd: int) -> str:
    """The secret of the folder open on ``fd`` (bounded, never through a symlink)."""
    return read_small(SECRET, MAX_SECRET_BYTES, fd).decode("utf-8", "replace")


def notebook_names(fd: int) -> list[str]:
    """The stems of the regular ``*.ipynb`` files at the top of the folder open on ``fd``."""
    with os.scandir(fd) as listing:
        names = [entry.name for entry in listing if entry.name.endswith(".ipynb")]
    return sorted(n[: -len(".ipynb")] for n in names if stat.S_ISREG(lstat_at(n, fd).st_mode))
