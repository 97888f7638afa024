"""What a PostgreSQL gradebook costs: the same class graded into SQLite and into PostgreSQL.

Builds N chapter 3 submissions with ``benchmarks/grading_course.py``'s variants, then times, as whole
commands (start-up included), ``python -m grader autograde`` with the default SQLite
gradebook and with ``--db postgresql+psycopg://...`` (a fresh, empty database each time, so
the PostgreSQL run also pays for creating nbgrader's tables), alternating the two backends
``--repeat`` times, then one re-run of each on the unchanged class. It exits 1 unless both
gradebooks give every submission the same score on every test cell.

PostgreSQL: ``--url`` names a role that may create databases; without it a throwaway server
is started with ``tests/pg_server.py`` (Debian's ``postgresql`` package must be installed).

    .venv/bin/python benchmarks/postgres.py            # N = 20, one round
    .venv/bin/python benchmarks/postgres.py --n 40 --repeat 3
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

# benchmarks/grading.py (the class and the timed runs), found through sys.path at run time
# (mypy knows it as benchmarks.grading)
import grading  # type: ignore[import-not-found]  # noqa: E402

from tests.pg_server import PostgresServer  # noqa: E402


def new_database(base_url: str) -> str:
    """CREATE DATABASE with a fresh name on the server of ``base_url``; its SQLAlchemy URL."""
    import psycopg
    from sqlalchemy.engine import make_url

    name = f"bench_{uuid.uuid4().hex[:12]}"
    libpq = make_url(base_url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    return make_url(base_url).set(database=name).render_as_string(hide_password=False)


def autograde(root: Path, out: Path, workers: int, db: str | None) -> float:
    """Wall-clock seconds of one whole ``python -m grader autograde`` command."""
    command = grading.autograde_command(root, out, workers, *(["--db", db] if db else []))
    return grading.run(command, cwd=root)


def gradebook_scores(url: str) -> dict[tuple[str, str], float]:
    """(student, grade cell) -> auto_score, read with nbgrader's own API."""
    from nbgrader.api import Gradebook

    with Gradebook(url) as gradebook:
        return {
            (student.id, grade.name): float(grade.auto_score or 0.0)
            for student in gradebook.students
            for submission in student.submissions
            for notebook in submission.notebooks
            for grade in notebook.grades
        }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="submissions (default 20)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the two runs (default 1)")
    parser.add_argument("--workers", type=int, default=2, help="--workers (default 2)")
    parser.add_argument("--url", default=None, help="a PostgreSQL URL whose role may CREATEDB")
    args = parser.parse_args(argv)

    server = None if args.url else PostgresServer.start()
    base_url = args.url if server is None else server.url
    root = Path(tempfile.mkdtemp(prefix="attention-bench-pg-"))
    try:
        students = grading.make_course(root, args.n)
        times: dict[str, list[float]] = {"sqlite": [], "postgresql": []}
        last: dict[str, tuple[Path, str]] = {}
        for k in range(args.repeat):
            for backend in ("sqlite", "postgresql"):
                out = root / f"out_{backend}_{k}"
                db = new_database(base_url) if backend == "postgresql" else None
                times[backend].append(autograde(root, out, args.workers, db))
                last[backend] = (out, db or f"sqlite:///{out / 'gradebook.db'}")
        rerun = {
            b: autograde(root, out, args.workers, None if b == "sqlite" else url)
            for b, (out, url) in last.items()
        }

        problems = []
        csv_scores = {b: grading.our_scores(out) for b, (out, _) in last.items()}
        if csv_scores["sqlite"] != csv_scores["postgresql"]:
            problems.append("grades.csv differs between the two backends")
        book_scores = {b: gradebook_scores(url) for b, (_, url) in last.items()}
        if book_scores["sqlite"] != book_scores["postgresql"]:
            problems.append("the two gradebooks hold different grades")
        if len({s for s, _ in book_scores["postgresql"]}) != len(students):
            problems.append("the PostgreSQL gradebook does not hold every student")

        sqlite, postgres = statistics.median(times["sqlite"]), statistics.median(times["postgresql"])
        print(
            f"{args.n} submissions, --workers {args.workers}, median of {args.repeat} "
            "(whole commands, start-up included)"
        )
        print(f"{'gradebook':<12}{'seconds':>10}{'per submission':>16}{'re-run (kept)':>15}")
        for name, seconds in (("sqlite", sqlite), ("postgresql", postgres)):
            print(f"{name:<12}{seconds:>10.1f}{seconds / args.n:>16.2f}{rerun[name]:>15.1f}")
        print(f"PostgreSQL / SQLite: {postgres / sqlite:.2f}")
        for problem in problems:
            print("DIFFERENCE:", problem)
        return 1 if problems else 0
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if server is not None:
            server.stop()


if __name__ == "__main__":
    sys.exit(main())
