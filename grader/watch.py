"""Grading on submit: ``python -m grader autograde --watch INBOUND --out OUT [--exchange ROOT]``.

INBOUND is an nbgrader exchange's inbound folder (``<exchange>/<course>/inbound``), where
``nbgrader submit`` puts ``<student>+<assignment>+<timestamp>+<random>/`` holding the
notebooks, ``timestamp.txt`` and ``submission_secret.txt`` (written last, so a folder with
a regular secret is complete). The watcher looks at it twice a second (``grader.inbound``:
through descriptors, never through a symlink); for each student and assignment it takes
the newest complete submission, by the timestamp in its name as ``nbgrader collect`` does,
and grades it with the ordinary pipeline: a copy of it, made in one pass of the submissions'
own bounded walker through the one descriptor of the folder (``walk_folder(dir_fd=...,
copy_to=...)``: symlinks never followed, files owned by another user than the folder's never
copied), is a SUBMITTED folder of one submission in OUT (private), graded in the watcher's
one open session (``GradingSession``), so scores,
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

Identity comes from the file system (``grader.inbound``): a folder whose owner may not hand
in as the student it names is not graded; the claimed student's grade is kept and flagged
(results.json and grades.csv), and the flag stays on later gradings of that student.

Time comes from the server's clock: the arrival (the folder's complete time, its ctime) is
handed to the run (``Run.arrived``) before the copy is graded, so it decides lateness, is the
gradebook's ``SubmittedAssignment.timestamp`` and results.json's ``timestamp`` and
``arrived_at``; ``timestamp.txt``, written on the student's machine by ``nbgrader submit``, is
only the student's claim (``claimed_at``), flagged in grades.csv and formgrader when it is more
than ``deadlines.CLOCK_SKEW_LIMIT`` away (``deadlines.judge_time``). A copy without a regular
``timestamp.txt`` (a symlink is not one) gets one holding the arrival, for nbgrader's layout.
An edit of OUT/extensions.csv grades again the newest arrival of each student and assignment
whose row changed (:meth:`Watcher.extensions_edited`; the row is in its fingerprint).

``--max-per-hour N``: one owner's submissions are graded (or refused) at most N times in any
hour, counted by the folder's unix owner (by claimed id only for folders of root or of the
watcher's own user); a newer one waits (only the newest is kept) and its feedback in the
exchange says until when.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

from attention_learner.cell_rules import Status
from grader import inbound
from grader.autograde import permissions, reports
from grader.autograde.executor import Executor
from grader.autograde.feedback import TIMESTAMP, release_feedback, release_page
from grader.autograde.folder_walk import SUBMISSION_LIMITS, walk_folder
from grader.autograde.pipeline import GradeOptions
from grader.autograde.reports import waiting_html, write_atomically
from grader.autograde.results import SubmissionResult, read_result
from grader.autograde.session import GradingSession
from grader.autograde.submissions import student_id_problem
from grader.course_cli import exchange_course
from grader.deadlines import EXTENSIONS_FILE, DeadlineError, read_extensions
from grader.inbound import Arrival

POLL_SECONDS = 0.5
RETRY_SECONDS = 60.0
HOUR = 3600.0


def newest_arrivals(folder: Path, assignments: set[str]) -> dict[str, Arrival]:
    """The newest complete submission of each student and assignment in INBOUND whose owner
    may claim it (``grader.inbound.scan``)."""
    return inbound.scan(folder, assignments)[0]


@dataclass
class WatchState:
    """OUT/.watch/state.json: what was graded, when each owner was last graded, and which
    arrivals were refused (their owner may not claim the id they name) with their flags."""

    path: Path
    graded: dict[str, str] = field(default_factory=dict)  # "<student>+<assignment>" -> folder name
    times: dict[str, list[float]] = field(default_factory=dict)  # Arrival.rate_key -> epoch seconds
    noticed: dict[str, str] = field(default_factory=dict)  # key -> folder told it waits
    refused: dict[str, str] = field(default_factory=dict)  # folder name -> its flag
    flags: dict[str, list[str]] = field(default_factory=dict)  # key -> flags its results.json keeps

    @classmethod
    def load(cls, path: Path) -> WatchState:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        return cls(
            path,
            dict(data.get("graded", {})),
            {k: list(v) for k, v in data.get("times", {}).items()},
            dict(data.get("noticed", {})),
            dict(data.get("refused", {})),
            {k: list(v) for k, v in data.get("flags", {}).items()},
        )

    def save(self) -> None:
        write_atomically(
            self.path,
            json.dumps(
                {
                    "graded": self.graded,
                    "times": self.times,
                    "noticed": self.noticed,
                    "refused": self.refused,
                    "flags": self.flags,
                },
                indent=1,
            ),
        )

    def recent(self, who: str, now: float) -> list[float]:
        self.times[who] = [t for t in self.times.get(who, []) if now - t < HOUR]
        return self.times[who]


@dataclass
class Flight:
    """An arrival being graded: its copy (``folder``/<student>/<assignment>) and its
    results.json's mtime before (to tell a grading from a skip)."""

    arrival: Arrival
    folder: Path
    copy: Path
    stamp: int | None


class Watcher:
    def __init__(self, inbound: Path, out: Path, session: GradingSession, exchange_course: Path | None,
                 max_per_hour: int | None) -> None:  # fmt: skip
        self.inbound, self.out, self.session = inbound, out, session
        self.exchange_course, self.max_per_hour = exchange_course, max_per_hour
        self.home = out / ".watch"
        permissions.make_folders(self.home)
        self.state = WatchState.load(self.home / "state.json")
        self.failed: dict[str, float] = {}  # folder name -> when the watcher failed on it
        self.flights: dict[str, Flight] = {}  # "<student>+<assignment>" -> its arrival being graded
        self._copies = 0  # names each arrival's copy, OUT/.watch/arrivals/<n>/
        shutil.rmtree(self.home / "arrivals", ignore_errors=True)  # an earlier run's, half made
        self.graded_now = 0
        self._extensions: tuple[tuple[int, int] | None, dict[str, str]] | None = None  # (stat, rows)

    def step(self) -> int:
        """Start grading what arrived since the last look, each arrival on its own; hand back
        what ended meanwhile (waiting at most ``POLL_SECONDS`` for it while jobs run). The
        number of arrivals started or ended."""
        now = time.time()
        self.extensions_edited()
        taken: dict[str, int] = {}
        for flight in self.flights.values():  # in flight: not yet among the owner's gradings
            taken[flight.arrival.rate_key] = taken.get(flight.arrival.rate_key, 0) + 1
        newest, refused = inbound.scan(self.inbound, set(self.session.run.sources))
        if any(a.folder.name not in self.state.refused for a in refused):
            self.refuse([a for a in refused if a.folder.name not in self.state.refused], now)
        started = 0
        for key, arrival in sorted(newest.items(), key=lambda item: item[1].arrived_at):
            if self.state.graded.get(key) == arrival.folder.name or key in self.flights:
                continue  # graded, or an earlier one of this student's is being graded
            if now - self.failed.get(arrival.folder.name, -RETRY_SECONDS) < RETRY_SECONDS:
                continue
            if self._must_wait(arrival, now, taken.get(arrival.rate_key, 0)):
                continue
            taken[arrival.rate_key] = taken.get(arrival.rate_key, 0) + 1
            self.start(arrival)
            started += 1
        ended = self.session.collect(POLL_SECONDS) if self.session.busy else []
        for sub in ended:
            self.finish(f"{sub.student}+{sub.assignment}")
        return started + len(ended)

    def extensions_edited(self) -> None:
        """When OUT/extensions.csv changed since the last look (its mtime and size), each student
        and assignment whose row was added, edited or removed loses its "graded" mark, so its
        newest arrival is graded again under the new row. The first look only records the table;
        a table that cannot be read is logged and left to the next edit."""
        path = self.out / EXTENSIONS_FILE
        try:
            st = path.stat()
            mark: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except OSError:
            mark = None
        if self._extensions is not None and self._extensions[0] == mark:
            return
        try:
            table = read_extensions(path) if mark is not None else {}
        except DeadlineError as exc:
            log(f"{exc} (read again when it changes)")
            self._extensions = (mark, self._extensions[1] if self._extensions else {})
            return
        rows = {f"{student}+{assignment}": str(row) for (student, assignment), row in table.items()}
        if self._extensions is not None:
            before = self._extensions[1]
            for key in sorted(k for k in set(rows) | set(before) if rows.get(k) != before.get(k)):
                if self.state.graded.pop(key, None) is not None:
                    log(f"{key}: its row of {EXTENSIONS_FILE} changed: graded again")
            self.state.save()
        self._extensions = (mark, rows)

    def _over_limit(self, arrival: Arrival, now: float, taken: int) -> list[float] | None:
        """The owner's gradings of the last hour if ``arrival`` would exceed --max-per-hour."""
        if self.max_per_hour is None:
            return None
        recent = self.state.recent(arrival.rate_key, now)
        return recent if len(recent) + taken >= self.max_per_hour else None

    def _must_wait(self, arrival: Arrival, now: float, taken: int) -> bool:
        """Over --max-per-hour (counting ``taken``, this step's other arrivals of the owner)."""
        recent = self._over_limit(arrival, now, taken)
        if recent is None:
            return False
        if self.state.noticed.get(arrival.key) != arrival.folder.name:
            until = datetime.fromtimestamp(min(recent) + HOUR, UTC).strftime("%Y-%m-%d %H:%M UTC")
            self._notify_waiting(arrival, until)
            self.state.noticed[arrival.key] = arrival.folder.name
            self.state.save()
            log(f"{arrival.key}: waits until {until} ({self.max_per_hour} gradings an hour)")
        return True

    def refuse(self, arrivals: list[Arrival], now: float) -> None:
        """Arrivals whose owner may not claim the id they name: never graded. Each is logged
        once; the claimed student's results.json keeps its grade and gains the flag (an
        ``invalid`` one is written if there is none), within the owner's --max-per-hour."""
        for arrival in arrivals:
            flag = inbound.claim_problem(arrival)
            self.state.refused[arrival.folder.name] = flag
            log(f"{arrival.folder.name}: refused: {flag}")
            if student_id_problem(arrival.student) or self._over_limit(arrival, now, 0) is not None:
                continue  # no folder of OUT may carry this name, or the owner used up its hour
            self.state.recent(arrival.rate_key, now).append(now)
            kept = self.state.flags.setdefault(arrival.key, [])
            if flag not in kept:
                kept.append(flag)
            _keep_flags(self.out, arrival, kept, refused=flag)
        self.state.save()
        reports.write_grades_csv(self.out, reports.read_results(self.out))

    def _notify_waiting(self, arrival: Arrival, until: str) -> None:
        """The waiting submission's own feedback, in the exchange: why, and until when."""
        if self.exchange_course is None:
            return
        try:
            with inbound.opened(arrival) as fd:
                secret, notebooks = inbound.read_secret(fd), inbound.notebook_names(fd)
        except OSError:
            return
        message = (
            f"Your submission of {arrival.submitted_at:%Y-%m-%d %H:%M:%S} UTC is waiting to be "
            f"graded: at most {self.max_per_hour} of your submissions are graded in any hour. It "
            f"will be graded after {until} (or your newest submission then, if you submit again). "
            "Until then, fetch_feedback shows this note."
        )
        page = waiting_html(arrival.student, arrival.assignment, message)
        for notebook in notebooks:
            release_page(self.exchange_course, secret, notebook, page)

    def start(self, arrival: Arrival) -> None:
        """A copy of ``arrival`` (a SUBMITTED folder of its own) queued in the session, to
        be graded as soon as a worker is free, beside whatever the others run."""
        problem = student_id_problem(arrival.student)
        if problem:  # no folder may carry this name; nbgrader would not have let it submit
            log(f"{arrival.folder.name}: not graded: {problem}")
            self.state.graded[arrival.key] = arrival.folder.name
            self.state.save()
            return
        self._copies += 1
        folder = self.home / "arrivals" / str(self._copies)
        copy = folder / arrival.student / arrival.assignment
        problems: dict[tuple[str, str], str] = {}
        try:
            notes = self._copy(arrival, copy, problems)
        except (OSError, ValueError) as exc:  # it changed or vanished while it was copied
            self.failed[arrival.folder.name] = time.time()
            log(f"could not copy {arrival.folder.name}: {exc} (retried in {RETRY_SECONDS:.0f} s)")
            shutil.rmtree(folder, ignore_errors=True)
            return
        stamp = _mtime(self.out / arrival.student / arrival.assignment / "results.json")
        self.flights[arrival.key] = Flight(arrival, folder, copy, stamp)
        arrived = datetime.fromtimestamp(arrival.arrived_at, UTC).replace(tzinfo=None)
        self.session.run.arrived[(arrival.student, arrival.assignment)] = arrived  # the server's clock
        self.session.run.arrival_notes[(arrival.student, arrival.assignment)] = notes
        try:
            queued = self.session.add(folder, problems)["queued"]
        except Exception as exc:  # a bug on one arrival must not stop the watch
            del self.flights[arrival.key]
            self.failed[arrival.folder.name] = time.time()
            shutil.rmtree(folder, ignore_errors=True)
            log(
                f"could not grade {arrival.folder.name}: {type(exc).__name__}: {exc} "
                f"(retried in {RETRY_SECONDS:.0f} s)"
            )
            return
        if not any(f"{s.student}+{s.assignment}" == arrival.key for s in queued):
            self.finish(arrival.key)  # nothing to run (invalid, or unchanged): done already

    def finish(self, key: str) -> None:
        """The arrival of ``key`` has its results.json: keep its copy, release its feedback,
        log its line (the time from its arrival, the folder's complete time, to now)."""
        flight = self.flights.pop(key)
        arrival = flight.arrival
        kept = self.home / "submitted" / arrival.student / arrival.assignment
        shutil.rmtree(kept, ignore_errors=True)
        permissions.make_folders(kept.parent)
        os.replace(flight.copy, kept)
        graded = _mtime(self.out / arrival.student / arrival.assignment / "results.json") != flight.stamp
        if graded:  # a refused claim's flag names the claimant's unix account: results.json and
            # grades.csv (the instructor's) get it, this student's feedback page does not
            _keep_flags(self.out, arrival, self.state.flags.get(key, []))
        if self.exchange_course is not None:
            release_feedback(self.out, arrival.student, arrival.assignment, self.exchange_course)
        self.state.graded[key] = arrival.folder.name
        if graded:
            self.state.recent(arrival.rate_key, time.time()).append(time.time())
            self.graded_now += 1
        if self.state.flags.get(key):
            reports.write_grades_csv(self.out, reports.read_results(self.out))
        self.state.save()
        shutil.rmtree(flight.folder, ignore_errors=True)
        waited = time.time() - arrival.arrived_at
        log(
            f"{key}: {_outcome(self.out, arrival)} (feedback {waited:.2f} s after it arrived"
            f"{'' if graded else ', unchanged'})"
        )

    @staticmethod
    def _copy(arrival: Arrival, copy: Path, problems: dict[tuple[str, str], str]) -> list[str]:
        """The arrival's files into ``copy``, read once through one descriptor of its folder
        (the folder judged, still complete); the notes its results.json gets."""
        with inbound.opened(arrival) as fd:
            walk = walk_folder(arrival.folder, SUBMISSION_LIMITS, dir_fd=fd, copy_to=copy, owner=arrival.uid)
        permissions.make_folders(copy)
        if walk.problem:
            problems[(arrival.student, arrival.assignment)] = walk.problem.replace(
                "the folder", "the submission folder", 1
            )
            return []
        if any(f.relative == Path(TIMESTAMP) for f in walk.files):
            return []
        stamp = datetime.fromtimestamp(arrival.arrived_at, UTC)
        (copy / TIMESTAMP).write_text(stamp.strftime("%Y-%m-%d %H:%M:%S.%f UTC"), encoding="utf-8")
        return [
            f"no regular {TIMESTAMP} was handed in: the time the submission arrived "
            f"({stamp:%Y-%m-%d %H:%M:%S} UTC, the server's clock) was used"
        ]


def _keep_flags(out: Path, arrival: Arrival, flags: list[str], *, refused: str = "") -> None:
    """Add ``flags`` (each once) to the claimed student's results.json, keeping
    everything else; with ``refused`` and no results.json yet, write an ``invalid`` one that
    says why nothing was graded."""
    path = out / arrival.student / arrival.assignment / "results.json"
    result = read_result(path)
    if result is None:
        if not refused:
            return
        result = SubmissionResult(arrival.student, arrival.assignment, "", "", Status.INVALID, refused)
        permissions.make_folders(path.parent)
    else:
        # read back, its texts are the printable ones: the folders' names stay the raw ones
        result = replace(result, student_id=arrival.student, assignment=arrival.assignment)
        if refused:  # the student's own grade: only the flag is added
            flags = [refused]
    result.flags += [f for f in flags if f not in result.flags]
    reports.write_results_json(out, result)


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def _outcome(out: Path, arrival: Arrival) -> str:
    result = read_result(out / arrival.student / arrival.assignment / "results.json")
    if result is None:
        return "no result"
    return f"{result.status} {result.score}/{result.max_score}"


def log(line: str) -> None:
    print(f"[{datetime.now(UTC):%H:%M:%S}] {line}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    signal.raise_signal(signal.SIGINT)  # SIGTERM (a service manager) stops it as Ctrl-C does


def watch(
    inbound: Path,
    out: Path,
    source: Path,
    *,
    options: GradeOptions,
    server: Executor,
    work: Path,
    exchange: Path | None = None,
    max_per_hour: int | None = None,
) -> int:
    """Grade INBOUND's arrivals until interrupted; 0 when stopped by Ctrl-C or SIGTERM."""
    course, course_folder = exchange_course(inbound, exchange)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    session = watcher = None
    try:
        session = GradingSession(out, source, options, server, work, course_id=course, exchange=exchange)
        watcher = Watcher(inbound, out, session, course_folder, max_per_hour)
        session.server.wait_ready()  # each assignment is prepared when its first arrival comes
        released = f", feedback released to {course_folder}/feedback" if course_folder else ""
        log(f"watching {inbound}{released}")
        while True:
            session.interrupts.check()
            if not watcher.step() and not session.busy:
                time.sleep(POLL_SECONDS)
    except KeyboardInterrupt:
        graded = watcher.graded_now if watcher is not None else 0
        log(f"stopped: {graded} submissions graded; everything written is kept")
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        if session is not None:
            session.close()
