"""Keeping the executor busy: the run's submissions between preparation and results.

``grade_all`` keeps ``workers`` jobs running and prepares the next submissions while they
run; how a submission is prepared and finished is the pipeline's (``prepare`` and
``finish``), so this module holds only the bookkeeping of jobs in flight.
"""

from __future__ import annotations

import sys
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


def grade_all(server: Executor, todo: list[tuple[Submission, str]], workers: int, progress: bool,
              prepare: Prepare, finish: Finish, interrupts: Interrupts) -> None:
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
        self.upcoming = iter(todo)
        self.pending: dict[str, tuple[SubmissionResult, list[NotebookJob]]] = {}  # by job id
        self.queue: list[NotebookJob] = []
        self.running = 0

    def prepare_next(self) -> bool:
        """Prepare the next submission's jobs (or finish it at once); False when none is left."""
        step = next(self.upcoming, None)
        if step is None:
            return False
        sub, fingerprint = step
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

    def collect(self, workers: int) -> None:
        """Wait for finished jobs; hand their places to queued jobs at once, then finish each
        submission whose jobs have all come back (so judging overlaps the next jobs)."""
        with phases.phase("parent.wait_for_jobs"):
            done = self.server.wait()
        self.running -= len(done)
        self.start(workers)
        for finished in done:
            result, jobs = self.pending.pop(finished.job.id)
            next(j for j in jobs if j.job.id == finished.job.id).finished = finished
            if all(j.finished is not None for j in jobs):
                self.finish(jobs[0].submission, result, jobs)
                self.done(1)
