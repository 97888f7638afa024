"""Keeping the executor busy: the run's submissions between preparation and results.

``grade_all`` keeps ``workers`` jobs running and prepares the next submissions while they
run; :class:`JobStream` does the same for submissions that come one by one (the watcher's
arrivals): each is added when it arrives, its jobs start as soon as a worker is free, and
``pump`` hands back each submission as soon as all its jobs have ended, whatever the
others are doing (a notebook running to its timeout holds one worker, nothing else). How a
submission is prepared and finished is the pipeline's (``prepare`` and ``finish``), so this
module holds only the bookkeeping of jobs in flight.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from grader.autograde import phases
from grader.autograde.executor import Executor, Finished
from grader.autograde.fork_protocol import ChildJob
from grader.autograde.interrupts import Interrupts
from grader.autograde.results import SubmissionResult
from grader.autograde.sanitize import Sanitized
from grader.autograde.submissions import Submission

Prepare = Callable[[Submission, str], "tuple[SubmissionResult, list[NotebookJob]]"]
Finish = Callable[[Submission, SubmissionResult, "list[NotebookJob]"], None]


@dataclass
class NotebookJob:
    submission: Submission
    notebook: str
    sanitized: Sanitized
    job: ChildJob
    finished: Finished | None = None


def grade_all(
    server: Executor,
    todo: list[tuple[Submission, str]],
    workers: int,
    progress: bool,
    prepare: Prepare,
    finish: Finish,
    interrupts: Interrupts,
) -> None:
    """Keep ``workers`` children busy; prepare the next submissions while they run.

    Between steps, ``interrupts.check()`` raises a Ctrl-C that a library call swallowed.
    """
    from tqdm import tqdm

    bar = tqdm(total=len(todo), unit="sub", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)  # fmt: skip
    flight = _InFlight(server, todo, prepare, finish, bar.update)
    try:
        more = True
        while True:
            interrupts.check()
            while more and len(flight.queue) < workers:
                more = flight.prepare_next()
            flight.start(workers)
            if more and len(flight.queue) < workers:
                more = flight.prepare_next()  # ahead of time, while the children run
            if not flight.running:
                if more or flight.queue:
                    continue
                break
            flight.collect(workers)
    finally:
        bar.close()


class _InFlight:
    """The run's submissions between preparation and their results: jobs queued for the
    server, jobs running, and the submission each job belongs to."""

    def __init__(self, server: Executor, todo: list[tuple[Submission, str]], prepare: Prepare,
                 finish: Finish, done: Callable[[int], object]) -> None:  # fmt: skip
        self.server, self.prepare, self.finish, self.done = server, prepare, finish, done
        self.upcoming = deque(todo)
        self.pending: dict[str, tuple[SubmissionResult, list[NotebookJob]]] = {}  # by job id
        self.queue: list[NotebookJob] = []
        self.running = 0

    def prepare_next(self) -> bool:
        """Prepare the next submission's jobs (or finish it at once); False when none is left."""
        if not self.upcoming:
            return False
        sub, fingerprint = self.upcoming.popleft()
        result, jobs = self.prepare(sub, fingerprint)  # never raises: an odd one is invalid
        for job in jobs:
            self.pending[job.job.id] = (result, jobs)
        self.queue.extend(jobs)
        if not jobs:
            self.finish(sub, result, [])
            self.done(1)
        return True

    def start(self, workers: int) -> None:
        """Hand queued jobs to the server until ``workers`` of them run."""
        while self.queue and self.running < workers:
            self.server.submit(self.queue.pop(0).job)
            self.running += 1

    def collect(self, workers: int, timeout: float | None = None) -> list[Submission]:
        """Wait for finished jobs (at most ``timeout`` seconds, if given); hand their places to
        queued jobs at once, then finish each submission whose jobs have all come back (so
        judging overlaps the next jobs); the submissions finished."""
        with phases.phase("parent.wait_for_jobs"):
            done = self.server.wait() if timeout is None else self.server.wait(timeout)
        self.running -= len(done)
        self.start(workers)
        ended = []
        for finished in done:
            result, jobs = self.pending.pop(finished.job.id)
            next(j for j in jobs if j.job.id == finished.job.id).finished = finished
            if all(j.finished is not None for j in jobs):
                self.finish(jobs[0].submission, result, jobs)
                self.done(1)
                ended.append(jobs[0].submission)
        return ended


class JobStream:
    """Submissions graded as they arrive, every worker busy: ``add`` one (prepared at once,
    its jobs queued), ``pump`` to start queued jobs on free workers and collect what ended.

    A submission with no job to run (invalid) is finished inside ``add``; ``add`` returns
    True then. ``idle`` is True when nothing is queued or running.
    """

    def __init__(self, server: Executor, workers: int, prepare: Prepare, finish: Finish) -> None:
        self.workers = workers
        self.flight = _InFlight(server, [], prepare, finish, lambda n: None)

    @property
    def idle(self) -> bool:
        return not self.flight.running and not self.flight.queue

    def add(self, sub: Submission, fingerprint: str) -> bool:
        """Prepare ``sub`` and queue its jobs; True when it was finished at once (no job)."""
        self.flight.upcoming.append((sub, fingerprint))
        queued = len(self.flight.pending)
        self.flight.prepare_next()
        finished = len(self.flight.pending) == queued
        self.flight.start(self.workers)
        return finished

    def pump(self, timeout: float) -> list[Submission]:
        """Start queued jobs on free workers, wait up to ``timeout`` seconds for jobs to end;
        the submissions whose jobs have all ended (finished by then)."""
        self.flight.start(self.workers)
        if not self.flight.running:
            return []
        return self.flight.collect(self.workers, timeout)
