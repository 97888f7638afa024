"""Grading on submit: ``python -m grader autograde --watch INBOUND --out OUT [--exchange ROOT]``.

INBOUND is an nbgrader exchange's inbound folder (``<exchange>/<course>/inbound``), where
``nbgrader submit`` puts ``<student>+<assignment>+<timestamp>+<random>/`` holding the
notebooks, ``timestamp.txt`` and ``submission_secret.txt`` (written last, so a folder with
a secret is complete). The watcher looks at it twice a second; for each student and
assignment it takes the newest complete submission, by the timestamp in its name as
``nbgrader collect`` does, and grades it with the ordinary pipeline: a copy of it (made by
the submissions' own bounded walker, symlinks never followed) is a SUBMITTED folder of one
submission, graded in the watcher's one open session (``GradingSession``), so scores,
results.json, feedback, the gradebook and grades.csv (every student graded so far) are
exactly what a batch run writes. With ``--exchange`` the feedback is then released into
the exchange, where ``nbgrader fetch_feedback`` finds it.

What it keeps in OUT/.watch/: ``state.json`` (which submission of each student and
assignment was graded, when each student was last graded) and ``submitted/`` (the copy of
each one graded, nbgrader's submitted layout, for a later batch re-run). A restart grades
only what arrived since; a submission graded before is not graded again (its results.json
fingerprint is unchanged even if the state was lost). A broken submission is graded as
``invalid``, ``crashed`` or ``timeout`` like any other, and a failure of the watcher on one
submission is logged and retried a minute later; neither stops the others. Ctrl-C or
SIGTERM stops it between two steps; what was written stays.

``--max-per-hour N``: one student's submissions are graded at most N times in any hour; a
newer one waits (only the newest is kept) and its feedback in the exchange says until when.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from grader.autograde import permissions
from grader.autograde.executor import Executor
from grader.autograde.feedback import SECRET, TIMESTAMP, release_feedback, release_page
from grader.autograde.folder_walk import SUBMISSION_LIMITS, copy_walked_file, walk_folder
from grader.autograde.pipeline import GradeOptions
from grader.autograde.reports import feedback_html, write_atomically
from grader.autograde.session import GradingSession
from grader.autograde.submissions import student_id_problem
from grader.course_cli import exchange_course

POLL_SECONDS = 0.5
RETRY_SECONDS = 60.0
HOUR = 3600.0


@dataclass(frozen=True)
class Arrival:
    folder: Path
    student: str
    assignment: str
    submitted_at: datetime  # naive UTC, from the folder's name

    @property
    def key(self) -> str:
        return f"{self.student}+{self.assignment}"


def parse_inbound_name(name: str) -> tuple[str, str, datetime] | None:
    """``<student>+<assignment>+<timestamp>[+<random>]``, split as nbgrader collect does
    (from the right, so a student id may hold a ``+``)."""
    from nbgrader.utils import parse_utc

    parts = name.rsplit("+", 3)
    if len(parts) < 3 or name.startswith("."):
        return None
    student, assignment, stamp = parts[0], parts[1], parts[2]
    try:
        return student, assignment, parse_utc(stamp)
    except (ValueError, OverflowError):
        return None


def _complete(folder: Path) -> bool:
    """nbgrader submit writes the secret after everything else."""
    try:
        return (folder / TIMESTAMP).stat().st_size > 0 and (folder / SECRET).stat().st_size > 0
    except OSError:
        return False


def newest_arrivals(inbound: Path, assignments: set[str]) -> dict[str, Arrival]:
    """The newest complete submission of each student and assignment in INBOUND."""
    newest: dict[str, Arrival] = {}
    try:
        entries = list(os.scandir(inbound))
    except OSError:
        return newest
    for entry in entries:
        parsed = parse_inbound_name(entry.name)
        if parsed is None or parsed[1] not in assignments:
            continue
        try:
            if not entry.is_dir(follow_symlinks=False):
                continue
        except OSError:
            continue
        arrival = Arrival(Path(entry.path), *parsed)
        if not _complete(arrival.folder):
            continue
        old = newest.get(arrival.key)
        if old is None or (arrival.submitted_at, entry.name) > (old.submitted_at, old.folder.name):
            newest[arrival.key] = arrival
    return newest


@dataclass
class WatchState:
    """OUT/.watch/state.json: what was graded, and when each student was last graded."""

    path: Path
    graded: dict[str, str] = field(default_factory=dict)  # "<student>+<assignment>" -> folder name
    times: dict[str, list[float]] = field(default_factory=dict)  # student -> epoch seconds
    noticed: dict[str, str] = field(default_factory=dict)  # key -> folder told it waits

    @classmethod
    def load(cls, path: Path) -> WatchState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        return cls(path, dict(data.get("graded", {})), {k: list(v) for k, v in data.get("times", {}).items()},
                   dict(data.get("noticed", {})))

    def save(self) -> None:
        write_atomically(self.path, json.dumps({"graded": self.graded, "times": self.times,
                                                "noticed": self.noticed}, indent=1))

    def recent(self, student: str, now: float) -> list[float]:
        self.times[student] = [t for t in self.times.get(student, []) if now - t < HOUR]
        return self.times[student]


class Watcher:
    def __init__(self, inbound: Path, out: Path, session: GradingSession, exchange_course: Path | None,
                 max_per_hour: int | None) -> None:  # fmt: skip
        self.inbound, self.out, self.session = inbound, out, session
        self.exchange_course, self.max_per_hour = exchange_course, max_per_hour
        self.home = out / ".watch"
        permissions.make_folders(self.home)
        self.state = WatchState.load(self.home / "state.json")
        self.failed: dict[str, float] = {}  # folder name -> when the watcher failed on it
        self.first_seen: dict[str, float] = {}  # folder name -> when a step first saw it
        self.graded_now = 0

    def step(self) -> int:
        """Grade what arrived since the last step, as one batch; the number of submissions."""
        now = time.time()
        batch, taken = [], {}
        for key, arrival in sorted(newest_arrivals(self.inbound, set(self.session.run.sources)).items()):
            self.first_seen.setdefault(arrival.folder.name, time.monotonic())
            if self.state.graded.get(key) == arrival.folder.name:
                continue
            if now - self.failed.get(arrival.folder.name, -RETRY_SECONDS) < RETRY_SECONDS:
                continue
            if self._must_wait(arrival, now, taken.get(arrival.student, 0)):
                continue
            taken[arrival.student] = taken.get(arrival.student, 0) + 1
            batch.append(arrival)
        if batch:
            try:
                self.grade(batch)
            except Exception as exc:  # a bug on one batch must not stop the watch
                for arrival in batch:
                    self.failed[arrival.folder.name] = time.time()
                log(f"could not grade {', '.join(a.folder.name for a in batch)}: {type(exc).__name__}: "
                    f"{exc} (retried in {RETRY_SECONDS:.0f} s)")
        return len(batch)

    def _must_wait(self, arrival: Arrival, now: float, taken: int) -> bool:
        """Over --max-per-hour (counting ``taken``, this step's other arrivals of the student)."""
        if self.max_per_hour is None:
            return False
        recent = self.state.recent(arrival.student, now)
        if len(recent) + taken < self.max_per_hour:
            return False
        if self.state.noticed.get(arrival.key) != arrival.folder.name:
            until = datetime.fromtimestamp(min(recent) + HOUR, UTC).strftime("%Y-%m-%d %H:%M UTC")
            self._notify_waiting(arrival, until)
            self.state.noticed[arrival.key] = arrival.folder.name
            self.state.save()
            log(f"{arrival.key}: waits until {until} ({self.max_per_hour} gradings an hour)")
        return True

    def _notify_waiting(self, arrival: Arrival, until: str) -> None:
        """The waiting submission's own feedback, in the exchange: why, and until when."""
        if self.exchange_course is None:
            return
        try:
            secret = (arrival.folder / SECRET).read_text(encoding="utf-8")
        except OSError:
            return
        message = (f"Your submission of {arrival.submitted_at:%Y-%m-%d %H:%M:%S} UTC is waiting to be "
                   f"graded: at most {self.max_per_hour} of your submissions are graded in any hour. It "
                   f"will be graded after {until} (or your newest submission then, if you submit again). "
                   "Until then, fetch_feedback shows this note.")
        page = feedback_html({"student_id": arrival.student, "assignment": arrival.assignment,
                              "status": "waiting", "tests": []}, queued=message)
        for notebook in sorted(p.stem for p in arrival.folder.glob("*.ipynb")):
            release_page(self.exchange_course, secret, notebook, page)

    def grade(self, arrivals: list[Arrival]) -> None:
        """One SUBMITTED folder holding a copy of each arrival, graded in the session; then
        each copy is kept, its feedback released and its line logged."""
        folder = self.home / "arrival"
        shutil.rmtree(folder, ignore_errors=True)
        problems, copies, stamps = {}, [], {}
        for arrival in arrivals:
            problem = student_id_problem(arrival.student)
            if problem:  # no folder may carry this name; nbgrader would not have let it submit
                log(f"{arrival.folder.name}: not graded: {problem}")
                self.state.graded[arrival.key] = arrival.folder.name
                continue
            copy = folder / arrival.student / arrival.assignment
            try:
                self._copy(arrival, copy, problems)
            except (OSError, ValueError) as exc:  # it changed or vanished while it was copied
                self.failed[arrival.folder.name] = time.time()
                log(f"could not copy {arrival.folder.name}: {exc} (retried in {RETRY_SECONDS:.0f} s)")
                shutil.rmtree(copy, ignore_errors=True)
                continue
            copies.append((arrival, copy))
            stamps[arrival.key] = _mtime(self.out / arrival.student / arrival.assignment / "results.json")
        if copies:
            self.session.grade(folder, every_result=True, problems=problems)
        for arrival, copy in copies:
            kept = self.home / "submitted" / arrival.student / arrival.assignment
            shutil.rmtree(kept, ignore_errors=True)
            permissions.make_folders(kept.parent)
            os.replace(copy, kept)
            if self.exchange_course is not None:
                release_feedback(self.out, arrival.student, arrival.assignment, self.exchange_course)
            self.state.graded[arrival.key] = arrival.folder.name
            results = self.out / arrival.student / arrival.assignment / "results.json"
            graded = _mtime(results) != stamps[arrival.key]
            if graded:
                self.state.recent(arrival.student, time.time()).append(time.time())
                self.graded_now += 1
            waited = time.monotonic() - self.first_seen.get(arrival.folder.name, time.monotonic())
            log(f"{arrival.key}: {_outcome(self.out, arrival)} ({waited:.2f} s after it arrived"
                f"{'' if graded else ', unchanged'})")
        self.state.save()
        shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _copy(arrival: Arrival, copy: Path, problems: dict[tuple[str, str], str]) -> None:
        """The arrival's files, as the submissions' walker finds them, into ``copy``."""
        walk = walk_folder(arrival.folder, SUBMISSION_LIMITS)
        permissions.make_folders(copy)
        if walk.problem:
            problems[(arrival.student, arrival.assignment)] = walk.problem.replace(
                "the folder", "the submission folder", 1)
            return
        for file in walk.files:
            permissions.make_folders((copy / file.relative).parent)
            copy_walked_file(file, copy / file.relative)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _outcome(out: Path, arrival: Arrival) -> str:
    try:
        result = json.loads((out / arrival.student / arrival.assignment / "results.json").read_text())
    except (OSError, ValueError):
        return "no result"
    return f"{result.get('status')} {result.get('score')}/{result.get('max_score')}"


def log(line: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {line}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)  # SIGTERM (a service manager) stops it as Ctrl-C does


def watch(inbound: Path, out: Path, source: Path, *, options: GradeOptions, server: Executor, work: Path,
          exchange: Path | None = None, max_per_hour: int | None = None) -> int:
    """Grade INBOUND's arrivals until interrupted; 0 when stopped by Ctrl-C or SIGTERM."""
    course, course_folder = exchange_course(inbound, exchange)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    session = watcher = None
    try:
        session = GradingSession(out, source, options, server, work, course_id=course, exchange=exchange)
        watcher = Watcher(inbound, out, session, course_folder, max_per_hour)
        log(f"preparing {len(session.run.sources)} assignments of {source}")
        session.prepare(sorted(session.run.sources))
        released = f", feedback released to {course_folder}/feedback" if course_folder else ""
        log(f"watching {inbound}{released}")
        while True:
            session.interrupts.check()
            if not watcher.step():
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        graded = watcher.graded_now if watcher is not None else 0
        log(f"stopped: {graded} submissions graded; everything written is kept")
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if session is not None:
            session.close()
