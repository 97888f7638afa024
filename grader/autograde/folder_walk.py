"""Reading a folder without trusting it: ONE walker, and the copy and fingerprint it serves.

Every folder is read by :func:`walk_folder`: iterative (no recursion per folder level),
byte-safe (names that are not UTF-8 are kept as surrogate escapes, hashed as their bytes),
bounded (:data:`SUBMISSION_LIMITS`: folder depth, bytes per file and per submission,
entries, all measured with ``lstat`` before a byte is read: a 32 GiB sparse file is refused
unread), and it never follows a symlink: the folder is opened once and everything in it
is reached through descriptors, a name at a time (``safe_open``), so swapping the folder or
anything in it for a symlink mid-walk changes nothing that is read. Its list of files is
both what a submission's fingerprint hashes and what the job receives (``pipeline._beside_files``, copied with
:func:`copy_walked_file`), so a re-run sees every change to a file the job got,
``__pycache__`` included; files behind symlinks are neither fingerprinted nor copied. The
source's and the grader's own code are walked the same way (:data:`TRUSTED`,
:func:`folder_fingerprint`, :func:`code_fingerprint`).
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from grader.autograde import permissions, safe_open

MAX_NOTEBOOK_BYTES = 50 * 2**20
MB = 2**20
CHUNK = 1 * MB
NOTE_NAMES = 10  # a note lists at most this many skipped entries, then says how many more


@dataclass(frozen=True)
class FolderLimits:
    """What one walk of a folder may cost; ``None`` is no limit (trusted folders only)."""

    depth: int | None  # folder levels below the walked folder that are entered
    file_bytes: int | None  # one file: max(st_size, st_blocks * 512), so sparse files count whole
    total_bytes: int | None  # every file kept, summed the same way
    entries: int | None  # files, folders, symlinks and others seen


# A job's home is a 64 MB tmpfs (mount_tree.py): no submission needs more than that.
SUBMISSION_LIMITS = FolderLimits(depth=16, file_bytes=MAX_NOTEBOOK_BYTES, total_bytes=64 * MB, entries=10_000)
TRUSTED = FolderLimits(None, None, None, None)  # the source and the grader's own code


class WalkedFile(NamedTuple):
    relative: Path  # inside the walked folder; may hold surrogate escapes
    path: Path
    size: int  # max(st_size, st_blocks * 512) when it was walked
    sha256: bytes | None  # of its content when walked (None: the walk did not read files)


@dataclass(frozen=True)
class Skipped:
    relative: Path
    why: str
    regular: bool = False  # a regular file (a notebook that could not be used, say)


@dataclass
class FolderWalk:
    """What :func:`walk_folder` found: the files kept, what it left out and why, or why the
    whole folder cannot be used (``problem``)."""

    files: list[WalkedFile] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    symlinks: list[Path] = field(default_factory=list)
    problem: str = ""

    def digest(self) -> str:
        """A hash of every kept file (name as bytes, content) and of what was left out and why."""
        h = hashlib.sha256()
        for f in sorted(self.files):
            h.update(b"file\0" + os.fsencode(f.relative) + b"\0" + (f.sha256 or str(f.size).encode()))
        for s in self.skipped:
            h.update(b"skipped\0" + os.fsencode(s.relative) + b"\0" + utf8(s.why) + b"\0")
        for link in self.symlinks:
            h.update(b"symlink\0" + os.fsencode(link) + b"\0")
        h.update(b"problem\0" + utf8(self.problem))
        return h.hexdigest()

    def notes(self) -> list[str]:
        """What the learner is told about entries not given to the job (at most two lines)."""
        notes = []
        if self.skipped:
            listed = [f"{s.relative}: {s.why}" for s in self.skipped[:NOTE_NAMES]]
            more = len(self.skipped) - NOTE_NAMES
            notes.append(
                "not copied into the grading job: "
                + "; ".join(listed)
                + (f"; and {more} more" if more > 0 else "")
            )
        if self.symlinks:
            listed = [str(p) for p in self.symlinks[:NOTE_NAMES]]
            more = len(self.symlinks) - NOTE_NAMES
            notes.append(
                "symlinks are not followed (not copied): "
                + ", ".join(listed)
                + (f" and {more} more" if more > 0 else "")
            )
        return notes


def utf8(text: str) -> bytes:
    """A name read from the filesystem as its bytes (surrogate escapes kept)."""
    return text.encode("utf-8", "surrogatepass")


def reason(exc: OSError) -> str:
    """Why a file could not be used, in the words of its OSError."""
    return exc.strerror or type(exc).__name__


def file_size(st: os.stat_result) -> int:
    """What a file costs: its size or its blocks, whichever is larger (sparse files count whole)."""
    return max(st.st_size, st.st_blocks * 512)


def _megabytes(size: int) -> str:
    return f"{size / MB:,.0f} MB" if size >= MB else f"{size:,} bytes"


def walk_folder(
    folder: Path,
    limits: FolderLimits = SUBMISSION_LIMITS,
    *,
    read: bool = True,
    skip_names: frozenset[str] = frozenset(),
    dir_fd: int | None = None,
    copy_to: Path | None = None,
    owner: int | None = None,
) -> FolderWalk:
    """Every regular file under ``folder``, sorted, without following a symlink; never raises.

    ``folder`` is opened once (or ``dir_fd`` is its open descriptor) and everything below it
    is reached through descriptors, one name at a time (``safe_open``): a swap of the folder
    or of anything in it for a symlink or another file is refused, never read. Folders are
    visited depth first from an explicit stack of open descriptors (one per level: a depth
    of thousands costs no recursion, at most ``depth + 1`` descriptors); sizes are judged
    from ``fstatat`` before anything is opened; with ``read`` each kept file is hashed in
    chunks, reading no more than the limit, and with ``copy_to`` written there in the same
    pass (the copy holds exactly the bytes hashed). With ``owner`` (the watcher: the inbound
    folder's owner) a file or folder owned by another user is left out: a hard link to a
    file its student could not have read is never copied. A file that is unreadable, too
    large or not regular, and a folder too deep or unreadable, is left out with a reason
    (the job is graded without it); going over the entries or total bytes, or an unreadable
    ``folder`` itself, sets ``problem`` (the submission cannot be graded).
    """
    walk = FolderWalk()
    try:
        top = os.dup(dir_fd) if dir_fd is not None else safe_open.open_folder(folder)
    except OSError as exc:
        walk.problem = f"the folder could not be read ({reason(exc)})"
        return walk
    counts = [0, 0]  # entries seen, bytes kept
    # one frame per open folder: its descriptor, relative path, depth, subfolders still to enter
    frames: list[tuple[int, Path, int, list[tuple[str, os.stat_result]]]] = []
    try:
        base = copy_to if copy_to is not None else folder
        listed = _list(top, Path(), 0, walk, limits, skip_names, read, copy_to, owner, counts, base)
        if listed is None:
            return walk
        frames.append((top, Path(), 0, listed))
        top = -1
        while frames:
            fd, relative, depth, pending = frames[-1]
            if not pending:
                os.close(fd)
                frames.pop()
                continue
            name, st = pending.pop(0)
            try:
                child = safe_open.open_folder(name, fd, expect=st)
            except OSError as exc:
                walk.skipped.append(Skipped(relative / name, f"the folder could not be read ({reason(exc)})"))
                continue
            try:
                listed = _list(
                    child,
                    relative / name,
                    depth + 1,
                    walk,
                    limits,
                    skip_names,
                    read,
                    copy_to,
                    owner,
                    counts,
                    base,
                )
            except BaseException:
                os.close(child)
                raise
            if listed is None:
                os.close(child)
                return walk
            frames.append((child, relative / name, depth + 1, listed))
    finally:
        for fd, *_ in frames:
            os.close(fd)
        if top >= 0:
            os.close(top)
    walk.files.sort()
    return walk


def _list(
    fd: int,
    relative: Path,
    depth: int,
    walk: FolderWalk,
    limits: FolderLimits,
    skip_names: frozenset[str],
    read: bool,
    copy_to: Path | None,
    owner: int | None,
    counts: list[int],
    base: Path,
) -> list[tuple[str, os.stat_result]] | None:
    """One folder's entries (through its descriptor ``fd``) into ``walk``; its subfolders to
    enter, as (name, stat); ``None`` when ``walk.problem`` was set (stop the walk). Kept
    files are named under ``base`` (the copy if there is one, else the walked folder)."""
    try:
        with os.scandir(fd) as listing:
            names = sorted((e.name for e in listing), key=os.fsencode)
    except OSError as exc:
        if depth == 0:
            walk.problem = f"the folder could not be read ({reason(exc)})"
            return None
        walk.skipped.append(Skipped(relative, f"the folder could not be read ({reason(exc)})"))
        return []
    if copy_to is not None:
        permissions.make_folders(copy_to / relative)
    subfolders = []
    for entry in names:
        counts[0] += 1
        if limits.entries is not None and counts[0] > limits.entries:
            walk.problem = f"the submission folder holds more than {limits.entries:,} files and folders"
            return None
        if entry in skip_names:
            continue
        name = relative / entry
        try:
            st = safe_open.lstat_at(entry, fd)
        except OSError as exc:
            walk.skipped.append(Skipped(name, f"could not be read ({reason(exc)})"))
            continue
        if stat.S_ISLNK(st.st_mode):
            walk.symlinks.append(name)
        elif owner is not None and st.st_uid != owner:
            walk.skipped.append(
                Skipped(
                    name,
                    "owned by another user than the submission folder (a hard link to someone else's file?)",
                    regular=stat.S_ISREG(st.st_mode),
                )
            )
        elif stat.S_ISDIR(st.st_mode):
            if limits.depth is not None and depth + 1 > limits.depth:
                walk.skipped.append(Skipped(name, f"a folder more than {limits.depth} levels deep"))
            else:
                subfolders.append((entry, st))
        elif not stat.S_ISREG(st.st_mode):
            walk.skipped.append(Skipped(name, "not a regular file"))
        elif limits.file_bytes is not None and file_size(st) > limits.file_bytes:
            walk.skipped.append(
                Skipped(
                    name,
                    f"{_megabytes(file_size(st))}, over the "
                    f"{_megabytes(limits.file_bytes)} limit for one file",
                    regular=True,
                )
            )
        else:
            counts[1] += file_size(st)
            if limits.total_bytes is not None and counts[1] > limits.total_bytes:
                walk.problem = (
                    f"the submission folder holds more than {_megabytes(limits.total_bytes)} of files"
                )
                return None
            try:
                digest = (
                    safe_open.hash_file(entry, fd, st, limits.file_bytes, copy_to and copy_to / name)
                    if read or copy_to is not None
                    else None
                )
            except OSError as exc:
                walk.skipped.append(Skipped(name, f"could not be read ({reason(exc)})", regular=True))
                continue
            walk.files.append(WalkedFile(name, base / name, file_size(st), digest))
    return subfolders


def copy_walked_file(file: WalkedFile, target: Path) -> None:
    """Copy ``file`` to ``target``: at most the bytes it had when walked, and, when the walk
    hashed it, exactly those bytes (the job gets what the fingerprint covers, or nothing).
    ``file.path`` is in a folder only the grader writes (SUBMITTED, the watcher's copy, the
    source); its last component is still never followed."""
    fd = safe_open.open_regular(file.path)
    try:
        digest = hashlib.sha256()
        with open(target, "xb") as out:
            for chunk in safe_open.read_chunks(fd, max(file.size, CHUNK)):
                digest.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    if file.sha256 is not None and digest.digest() != file.sha256:
        target.unlink()
        raise ValueError(f"{file.relative} changed while it was being graded; run again")


def copy_walked_files(files: list[WalkedFile], home: Path) -> None:
    """Copy each of ``files`` to ``home / file.relative`` (:func:`copy_walked_file`: the bytes
    the walk hashed, or ValueError), making its folders: how a job's home gets the files beside
    its notebook, in autograde and in ``python -m grader check``."""
    for file in files:
        target = home / file.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_walked_file(file, target)


def folder_fingerprint(
    folder: Path, limits: FolderLimits = TRUSTED, skip_names: frozenset[str] = frozenset()
) -> str:
    """A hash of every regular file under ``folder`` (names and contents); symlinks skipped."""
    return walk_folder(folder, limits, skip_names=skip_names).digest()


def code_fingerprint() -> str:
    """A hash of the grader's own code and of the learner package: editing either re-grades.

    Their ``__pycache__`` folders are left out: nothing of them reaches a job, and Python
    rewrites them as it likes."""
    import grader

    folders = [Path(grader.__file__).parent]
    try:
        import attention_learner

        folders.append(Path(attention_learner.__file__).parent)
    except ImportError:
        pass
    caches = frozenset({"__pycache__"})
    return hashlib.sha256(
        "".join(folder_fingerprint(f, skip_names=caches) for f in folders).encode()
    ).hexdigest()
