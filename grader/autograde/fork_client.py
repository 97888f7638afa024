"""The parent's side of the fork server: starting it, submitting jobs, collecting their ends.

:class:`ForkServer` starts ``python -m grader.autograde.sandbox`` with a minimal environment,
sends it its configuration and one job per line, and turns its ``exited`` events into
:class:`~grader.autograde.executor.Finished` records; the server, not the job, says how each
job ended. :func:`choose_isolation` decides what this machine can confine, and
:func:`grading_config` is the configuration grading uses (the grader's code and the run's
secrets hidden).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from grader.autograde import confine, phases
from grader.autograde.executor import Executor, Finished, IsolationUnavailable
from grader.autograde.fork_protocol import ChildJob, Isolation, ServerConfig


class ForkServer(Executor):
    """The parent's side: start the server, submit jobs, collect finished ones."""

    def __init__(self, config: ServerConfig) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
        env.update(
            OMP_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            MPLBACKEND="Agg",
            HOME=os.environ.get("HOME", "/"),
            PYTHONDONTWRITEBYTECODE="1",
        )
        self.config = config
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.autograde.sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
        )
        assert self.process.stdin is not None and self.process.stdout is not None  # both PIPE
        self._stdin, self._stdout = self.process.stdin, self.process.stdout
        # the configuration goes in on stdin, not argv: a child's /proc/self/cmdline is its own
        self._stdin.write(config.to_line().encode())
        self._stdin.flush()
        self.running: dict[str, tuple[ChildJob, float]] = {}
        self._buffer = b""
        self._ready = False  # the server imports torch while the caller gets on with its work
        self.cgroup = ""  # once ready: "v1" or "v2" (a cgroup per job), or "none"

    def wait_ready(self) -> None:
        if self._ready:
            return
        event = self._read_event(timeout=300)
        if event and event.get("event") == "error":
            raise IsolationUnavailable(event.get("message", ""))
        if not event or event.get("event") != "ready":
            raise RuntimeError("the grading fork server did not start")
        self.cgroup = str(event.get("cgroup", "none"))
        self._ready = True

    def submit(self, job: ChildJob) -> None:
        self.wait_ready()
        self.running[job.id] = (job, time.monotonic())
        self._stdin.write((json.dumps(asdict(job)) + "\n").encode())
        self._stdin.flush()

    def wait(self, timeout: float | None = None) -> list[Finished]:
        """Block until at least one job ends (the server enforces each job's time limit), or
        for at most ``timeout`` seconds if given (then the list may be empty)."""
        finished: list[Finished] = []
        limit = None if timeout is None else time.monotonic() + timeout
        while not finished and self.running:
            # the server kills at the limit; this is only a backstop should the server stall
            backstop = min(t + j.limits.timeout + 30 for j, t in self.running.values())
            until = backstop if limit is None else min(backstop, limit)
            event = self._read_event(timeout=max(0.0, until - time.monotonic()))
            if event is None and limit is not None and limit < backstop:
                return finished  # the caller's time is up, not the server's
            if event is None:
                raise RuntimeError("the grading fork server stopped answering")
            if event["event"] == "exited" and event["id"] in self.running:
                job, submitted = self.running.pop(event["id"])
                _job_phases(event.get("phases"), time.monotonic() - submitted)
                finished.append(
                    Finished(job, event["code"], bool(event["timed_out"]), time.monotonic() - submitted)
                )
        return finished

    def _read_event(self, timeout: float) -> dict[str, Any] | None:
        fd = self._stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the grading fork server stopped")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        event: dict[str, Any] = json.loads(line)  # the server's own line (sandbox._emit)
        return event

    def close(self) -> None:
        self.running.clear()
        if self.process.poll() is None:
            self._stdin.close()  # the server kills every child it still has, then exits
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _job_phases(server_side: object, seconds: float) -> None:
    """A job's phases as its server measured them (cgroup, fork and confine, all until it
    ended), and the rest of ``seconds`` (the event's way back, the server's queue)."""
    if not phases.enabled():
        return
    phases.add("job.total", seconds)
    if isinstance(server_side, list) and len(server_side) == 3:
        cgroup, fork, ran = (float(x) for x in server_side)
        phases.add("job.cgroup", cgroup)
        phases.add("job.fork_and_confine", fork)
        phases.add("job.execution_and_report", max(0.0, ran - fork))


def choose_isolation(accept_weak: bool) -> Isolation:
    """Namespaces when this machine allows them (root, or user namespaces); else refuse.

    ``accept_weak`` is the instructor's explicit consent to run without them.
    """
    if os.getuid() == 0 or confine.can_use_user_namespaces():
        return Isolation.NAMESPACES
    if accept_weak:
        return Isolation.WEAK
    raise IsolationUnavailable(
        "this machine cannot confine grading children (not root, and user namespaces are "
        "disabled); rerun with --accept-weak-isolation to grade without confinement"
    )


def grading_config(isolation: Isolation, secrets: list[Path]) -> ServerConfig:
    """The server configuration for grading: ``secrets`` and the grader's own code hidden.

    The learner package's folder is shown read-only (an editable install may not be on
    ``sys.path``); the grader package and this checkout's solutions are hidden wherever
    they are installed.
    """
    import importlib.util

    import grader
    from grader.paths import SOLUTIONS

    hidden = [Path(grader.__file__).parent, SOLUTIONS, *secrets]
    readonly = []
    spec = importlib.util.find_spec("attention_learner")
    if spec is not None and spec.origin:
        readonly.append(str(Path(spec.origin).parent))
    return ServerConfig(isolation, tuple(str(Path(p).resolve()) for p in hidden), tuple(readonly))
