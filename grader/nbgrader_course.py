"""A throwaway nbgrader course folder around a source directory.

nbgrader wants a course root with ``source/<assignment>/`` and a gradebook, and its
generate_assignment deletes its whole output folder. So every call works in a temporary
root whose ``source`` is a symlink to the real source directory; only what the caller
copies out of it survives.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nbgrader.apps import NbGraderAPI
from nbgrader.coursedir import CourseDirectory
from traitlets.config import Config

from grader.autograde.nbgrader_adapters import alembic_head_in_process


def prepare_nbgrader() -> None:
    """Put this interpreter's scripts folder on PATH, where nbgrader looks for the scripts it
    runs by name (``alembic``), so that they are found when the venv is not activated.

    The subprocess a new gradebook would run for its schema revision is answered in-process
    instead, for the length of each call (``nbgrader_adapters.alembic_head_in_process``).
    """
    scripts = str(Path(sys.executable).parent)
    if scripts not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = scripts + os.pathsep + os.environ.get("PATH", "")


class NbgraderError(RuntimeError):
    """nbgrader reported a failure; the message carries its log."""


@contextmanager
def temporary_course(source_dir: Path, db_url: str | None = None) -> Iterator[NbGraderAPI]:
    """An nbgrader API on a temporary course root whose source/ is ``source_dir``."""
    prepare_nbgrader()
    with tempfile.TemporaryDirectory(prefix="attention-course-") as tmp, alembic_head_in_process():
        root = Path(tmp)
        (root / "source").symlink_to(Path(source_dir).resolve(), target_is_directory=True)
        config = Config()
        config.CourseDirectory.root = str(root)
        config.CourseDirectory.db_url = db_url or f"sqlite:///{root / 'gradebook.db'}"
        # the course nbgrader's Gradebook() creates; the default '' has no course row, which
        # SQLite lets pass and PostgreSQL refuses (assignment_course_id_fkey)
        config.CourseDirectory.course_id = "default_course"
        config.Application.log_level = logging.ERROR
        coursedir = CourseDirectory(config=config)
        yield NbGraderAPI(coursedir=coursedir, config=config)


def generate_assignment(api: NbGraderAPI, assignment: str) -> Path:
    """Run nbgrader's generate_assignment; return the folder holding the released files.

    This also records the assignment's notebooks and grade cells in the API's gradebook.
    """
    result = api.generate_assignment(assignment, force=True, create=True)
    if not result["success"]:
        raise NbgraderError(f"nbgrader generate_assignment {assignment} failed:\n{result['log']}")
    return Path(api.coursedir.format_path(api.coursedir.release_directory, ".", assignment))
