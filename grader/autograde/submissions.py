"""Finding submissions and reading their notebooks without trusting them.

Layout (nbgrader's): SUBMITTED/<student_id>/<assignment>/<notebook>.ipynb. A folder of an
assignment whose source has a single notebook may hold exactly one notebook of another name:
it is graded, with a note. Anything unusable is a :class:`Submission` whose ``problem`` says
why (it becomes an ``invalid`` row). Nothing here follows a symlink: a student folder,
assignment folder or notebook that is a symlink is refused, and files behind symlinks are
neither fingerprinted nor copied.
"""

from __future__ import annotations

import hashlib
import json
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

MAX_NOTEBOOK_BYTES = 50 * 2**20
MAX_ID_LENGTH = 128
# names a student folder may not have: OUT's own files and folders sit beside student folders
RESERVED_IDS = {"grades.csv", "gradebook.db", "gradebook.db-wal", "gradebook.db-shm",
                "gradebook.db-journal", "autograded", "feedback", "source", "release", "submitted"}


@dataclass
class Submission:
    student: str
    assignment: str
    folder: Path
    notebooks: dict[str, Path]  # source notebook name -> the submitted file that stands for it
    notes: list[str] = field(default_factory=list)
    problem: str = ""  # set when the submission cannot be graded at all
    unsafe_id: bool = False  # the student id cannot name a folder of OUT: grades.csv row only

    def fingerprint(self, context: str) -> str:
        """A hash of every file of the submission and of ``context`` (source and grader code)."""
        return hashlib.sha256((context + folder_fingerprint(self.folder)).encode()).hexdigest()


def folder_fingerprint(folder: Path) -> str:
    """A hash of every regular file under ``folder`` (names and contents); symlinks skipped."""
    digest = hashlib.sha256()
    for path in sorted(_regular_files(folder)):
        digest.update(str(path.relative_to(folder)).encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _regular_files(folder: Path) -> list[Path]:
    found = []
    for entry in folder.iterdir():
        if entry.is_symlink() or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            found += _regular_files(entry)
        elif entry.is_file():
            found.append(entry)
    return found


def code_fingerprint() -> str:
    """A hash of the grader's own code and of the learner package: editing either re-grades."""
    import grader

    folders = [Path(grader.__file__).parent]
    try:
        import attention_learner

        folders.append(Path(attention_learner.__file__).parent)
    except ImportError:
        pass
    return hashlib.sha256("".join(folder_fingerprint(f) for f in folders).encode()).hexdigest()


def student_id_problem(name: str) -> str:
    """"" for a usable student id, else why it is refused."""
    if not name or len(name) > MAX_ID_LENGTH:
        return f"the student id must have 1 to {MAX_ID_LENGTH} characters"
    if name.startswith(".") or name.strip() != name:
        return "the student id may not start with a dot or with or end in spaces"
    if any(unicodedata.category(c).startswith("C") or c in "/\\:" for c in name):
        return "the student id contains a separator or a control character"
    if name.lower() in RESERVED_IDS:
        return f"the student id {name!r} is the name of one of the grader's own outputs"
    return ""


def find_submissions(submitted: Path, source_notebooks: dict[str, list[str]]) -> list[Submission]:
    """Every <student>/<assignment> folder of ``submitted`` whose assignment has a source."""
    found = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        problem = student_id_problem(student_dir.name)
        if student_dir.is_symlink():
            problem = "the student folder is a symlink (not followed)"
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if folder.name not in source_notebooks:
                continue
            if problem:
                found.append(Submission(student_dir.name, folder.name, folder, {}, problem=problem,
                                        unsafe_id=bool(student_id_problem(student_dir.name))))
            elif folder.is_symlink():
                found.append(Submission(student_dir.name, folder.name, folder, {},
                                        problem="the assignment folder is a symlink (not followed)"))
            else:
                found.append(match_notebooks(student_dir.name, folder, source_notebooks[folder.name]))
    return found


def match_notebooks(student: str, folder: Path, expected: list[str]) -> Submission:
    sub = Submission(student, folder.name, folder, {})
    linked = sorted(p.name for p in folder.glob("*.ipynb") if p.is_symlink())
    if linked:
        sub.notes.append("symlinked notebook(s) ignored (symlinks are not followed): " + ", ".join(linked))
    present = sorted(p for p in folder.glob("*.ipynb") if p.is_file() and not p.is_symlink())
    for name in expected:
        path = folder / f"{name}.ipynb"
        if path in present:
            sub.notebooks[name] = path
    if not sub.notebooks and len(expected) == 1 and len(present) == 1:
        sub.notebooks[expected[0]] = present[0]
        sub.notes.append(
            f"graded {present[0].name} as {expected[0]}.ipynb (the notebook had another name)"
        )
    missing = [n for n in expected if n not in sub.notebooks]
    if not sub.notebooks:
        sub.problem = (
            "no notebook was found in the submission folder"
            if not present
            else f"none of the notebooks ({', '.join(p.name for p in present)}) is "
            f"{' or '.join(n + '.ipynb' for n in expected)}"
        )
    elif missing:
        sub.notes.append("missing notebook(s), scored 0: " + ", ".join(f"{n}.ipynb" for n in missing))
    return sub


class InvalidNotebook(ValueError):
    """The file is not a notebook nbgrader could grade; the message says why."""


def read_notebook(path: Path) -> NotebookNode:
    size = path.stat().st_size
    if size == 0:
        raise InvalidNotebook(f"{path.name} is empty (0 bytes)")
    if size > MAX_NOTEBOOK_BYTES:
        raise InvalidNotebook(f"{path.name} is {size / 2**20:.0f} MB, over the 50 MB limit")
    try:
        text = path.read_text(encoding="utf-8")
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
