"""What the pipeline needs from whatever runs its jobs: one ``Executor`` protocol.

Two executors answer it: the local fork server's client (``fork_client.ForkServer``) and a
Dask cluster (``distributed.DaskExecutor``). Either returns a :class:`Finished` for every
job it was given, and raises :class:`IsolationUnavailable` when it cannot confine them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from grader.autograde.fork_protocol import ChildJob, ServerConfig


@dataclass(frozen=True)
class Finished:
    job: ChildJob
    exitcode: int | None  # negative: killed by that signal
    timed_out: bool
    seconds: float


class IsolationUnavailable(RuntimeError):
    """The machine cannot confine grading children (no root, no user namespaces)."""


class Executor(Protocol):
    """What the pipeline needs from whatever runs its jobs (a ForkServer, or a Dask cluster).

    ``config`` is the ``ServerConfig`` the jobs run under; ``wait_ready()`` blocks until jobs
    can start; ``submit(job)`` starts one; ``wait()`` blocks until at least one job ends and
    returns those that did (``wait(timeout)``: for at most that many seconds, so perhaps
    none); ``close()`` stops everything still running. An executor that names this class as
    its base gets ``run`` and the context manager from here.
    """

    config: ServerConfig

    def wait_ready(self) -> None: ...

    def submit(self, job: ChildJob) -> None: ...

    def wait(self, timeout: float | None = None) -> list[Finished]: ...

    def close(self) -> None: ...

    def run(self, job: ChildJob) -> Finished:
        """Submit one job and wait for it alone (nothing else may be running)."""
        self.submit(job)
        finished: list[Finished] = []
        while not finished:
            finished = self.wait()
        return finished[0]

    def __enter__(self) -> Executor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
