"""The autograder with a real PostgreSQL gradebook (``--db postgresql+psycopg://...``).

One small chapter 3 class (correct, stub, partial, a student id with a quote, one in
Unicode, a folder without a notebook, and a submission that tries to reach the database) is
graded twice: into a fresh PostgreSQL database and into the default SQLite gradebook. The
tests compare the two, read the PostgreSQL gradebook back with ``nbgrader export``, and
grade again into the same database to show that nothing is duplicated.

The server: ``ATTENTION_TEST_PG_URL`` (set by ``.ci/run``) names a role that may create
databases; without it the module starts a throwaway server of its own (``tests/pg_server.py``)
and skips only when PostgreSQL is not installed. Every run uses a database of its own, so the
module works in any order and next to other test modules under pytest-xdist.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest

from tests.notebook_runner import grade_id, learner_notebook, solved_notebook, with_cell
from tests.pg_server import URL_VARIABLE, PostgresServer, find_bin_dir
from tests.security.grade_as import autograde_command

try:
    import psycopg
    import sqlalchemy
    from sqlalchemy.engine import make_url
except ImportError as exc:  # psycopg is in the test extra: pip install -e ".[test]"
    pytest.skip(f"psycopg is not installed ({exc}); pip install 'psycopg[binary]'", allow_module_level=True)

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("postgres"),
]

A = "03_scaled_dot_product"
FULL = 10.0
BIN = Path(sys.executable).parent
QUOTED = "o'brien"
UNICODE = "zoë-李雷"


# ------------------------------------------------------------------ the server and databases


@pytest.fixture(scope="module")
def pg_base_url() -> Iterator[str]:
    """A URL whose role may CREATE DATABASE: CI's server, or one this module starts."""
    url = os.environ.get(URL_VARIABLE)
    if url:
        yield url
        return
    bin_dir = find_bin_dir()
    if bin_dir is None:
        pytest.skip(
            f"PostgreSQL is not installed (no initdb and pg_ctl under /usr/lib/postgresql/"
            f"*/bin or on PATH) and {URL_VARIABLE} is not set"
        )
    server = PostgresServer.start(bin_dir=bin_dir)
    try:
        yield server.url
    finally:
        server.stop()


def _libpq(url: str) -> str:
    """A SQLAlchemy URL as a plain libpq URI (what psycopg.connect takes)."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def new_database(base_url: str) -> str:
    """CREATE DATABASE with a fresh name; return its SQLAlchemy URL."""
    name = f"attention_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(_libpq(base_url), autocommit=True) as connection:
        try:
            connection.execute(f'CREATE DATABASE "{name}"')
        except psycopg.errors.InsufficientPrivilege:
            pytest.fail(f"the role in {URL_VARIABLE} may not create databases (ALTER ROLE ... CREATEDB)")
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


def drop_database(base_url: str, url: str) -> None:
    name = make_url(url).database
    with psycopg.connect(_libpq(base_url), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def row_counts(url: str) -> dict[str, int]:
    """Rows per table of a gradebook, whichever database holds it."""
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            tables = sqlalchemy.inspect(connection).get_table_names()
            return {
                t: connection.execute(sqlalchemy.text(f'SELECT count(*) FROM "{t}"')).scalar_one()
                for t in tables
            }
    finally:
        engine.dispose()


def grade_rows(url: str) -> list[tuple]:
    """Every row of nbgrader's grade table with its student, in id order.

    (student, id, auto score, manual score, needs manual grade); a grade's id survives an
    update, not a delete and re-insert.
    """
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as connection:
            return [
                tuple(r)
                for r in connection.execute(
                    sqlalchemy.text(
                        "SELECT sa.student_id, g.id, g.auto_score, g.manual_score, g.needs_manual_grade "
                        "FROM grade g JOIN submitted_notebook sn ON g.notebook_id = sn.id "
                        "JOIN submitted_assignment sa ON sn.assignment_id = sa.id ORDER BY g.id"
                    )
                )
            ]
    finally:
        engine.dispose()


def gradebook_scores(url: str) -> dict[tuple[str, str, str, str], tuple]:
    """(student, assignment, notebook, grade cell) -> (auto, manual, needs manual grade)."""
    from nbgrader.api import Gradebook

    scores = {}
    with Gradebook(url) as gradebook:
        for student in gradebook.students:
            for submission in student.submissions:
                for notebook in submission.notebooks:
                    for grade in notebook.grades:
                        key = (student.id, submission.name, notebook.name, grade.name)
                        scores[key] = (grade.auto_score, grade.manual_score, grade.needs_manual_grade)
    return scores


# ------------------------------------------------------------------ the class


def _cell_source(nb, exercise: str) -> str:
    return next(c.source for c in nb.cells if grade_id(c) == exercise)


def _probe(url: str) -> object:
    """A correct submission whose solution cells first try to reach the database.

    The sandbox should give the child no network: each connection must fail. A connection
    that succeeds raises, and the exercise's tests then lose their points in results.json.
    A third cell looks for the database password where a child could read it: its own
    environment and every other process's command line and environment under /proc.
    """
    port = make_url(url).port
    password = make_url(url).password
    solved = solved_notebook(A)
    tcp = (
        "import socket\n"
        "try:\n"
        f"    socket.create_connection(('127.0.0.1', {port}), timeout=2).close()\n"
        "except OSError:\n"
        "    pass\n"
        "else:\n"
        "    raise RuntimeError('the grading child opened a TCP connection to PostgreSQL')\n\n"
    )
    login = (
        "try:\n"
        "    import psycopg\n"
        f"    psycopg.connect({_libpq(url)!r}, connect_timeout=2).close()\n"
        "except Exception:\n"
        "    pass\n"
        "else:\n"
        "    raise RuntimeError('the grading child logged in to PostgreSQL')\n\n"
    )
    snoop = (
        "import glob, os\n"
        "def _leaks(secret):\n"
        "    found = [k for k, v in os.environ.items() if secret in v]\n"
        "    for path in glob.glob('/proc/[0-9]*/cmdline') + glob.glob('/proc/[0-9]*/environ'):\n"
        "        try:\n"
        "            with open(path, 'rb') as handle:\n"
        "                if secret.encode() in handle.read():\n"
        "                    found.append(path)\n"
        "        except OSError:\n"
        "            pass\n"
        "    return found\n"
        f"_found = _leaks({password!r})\n"
        "if _found:\n"
        "    raise RuntimeError(f'the grading child read the database password in {_found}')\n\n"
    )
    nb = with_cell(solved, "softmax_jacobian", tcp + _cell_source(solved, "softmax_jacobian"))
    nb = with_cell(
        nb,
        "scaled_dot_product_attention_torch",
        snoop + _cell_source(solved, "scaled_dot_product_attention_torch"),
    )
    return with_cell(
        nb, "scaled_dot_product_attention", login + _cell_source(solved, "scaled_dot_product_attention")
    )


def _write_class(submitted: Path, url: str) -> None:
    solved = solved_notebook(A)
    partial = with_cell(
        solved, "softmax_jacobian", "def softmax_jacobian(p):\n    return np.outer(p, p) - np.diag(p)\n"
    )
    notebooks = {
        "correct": solved,
        "stub": learner_notebook(A),
        "partial": partial,
        QUOTED: solved,
        UNICODE: partial,
        "net_probe": _probe(url),
    }
    for student, nb in notebooks.items():
        folder = submitted / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
    (submitted / "no_notebook" / A).mkdir(parents=True)
    (submitted / "no_notebook" / A / "notes.txt").write_text("I forgot\n")


def _env(**extra: str) -> dict[str, str]:
    """This environment minus the test server's URL (the grader must not need it), plus extra."""
    env = {k: v for k, v in os.environ.items() if k != URL_VARIABLE}
    return dict(env, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""), **extra)


def autograde(submitted: Path, out: Path, db: str | None = None, **env: str) -> subprocess.CompletedProcess:
    command = autograde_command(submitted, out, *(["--db", db] if db else []), timeout=20)
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=_env(**env))


COURSE_ID_HINT = (
    "\nnbgrader records assignments under CourseDirectory.course_id ('' by default) and creates "
    "no course row for ''; SQLite ignores that foreign key, PostgreSQL refuses it. "
    "grader/nbgrader_course.temporary_course must set course_id = 'default_course'."
)


@pytest.fixture(scope="module")
def graded(pg_base_url, tmp_path_factory) -> Iterator[dict]:
    """The class graded into a fresh PostgreSQL database and into the default SQLite gradebook."""
    root = tmp_path_factory.mktemp("pg_class")
    url = new_database(pg_base_url)
    try:
        _write_class(root / "submitted", url)
        run = autograde(root / "submitted", root / "out_pg", url)
        hint = COURSE_ID_HINT if "assignment_course_id_fkey" in run.stderr else ""
        assert run.returncode == 0, run.stderr[-4000:] + hint
        lite = autograde(root / "submitted", root / "out_sqlite")
        assert lite.returncode == 0, lite.stderr[-4000:]
        students = sorted(p.name for p in (root / "submitted").iterdir())
        # net_probe finds the password in the PostgreSQL run's command line, not in SQLite's
        yield {
            "root": root,
            "submitted": root / "submitted",
            "url": url,
            "out": root / "out_pg",
            "sqlite": root / "out_sqlite",
            "students": students,
            "compared": [s for s in students if s != "net_probe"],
        }
    finally:
        drop_database(pg_base_url, url)


def _results(out: Path, student: str) -> dict:
    return json.loads((out / student / A / "results.json").read_text(encoding="utf-8"))


def _grades_csv(path: Path) -> dict[str, dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return {row["student_id"]: row for row in csv.DictReader(handle)}


def _essentials(res: dict) -> dict:
    return {
        "score": res["score"],
        "max_score": res["max_score"],
        "status": res["status"],
        "tests": [(t["grade_id"], t["points"], t["max_points"], t["status"]) for t in res["tests"]],
    }


# ------------------------------------------------------------------ the tests


def test_scores_equal_the_sqlite_gradebook(graded):
    expected = {
        "correct": FULL,
        "stub": 0.0,
        "partial": FULL - 2,
        QUOTED: FULL,
        UNICODE: FULL - 2,
        "no_notebook": 0.0,
    }
    for student, score in expected.items():  # the comparison below is not between two zeros
        assert _results(graded["out"], student)["score"] == score, student
        assert _results(graded["out"], student)["max_score"] == FULL, student
    for student in graded["compared"]:
        assert _essentials(_results(graded["out"], student)) == _essentials(
            _results(graded["sqlite"], student)
        ), student
    on_postgres = _grades_csv(graded["out"] / "grades.csv")
    on_sqlite = _grades_csv(graded["sqlite"] / "grades.csv")
    assert set(on_postgres) == set(on_sqlite) == set(graded["students"])
    assert all(on_postgres[s] == on_sqlite[s] for s in graded["compared"])


def test_postgres_gradebook_holds_what_sqlite_holds(graded):
    on_postgres = gradebook_scores(graded["url"])
    on_sqlite = gradebook_scores(f"sqlite:///{graded['sqlite'] / 'gradebook.db'}")
    assert on_postgres.keys() == on_sqlite.keys()
    assert {key[0] for key in on_postgres} == set(graded["students"])
    assert {k: v for k, v in on_postgres.items() if k[0] in graded["compared"]} == {
        k: v for k, v in on_sqlite.items() if k[0] in graded["compared"]
    }
    assert not (graded["out"] / "gradebook.db").exists()  # --db was used, not the default
    tables = row_counts(graded["url"])
    assert {"alembic_version", "grade", "submitted_assignment", "student"} <= set(tables)
    assert tables["alembic_version"] == 1


def test_nbgrader_export_reads_the_postgres_gradebook(graded, tmp_path):
    course = tmp_path / "course"  # an instructor's course folder with no gradebook of its own
    course.mkdir()
    exported = tmp_path / "export.csv"
    run = subprocess.run(
        [
            str(BIN / "nbgrader"),
            "export",
            "--db",
            graded["url"],
            f"--CourseDirectory.root={course}",
            f"--CsvExportPlugin.to={exported}",
        ],
        cwd=course,
        capture_output=True,
        text=True,
        env=_env(),
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    rows = _grades_csv(exported)
    ours = _grades_csv(graded["out"] / "grades.csv")
    assert set(rows) == set(ours) == set(graded["students"])
    for student in graded["compared"]:  # net_probe's points may differ after another run
        row = rows[student]
        assert row["assignment"] == A
        assert float(row["score"]) == float(ours[student]["score"]), student
        assert float(row["max_score"]) == float(ours[student]["max_score"]) == FULL, student
    assert not list(course.glob("*.db"))


def test_quoted_and_unicode_student_ids_round_trip(graded):
    from nbgrader.api import Gradebook

    with Gradebook(graded["url"]) as gradebook:
        stored = {s.id for s in gradebook.students}
        assert {QUOTED, UNICODE} <= stored
        assert gradebook.find_submission(A, QUOTED).score == FULL
        assert gradebook.find_submission(A, UNICODE).score == FULL - 2
    csv_rows = _grades_csv(graded["out"] / "grades.csv")
    for student in (QUOTED, UNICODE):
        assert _results(graded["out"], student)["student_id"] == student
        assert csv_rows[student]["student_id"] == student
        assert (graded["out"] / "autograded" / student / A / f"{A}.ipynb").exists()


def test_rerun_keeps_everything_and_duplicates_nothing(graded):
    counts, grades = row_counts(graded["url"]), grade_rows(graded["url"])
    stamps = {s: (graded["out"] / s / A / "results.json").stat().st_mtime_ns for s in graded["students"]}
    run = autograde(graded["submitted"], graded["out"], graded["url"])
    assert run.returncode == 0, run.stderr[-4000:]
    assert f"0 graded, {len(graded['students'])} unchanged (kept)" in run.stdout
    assert row_counts(graded["url"]) == counts
    assert grade_rows(graded["url"]) == grades
    for student, stamp in stamps.items():
        assert (graded["out"] / student / A / "results.json").stat().st_mtime_ns == stamp


def test_regrading_into_the_same_database_updates_rows_in_place(graded, tmp_path):
    """A fresh OUT grades everyone again; the gradebook's rows are updated, never added.

    This run keeps the password out of the URL (which ``ps`` shows to every local user) and
    gives it to libpq in a password file instead, as the README advises.
    """
    counts, before = row_counts(graded["url"]), grade_rows(graded["url"])
    url = make_url(graded["url"])
    passfile = tmp_path / "pgpass"
    passfile.write_text(f"{url.host}:{url.port}:{url.database}:{url.username}:{url.password}\n")
    passfile.chmod(0o600)
    bare = sqlalchemy.engine.URL.create(
        url.drivername, url.username, None, url.host, url.port, url.database
    ).render_as_string(hide_password=False)
    assert url.password not in bare
    run = autograde(graded["submitted"], tmp_path / "out", bare, PGPASSFILE=str(passfile))
    assert run.returncode == 0, run.stderr[-4000:]
    assert " 0 unchanged (kept)" in run.stdout
    assert row_counts(graded["url"]) == counts
    after = grade_rows(graded["url"])
    assert [row[:2] for row in after] == [row[:2] for row in before]  # the same grade rows
    # the same scores, except where net_probe's password probe found no password this time
    assert [row for row in after if row[0] in graded["compared"]] == [
        row for row in before if row[0] in graded["compared"]
    ]
    again, first = _grades_csv(tmp_path / "out" / "grades.csv"), _grades_csv(graded["out"] / "grades.csv")
    assert set(again) == set(first)
    assert all(again[s] == first[s] for s in graded["compared"])


def _probe_errors(graded) -> dict[str, str]:
    """Solution cell -> the RuntimeError its probe raised, in the executed net_probe notebook."""
    executed = nbformat.read(graded["out"] / "autograded" / "net_probe" / A / f"{A}.ipynb", as_version=4)
    return {
        grade_id(c): o["evalue"]
        for c in executed.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o["output_type"] == "error" and o["ename"] == "RuntimeError"
    }


def test_grading_children_cannot_reach_the_database(graded):
    """The sandbox gives each child its own network namespace: 127.0.0.1 is not the host's."""
    errors = _probe_errors(graded)
    reached = {
        cell: errors[cell] for cell in ("scaled_dot_product_attention", "softmax_jacobian") if cell in errors
    }
    assert not reached, f"the grading child reached PostgreSQL: {reached}"
    res = _results(graded["out"], "net_probe")
    lost = {
        t["grade_id"]: t["message"]
        for t in res["tests"]
        if t["points"] < t["max_points"] and "torch" not in t["grade_id"]
    }
    assert not lost, lost


def test_grading_children_cannot_read_the_database_password(graded):
    """The grader's --db URL (and the tests' environment) is out of the child's sight."""
    errors = _probe_errors(graded)
    assert "scaled_dot_product_attention_torch" not in errors, errors
    res = _results(graded["out"], "net_probe")
    lost = {
        t["grade_id"]: t["message"]
        for t in res["tests"]
        if t["points"] < t["max_points"] and "torch" in t["grade_id"]
    }
    assert not lost, lost
