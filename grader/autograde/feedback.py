"""Feedback in nbgrader's layout, and its delivery through nbgrader's exchange.

``OUT/feedback/<student>/<assignment>/<notebook>.html``: one page per notebook the student
handed in, named after that file (``nbgrader fetch_feedback`` looks a page up by the name of
the notebook in the student's own copy), beside the submission's ``timestamp.txt`` and
``submission_secret.txt`` (for submissions that came through the exchange, which have
them), which ``nbgrader release_feedback`` reads (the page's name in the
exchange is a hash of the secret and the notebook's name). The same two files are copied
into ``OUT/autograded/<student>/<assignment>/``, as nbgrader's autograde does, so that
nbgrader's own ``generate_feedback`` (formgrader's button, after manual grading) writes the
same layout. The pages are the grader's feedback: hidden tests are described by what they
checked, never by their code.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from grader.autograde import permissions, safe_open
from grader.autograde.reports import feedback_html, printable_result, write_atomically
from grader.autograde.results import SubmissionResult
from grader.autograde.submissions import Submission

TIMESTAMP, SECRET = "timestamp.txt", "submission_secret.txt"
MAX_COURSE_FILE = 4096  # nbgrader's secret is 128 hex digits, a timestamp one line


def feedback_folder(out: Path, student: str, assignment: str) -> Path:
    return out / "feedback" / student / assignment


def write_course_feedback(out: Path, result: SubmissionResult, sub: Submission) -> list[Path]:
    """The submission's pages and course files under OUT/feedback (and the files under
    OUT/autograded); pages of notebooks no longer handed in are removed.

    Only a submission that came through the exchange (it has nbgrader's timestamp.txt and
    submission_secret.txt) gets pages there: ``nbgrader release_feedback`` stops at the
    first page without them, and a student with no secret could not fetch one anyway.
    Everyone's feedback is OUT/<student>/<assignment>/feedback.html.
    """
    copy_course_files(sub, out / "autograded" / sub.student / sub.assignment)
    folder = feedback_folder(out, sub.student, sub.assignment)
    exchanged = course_file(sub, TIMESTAMP) is not None and course_file(sub, SECRET) is not None
    pages = _pages(sub, result) if exchanged else {}
    for stale in folder.glob("*.html") if folder.is_dir() else []:
        if stale.stem not in pages:
            stale.unlink(missing_ok=True)
    if not exchanged:
        for name in (TIMESTAMP, SECRET):
            (folder / name).unlink(missing_ok=True)
        return []
    permissions.make_folders(folder)
    shown = printable_result(result)
    written = []
    for stem, notebook in pages.items():
        tests = [t for t in shown.tests if not notebook or t.notebook == notebook]
        page = feedback_html(shown, notebook=f"{stem}.ipynb" if len(pages) > 1 else "", tests=tests)
        write_atomically(folder / f"{stem}.html", page)
        written.append(folder / f"{stem}.html")
    copy_course_files(sub, folder)
    return written


def _pages(sub: Submission, result: SubmissionResult) -> dict[str, str]:
    """Page name (a handed-in notebook's stem) -> the source notebook it stands for ("" for
    a notebook that stands for none: its page shows the whole result)."""
    pages = {path.stem: name for name, path in sub.notebooks.items()}
    for file in sub.walk.files if sub.walk is not None else []:
        if len(file.relative.parts) == 1 and file.relative.suffix == ".ipynb":
            pages.setdefault(file.relative.stem, "")
    if not pages:  # nothing handed in: one page per source notebook the result names
        pages = {t.notebook: t.notebook for t in result.tests} or {result.assignment: ""}
    return pages


def course_file(sub: Submission, name: str) -> bytes | None:
    """timestamp.txt or submission_secret.txt of the submission, as its walk found it."""
    for file in sub.walk.files if sub.walk is not None else []:
        if file.relative == Path(name) and file.size <= MAX_COURSE_FILE:
            return _read_small(file.path)
    return None


def copy_course_files(sub: Submission, target: Path) -> None:
    for name in (TIMESTAMP, SECRET):
        content = course_file(sub, name)
        if content is None:
            (target / name).unlink(missing_ok=True)  # an older submission's must not stay
        else:
            permissions.make_folders(target)
            write_atomically(target / name, content.decode("utf-8", "replace"))


def _read_small(path: Path) -> bytes | None:
    try:
        return safe_open.read_small(path, MAX_COURSE_FILE)  # no symlink, no FIFO, bounded
    except OSError:
        return None


def release_page(exchange_course: Path, secret: str, notebook_id: str, html: str) -> Path:
    """Put one page where ``nbgrader fetch_feedback`` looks for it: the course's outbound
    feedback folder of the exchange, named ``md5(secret + notebook id).html``, readable by
    all (the folder lets students reach a page by name without listing the others)."""
    from nbgrader.utils import notebook_hash

    folder = exchange_course / "feedback"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(0o711)  # nbgrader's release_feedback: rwx--x--x
    target = folder / f"{notebook_hash(secret=secret, notebook_id=notebook_id)}.html"
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".feedback-")
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as handle:
        handle.write(html)
    os.chmod(tmp, 0o644)
    os.replace(tmp, target)
    return target


def release_feedback(out: Path, student: str, assignment: str, exchange_course: Path) -> list[Path]:
    """Every page of OUT/feedback/<student>/<assignment>/ into the exchange, as
    ``nbgrader release_feedback`` would put it there; nothing without the submission's secret."""
    folder = feedback_folder(out, student, assignment)
    secret = _read_small(folder / SECRET)
    if not secret:
        return []
    return [
        release_page(
            exchange_course, secret.decode("utf-8", "replace"), page.stem, page.read_text(encoding="utf-8")
        )
        for page in sorted(folder.glob("*.html"))
    ]
