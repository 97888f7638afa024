"""The run's gradebook: opened once (nbgrader's Gradebook, tuned for SQLite), the source's cell
records read once, a submission's rows written in one transaction, and a one-line message
when the database cannot be opened.

nbgrader's gradebook preprocessors share this open gradebook through
``nbgrader_adapters`` (its ``Shared*`` preprocessors and :class:`SourceCells` here).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import sqlalchemy
from nbgrader.api import Gradebook

from grader.autograde import phases
from grader.autograde.nbgrader_adapters import alembic_head_in_process

_HINTS = [  # (words in the driver's message, what to fix)
    (
        ("no password supplied", "password authentication failed"),
        "give the password in a libpq password file (PGPASSFILE or ~/.pgpass) or in the URL",
    ),
    (("does not exist",), "create the database first (createdb NAME) or fix its name in the URL"),
    (
        ("connection refused", "could not connect", "timeout expired", "could not translate host"),
        "is the database server running, and reachable at the URL's host and port?",
    ),
    (("unable to open database file",), "the folder of the SQLite file must exist and be writable"),
    (
        ("no module named", "can't load plugin"),
        "the URL's driver is not installed: for PostgreSQL use postgresql+psycopg://",
    ),
    (
        ("could not parse", "invalid"),
        "a URL looks like sqlite:////abs/path.db or postgresql+psycopg://user@host:5432/dbname",
    ),
]


class GradebookUnavailable(RuntimeError):
    """The gradebook's database cannot be opened; the message is one line saying what to fix."""


def unavailable_message(db_url: str, exc: BaseException) -> str:
    """One line: which gradebook (password hidden), the driver's first line, and a hint."""
    try:
        shown = sqlalchemy.engine.make_url(db_url).render_as_string(hide_password=True)
    except Exception:
        shown = "(an unreadable URL)"
    reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
    first = reason[0] if reason else type(exc).__name__
    hint = next(
        (fix for words, fix in _HINTS if any(w in first.lower() for w in words)), "check the --db URL"
    )
    return f"cannot open the gradebook {shown}: {first}; {hint}"


def open_gradebook(db_url: str) -> Gradebook:
    """nbgrader's Gradebook; on SQLite, in WAL mode with NORMAL sync.

    nbgrader commits once per grade cell; with SQLite's default rollback journal each commit
    waits for the disk twice. WAL keeps every commit durable against a crash of this process
    (the case an interrupted run must survive) at a fraction of the cost.
    """
    from sqlalchemy import event, text

    from grader.nbgrader_course import prepare_nbgrader

    prepare_nbgrader()
    try:
        with alembic_head_in_process():
            gradebook = Gradebook(db_url)
    except (sqlalchemy.exc.SQLAlchemyError, ImportError) as exc:
        raise GradebookUnavailable(unavailable_message(db_url, exc)) from None
    if db_url.startswith("sqlite"):

        @event.listens_for(gradebook.engine, "connect")
        def _pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.close()

        gradebook.db.remove()
        gradebook.engine.dispose()  # reconnect with the pragmas
        gradebook.db.execute(text("SELECT 1"))
    # what the run costs the database, counted (GRADER_PHASES): its transactions and statements
    event.listen(gradebook.engine, "commit", lambda _conn: phases.count("gradebook.commits"))
    event.listen(
        gradebook.engine, "before_cursor_execute", lambda *_args: phases.count("gradebook.statements")
    )
    return gradebook


@contextmanager
def one_transaction(gradebook: Gradebook) -> Iterator[None]:
    """Everything nbgrader writes within the block, committed once at its end.

    nbgrader's gradebook API commits after every row it touches: a submission's record,
    each grade and comment, the late penalty, some twelve commits per notebook. Within the
    block the session's ``commit`` is lent ``flush`` then ``expire_all``: the rows reach the
    database in the same order, and every object is reloaded on its next use exactly as
    after nbgrader's commit (its computed scores and penalties are SQL sums, read fresh),
    but the transaction stays open; it is committed when the block ends, or rolled back
    with all of the submission's rows if the block raises. A run interrupted mid-submission
    leaves that submission out of the gradebook entirely, never half written.
    """
    session = gradebook.db  # nbgrader's scoped session: the same object every call sees

    def commit_at_the_end() -> None:
        session.flush()
        session.expire_all()

    session.commit = commit_at_the_end  # an attribute of this one session object
    try:
        yield
    except BaseException:
        del session.commit
        session.rollback()
        raise
    del session.commit
    session.commit()


class SourceCells:
    """The source's cell records in the gradebook, each read once per run.

    OverwriteCells asks the gradebook for each submitted cell's source record and grade
    record: two queries per cell, with the same answers for every submission of an
    assignment (``generate_assignment`` wrote them before grading began, and nothing changes
    them during the run); measured, a third of the parent's sanitizing time. Each record is
    kept as a snapshot of its columns, never as an ORM object that a later commit expires.
    A lookup that fails (nbgrader's MissingEntry) is not kept and fails again next time.
    """

    def __init__(self, gradebook: Gradebook) -> None:
        self.gradebook = gradebook
        self._rows: dict[tuple[str, ...], SimpleNamespace] = {}

    def find_source_cell(self, name: str, notebook: str, assignment: str) -> SimpleNamespace:
        return self._row("find_source_cell", name, notebook, assignment)

    def find_graded_cell(self, name: str, notebook: str, assignment: str) -> SimpleNamespace:
        return self._row("find_graded_cell", name, notebook, assignment)

    def find_notebook(self, name: str, assignment: str) -> SimpleNamespace:
        """The source notebook's record (its columns only, e.g. the kernelspec)."""
        return self._row("find_notebook", name, assignment)

    def _row(self, method: str, *key: str) -> SimpleNamespace:
        if (method, *key) not in self._rows:
            row = getattr(self.gradebook, method)(*key)
            columns = sqlalchemy.inspect(row).mapper.column_attrs
            self._rows[(method, *key)] = SimpleNamespace(**{c.key: getattr(row, c.key) for c in columns})
        return self._rows[(method, *key)]
