"""nbgrader's gradebook preprocessors, sharing one open gradebook for the whole run.

OverwriteCells and SaveAutoGrades open (and migrate-check) a new Gradebook for every
notebook, over 100 ms each here; with hundreds of submissions that was most of the parent's
time. These subclasses run nbgrader's own ``preprocess`` unchanged; for the length of that
call, the name ``Gradebook`` in its module gives back the run's open gradebook (``lend.py``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from nbgrader.api import Gradebook
from nbgrader.preprocessors import OverwriteCells, SaveAutoGrades, overwritecells, saveautogrades

from grader.autograde.lend import lend


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


class _Lent:
    """The run's open gradebook, lent to one nbgrader preprocessor: ``with`` leaves it open."""

    def __init__(self, gradebook: Gradebook) -> None:
        self._gradebook = gradebook

    def __getattr__(self, name: str) -> Any:
        return getattr(self._gradebook, name)

    def __enter__(self) -> _Lent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def _lending(module: Any, gradebook: Gradebook) -> AbstractContextManager[None]:
    """For the duration of one call, ``module``'s ``Gradebook(db_url)`` is the open one."""
    return lend(module, "Gradebook", lambda *args, **kwargs: _Lent(gradebook))


class SharedOverwriteCells(OverwriteCells):
    """nbgrader's OverwriteCells (missing grade cells added back), on the run's gradebook."""

    def __init__(self, gradebook: Gradebook, **kwargs: Any) -> None:
        super().__init__(add_missing_cells=True, **kwargs)
        self.shared = gradebook

    def preprocess(self, nb, resources):
        with _lending(overwritecells, self.shared):
            return super().preprocess(nb, resources)


class SharedSaveAutoGrades(SaveAutoGrades):
    """nbgrader's SaveAutoGrades (determine_grade -> auto_score), on the run's gradebook."""

    def __init__(self, gradebook: Gradebook, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shared = gradebook

    def preprocess(self, nb, resources):
        with _lending(saveautogrades, self.shared):
            return super().preprocess(nb, resources)
