"""One cgroup per grading job: its memory (swap included) and its tasks capped as a whole.

Per-process limits (``RLIMIT_AS``) let a job spread its memory over many processes, or keep
it where no address space counts it (memfd and tmpfs pages). A cgroup counts every page the
job's processes touch, those included. The fork server makes, in the cgroup it runs in
itself (so whatever limit the machine puts on the grader still holds), one folder per run,
``attention-<pid>-<start time>``, and in it one folder per job; the job's first process
joins it before any learner code exists, and the server kills what is left in it and
removes it when the job has ended.

- cgroup v1 (as root; these machines): ``memory`` (``memory.limit_in_bytes`` and, where
  swap is accounted, ``memory.memsw.limit_in_bytes``) and ``pids`` (``pids.max``), each in
  its own hierarchy. A v1 cgroup is emptied by killing each pid of ``cgroup.procs`` until
  none is left.
- cgroup v2, where the server's own cgroup hands ``memory`` and ``pids`` to cgroups made
  below it (its ``cgroup.subtree_control`` accepts them: a delegated subtree): ``memory.max``,
  ``memory.swap.max`` = 0, ``memory.oom.group`` = 1 and ``pids.max`` in one folder, emptied
  through ``cgroup.kill``.

Where neither can be had, :func:`discover` returns None and the sandbox lowers its
per-process limits instead (SECURITY.md states the worst case of each). A run folder left
behind by a server that was killed (SIGKILL leaves no time to clean up) is removed by the
next server that starts, once nothing runs in it. Which folders those are is read from
``/proc`` by ``cgroup_mounts``.
"""

from __future__ import annotations

import errno
import os
import re
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from grader.autograde.cgroup_mounts import folder_of, mounts, own_paths

RUN_PREFIX = "attention-"
_RUN_NAME = re.compile(r"attention-(\d+)-(\d+)$")
_JOB_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}$")


def _starttime(pid: int | str) -> str | None:
    """The process's start time (clock ticks since boot): with the pid, it names one process.
    None when there is no such process, or only its zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else fields[19]


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _pids(procs: Path) -> list[int]:
    try:
        return [int(p) for p in procs.read_text().split()]
    except OSError:
        return []


def kill_all(folder: Path, deadline: float = 1.0) -> bool:
    """Kill every process in the cgroup ``folder`` until none is left; whether that happened.

    ``cgroup.kill`` where the kernel has it (v2); else each pid of ``cgroup.procs`` through a
    pidfd opened before its membership is read again, so a pid reused meanwhile by a process
    outside the cgroup is never signalled.
    """
    procs = folder / "cgroup.procs"
    kill_file = folder / "cgroup.kill"
    if kill_file.exists():
        try:
            _write(kill_file, "1")
        except OSError:
            pass
    end = time.monotonic() + deadline
    pause = 0.0005
    while True:
        pids = _pids(procs)
        if not pids:
            return True
        if time.monotonic() > end:
            return False
        for pid in pids:
            try:
                fd = os.pidfd_open(pid)
            except OSError:
                continue
            try:
                if pid in _pids(procs):
                    signal.pidfd_send_signal(fd, signal.SIGKILL)
            except OSError:
                pass
            finally:
                os.close(fd)
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _remove(folder: Path, deadline: float = 1.0) -> bool:
    """Empty and remove one cgroup folder (it may be gone already); whether it is gone."""
    if not folder.exists():
        return True
    kill_all(folder, deadline)
    end = time.monotonic() + deadline
    pause = 0.0005
    while True:
        try:
            os.rmdir(folder)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > end:
                return False
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def remove_stale(bases: Iterable[Path]) -> list[Path]:
    """Remove the run folders under ``bases`` whose server no longer runs; what remains of them."""
    left = []
    for base in bases:
        try:
            entries = list(base.iterdir())
        except OSError:
            continue
        for run in entries:
            match = _RUN_NAME.match(run.name)
            if not match or not run.is_dir() or _starttime(match[1]) == match[2]:
                continue  # not ours, or its server is alive
            for job in [p for p in run.iterdir() if p.is_dir()]:
                if not _remove(job):
                    left.append(job)
            if not _remove(run):
                left.append(run)
    return left


@dataclass
class Cgroups:
    """The run's cgroups, made and removed by the fork server (which runs as their owner)."""

    kind: str  # "v1" or "v2"
    bases: tuple[Path, ...]  # the server's own cgroup: one per v1 hierarchy, or the v2 one
    name: str = field(default_factory=lambda: f"{RUN_PREFIX}{os.getpid()}-{_starttime(os.getpid())}")
    pending: list[Path] = field(default_factory=list)  # job folders that were still busy

    @property
    def runs(self) -> tuple[Path, ...]:
        return tuple(base / self.name for base in self.bases)

    def make_run(self) -> None:
        for run in self.runs:
            run.mkdir(mode=0o755, exist_ok=True)
        if self.kind == "v2":
            _write(self.runs[0] / "cgroup.subtree_control", "+memory +pids")

    def job(self, job_id: str, memory_bytes: int, tasks: int) -> tuple[str, ...]:
        """Make the job's cgroups with their limits; the files its first process writes "0"
        into to join them (:func:`join`)."""
        if not _JOB_NAME.match(job_id):
            raise ValueError(f"not a job id: {job_id!r}")
        folders = [run / job_id for run in self.runs]
        for folder in folders:
            if folder.exists():  # a job id used again (the probe of a retried start)
                self.remove_job(job_id)
            folder.mkdir(mode=0o755)
        for folder in folders:
            for name, value in self._limits(memory_bytes, tasks):
                if (folder / name).exists():
                    _write(folder / name, value)
        # v1: the calling thread through ``tasks`` (the job's first process has one thread), which
        # the kernel moves without its global threadgroup lock: ``cgroup.procs`` waits for an
        # RCU grace period (about 14 ms here, on every job's start)
        return tuple(str(folder / ("tasks" if self.kind == "v1" else "cgroup.procs")) for folder in folders)

    def _limits(self, memory_bytes: int, tasks: int) -> list[tuple[str, str]]:
        if self.kind == "v1":  # the memory limit first: memsw may never be below it
            return [
                ("memory.limit_in_bytes", str(memory_bytes)),
                ("memory.memsw.limit_in_bytes", str(memory_bytes)),
                ("pids.max", str(tasks)),
            ]
        return [
            ("memory.max", str(memory_bytes)),
            ("memory.swap.max", "0"),
            ("memory.oom.group", "1"),
            ("pids.max", str(tasks)),
        ]

    def remove_job(self, job_id: str) -> bool:
        """Kill whatever is left of the job and remove its cgroups (retried later if busy)."""
        gone = True
        for run in self.runs:
            folder = run / job_id
            if not _remove(folder, deadline=0.2):
                self.pending.append(folder)
                gone = False
        return gone

    def retry_pending(self) -> None:
        self.pending = [f for f in self.pending if not _remove(f, deadline=0.0)]

    def close(self) -> None:
        """Remove every job folder and the run's own folders."""
        for run in self.runs:
            try:
                jobs = [p for p in run.iterdir() if p.is_dir()]
            except OSError:
                jobs = []
            for folder in jobs:
                _remove(folder)
            _remove(run)
        self.pending = []


_MEMORY_FILES = ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes", "memory.max")


def lower_memory(files: Iterable[str], memory_bytes: int) -> None:
    """Lower the memory limit of the job's cgroups whose joining ``files`` these are (those of
    :meth:`Cgroups.job`) to ``memory_bytes``, swap included. v1: the memory limit first, so
    that memsw is never below it; a folder without these files (``pids``) is left alone."""
    for name in files:
        folder = Path(name).parent
        for limit in _MEMORY_FILES:
            if (folder / limit).exists():
                _write(folder / limit, str(memory_bytes))


def join(files: Iterable[str]) -> None:
    """Move the calling single-threaded process into each cgroup (its children are born there)."""
    for name in files:
        _write(Path(name), "0")


def _candidates(mountinfo: str | None, proc_cgroup: str | None) -> list[Cgroups]:
    """The run cgroups this process could make, v1 first; nothing is made or checked yet."""
    if mountinfo is None:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    if proc_cgroup is None:
        proc_cgroup = Path("/proc/self/cgroup").read_text()
    mounts_v1, mount_v2 = mounts(mountinfo)
    own_v1, own_v2 = own_paths(proc_cgroup)
    candidates: list[Cgroups] = []
    if all(c in mounts_v1 and c in own_v1 for c in ("memory", "pids")):
        folders = [folder_of(mounts_v1[c], own_v1[c]) for c in ("memory", "pids")]
        found = [folder for folder in folders if folder is not None]
        if len(found) == len(folders):
            candidates.append(Cgroups("v1", tuple(found)))
    if mount_v2 is not None and own_v2 is not None and (base := folder_of(mount_v2, own_v2)):
        try:
            available = (base / "cgroup.controllers").read_text().split()
        except OSError:
            available = []
        if "memory" in available and "pids" in available:
            candidates.append(Cgroups("v2", (base,)))
    return candidates


def discover_bases(mountinfo: str | None = None, proc_cgroup: str | None = None) -> list[Path]:
    """The folders under which this process's server would make its run folders."""
    return [base for cgroups in _candidates(mountinfo, proc_cgroup) for base in cgroups.bases]


def discover(mountinfo: str | None = None, proc_cgroup: str | None = None) -> Cgroups | None:
    """The run's cgroups where this process may make them, else None (then nothing is made).

    cgroup v1 first (both ``memory`` and ``pids`` writable), then v2 with both controllers
    delegated. Run folders of servers that died are removed on the way.
    """
    for cgroups in _candidates(mountinfo, proc_cgroup):
        remove_stale(cgroups.bases)
        try:
            if cgroups.kind == "v2":
                enabled = (cgroups.bases[0] / "cgroup.subtree_control").read_text().split()
                if not {"memory", "pids"} <= set(enabled):
                    _write(cgroups.bases[0] / "cgroup.subtree_control", "+memory +pids")
            cgroups.make_run()
        except OSError:
            cgroups.close()
            continue
        return cgroups
    return None
