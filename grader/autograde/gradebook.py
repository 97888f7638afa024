"""nbgrader's gradebook preprocessors, sharing one open gradebook for the whole run.

OverwriteCells and SaveAutoGrades open (and migrate-check) a new Gradebook for every
notebook, over 100 ms each here; with hundreds of submissions that was most of the parent's
time. These subclasses run nbgrader's own cell logic unchanged against one connection.
"""

from __future__ import annotations

from nbgrader.api import Gradebook
from nbgrader.preprocessors import OverwriteCells, SaveAutoGrades


def open_gradebook(db_url: str) -> Gradebook:
    """nbgrader's Gradebook; on SQLite, in WAL mode with NORMAL sync.

    nbgrader commits once per grade cell; with SQLite's default rollback journal each commit
    waits for the disk twice. WAL keeps every commit durable against a crash of this process
    (the case an interrupted run must survive) at a fraction of the cost.
    """
    from sqlalchemy import event, text

    from grader.nbgrader_course import prepare_nbgrader

    prepare_nbgrader()
    gradebook = Gradebook(db_url)
    if db_url.startswith("sqlite"):
        @event.listens_for(gradebook.engine, "connect")
        def _pragmas(dbapi_connection, _record) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        gradebook.db.remove()
        gradebook.engine.dispose()  # reconnect with the pragmas
        gradebook.db.execute(text("SELECT 1"))
    return gradebook


def _set_ids(pp, gradebook: Gradebook, resources: dict) -> None:
    info = resources["nbgrader"]
    pp.notebook_id = info["notebook"]
    pp.assignment_id = info["assignment"]
    pp.student_id = info.get("student")
    pp.db_url = info["db_url"]
    pp.gradebook = gradebook


class SharedOverwriteCells(OverwriteCells):
    """OverwriteCells (with missing grade cells added back) on an already open gradebook."""

    def __init__(self, gradebook: Gradebook, **kwargs) -> None:
        super().__init__(add_missing_cells=True, **kwargs)
        self.shared = gradebook

    def preprocess(self, nb, resources):
        _set_ids(self, self.shared, resources)
        nb, resources = super(OverwriteCells, self).preprocess(nb, resources)  # per-cell logic
        nb, resources = self.add_missing_grade_cells(nb, resources)
        nb, resources = self.add_missing_task_cells(nb, resources)
        return nb, resources


class SharedSaveAutoGrades(SaveAutoGrades):
    """SaveAutoGrades (determine_grade -> auto_score, needs_manual_grade) on an open gradebook."""

    def __init__(self, gradebook: Gradebook, **kwargs) -> None:
        super().__init__(**kwargs)
        self.shared = gradebook

    def preprocess(self, nb, resources):
        _set_ids(self, self.shared, resources)
        return super(SaveAutoGrades, self).preprocess(nb, resources)
