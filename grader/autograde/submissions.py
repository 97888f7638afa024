"""Finding submissions: one student folder at a time, their ids checked, their notebooks matched.

Layout (nbgrader's): SUBMITTED/<student_id>/<assignment>/<notebook>.ipynb. A folder of an
assignment whose source has a single notebook may hold exactly one notebook of another name:
it is graded, with a note. Anything unusable is a :class:`Submission` whose ``problem`` says
why (it becomes an ``invalid`` row); one folder, whatever it holds, never stops the others.
Each assignment folder is read once, by ``folder_walk.walk_folder``; a student folder,
assignment folder or notebook that is a symlink is refused.
"""

from __future__ import annotations

import hashlib
import os
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path

from grader.autograde.folder_walk import SUBMISSION_LIMITS, FolderWalk, reason, utf8, walk_folder

MAX_ID_LENGTH = 128
# names a student folder may not have: OUT's own files and folders sit beside student folders
RESERVED_IDS = {
    "grades.csv",
    "gradebook.db",
    "gradebook.db-wal",
    "gradebook.db-shm",
    "gradebook.db-journal",
    "autograded",
    "feedback",
    "source",
    "release",
    "submitted",
}


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
        return hashlib.sha256(utf8(context + files)).hexdigest()


def isutf8(name: str) -> bool:
    """Whether a name read from the filesystem was valid UTF-8 (no surrogate escapes in it)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def student_id_problem(name: str) -> str:
    """ "" for a usable student id, else why it is refused."""
    if not isutf8(name):
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
            unlisted.append((student, student_dir, f"the student folder could not be read ({reason(exc)})"))
        except Exception as exc:  # one odd folder must not stop the class
            unlisted.append(
                (student, student_dir, f"the student folder could not be read: {type(exc).__name__}: {exc}")
            )
    handed_in = sorted({s.assignment for s in found}) or sorted(source_notebooks)
    for student, student_dir, why in unlisted:
        found += [
            Submission(
                student, a, student_dir / a, {}, problem=why, unsafe_id=bool(student_id_problem(student))
            )
            for a in handed_in
        ]
    return sorted(found, key=lambda s: (os.fsencode(s.student), s.assignment))


def _student_submissions(
    student: str, student_dir: Path, is_link: bool, source_notebooks: dict[str, list[str]]
) -> list[Submission]:
    problem = student_id_problem(student)
    if is_link and not problem:
        problem = "the student folder is a symlink (not followed)"
    found = []
    for folder, folder_is_link in _folders(student_dir):
        if folder.name not in source_notebooks:
            continue
        if problem:
            found.append(
                Submission(
                    student,
                    folder.name,
                    folder,
                    {},
                    problem=problem,
                    unsafe_id=bool(student_id_problem(student)),
                )
            )
        elif folder_is_link:
            found.append(
                Submission(
                    student,
                    folder.name,
                    folder,
                    {},
                    problem="the assignment folder is a symlink (not followed)",
                )
            )
        else:
            try:
                found.append(match_notebooks(student, folder, source_notebooks[folder.name]))
            except Exception as exc:  # a bug here must cost this submission only
                found.append(
                    Submission(
                        student,
                        folder.name,
                        folder,
                        {},
                        problem=(f"the submission folder could not be read: {type(exc).__name__}: {exc}"),
                    )
                )
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
    sub.notes += FolderWalk(
        skipped=[s for s in walk.skipped if not top_notebook(s.relative)],
        symlinks=[p for p in walk.symlinks if not top_notebook(p)],
    ).notes()
    refused = [f"{n}: {why}" for n, why in sorted(unusable.items())]
    missing = [n for n in expected if n not in sub.notebooks]
    if not sub.notebooks:
        if refused:
            sub.problem = "the notebook could not be used: " + "; ".join(refused)
        elif not present:
            sub.problem = "no notebook was found in the submission folder"
        else:
            sub.problem = (
                f"none of the notebooks ({', '.join(sorted(present))}) is "
                f"{' or '.join(n + '.ipynb' for n in expected)}"
            )
    elif missing:
        sub.notes.append("missing notebook(s), scored 0: " + ", ".join(f"{n}.ipynb" for n in missing))
        if refused:
            sub.notes.append("notebook(s) that could not be used: " + "; ".join(refused))
    return sub
