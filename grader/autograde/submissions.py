"""Finding submissions and reading their notebooks without trusting them.

Layout (nbgrader's): SUBMITTED/<student_id>/<assignment>/<notebook>.ipynb. A folder of an
assignment whose source has a single notebook may hold exactly one notebook of another name:
it is graded, with a note. Anything unreadable becomes an :class:`Invalid` with a reason.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbformat import NotebookNode

MAX_NOTEBOOK_BYTES = 50 * 2**20


@dataclass
class Submission:
    student: str
    assignment: str
    folder: Path
    notebooks: dict[str, Path]  # source notebook name -> the submitted file that stands for it
    notes: list[str] = field(default_factory=list)
    problem: str = ""  # set when the submission cannot be graded at all

    @property
    def key(self) -> str:
        return f"{self.student}/{self.assignment}"

    def fingerprint(self, source_fingerprint: str) -> str:
        """A hash of every file of the submission and of the source it is graded against."""
        digest = hashlib.sha256(source_fingerprint.encode())
        for path in sorted(p for p in self.folder.rglob("*") if p.is_file() and not p.is_symlink()):
            digest.update(str(path.relative_to(self.folder)).encode() + b"\0")
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        return digest.hexdigest()


def folder_fingerprint(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def find_submissions(submitted: Path, source_notebooks: dict[str, list[str]]) -> list[Submission]:
    """Every <student>/<assignment> folder of ``submitted`` whose assignment has a source."""
    found = []
    for student_dir in sorted(p for p in submitted.iterdir() if p.is_dir()):
        for folder in sorted(p for p in student_dir.iterdir() if p.is_dir()):
            if folder.name not in source_notebooks:
                continue
            found.append(match_notebooks(student_dir.name, folder, source_notebooks[folder.name]))
    return found


def match_notebooks(student: str, folder: Path, expected: list[str]) -> Submission:
    sub = Submission(student, folder.name, folder, {})
    present = sorted(p for p in folder.glob("*.ipynb") if p.is_file())
    for name in expected:
        path = folder / f"{name}.ipynb"
        if path.is_file():
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
