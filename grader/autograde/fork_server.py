"""The fork server's jobs: each forked, watched through pidfds, killed and taken down.

:class:`Server` is what the server's loop (``sandbox``) holds: its configuration, the job
filesystem's view, the run's cgroups and every job still running. It forks each job
(``fork_child``), reads the keeper's pipe for how PID 1 ended, kills a job at its limit
through a pidfd (no pid-reuse race), removes a finished job's cgroups with whatever is left
in them, and takes every job down when the parent has gone.
"""

from __future__ import annotations

import os
import select
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.autograde import cgroups as cgroup_tree
from grader.autograde import mount_tree
from grader.autograde.fork_child import first_child
from grader.autograde.fork_protocol import ChildJob, Isolation, ServerConfig, exited_event
from grader.autograde.results import ChildExit


@dataclass
class Child:
    id: str
    pid: int  # the server's own child: the keeper (namespaces) or the job itself
    leader: int  # the job's PID 1 (the same process without namespaces)
    leader_fd: int  # a pidfd of it (-1 without namespaces: ``pid`` is the job)
    deadline: float
    isolation: Isolation
    cgroup: str = ""  # the job's cgroup folder name ("" without one)
    status_fd: int = -1  # the keeper's pipe, until it has said how PID 1 ended
    reported: bool = False  # its "exited" event has been emitted
    timed_out: bool = False
    started: float = 0.0  # monotonic, once its cgroup is made
    setup: tuple[float, float] = (0.0, 0.0)  # seconds: its cgroup; fork and confine to PID 1

    def event(self, status: int) -> dict[str, Any]:
        self.reported = True
        event = exited_event(
            self.id, os.waitstatus_to_exitcode(status), self.timed_out or time.monotonic() >= self.deadline
        )
        # the job's phases (seconds), for GRADER_PHASES: the parent only adds them up
        event["phases"] = [*self.setup, time.monotonic() - self.started]
        return event


def leader_pidfd(pid: int) -> int:
    """A pidfd of the job's PID 1, or -1 if it has ended and its keeper has reaped it already
    (a job that fails at once can be gone before the server asks): then nothing of it is left
    to kill, and its keeper's pipe still reports how it ended."""
    try:
        return os.pidfd_open(pid)
    except ProcessLookupError:
        return -1


class Server:
    """What the loop holds: the configuration, the view, the run's cgroups, the jobs."""

    def __init__(
        self, config: ServerConfig, view: mount_tree.View | None, cgroups: cgroup_tree.Cgroups | None
    ) -> None:
        self.config, self.view, self.cgroups = config, view, cgroups
        self.children: dict[int, Child] = {}  # pidfd of Child.pid -> child
        self.pipes: dict[int, Child] = {}  # Child.status_fd -> child
        self._numbers = iter(range(1, 1 << 62))

    def start(self, job: ChildJob) -> Child | None:
        """Fork the job; None if it never started (then nothing of it is left)."""
        made = time.monotonic()
        name, procs = self._job_cgroups(job)
        started = time.monotonic()
        folder = Path(job.folder)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
        report = os.open(folder / "report", flags, 0o600)
        log = os.open(folder / "log", flags, 0o600)
        read_end, write_end = os.pipe()
        server = os.getpid()
        first = os.fork()
        if first == 0:
            os.close(read_end)
            first_child(job, self.config.isolation, self.view, report, log, write_end, server, procs)
        for fd in (write_end, report, log):
            os.close(fd)
        leader = _read_pid(read_end)
        if not leader:
            os.close(read_end)
            os.waitpid(first, 0)
            if name and self.cgroups is not None:  # a name only ever comes from the cgroups
                self.cgroups.remove_job(name)
            return None
        child = Child(
            job.id,
            first,
            leader,
            -1,
            started + job.limits.timeout,
            self.config.isolation,
            name,
            started=started,
            setup=(started - made, time.monotonic() - started),
        )
        if child.isolation is Isolation.NAMESPACES:
            child.leader_fd = leader_pidfd(leader)
            child.status_fd = read_end
            self.pipes[read_end] = child
        else:
            os.close(read_end)
        self.children[os.pidfd_open(first)] = child
        return child

    def _job_cgroups(self, job: ChildJob) -> tuple[str, tuple[str, ...]]:
        """The job's cgroup folder name and the files that join it (none without cgroups)."""
        if self.cgroups is None:
            return "", ()
        name = f"job{next(self._numbers)}"
        try:
            return name, self.cgroups.job(name, job.limits.memory_bytes, job.limits.processes)
        except OSError:  # then this job gets the lower limits of a machine without cgroups
            self.cgroups.remove_job(name)
            return "", ()

    def status(self, fd: int) -> dict[str, Any] | None:
        """What the keeper says on its pipe: PID 1's end (an ``exited`` event), or nothing."""
        child = self.pipes.pop(fd)
        data = os.read(fd, 64)
        os.close(fd)
        child.status_fd = -1
        line = data.split(b"\n", 1)[0].lstrip(b"-")
        if not data.endswith(b"\n") or not line.isdigit() or child.reported:
            return None  # the keeper died first: its own end is the job's (finish)
        return child.event(int(data.split(b"\n", 1)[0]))

    def finish(self, pidfd: int) -> dict[str, Any] | None:
        """The keeper has ended: remove what is left of the job; its ``exited`` event unless
        the keeper's pipe gave it already."""
        child = self.children.pop(pidfd)
        _, status = os.waitpid(child.pid, 0)
        os.close(pidfd)
        if child.status_fd >= 0:
            self.pipes.pop(child.status_fd, None)
            os.close(child.status_fd)
            child.status_fd = -1
        self.take_down(child)
        return None if child.reported else child.event(status)

    def take_down(self, child: Child) -> None:
        """Kill whatever is left of a job whose keeper has ended, and remove its cgroups."""
        if child.leader_fd >= 0:  # the keeper may have been killed before PID 1
            _send_kill(child.leader_fd)
            os.close(child.leader_fd)
            child.leader_fd = -1
        elif child.isolation is not Isolation.NAMESPACES:
            _kill_group(child.pid)  # whatever it left running
        if child.cgroup and self.cgroups is not None:
            self.cgroups.remove_job(child.cgroup)

    def kill(self, child: Child) -> None:
        """SIGKILL through a pidfd (no pid reuse race); PID 1 takes its namespace with it."""
        if child.leader_fd >= 0:
            _send_kill(child.leader_fd)
        else:
            _kill_group(child.pid)
            if child.isolation is not Isolation.NAMESPACES:
                os.kill(child.pid, signal.SIGKILL)  # not reaped yet: the pid is still its own

    def reap_orphans(self) -> None:
        """Reap processes that were adopted (as subreaper) rather than started here."""
        mine = {c.pid for c in self.children.values()}
        while True:
            try:
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None or info.si_pid in mine:
                return  # a job's own end is read through its pidfd
            os.waitpid(info.si_pid, 0)

    def shut_down(self) -> None:
        """The parent has gone: take every job with us, and remove the run's cgroups."""
        for child in self.children.values():
            self.kill(child)
        end = time.monotonic() + 5
        for pidfd, child in list(self.children.items()):
            if select.select([pidfd], [], [], max(0.0, end - time.monotonic()))[0]:
                os.waitpid(child.pid, 0)
            self.take_down(child)
        if self.cgroups is not None:
            self.cgroups.close()
        os._exit(ChildExit.OK)  # no teardown of torch: nothing is left to clean up


def _send_kill(pidfd: int) -> None:
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_pid(fd: int) -> int:
    """The first line the forked child writes on its pipe: its job's PID 1 (0: it never said)."""
    data = b""
    while b"\n" not in data and (chunk := os.read(fd, 64)):
        data += chunk
    line = data.split(b"\n", 1)[0]
    return int(line) if line.isdigit() else 0
