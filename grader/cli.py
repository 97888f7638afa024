"""The command line: ``python -m grader {release,check,autograde}``.

README.md describes the commands, ARCHITECTURE.md what each does, SECURITY.md what grading
defends.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from grader import decline_iri_checker
from grader.paths import SOLUTIONS


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

    check = commands.add_parser("check", help="run a notebook's visible tests and explain them")
    check.add_argument("notebook", type=Path)
    check.add_argument("--timeout", type=_positive(float), default=120.0)

    grade = commands.add_parser("autograde", help="grade a folder of submissions")
    grade.add_argument("submitted", type=Path, help="SUBMITTED/<student>/<assignment>/*.ipynb")
    grade.add_argument("--out", type=Path, required=True, help="where results go")
    grade.add_argument("--workers", type=_positive(int), default=None,
                       help="notebooks run at once (default: the CPU count; with --scheduler, "
                            "the cluster's worker threads)")
    grade.add_argument("--timeout", type=_positive(float), default=60.0,
                       help="wall-clock seconds per submission (default 60)")
    grade.add_argument("--source", type=Path, default=SOLUTIONS,
                       help="nbgrader source directory (default: this course's solutions/)")
    grade.add_argument("--db", default=None, help="SQLAlchemy URL (default OUT/gradebook.db)")
    grade.add_argument("--quiet", action="store_true", help="no progress bar")
    grade.add_argument("--accept-weak-isolation", action="store_true",
                       help="grade even where submissions cannot be confined (no root and no user "
                            "namespaces); every results.json then says so (see SECURITY.md)")
    grade.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="grade on a Dask cluster: tcp://host:8786 or tls://... (workers started "
                            "with --preload grader.autograde.distributed), or local:N for a "
                            "LocalCluster of N worker processes; needs the 'cluster' extra")
    return parser


def main(argv: list[str] | None = None) -> int:
    decline_iri_checker()
    args = build_parser().parse_args(argv)
    if args.command == "release":
        from grader.release import release

        for path in release(args.assignments or None):
            print(f"wrote {path}")
        return 0
    if args.command == "check":
        from grader.selfcheck import check_notebook, format_report

        if not args.notebook.is_file():
            print(f"error: {args.notebook} is not a file", file=sys.stderr)
            return 2
        from grader.autograde.submissions import InvalidNotebook

        try:
            outcomes = check_notebook(args.notebook, timeout=args.timeout)
        except InvalidNotebook as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(format_report(args.notebook, outcomes))
        return 0 if all(o.passed for o in outcomes) else 1
    if args.command == "autograde":
        for folder, what in ((args.submitted, "submitted folder"), (args.source, "source")):
            if not folder.is_dir():
                print(f"error: the {what} {folder} is not a directory", file=sys.stderr)
                return 2
        start = time.monotonic()
        from grader.autograde.sandbox import (
            ForkServer,
            IsolationUnavailable,
            choose_isolation,
            grading_config,
        )

        try:
            isolation = choose_isolation(args.accept_weak_isolation)
        except IsolationUnavailable as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        import tempfile

        work = Path(tempfile.mkdtemp(prefix="attention-grading-"))
        secrets = [args.submitted, args.out, args.source, work]
        if args.db and args.db.startswith("sqlite:///"):
            secrets.append(Path(args.db[len("sqlite:///"):]))
        workers = args.workers
        if args.scheduler:  # the same pipeline; the jobs run on the cluster's workers
            try:
                from grader.autograde.distributed import DaskExecutor

                server = DaskExecutor(args.scheduler, grading_config(isolation, secrets))
                # one notebook per worker thread: none waits in a worker's own queue, where
                # a poison notebook that kills the worker would take it down with it
                workers = workers or server.slots()
            except (ImportError, OSError, ValueError) as exc:
                print(f"error: cannot use the Dask scheduler {args.scheduler}: {exc}", file=sys.stderr)
                import shutil

                shutil.rmtree(work, ignore_errors=True)
                return 2
        else:  # start the server first: its imports overlap with ours below
            server = ForkServer(grading_config(isolation, secrets))
        from grader.autograde.pipeline import GradeOptions, SourceError, autograde
        from grader.nbgrader_course import NbgraderError

        options = GradeOptions(db_url=args.db, workers=workers or os.cpu_count() or 1,
                               timeout=args.timeout, progress=not args.quiet)
        try:
            summary = autograde(args.submitted, args.out, args.source, options=options,
                                server=server, work=work)
        except IsolationUnavailable as exc:
            print(f"error: the grading sandbox cannot start here: {exc}\n"
                  "rerun with --accept-weak-isolation to grade without confinement", file=sys.stderr)
            return 2
        except (SourceError, NbgraderError) as exc:  # the source itself cannot be graded against
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted: every result written so far is kept; run again to resume",
                  file=sys.stderr)
            return 130
        print(f"{summary.line()} in {time.monotonic() - start:.1f} s; see {args.out}/grades.csv")
        return 0
    return 2
