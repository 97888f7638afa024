"""OUT as an nbgrader course directory, so that nbgrader's own tools work on it.

Beside what the grader writes for itself (``<student>/<assignment>/results.json``, grades.csv),
OUT holds what nbgrader's course root holds: ``source/<assignment>/`` (a copy of each
source assignment graded), ``autograded/``, ``feedback/`` (``feedback.py``), the gradebook,
and an ``nbgrader_config.py`` that points nbgrader (formgrader, ``release_feedback``,
``generate_feedback``, ``export``) at this root and this gradebook. It has no ``submitted/``:
formgrader's "autograde" button would run the learners' code unconfined, as the instructor.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import tempfile
from pathlib import Path

from grader.autograde import permissions
from grader.autograde.folder_walk import TRUSTED, copy_walked_file, folder_fingerprint, walk_folder
from grader.autograde.reports import write_atomically

CONFIG = "nbgrader_config.py"
MARKER = "# Written by python -m grader autograde: delete this line to keep your own edits."
# a student folder may not carry the name of a configuration file nbgrader or Jupyter would
# read from OUT (formgrader runs with OUT as its working folder); the other names of OUT's
# own entries are refused by discovery (submissions.RESERVED_IDS)
_CONFIG_NAME = re.compile(r".*_config\.(py|json)", re.IGNORECASE)
# nbgrader's feedback, regenerated from formgrader after manual grading ("Generate
# Feedback"), leaves out the hidden tests' code, as the grader's own feedback does
FEEDBACK_PREPROCESSORS = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
]


def reserved_name(student: str) -> str:
    """Why ``student`` cannot name a folder of OUT beside its configuration ("" if it can)."""
    if _CONFIG_NAME.fullmatch(student):
        return f"the student id {student!r} is the name of a configuration file of OUT"
    return ""


def copy_sources(out: Path, folders: dict[str, Path]) -> None:
    """OUT/source/<assignment>/ as a copy of each source folder, replaced when it changed."""
    root = out / "source"
    permissions.make_folders(root)
    for name, folder in folders.items():
        target = root / name
        if target.is_dir() and not target.is_symlink():
            if folder_fingerprint(target) == folder_fingerprint(folder):
                continue
        fresh = Path(tempfile.mkdtemp(dir=root, prefix=f".{name}."))
        for file in walk_folder(folder, TRUSTED, read=False).files:
            permissions.make_folders((fresh / file.relative).parent)
            copy_walked_file(file, fresh / file.relative)
            os.chmod(fresh / file.relative, permissions.file_mode())
        permissions.set_folder_mode(fresh)  # mkdtemp's 0700, or the group's 0750
        old = root / f".{name}.old"
        shutil.rmtree(old, ignore_errors=True)
        if target.exists() or target.is_symlink():
            os.replace(target, old)
        os.replace(fresh, target)
        shutil.rmtree(old, ignore_errors=True)


def write_config(
    out: Path, db_url: str, course_id: str | None = None, exchange: Path | None = None
) -> Path | None:
    """OUT/nbgrader_config.py for nbgrader's tools; an instructor's own file is left alone.

    A password in ``db_url`` is not written (give it to libpq in a password file instead).
    """
    from sqlalchemy.engine import make_url

    path = out / CONFIG
    previous = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    if path.exists() and MARKER not in previous:
        return None
    course_id = course_id or _previous(previous, "CourseDirectory.course_id")
    if exchange is None and _previous(previous, "Exchange.root"):
        exchange = Path(_previous(previous, "Exchange.root"))
    url = make_url(db_url)
    lines = [
        MARKER,
        "c = get_config()  # noqa: F821 (nbgrader defines it)",
        f"c.CourseDirectory.root = {str(out.resolve())!r}",
        f"c.CourseDirectory.db_url = {url.set(password=None).render_as_string(hide_password=False)!r}",
    ]
    if url.password:
        lines.append("# the URL's password is not written here: put it in a libpq password file (PGPASSFILE)")
    if course_id:
        lines.append(f"c.CourseDirectory.course_id = {course_id!r}")
    if exchange is not None:
        lines.append(f"c.Exchange.root = {str(exchange.resolve())!r}")
    lines.append(f"c.GenerateFeedback.preprocessors = {FEEDBACK_PREPROCESSORS!r}")
    # nbgrader chmods each page it writes (644 unless told): as private as OUT's own files
    lines.append(f"c.GenerateFeedback.permissions = {permissions.file_mode():o}")
    write_atomically(path, "\n".join(lines) + "\n")
    return path


def _previous(text: str, trait: str) -> str:
    """A string setting of our own earlier config (the watcher's course and exchange)."""
    match = re.search(rf"^c\.{re.escape(trait)} = (.+)$", text, re.MULTILINE)
    if not match:
        return ""
    try:
        value = ast.literal_eval(match.group(1))
    except (ValueError, SyntaxError):
        return ""
    return value if isinstance(value, str) else ""
