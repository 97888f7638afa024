"""formgrader's "# Submissions" and submission times on OUT, which has no ``submitted/``.

nbgrader counts ``submitted/<student>/<assignment>/`` folders; OUT holds the gradebook's
graded submissions and ``autograded/`` instead. ``grader/formgrader_server._gradebook_api``
counts those, so the count (and with it the Generate/Release Feedback buttons, shown only
above 0) is right, and each submission still lists as autograded.
"""

from __future__ import annotations

import datetime
import os
import sys
from pathlib import Path

import pytest
from nbgrader.api import Gradebook
from nbgrader.coursedir import CourseDirectory

from grader.formgrader_server import _gradebook_api

STUDENTS = ("ann", "bob", "cid")


@pytest.fixture(autouse=True)
def _alembic_on_path(monkeypatch):
    """nbgrader's gradebook runs alembic by name, from beside this interpreter."""
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))


def _course(root: Path) -> CourseDirectory:
    """A course root with one assignment: ann and bob graded (gradebook and autograded/),
    cid in the gradebook without an autograded folder, dan only on the roster."""
    for name in ("a1", "a2"):  # a2 prepared, never handed out
        (root / "source" / name).mkdir(parents=True)
    url = f"sqlite:///{root / 'gradebook.db'}"
    with Gradebook(url) as gb:
        gb.add_assignment("a1", duedate=datetime.datetime(2026, 3, 1, 12, 0))
        for student in (*STUDENTS, "dan"):
            gb.add_student(student, first_name=student.title(), last_name="Roe")
        for hour, student in enumerate(STUDENTS):
            gb.add_submission("a1", student, timestamp=datetime.datetime(2026, 3, 1, 10 + hour))
    for student in STUDENTS[:2]:
        (root / "autograded" / student / "a1").mkdir(parents=True)
    return CourseDirectory(root=str(root), db_url=url)


def test_graded_submissions_are_counted_and_listed_as_autograded(tmp_path):
    api = _gradebook_api()(_course(tmp_path))
    assert api.get_submitted_students("a1") == {"ann", "bob"}
    assert api.get_submitted_students("*") == {"ann", "bob"}
    assert api.get_assignment("a1")["num_submissions"] == 2
    assert [row["name"] for row in api.get_assignments()] == ["a1"]
    assert api.get_autograded_students("a1") == {"ann", "bob"}
    # formgrader's ungraded list (submitted minus autograded) is empty: none shows as new
    assert api.get_submitted_students("a1") - api.get_autograded_students("a1") == set()
    assert api.get_submission("a1", "ann")["autograded"]
    assert api.get_submitted_timestamp("a1", "bob") == datetime.datetime(2026, 3, 1, 11, 0)


def test_a_submitted_folder_still_counts_with_its_own_timestamp(tmp_path):
    course = _course(tmp_path)
    folder = tmp_path / "submitted" / "dan" / "a1"
    folder.mkdir(parents=True)
    (folder / "timestamp.txt").write_text("2026-03-02 09:00:00.000000 UTC\n")
    api = _gradebook_api()(course)
    assert api.get_submitted_students("a1") == {"ann", "bob", "dan"}
    assert api.get_submitted_timestamp("a1", "dan").day == 2
    assert api.get_submitted_timestamp("a1", "ann").hour == 10
