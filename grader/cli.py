"""The command line: ``python -m grader {release,check,autograde,export,formgrader,similarity}``.

``export`` and ``formgrader`` are defined in ``grader/course_cli.py``. README.md describes the
commands, ARCHITECTURE.md what each does, SECURITY.md what grading defends.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from grader import decline_iri_checker
from grader.paths import SOLUTIONS
from grader.usage_error import UsageError

if TYPE_CHECKING:  # only the autograde command imports the sandbox
    from grader.autograde.executor import Executor
    from grader.autograde.fork_protocol import Isolation


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be positive, got {text}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m grader", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    release = commands.add_parser("release", help="solutions/ -> chapters/ learner notebooks")
    release.add_argument("assignments", nargs="*", help="assignment ids (default: all)")

    check = commands.add_parser(
        "check",
        help="run a notebook's visible tests and explain them, confined as autograde confines a submission",
    )
    check.add_argument("notebook", type=Path)
    check.add_argument(
        "--timeout", type=_positive(float), default=120.0, help="seconds the notebook may run (default: 120)"
    )
    check.add_argument(
        "--unconfined",
        action="store_true",
        help="for your own notebook only: run it in its own folder with limits but "
        "no confinement (see SECURITY.md)",
    )

    grade = commands.add_parser("autograde", help="grade a folder of submissions")
    grade.add_argument(
        "submitted",
        type=Path,
        nargs="?",
        default=None,
        help="SUBMITTED/<student>/<assignment>/*.ipynb (or --watch INBOUND)",
    )
    grade.add_argument("--out", type=Path, required=True, help="where results go")
    grade.add_argument(
        "--workers",
        type=_positive(int),
        default=None,
        help="notebooks run at once (default: the CPU count; with --scheduler, the cluster's worker threads)",
    )
    grade.add_argument(
        "--timeout",
        type=_positive(float),
        default=60.0,
        help="wall-clock seconds per submission (default 60)",
    )
    grade.add_argument(
        "--source",
        type=Path,
        default=SOLUTIONS,
        help="nbgrader source directory (default: this course's solutions/)",
    )
    grade.add_argument("--db", default=None, help="SQLAlchemy URL (default OUT/gradebook.db)")
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    grade.add_argument(
        "--accept-weak-isolation",
        action="store_true",
        help="grade even where submissions cannot be confined (no root and no user "
        "namespaces); every results.json then says so (see SECURITY.md)",
    )
    grade.add_argument(
        "--scheduler",
        default=None,
        metavar="ADDRESS",
        help="grade on a Dask cluster: tcp://host:8786 or tls://... (workers started "
        "with --preload grader.autograde.distributed), or local:N for a "
        "LocalCluster of N worker processes; needs the 'cluster' extra",
    )
    from grader.course_cli import add_course_commands, add_course_options  # argparse only

    add_course_options(grade)
    add_course_commands(commands)

    from grader.similarity import DEFAULT_THRESHOLD  # a constant: no numpy imported here

    similar = commands.add_parser(
        "similarity",
        help="which submissions share their code: "
        "REPORT/similarity.csv and similarity.html (evidence, not a verdict)",
    )
    similar.add_argument("submitted", type=Path, help="SUBMITTED/<student>/<assignment>/*.ipynb")
    similar.add_argument("--out", type=Path, required=True, metavar="REPORT", help="the report's folder")
    similar.add_argument(
        "--source",
        type=Path,
        default=SOLUTIONS,
        help="nbgrader source directory (default: this course's solutions/)",
    )
    similar.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of known solutions (DIR/<assignment>/*.ipynb or DIR/<name>/<assignment>/*.ipynb), "
        "such as published answers; repeatable. The source's own solutions are always compared: "
        "REPORT/known_solutions.csv lists every submission that matches one",
    )
    similar.add_argument(
        "--threshold",
        type=_fraction,
        default=DEFAULT_THRESHOLD,
        help=f"pairs scoring this or more are listed, 0 to 1 (default {DEFAULT_THRESHOLD})",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; 0 on success, 1 when a checked notebook fails a test, 2 on bad input."""
    decline_iri_checker()
    args = build_parser().parse_args(argv)
    command = {"release": _release, "check": _check, "autograde": _autograde, "similarity": _similarity}.get(
        args.command
    ) or args.course_command  # export, formgrader
    try:
        return command(args)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def _release(args: argparse.Namespace) -> int:
    from grader.release import release

    for path in release(args.assignments or None):
        print(f"wrote {path}")
    return 0


def _check(args: argparse.Namespace) -> int:
    from grader.autograde.executor import IsolationUnavailable
    from grader.autograde.notebook_file import InvalidNotebook
    from grader.selfcheck import FolderRefused, check_notebook, format_report

    if not args.notebook.is_file():
        raise UsageError(f"{args.notebook} is not a file")
    try:
        outcomes = check_notebook(args.notebook, timeout=args.timeout, unconfined=args.unconfined)
    except (InvalidNotebook, FolderRefused) as exc:
        raise UsageError(str(exc)) from exc
    except IsolationUnavailable as exc:
        raise UsageError(
            "this machine cannot confine the notebook's code (not root, and user "
            "namespaces are disabled); for your own notebook only, --unconfined "
            "runs it without confinement"
        ) from exc
    print(format_report(args.notebook, outcomes))
    return 0 if all(o.passed for o in outcomes) else 1


def _autograde(args: argparse.Namespace) -> int:
    from grader.autograde.executor import IsolationUnavailable
    from grader.autograde.fork_client import choose_isolation
    from grader.course_cli import course_grade_options

    if (args.submitted is None) == (args.watch is None):
        raise UsageError("give either a SUBMITTED folder or --watch INBOUND")
    for folder, what in ((args.submitted or args.watch, "submitted folder"), (args.source, "source")):
        if not folder.is_dir():
            raise UsageError(f"the {what} {folder} is not a directory")
    start = time.monotonic()
    try:
        isolation = choose_isolation(args.accept_weak_isolation)
    except IsolationUnavailable as exc:
        raise UsageError(str(exc)) from exc
    work = Path(tempfile.mkdtemp(prefix="attention-grading-"))
    try:
        server, workers = _start_executor(args, isolation, work)
    except UsageError:
        shutil.rmtree(work, ignore_errors=True)
        raise
    try:  # after the server's start: these options import nbgrader, while the server imports torch
        course = course_grade_options(args)
    except ValueError as exc:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
        raise UsageError(str(exc)) from exc
    # imported after the server has started: its own imports overlap with these
    from grader.autograde.gradebook import GradebookUnavailable
    from grader.autograde.pipeline import GradeOptions, SourceError
    from grader.autograde.session import autograde
    from grader.nbgrader_course import NbgraderError

    options = GradeOptions(db_url=args.db, workers=workers or os.cpu_count() or 1,
                           timeout=args.timeout, progress=not args.quiet and not args.watch,
                           **course)  # fmt: skip
    try:
        if args.watch:
            from grader.watch import watch

            return watch(args.watch, args.out, args.source, options=options, server=server, work=work,
                         exchange=args.exchange, max_per_hour=args.max_per_hour)  # fmt: skip
        summary = autograde(args.submitted, args.out, args.source, options=options,
                            server=server, work=work)  # fmt: skip
    except GradebookUnavailable as exc:  # one line: which database, and what to fix
        raise UsageError(str(exc)) from None
    except IsolationUnavailable as exc:
        raise UsageError(
            f"the grading sandbox cannot start here: {exc}\n"
            "rerun with --accept-weak-isolation to grade without confinement"
        ) from exc
    except (SourceError, NbgraderError) as exc:  # the source itself cannot be graded against
        raise UsageError(str(exc)) from exc
    except KeyboardInterrupt:
        print("interrupted: every result written so far is kept; run again to resume",
              file=sys.stderr)  # fmt: skip
        return 130
    print(f"{summary.line()} in {time.monotonic() - start:.1f} s; see {args.out}/grades.csv")
    return 0


def _fraction(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, got {text}")
    return value


def _similarity(args: argparse.Namespace) -> int:
    from grader.similarity.run import SourceProblem, similarity_report

    folders = [(args.submitted, "submitted folder"), (args.source, "source")]
    for folder, what in [*folders, *((f, "--against folder") for f in args.against)]:
        if not folder.is_dir():
            raise UsageError(f"the {what} {folder} is not a directory")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out} is a file, not a folder")
    try:
        report = similarity_report(args.submitted, args.out, args.source, args.threshold, args.against)
    except SourceProblem as exc:
        raise UsageError(str(exc)) from exc
    except OSError as exc:  # SUBMITTED unreadable, REPORT not writable
        raise UsageError(f"{exc.filename or args.out}: {exc.strerror or exc}") from exc
    print(f"{report.line()} in {report.seconds:.1f} s; see {args.out}/similarity.html")
    return 0


def _start_executor(
    args: argparse.Namespace, isolation: Isolation, work: Path
) -> tuple[Executor, int | None]:
    """The executor that runs the jobs, and the number of jobs to keep in flight (None: CPUs).

    Everything a child must not see is hidden from it: the submissions, OUT, the source, the
    private work folder and a SQLite gradebook.
    """
    from grader.autograde.fork_client import ForkServer, grading_config

    secrets = [args.submitted or args.watch, args.out, args.source, work]
    if args.watch:  # the whole exchange: other students' submissions, everyone's feedback
        secrets.append(args.exchange or args.watch.parent)
    if args.db and args.db.startswith("sqlite:///"):
        secrets.append(Path(args.db[len("sqlite:///") :]))
    config = grading_config(isolation, secrets)
    if not args.scheduler:
        # the server builds each job's root under its umask: with the instructor's 077 the job's
        # identity could not enter its own home; OUT's files still follow the instructor's umask
        previous = os.umask(0o022)
        try:
            return ForkServer(config), args.workers
        finally:
            os.umask(previous)
    try:  # the same pipeline; the jobs run on the cluster's workers
        from grader.autograde.distributed import DaskExecutor

        server = DaskExecutor(args.scheduler, config)
    except (ImportError, OSError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        hint = (
            "install the 'cluster' extra: pip install -e '.[cluster]'"
            if isinstance(exc, ImportError)
            else "is a Dask scheduler running at that address (dask scheduler), and reachable?"
        )
        raise UsageError(f"cannot use the Dask scheduler {args.scheduler}: {reason}; {hint}") from None
    # one notebook per worker thread: none waits in a worker's own queue, where a poison
    # notebook that kills the worker would take it down with it
    return server, args.workers or server.slots()
