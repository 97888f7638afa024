"""The command line of a course run, beside grading itself (``grader/cli.py`` calls these).

- ``autograde``'s course options: ``--due``, ``--late-policy``, ``--retry-timeouts``,
  ``--group-readable``, and grading on submit (``--watch INBOUND [--exchange ROOT]
  [--max-per-hour N]``);
- ``python -m grader export OUT --format canvas|moodle|wide [--roster ROSTER.csv] -o FILE``;
- ``python -m grader formgrader OUT [--port P]``.

Nothing heavy is imported here: the commands import their modules when they run.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from datetime import datetime


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _port(text: str) -> int:
    value = int(text)
    if not 0 <= value < 65536:
        raise argparse.ArgumentTypeError(f"a port is 0 to 65535, got {text}")
    return value


def add_course_options(grade: argparse.ArgumentParser) -> None:
    """autograde's options for deadlines, re-runs, permissions and grading on submit."""
    grade.add_argument(
        "--due",
        action="append",
        default=[],
        metavar='ASSIGNMENT="YYYY-MM-DD HH:MM[:SS] TZ"',
        help="one assignment's due date, written into its gradebook record (repeatable, one per "
        "assignment; a bare date names the one assignment a batch grades); every other "
        "assignment keeps the due date its gradebook record has, if any",
    )
    grade.add_argument(
        "--late-policy",
        default="none",
        metavar="none|zero|subtract-per-hour:P|subtract-percent-per-hour:P",
        help="late penalty per notebook, as nbgrader's late-submission plugins: none "
        "(default), zero (the notebook's score), subtract-per-hour:P (P points "
        "per started hour late: 1 min late is 1 hour; nbgrader's example plugin "
        "rounds to the nearest hour instead), subtract-percent-per-hour:P (P%% of "
        "the notebook's score per started hour)",
    )
    grade.add_argument(
        "--retry-timeouts",
        action="store_true",
        help="grade timeouts again (by default a timeout is retried once, then kept)",
    )
    grade.add_argument(
        "--group-readable",
        action="store_true",
        help="make OUT's files readable by their folder's group (a TA group)",
    )
    grade.add_argument(
        "--watch",
        type=Path,
        default=None,
        metavar="INBOUND",
        help="grade each submission arriving in this nbgrader exchange inbound folder "
        "(<exchange>/<course>/inbound), until Ctrl-C",
    )
    grade.add_argument(
        "--exchange",
        type=Path,
        default=None,
        metavar="ROOT",
        help="with --watch: the exchange root, where each submission's feedback is "
        "released for nbgrader fetch_feedback",
    )
    grade.add_argument(
        "--max-per-hour",
        type=_positive_int,
        default=None,
        metavar="N",
        help="with --watch: grade at most N submissions of one owner (the Unix user "
        "owning the inbound folder) an hour; later ones wait (their feedback says so)",
    )


def add_course_commands(commands: Any) -> None:
    """The ``export`` and ``formgrader`` subcommands."""
    export = commands.add_parser(
        "export", help="grades for an LMS: Canvas's or Moodle's import CSV, or one wide row per student"
    )
    export.add_argument("out", type=Path, metavar="OUT", help="an autograde output folder")
    export.add_argument("--format", required=True, choices=["canvas", "moodle", "wide"])
    export.add_argument(
        "--roster",
        type=Path,
        default=None,
        metavar="ROSTER.csv",
        help="student_id plus the LMS's ids, names, emails, section",
    )
    export.add_argument(
        "--missing-as-zero",
        action="store_true",
        help="a roster student without a submission scores 0 (default: left empty)",
    )
    export.add_argument(
        "--db",
        default=None,
        metavar="URL",
        help="the gradebook's SQLAlchemy URL (default OUT/gradebook.db); its final scores "
        "(hand grades included, minus late penalties) are exported",
    )
    export.add_argument("-o", "--output", type=Path, required=True, metavar="FILE")
    export.set_defaults(course_command=_export)

    formgrader = commands.add_parser(
        "formgrader", help="nbgrader's formgrader on OUT (loopback only, with a token)"
    )
    formgrader.add_argument("out", type=Path, metavar="OUT", help="an autograde output folder")
    formgrader.add_argument("--port", type=_port, default=8890, help="default 8890; 0 picks a free one")
    formgrader.set_defaults(course_command=_formgrader)


def course_grade_options(args: argparse.Namespace) -> dict[str, Any]:
    """GradeOptions' course fields from autograde's arguments; ValueError says what is wrong."""
    from grader.deadlines import EXTENSIONS_FILE, LatePolicy, parse_due_options, read_extensions

    if args.watch is None and (args.exchange is not None or args.max_per_hour is not None):
        raise ValueError("--exchange and --max-per-hour go with --watch INBOUND")
    if args.watch is not None:
        exchange_course(args.watch, args.exchange)
    due: dict[str, datetime] = {}
    if args.due:
        known = sorted(p.name for p in args.source.iterdir() if p.is_dir()) if args.source.is_dir() else []
        batch = args.watch is None and args.submitted is not None
        due = parse_due_options(
            args.due, known, graded_assignments(args.submitted, args.source) if batch else None
        )
    if (args.out / EXTENSIONS_FILE).is_file():
        read_extensions(args.out / EXTENSIONS_FILE)  # a bad table stops the run before it grades
    return {
        "due": due,
        "late_policy": LatePolicy.parse(args.late_policy),
        "retry_timeouts": args.retry_timeouts,
        "group_readable": args.group_readable,
    }


def graded_assignments(submitted: Path, source: Path) -> list[str]:
    """The source's assignments that SUBMITTED/<student>/<assignment>/ folders hold."""
    known = {p.name for p in source.iterdir() if p.is_dir()} if source.is_dir() else set()
    found = set()
    try:
        for student in submitted.iterdir():
            if student.is_dir() and not student.is_symlink():
                found |= {a.name for a in student.iterdir() if a.name in known and a.is_dir()}
    except OSError:
        pass  # grading reports an unreadable folder itself
    return sorted(found)


def exchange_course(inbound: Path, exchange: Path | None) -> tuple[str | None, Path | None]:
    """The course id and its folder in the exchange, from ``--exchange ROOT`` and INBOUND
    (``ROOT/<course>/inbound``); ValueError when they do not fit together."""
    if exchange is None:
        return None, None
    inbound, root = inbound.resolve(), exchange.resolve()
    if inbound.name != "inbound" or inbound.parent.parent != root:
        raise ValueError(
            f"--watch {inbound} is not the inbound folder of a course in the exchange "
            f"{root} (expected ROOT/<course>/inbound)"
        )
    return inbound.parent.name, inbound.parent


def _export(args: argparse.Namespace) -> int:
    from grader.export import ExportError, export
    from grader.usage_error import UsageError

    try:
        report = export(
            args.out,
            args.format,
            args.output,
            roster=args.roster,
            missing_as_zero=args.missing_as_zero,
            db_url=args.db,
        )
    except ExportError as exc:
        raise UsageError(str(exc)) from exc
    for line in report.lines():
        print(line)
    return 0


def _formgrader(args: argparse.Namespace) -> int:
    from grader.formgrader import FormgraderError, serve
    from grader.usage_error import UsageError

    try:
        return serve(args.out, args.port)
    except FormgraderError as exc:
        raise UsageError(str(exc)) from exc
