"""Finding submissions and reading their notebooks without trusting them.

Layout (nbgrader's): SUBMITTED/<student_id>/<assignment>/<notebook>.ipynb. A folder of an
assignment whose source has a single notebook may hold exactly one notebook of another name:
it is graded, with a note. Anything unusable is a :class:`Submission` whose ``problem`` says
why (it becomes an ``invalid`` row); one folder, whatever it holds, never stops the others.

Every folder is read by ONE walker, :func:`walk_folder`: iterative (no recursion per folder
level), byte-safe (names that are not UTF-8 are kept as surrogate escapes, hashed as their
bytes), bounded (:data:`SUBMISSION_LIMITS`: folder depth, bytes per file and per submission,
entries, all measured with ``lstat`` before a byte is read: a 32 GiB sparse file is refused
unread), and it never follows a symlink. Its list of files is both what a submission's
fingerprint hashes and what the job receives (``pipeline._beside_files``), so a re-run sees
every change to a file the job got, ``__pycache__`` included. A student folder, assignment
folder or notebook that is a symlink is refused; files behind symlinks are neither
fingerprinted nor copied.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import nbformat
from nbformat import NotebookNode

MAX_NOTEBOOK_BYTES = 50 * 2**20
MAX_ID_LENGTH = 128
# names a student folder may not have: OUT's own files and folders sit beside student folders
RESERVED_IDS = {"grades.csv", "gradebook.db", "gradebook.db-wal", "gradebook.db-shm",
                "gradebook.db-journal", "autograded", "feedback", "source", "release", "submitted"}
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


# A job's home is a 64 MB tmpfs (confine.py): no submission needs more than that.
SUBMISSION_LIMITS = FolderLimits(depth=16, file_bytes=MAX_NOTEBOOK_BYTES, total_bytes=64 * MB,
                                 entries=10_000)
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
            h.update(b"skipped\0" + os.fsencode(s.relative) + b"\0" + _utf8(s.why) + b"\0")
        for link in self.symlinks:
            h.update(b"symlink\0" + os.fsencode(link) + b"\0")
        h.update(b"problem\0" + _utf8(self.problem))
        return h.hexdigest()

    def notes(self) -> list[str]:
        """What the learner is told about entries not given to the job (at most two lines)."""
        notes = []
        if self.skipped:
            listed = [f"{s.relative}: {s.why}" for s in self.skipped[:NOTE_NAMES]]
            more = len(self.skipped) - NOTE_NAMES
            notes.append("not copied into the grading job: " + "; ".join(listed)
                         + (f"; and {more} more" if more > 0 else ""))
        if self.symlinks:
            listed = [str(p) for p in self.symlinks[:NOTE_NAMES]]
            more = len(self.symlinks) - NOTE_NAMES
            notes.append("symlinks are not followed (not copied): " + ", ".join(listed)
                         + (f" and {more} more" if more > 0 else ""))
        return notes


def _utf8(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _why(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


def _size(st: os.stat_result) -> int:
    return max(st.st_size, st.st_blocks * 512)


def _megabytes(size: int) -> str:
    return f"{size / MB:,.0f} MB" if size >= MB else f"{size:,} bytes"


def walk_folder(folder: Path, limits: FolderLimits = SUBMISSION_LIMITS, *, read: bool = True,
                skip_names: frozenset[str] = frozenset()) -> FolderWalk:
    """Every regular file under ``folder``, sorted, without following a symlink; never raises.

    Folders are visited from an explicit stack (a depth of thousands costs no recursion);
    sizes are judged from ``lstat`` before anything is opened; with ``read`` each kept file
    is hashed in chunks, reading no more than the limit. A file that is unreadable, too
    large or not regular, and a folder too deep or unreadable, is left out with a reason
    (the job is graded without it); going over the entries or total bytes, or an unreadable
    ``folder`` itself, sets ``problem`` (the submission cannot be graded).
    """
    walk = FolderWalk()
    entries = total = 0
    stack: list[tuple[Path, int]] = [(Path(), 0)]  # (folder relative to ``folder``, its depth)
    while stack:
        relative, depth = stack.pop()
        try:
            with os.scandir(folder / relative) as listing:
                children = sorted(listing, key=lambda e: os.fsencode(e.name))
        except OSError as exc:
            if depth == 0:
                walk.problem = f"the folder could not be read ({_why(exc)})"
                return walk
            walk.skipped.append(Skipped(relative, f"the folder could not be read ({_why(exc)})"))
            continue
        subfolders = []
        for entry in children:
            entries += 1
            if limits.entries is not None and entries > limits.entries:
                walk.problem = (f"the submission folder holds more than {limits.entries:,} files "
                                "and folders")
                return walk
            if entry.name in skip_names:
                continue
            name = relative / entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError as exc:
                walk.skipped.append(Skipped(name, f"could not be read ({_why(exc)})"))
                continue
            if stat.S_ISLNK(st.st_mode):
                walk.symlinks.append(name)
            elif stat.S_ISDIR(st.st_mode):
                if limits.depth is not None and depth + 1 > limits.depth:
                    walk.skipped.append(Skipped(name, f"a folder more than {limits.depth} levels deep"))
                else:
                    subfolders.append((name, depth + 1))
            elif not stat.S_ISREG(st.st_mode):
                walk.skipped.append(Skipped(name, "not a regular file"))
            elif limits.file_bytes is not None and _size(st) > limits.file_bytes:
                walk.skipped.append(Skipped(name, f"{_megabytes(_size(st))}, over the "
                                                  f"{_megabytes(limits.file_bytes)} limit for one file",
                                            regular=True))
            else:
                total += _size(st)
                if limits.total_bytes is not None and total > limits.total_bytes:
                    walk.problem = (f"the submission folder holds more than "
                                    f"{_megabytes(limits.total_bytes)} of files")
                    return walk
                try:
                    digest = _hash_file(folder / name, limits.file_bytes) if read else None
                except OSError as exc:
                    walk.skipped.append(Skipped(name, f"could not be read ({_why(exc)})", regular=True))
                    continue
                walk.files.append(WalkedFile(name, folder / name, _size(st), digest))
        stack.extend(reversed(subfolders))
    walk.files.sort()
    return walk


def _open_regular(path: Path) -> int:
    """A descriptor on ``path`` if it is (still) a regular file; a symlink or FIFO is refused."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return fd


def _chunks(fd: int, limit: int | None):
    read = 0
    while chunk := os.read(fd, CHUNK):
        read += len(chunk)
        if limit is not None and read > limit:
            raise OSError(errno.EFBIG, f"grew over {_megabytes(limit)} while it was read")
        yield chunk


def _hash_file(path: Path, limit: int | None) -> bytes:
    fd = _open_regular(path)
    try:
        digest = hashlib.sha256()
        for chunk in _chunks(fd, limit):
            digest.update(chunk)
        return digest.digest()
    finally:
        os.close(fd)


def copy_walked_file(file: WalkedFile, target: Path) -> None:
    """Copy ``file`` to ``target``: at most the bytes it had when walked, and, when the walk
    hashed it, exactly those bytes (the job gets what the fingerprint covers, or nothing)."""
    fd = _open_regular(file.path)
    try:
        digest = hashlib.sha256()
        with open(target, "xb") as out:
            for chunk in _chunks(fd, max(file.size, CHUNK)):
                digest.update(chunk)
                out.write(chunk)
    finally:
        os.close(fd)
    if file.sha256 is not None and digest.digest() != file.sha256:
        target.unlink()
        raise ValueError(f"{file.relative} changed while it was being graded; run again")


@dataclass
class Submission:
    student: str
    assignment: str
    folder: Path
    notebooks: dict[str, Path]  # source notebook name -> the submitted file that stands for it
    notes: list[str] = field(default_factory=list)
    problem: str = ""  # set when the submission cannot be graded at all
    unsafe_id: bool = False  # the student id cannot name a folder of OUT: grades.csv row only
    walk: FolderWalk | None = None  # the files found once: fingerprinted, and given to the job

    def fingerprint(self, context: str) -> str:
        """A hash of ``context`` (source and grader code) and of exactly the files the job
        receives (or of why there are none); it reads nothing, so it cannot fail."""
        files = self.walk.digest() if self.walk is not None else "no files: " + self.problem
        return hashlib.sha256(_utf8(context + files)).hexdigest()


def folder_fingerprint(folder: Path, limits: FolderLimits = TRUSTED,
                       skip_names: frozenset[str] = frozenset()) -> str:
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
    return hashlib.sha256("".join(folder_fingerprint(f, skip_names=caches) for f in folders).encode()
                          ).hexdigest()


def is_utf8(name: str) -> bool:
    """Whether a name read from the filesystem was valid UTF-8 (no surrogate escapes in it)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def student_id_problem(name: str) -> str:
    """"" for a usable student id, else why it is refused."""
    if not is_utf8(name):
        return "the student folder's name is not UTF-8"
    if not name or len(name) > MAX_ID_LENGTH:
        return f"the student id must have 1 to {MAX_ID_LENGTH} characters"
    if name.startswith(".") or name.strip() != name:
        return "the student id may not start with a dot or with or end in spaces"
    if any(unicodedata.category(c).startswith("C") or c in "/\\:" for c in name):
        return "the student id contains a separator or a control character"
    if name.lower() in RESERVED_IDS:
        return f"the student id {name!r} is the name of one of the grader's own outputs"
    return ""


def _folders(folder: Path) -> list[tuple[Path, bool]]:
    """(path, is a symlink) of the folders in ``folder`` (symlinks to folders included),
    sorted by name as bytes; an entry that cannot even be looked at counts as a folder."""
    found = []
    with os.scandir(folder) as listing:
        for entry in listing:
            try:
                is_link, is_dir = entry.is_symlink(), entry.is_dir()
            except OSError:
                is_link, is_dir = False, True  # let the walk of it say what is wrong
            if is_dir:
                found.append((folder / entry.name, is_link))
    return sorted(found, key=lambda f: os.fsencode(f[0].name))


def find_submissions(submitted: Path, source_notebooks: dict[str, list[str]]) -> list[Submission]:
    """Every <student>/<assignment> folder of ``submitted`` whose assignment has a source.

    Each student folder is read on its own: whatever one holds (names that are not UTF-8,
    unreadable entries, thousands of levels, huge or sparse files), it becomes that
    student's ``invalid`` rows or notes, and the others are found as usual. A student folder
    that cannot be listed gets an ``invalid`` row for every assignment the others handed in
    (for every assignment of the source if nobody else did). Only an unreadable
    ``submitted`` itself raises.
    """
    found: list[Submission] = []
    unlisted: list[tuple[str, Path, str]] = []  # student, folder, why
    for student_dir, is_link in _folders(submitted):
        student = student_dir.name
        try:
            found += _student_submissions(student, student_dir, is_link, source_notebooks)
        except OSError as exc:
            unlisted.append((student, student_dir, f"the student folder could not be read ({_why(exc)})"))
        except Exception as exc:  # one odd folder must not stop the class
            unlisted.append((student, student_dir, f"the student folder could not be read: "
                                                   f"{type(exc).__name__}: {exc}"))
    handed_in = sorted({s.assignment for s in found}) or sorted(source_notebooks)
    for student, student_dir, why in unlisted:
        found += [Submission(student, a, student_dir / a, {}, problem=why,
                             unsafe_id=bool(student_id_problem(student))) for a in handed_in]
    return sorted(found, key=lambda s: (os.fsencode(s.student), s.assignment))


def _student_submissions(student: str, student_dir: Path, is_link: bool,
                         source_notebooks: dict[str, list[str]]) -> list[Submission]:
    problem = student_id_problem(student)
    if is_link and not problem:
        problem = "the student folder is a symlink (not followed)"
    found = []
    for folder, folder_is_link in _folders(student_dir):
        if folder.name not in source_notebooks:
            continue
        if problem:
            found.append(Submission(student, folder.name, folder, {}, problem=problem,
                                    unsafe_id=bool(student_id_problem(student))))
        elif folder_is_link:
            found.append(Submission(student, folder.name, folder, {},
                                    problem="the assignment folder is a symlink (not followed)"))
        else:
            try:
                found.append(match_notebooks(student, folder, source_notebooks[folder.name]))
            except Exception as exc:  # a bug here must cost this submission only
                found.append(Submission(student, folder.name, folder, {}, problem=(
                    f"the submission folder could not be read: {type(exc).__name__}: {exc}")))
    return found


def match_notebooks(student: str, folder: Path, expected: list[str]) -> Submission:
    """The submission in ``folder``: its files walked once, its notebooks matched by name."""
    walk = walk_folder(folder, SUBMISSION_LIMITS)
    sub = Submission(student, folder.name, folder, {}, walk=walk)
    if walk.problem:
        sub.problem = walk.problem.replace("the folder", "the assignment folder", 1)
        return sub

    def top_notebook(path: Path) -> bool:
        return len(path.parts) == 1 and path.suffix == ".ipynb"

    linked = sorted(str(p) for p in walk.symlinks if top_notebook(p))
    if linked:
        sub.notes.append("symlinked notebook(s) ignored (symlinks are not followed): " + ", ".join(linked))
    present = {f.relative.name: f.path for f in walk.files if top_notebook(f.relative)}
    unusable = {s.relative.name: s.why for s in walk.skipped if s.regular and top_notebook(s.relative)}
    for name in expected:
        if f"{name}.ipynb" in present:
            sub.notebooks[name] = present[f"{name}.ipynb"]
    if not sub.notebooks and len(expected) == 1 and len(present) == 1 and not unusable:
        (only,) = present.values()
        sub.notebooks[expected[0]] = only
        sub.notes.append(f"graded {only.name} as {expected[0]}.ipynb (the notebook had another name)")
    sub.notes += FolderWalk(skipped=[s for s in walk.skipped if not top_notebook(s.relative)],
                            symlinks=[p for p in walk.symlinks if not top_notebook(p)]).notes()
    refused = [f"{n}: {why}" for n, why in sorted(unusable.items())]
    missing = [n for n in expected if n not in sub.notebooks]
    if not sub.notebooks:
        if refused:
            sub.problem = "the notebook could not be used: " + "; ".join(refused)
        elif not present:
            sub.problem = "no notebook was found in the submission folder"
        else:
            sub.problem = (f"none of the notebooks ({', '.join(sorted(present))}) is "
                           f"{' or '.join(n + '.ipynb' for n in expected)}")
    elif missing:
        sub.notes.append("missing notebook(s), scored 0: " + ", ".join(f"{n}.ipynb" for n in missing))
        if refused:
            sub.notes.append("notebook(s) that could not be used: " + "; ".join(refused))
    return sub


class InvalidNotebook(ValueError):
    """The file is not a notebook nbgrader could grade; the message says why."""


def read_notebook(path: Path) -> NotebookNode:
    try:
        fd = _open_regular(path)  # no symlink, no FIFO: it was a regular file when walked
    except OSError as exc:
        raise InvalidNotebook(f"{path.name} could not be read ({_why(exc)})") from None
    with os.fdopen(fd, "rb") as handle:
        size = _size(os.fstat(fd))
        if size == 0:
            raise InvalidNotebook(f"{path.name} is empty (0 bytes)")
        if size > MAX_NOTEBOOK_BYTES:
            raise InvalidNotebook(f"{path.name} is {size / 2**20:.0f} MB, over the 50 MB limit")
        raw = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise InvalidNotebook(f"{path.name} grew over the 50 MB limit while it was read")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidNotebook(f"{path.name} is not UTF-8 text (is it really a notebook?)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidNotebook(f"{path.name} is not valid notebook JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise InvalidNotebook(f"{path.name} is not valid notebook JSON: it has no list of cells")
    if data.get("nbformat") != 4:  # old formats: let nbformat convert (and validate) them
        try:
            return nbformat.reads(text, as_version=4)
        except Exception as exc:  # nbformat raises several kinds for what it cannot convert
            raise InvalidNotebook(f"{path.name} is not a notebook nbformat can read: {exc}") from None
    # Version 4: a structural check instead of the full JSON-schema validation, which cost
    # 30 ms a notebook; what nbgrader cannot process is reported per submission later.
    for n, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidNotebook(f"{path.name}: cell {n} is not a code, markdown or raw cell")
        if not isinstance(cell.get("source", ""), str | list):
            raise InvalidNotebook(f"{path.name}: cell {n} has no text")
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
        if isinstance(cell["source"], list):
            cell["source"] = "".join(str(part) for part in cell["source"])
        if cell["cell_type"] == "code":
            cell.setdefault("outputs", [])
            cell.setdefault("execution_count", None)
    data.setdefault("metadata", {})
    data.setdefault("nbformat_minor", 4)
    return nbformat.from_dict(data)
