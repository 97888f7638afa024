"""Deadlines: when a submission was handed in, when it was due, and what lateness costs.

- The submission time is ``timestamp.txt`` beside the submitted notebooks, in nbgrader's
  format: one line such as ``2026-03-02 17:04:11.250117 UTC`` (``nbgrader submit`` writes
  ``%Y-%m-%d %H:%M:%S.%f %Z``; any zone name or numeric offset nbgrader reads is read here,
  with nbgrader's own ``parse_utc``). Without it a submission has no time and is never late.
- With grade on submit (the watcher) the time that counts is the server's instead: when the
  inbound folder became complete (:func:`judge_time`). timestamp.txt is then only the
  student's claim, kept as ``claimed_at`` and flagged when it is more than
  :data:`CLOCK_SKEW_LIMIT` away from the arrival.
- A due date belongs to one assignment: ``--due ASSIGNMENT="YYYY-MM-DD HH:MM[:SS] TZ"``
  (repeatable, :func:`parse_due_options`) writes it into that assignment in the gradebook, as
  ``nbgrader db assignment add NAME --duedate`` would; every other assignment keeps the date
  its gradebook record has. A bare ``--due DATE`` names the one assignment a batch grades.
  Extensions recorded in the gradebook count, as in nbgrader
  (``SubmittedAssignment.total_seconds_late``).
- The penalty is nbgrader's: its ``AssignLatePenalties`` preprocessor asks a late-submission
  plugin for each notebook's penalty and keeps it between 0 and that notebook's score.
  ``none`` and ``zero`` are nbgrader's ``LateSubmissionPlugin`` methods (no penalty; the
  notebook's whole score); ``subtract-per-hour:P`` is :class:`SubtractPerHour`, P points for
  every started hour late, ``ceil(seconds_late / 3600) * P`` (nbgrader's documented example
  plugin rounds to the nearest hour instead, which lets a submission 29 minutes late through
  unpunished); ``subtract-percent-per-hour:P`` is :class:`SubtractPercentPerHour`, P percent
  of the notebook's score for every started hour, ``ceil(seconds_late / 3600) * P/100 * score``.
"""

from __future__ import annotations

import errno
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from dateutil import tz as dateutil_tz
from nbgrader.plugins import BasePlugin
from traitlets import Float
from traitlets.config import Config

if TYPE_CHECKING:
    from nbgrader.api import Gradebook

TIMESTAMP_FILE = "timestamp.txt"
MAX_TIMESTAMP_BYTES = 256
_DUE = re.compile(r"(\d{4}-\d{2}-\d{2}) (\d{2}:\d{2}(?::\d{2})?) (\S+)")
_OFFSET = re.compile(r"([+-])(\d{2}):?(\d{2})")


CLOCK_SKEW_LIMIT = timedelta(minutes=5)  # timestamp.txt further than this from the arrival is flagged


class DeadlineError(ValueError):
    """A --due or --late-policy that cannot be read; the message says what is expected."""


def parse_due(text: str) -> datetime:
    """``YYYY-MM-DD HH:MM[:SS] TZ`` (a zone name such as ``Europe/Berlin`` or ``UTC``, or an
    offset such as ``+01:00``) as a naive UTC datetime, the gradebook's convention."""
    match = _DUE.fullmatch(text.strip())
    if not match:
        raise DeadlineError(
            f'--due {text!r}: expected "YYYY-MM-DD HH:MM[:SS] TZ", for example '
            '"2026-03-02 17:00 Europe/Berlin" or "2026-03-02 17:00:00 +01:00"'
        )
    day, clock, zone = match.groups()
    offset = _OFFSET.fullmatch(zone)
    if offset:
        sign, hours, minutes = offset.groups()
        delta = timedelta(hours=int(hours), minutes=int(minutes))
        tzinfo = timezone(delta if sign == "+" else -delta)
    else:
        tzinfo = dateutil_tz.gettz(zone)
        if tzinfo is None:
            raise DeadlineError(
                f"--due {text!r}: unknown time zone {zone!r} (use a name such as "
                "Europe/Berlin or UTC, or an offset such as +01:00)"
            )
    try:
        local = datetime.fromisoformat(f"{day}T{clock}").replace(tzinfo=tzinfo)
    except ValueError as exc:
        raise DeadlineError(f"--due {text!r}: {exc}") from None
    return local.astimezone(UTC).replace(tzinfo=None)


def parse_due_options(
    values: list[str], assignments: list[str], graded: list[str] | None
) -> dict[str, datetime]:
    """``--due`` values as ``{assignment: naive UTC}``: each ``NAME=DATE`` for the source
    assignment NAME (once each); a bare ``DATE`` only when ``graded`` (the assignments a batch
    grades; None for a watcher, which may grade any) is exactly one assignment."""
    dates: dict[str, datetime] = {}
    for value in values:
        name, equals, date = value.partition("=")
        if not equals:
            if graded is None or len(graded) != 1:
                where = (
                    "a watcher grades every assignment"
                    if graded is None
                    else (f"this run grades {len(graded)} assignments ({', '.join(graded) or 'none'})")
                )
                raise DeadlineError(
                    f'--due {value!r}: {where}, so say which one: --due ASSIGNMENT="DATE" (repeatable), '
                    "or give each its date in the gradebook (nbgrader db assignment add NAME --duedate DATE)"
                )
            name, date = graded[0], value
        name = name.strip()
        if name not in assignments:
            raise DeadlineError(
                f"--due {value!r}: {name!r} is not an assignment of the source ({', '.join(assignments)})"
            )
        if name in dates:
            raise DeadlineError(f"--due: {name} is given two dates")
        dates[name] = parse_due(date)
    return dates


@dataclass(frozen=True)
class LatePolicy:
    """``none``, ``zero``, ``subtract-per-hour:P`` (points) or ``subtract-percent-per-hour:P``."""

    method: str = "none"
    points_per_hour: float = 0.0

    @classmethod
    def parse(cls, text: str) -> LatePolicy:
        if text in ("none", "zero"):
            return cls(text)
        name, _, points = text.partition(":")
        if name in ("subtract-per-hour", "subtract-percent-per-hour"):
            try:
                value = float(points)
            except ValueError:
                value = -1.0
            if value > 0 and math.isfinite(value) and (name == "subtract-per-hour" or value <= 100):
                return cls(name, value)
        raise DeadlineError(
            f"--late-policy {text!r}: expected none, zero, subtract-per-hour:P (P > 0 "
            "points per started hour late) or subtract-percent-per-hour:P (0 < P <= 100 "
            "percent of the notebook's score per started hour)"
        )

    def __str__(self) -> str:
        if self.method.startswith("subtract-"):
            return f"{self.method}:{self.points_per_hour:g}"
        return self.method

    def nbgrader_config(self) -> Config:
        """The configuration under which nbgrader's AssignLatePenalties applies this policy."""
        config = Config()
        if self.method == "subtract-per-hour":
            config.AssignLatePenalties.plugin_class = SubtractPerHour
            config.SubtractPerHour.points_per_hour = self.points_per_hour
        elif self.method == "subtract-percent-per-hour":
            config.AssignLatePenalties.plugin_class = SubtractPercentPerHour
            config.SubtractPercentPerHour.percent_per_hour = self.points_per_hour
        else:
            config.LateSubmissionPlugin.penalty_method = self.method
        return config


class SubtractPerHour(BasePlugin):
    """nbgrader late-submission plugin: ``points_per_hour`` for each hour or part of one."""

    points_per_hour = Float(1.0, help="points taken per hour (or part of one) late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float:
        return math.ceil(total_seconds_late / 3600) * self.points_per_hour


class SubtractPercentPerHour(BasePlugin):
    """nbgrader late-submission plugin: ``percent_per_hour`` percent of the notebook's score for
    each started hour, so a notebook 2 h 10 min late under 10 keeps 70% of its score."""

    percent_per_hour = Float(10.0, help="percent of the score taken per started hour late").tag(config=True)

    def late_submission_penalty(self, student_id: str, score: float, total_seconds_late: float) -> float:
        return min(score, math.ceil(total_seconds_late / 3600) * self.percent_per_hour / 100 * score)


@dataclass(frozen=True)
class HandedIn:
    """A submission's time (naive UTC) as its timestamp.txt gave it, or why it gave none."""

    at: datetime | None = None
    problem: str = ""

    def iso(self) -> str | None:
        return iso_utc(self.at)


def iso_utc(moment: datetime | None) -> str | None:
    """A naive UTC time (the gradebook's convention) in ISO 8601 with its zone, as results.json
    keeps times; None stays None."""
    return None if moment is None else moment.replace(tzinfo=UTC).isoformat()


def read_timestamp(path: Path, dir_fd: int | None = None) -> HandedIn:
    """nbgrader's timestamp.txt at ``path`` (a name in ``dir_fd`` if given): no symlink, no
    FIFO, a few hundred bytes at most (``safe_open.read_small``)."""
    from nbgrader.utils import parse_utc

    from grader.autograde.safe_open import read_small

    try:
        raw = read_small(path, MAX_TIMESTAMP_BYTES, dir_fd)
    except FileNotFoundError:
        return HandedIn()
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            return HandedIn(problem=f"{TIMESTAMP_FILE} is not one line of a date and time")
        if exc.errno in (errno.ELOOP, errno.EINVAL):
            return HandedIn(problem=f"{TIMESTAMP_FILE} is not a regular file")
        return HandedIn(problem=f"{TIMESTAMP_FILE} could not be read ({exc.strerror})")
    text = raw.decode("utf-8", "replace").strip()
    if not text or "\n" in text:
        return HandedIn(problem=f"{TIMESTAMP_FILE} is not one line of a date and time")
    try:
        return HandedIn(parse_utc(text))
    except (ValueError, OverflowError, TypeError):
        return HandedIn(problem=f"{TIMESTAMP_FILE} holds no date and time nbgrader can read: {text[:60]!r}")


@dataclass(frozen=True)
class JudgedTime:
    """The time lateness counts from (naive UTC, None: never late), the student's claim when
    the server's clock decided instead, and a flag when the two disagree."""

    at: datetime | None
    claimed: datetime | None = None
    flag: str = ""


def skewed(claimed: datetime | None, arrived: datetime | None) -> bool:
    """The student's claimed time and the server's arrival are more than CLOCK_SKEW_LIMIT apart."""
    return claimed is not None and arrived is not None and abs(claimed - arrived) > CLOCK_SKEW_LIMIT


def judge_time(claim: HandedIn, arrived: datetime | None) -> JudgedTime:
    """Without an arrival (collect-and-grade) nbgrader's rule: timestamp.txt's time. With one
    (the watcher saw the inbound folder complete, naive UTC), the arrival counts and the claim
    is kept; more than ``CLOCK_SKEW_LIMIT`` between them is flagged."""
    if arrived is None:
        return JudgedTime(claim.at)
    if not skewed(claim.at, arrived):
        return JudgedTime(arrived, claim.at)
    assert claim.at is not None  # skewed: there is a claim
    gap = abs(claim.at - arrived).total_seconds()
    side = "before" if claim.at < arrived else "after"
    flag = (
        f"{TIMESTAMP_FILE} says {claim.at:%Y-%m-%d %H:%M:%S} UTC, {describe_lateness(gap)} {side} the "
        f"server received it ({arrived:%Y-%m-%d %H:%M:%S} UTC): lateness counted from the arrival"
    )
    return JudgedTime(arrived, claim.at, flag)


def describe_lateness(seconds: float | None) -> str:
    """``2 h 5 min`` for a late submission; "" when on time or unknown."""
    if not seconds:
        return ""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min" if minutes else ""]
    return " ".join(p for p in parts if p)


EXTENSIONS_FILE = "extensions.csv"  # in OUT, beside the gradebook: the course's table of extensions
MAX_EXTENSION_HOURS = 24 * 366


@dataclass(frozen=True)
class Extension:
    """One row of extensions.csv: a student's own due date (naive UTC) or extra hours."""

    due: datetime | None = None
    extra_hours: float | None = None

    def delta(self, assignment_due: datetime | None) -> timedelta | None:
        """nbgrader's ``SubmittedAssignment.extension``: the time added to the assignment's due
        date (None without one: nbgrader counts nothing late then)."""
        if assignment_due is None:
            return None
        if self.due is not None:
            return max(timedelta(0), self.due - assignment_due)
        return timedelta(hours=self.extra_hours or 0.0)


def read_extensions(path: Path) -> dict[tuple[str, str], Extension]:
    """extensions.csv (UTF-8): a header ``student_id,assignment,due,extra_hours`` and one row per
    extension, with either ``due`` (``YYYY-MM-DD HH:MM[:SS] TZ``, as ``--due``) or
    ``extra_hours`` (> 0). Ids are matched exactly, as folder names. DeadlineError names the
    line and what is wrong; a student and assignment listed twice is an error too."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            rows = list(csv.DictReader(handle))
            columns = set(rows[0]) if rows else set()
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise DeadlineError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if rows and not {"student_id", "assignment"} <= columns:
        raise DeadlineError(f"{path}: expected the columns student_id, assignment, due, extra_hours")
    table: dict[tuple[str, str], Extension] = {}
    for line, row in enumerate(rows, start=2):
        key = (row.get("student_id") or "", (row.get("assignment") or "").strip())
        due, hours = (row.get("due") or "").strip(), (row.get("extra_hours") or "").strip()
        where = f"{path}, line {line}"
        if not all(key) or bool(due) == bool(hours):
            raise DeadlineError(f"{where}: give a student_id, an assignment, and either due or extra_hours")
        if key in table:
            raise DeadlineError(f"{where}: {key[0]} and {key[1]} are listed twice")
        if due:
            try:
                table[key] = Extension(due=parse_due(due))
            except DeadlineError as exc:
                raise DeadlineError(f"{where}: {str(exc).removeprefix('--due ')}") from None
            continue
        try:
            value = float(hours)
        except ValueError:
            value = -1.0
        if not (0 < value <= MAX_EXTENSION_HOURS):
            raise DeadlineError(f"{where}: extra_hours must be a number of hours above 0, got {hours!r}")
        table[key] = Extension(extra_hours=value)
    return table


def apply_extension(gradebook: Gradebook, assignment: str, student: str, folder: Path) -> None:
    """Write extensions.csv's row for this submission (none: no extension) into nbgrader's
    ``SubmittedAssignment.extension``, where its AssignLatePenalties, formgrader and
    ``nbgrader export`` find it. Without the file in ``folder``, the gradebook's own extension
    stays. The table is read each time, so an edit counts at the next grading (the row is part
    of the submission's fingerprint, :func:`extension_key`), and no restart changes a date."""
    path = folder / EXTENSIONS_FILE
    if not path.is_file():
        return
    row = read_extensions(path).get((student, assignment))
    submission = gradebook.find_submission(assignment, student)
    submission.extension = None if row is None else row.delta(submission.assignment.duedate)
    gradebook.db.commit()


def extension_key(folder: Path, student: str, assignment: str) -> str:
    """What the fingerprint of ``student``'s ``assignment`` covers of ``folder``'s extensions.csv:
    its row (or none), so editing the row grades that submission again and nobody else's. A
    table that cannot be read counts as its error (the run that grades it reports it)."""
    path = folder / EXTENSIONS_FILE
    if not path.is_file():
        return "extension=gradebook"
    try:
        return f"extension={read_extensions(path).get((student, assignment))}"
    except DeadlineError as exc:
        return f"extension=unreadable:{exc}"
