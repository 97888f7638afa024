"""One fresh, confined child process per notebook, forked from a preloaded server.

``python -m grader.autograde.sandbox CONFIG`` is a small fork server: it imports numpy,
torch, IPython and the learner package once (``preload``: never the reference, never the
exercises' expected values), then forks one child per job it reads on stdin, so a child
starts in milliseconds instead of paying the imports again.

A job line names only an opaque id and a job folder the parent prepared, which holds
``job.json`` (the cells), ``home/`` (the files beside the notebook) and ``root/`` (an empty
mount point). The child reads its cells, wires its descriptors (0 = /dev/null, 1 and 2 =
``log``, 3 = ``report``; every other descriptor the server holds is closed), confines
itself (``confine``: namespaces, a filesystem that holds only what the notebook needs,
another identity, hard limits) and runs the cells; its only way out is the report.

Each job is two processes: a keeper, which runs no learner code and stays outside the job's
PID namespace, and the job's PID 1, its child, which runs the cells. The keeper dies with the
server (a parent-death signal, checked against ``getppid()`` once set) and takes PID 1 with
it; it also kills PID 1 at the time limit by its own clock, should the server be stuck. PID
1's own death takes its whole namespace with it. Where the machine allows it, the job lives in
cgroups of its own (``cgroups``: memory, swap included, and tasks counted for the whole job);
elsewhere the per-process limits are lowered instead (SECURITY.md gives both worst cases).

The server, not the child, tells the parent how each child ended: it holds a pidfd of every
job's keeper and PID 1, kills PID 1 at the time limit by its own clock (a stopped or sleeping
child included), removes the job's cgroups with whatever is left in them, and reports the
exit code the keeper passed on from ``waitpid``.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path

from grader.autograde import cgroups as cgroup_tree
from grader.autograde import confine


class Isolation(StrEnum):
    NAMESPACES = "namespaces"  # the full confinement of ``confine``
    WEAK = "weak"  # own process group, limits, no_new_privs only (the instructor accepted it)
    NONE = "none"  # the learner's own self-check on their own machine: limits only


@dataclass(frozen=True)
class Limits:
    timeout: float = 60.0  # wall-clock seconds for the whole notebook
    # The job's memory: in its cgroup every page counts (all its processes, tmpfs, memfd),
    # and each process's address space on top of what it starts with.
    memory_bytes: int = 3 * 2**30
    # Without a cgroup: each process's address space on top of what it starts with.
    process_memory_bytes: int = 256 * 2**20
    file_bytes: int = 64 * 2**20  # largest file the child may write (the report included)
    processes: int = 16  # tasks (processes and threads) of the job, its keeper included (namespaces)
    files: int = 64  # open descriptors per process (namespaces)
    tmp_bytes: int = 64 * 2**20  # size of its home, /tmp and /dev/shm (each)


@dataclass(frozen=True)
class ChildJob:
    id: str  # opaque: says nothing about the student
    folder: str  # job.json, home/, root/ and, written by the child through its fds, report, log
    limits: Limits = field(default_factory=Limits)
    record: bool = True  # record check arguments for the parent (off for the self-check)
    salt: int = 0  # the per-job secret the checks draw their inputs from (0: the notebook's seeds)

    @classmethod
    def from_json(cls, text: str) -> ChildJob:
        data = json.loads(text)
        data["limits"] = Limits(**data["limits"])
        return cls(**data)


def write_job_cells(folder: Path, cells: list[tuple[int, str, bool]],
                    memory_budgets: dict[int, int] | None = None, warnings_on_stdout: bool = False) -> None:
    """The parent's half of a job: the cells (index, source, is a test cell) for the child,
    for some cells the bytes they may allocate (``execution.execute_cells`` lowers the
    address-space limit to that before the cell runs), and whether warnings are shown on
    stdout (this course's notebooks, where a warning costs no points)."""
    budgets = memory_budgets or {}
    (folder / "home").mkdir(parents=True, exist_ok=True)
    (folder / "root").mkdir(exist_ok=True)
    (folder / "job.json").write_text(json.dumps(
        {"cells": [{"index": i, "source": s, "hidden": h, "memory_bytes": budgets.get(i),
                    "warnings_on_stdout": warnings_on_stdout} for i, s, h in cells]}))


@dataclass(frozen=True)
class ServerConfig:
    isolation: Isolation
    hidden: tuple[str, ...] = ()  # folders no child may see (source, OUT, SUBMITTED, work, grader)
    readonly: tuple[str, ...] = ()  # extra folders a child needs read-only
    cgroups: bool = True  # a cgroup per job where the machine allows it (False: tests only)

    def view(self) -> confine.View:
        return confine.View.for_this_python(self.readonly, self.hidden)


# ------------------------------------------------------------------ the child


def _wire_descriptors(report: int, log: int, keep: int) -> None:
    """0 = /dev/null, 1 and 2 = log, 3 = report; ``keep`` moves to 4; all others closed."""
    import fcntl

    null = os.open(os.devnull, os.O_RDONLY)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (null, log, log, report, keep)]
    for target, fd in enumerate(high):  # out of the way first, so no dup2 clobbers a source
        os.dup2(fd, target, inheritable=True)
    os.closerange(5, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


# RLIMIT_NPROC as root counts every process of uid 65534 on the machine, all jobs together:
# with a cgroup (pids.max holds each job) only a backstop, without one the only bound.
SHARED_UID_TASKS = {True: 1024, False: 64}


def _limits(limits: Limits, isolation: Isolation, counted: bool, as_root: bool) -> dict[int, int]:
    """The job's rlimits; ``counted``: a cgroup counts the job's memory and tasks."""
    memory = limits.memory_bytes if counted or isolation is not Isolation.NAMESPACES \
        else limits.process_memory_bytes
    values = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: int(limits.timeout) + 5,
        resource.RLIMIT_FSIZE: limits.file_bytes,
        resource.RLIMIT_AS: _current_address_space() + memory,
    }
    if isolation is Isolation.NAMESPACES:  # per job in its own user namespace, else per uid
        values[resource.RLIMIT_NPROC] = SHARED_UID_TASKS[counted] if as_root else limits.processes
        values[resource.RLIMIT_NOFILE] = limits.files
    return values


def _current_address_space() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _learner_environment(home: str) -> dict[str, str]:
    """The child's whole environment: nothing of the grader's (no URLs, no tokens)."""
    return {
        "HOME": home, "IPYTHONDIR": os.path.join(home, ".ipython"), "TMPDIR": "/tmp",
        "PATH": os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
        "NBGRADER_EXECUTION": "autograde", "MPLCONFIGDIR": "/tmp",
    }


def _job_main(job: ChildJob, cells: list, isolation: Isolation, view: confine.View | None,
              counted: bool = False) -> None:
    """Runs as the job's PID 1 (or its only process without namespaces). Never returns.

    ``counted``: the job is in cgroups of its own; without them the per-process limits are
    lowered and the calls that hold memory outside every limit are refused.
    """
    status = 71
    try:
        folder = Path(job.folder)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too-large writes fail, not kill
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        as_root = os.getuid() == 0
        if isolation is Isolation.NAMESPACES:
            confine.build_root(str(folder / "root"), view, str(folder / "home"), job.limits.tmp_bytes)
            home = confine.HOME
            if as_root:  # the job's files become the job identity's own
                for base, dirs, files in os.walk(home):
                    for name in (base, *(os.path.join(base, n) for n in dirs + files)):
                        os.lchown(name, confine.NOBODY, confine.NOBODY)
        else:  # HOME is the private job folder: no IPython profile lands beside a notebook
            home = str(folder / "home") if (folder / "home").is_dir() else os.getcwd()
        confine.set_limits(_limits(job.limits, isolation, counted, as_root))
        if isolation is Isolation.NAMESPACES:
            confine.drop_privileges(as_root)
            if not counted:
                confine.refuse_uncounted_memory()
            # changing identity cleared the parent-death signal: ask again (the keeper also
            # kills this process when it dies of the server's death)
            confine.die_with_parent(signal.SIGKILL)
        elif isolation is Isolation.WEAK:
            confine._prctl(confine.PR_SET_NO_NEW_PRIVS, 1)
        os.chdir(home)
        os.environ.clear()
        os.environ.update(_learner_environment(home if isolation is Isolation.NAMESPACES else str(folder)))
        from grader.autograde.execution import CellJob, execute_cells

        status = 70
        execute_cells([CellJob(c["index"], c["source"], c["hidden"], c.get("memory_bytes"),
                               bool(c.get("warnings_on_stdout"))) for c in cells], 3, job.record, job.salt)
        status = 0
    except BaseException:  # noqa: BLE001 - report the sandbox's own failure in the log
        traceback.print_exc()
    finally:
        os._exit(status)  # no interpreter teardown: the learner may have left threads behind


def _first_child(job: ChildJob, isolation: Isolation, view: confine.View | None,
                 report: int, log: int, pid_pipe: int, server: int, cgroup_procs: tuple[str, ...]) -> None:
    """The forked child: read the cells, wire descriptors, then keep the job (namespaces) or
    run it (without them)."""
    status = 72
    try:
        cells = json.loads((Path(job.folder) / "job.json").read_text())["cells"]
        _wire_descriptors(report, log, pid_pipe)
        # A session of its own: kill(0, ...) in the job must not reach the grader's process
        # group (as an ordinary user the job keeps the grader's uid, so that would be allowed).
        os.setsid()
        if isolation is Isolation.NAMESPACES:
            _keeper(job, cells, view, server, cgroup_procs)
        # without namespaces this process runs the cells, and dies with the server (unless
        # the learner's code undoes that: weak isolation); its group is killed at the end
        if not confine.die_with_parent(signal.SIGKILL, server):
            return
        os.write(4, f"{os.getpid()}\n".encode())
        os.close(4)
        _job_main(job, cells, isolation, None)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(status)


KEEPER_GRACE = 2.0  # seconds past the time limit after which the keeper kills PID 1 itself


def _keeper(job: ChildJob, cells: list, view: confine.View | None, server: int,
            cgroup_procs: tuple[str, ...]) -> None:
    """Join the job's cgroups, enter its namespaces, start its PID 1, and keep it. Never returns.

    This process runs no learner code and stays outside the job's PID namespace, where no
    process of the job can name it. When the server dies (however: a SIGKILL of the whole
    grading process group included) its parent-death signal makes it kill PID 1 and go; at
    the time limit plus KEEPER_GRACE it kills PID 1 itself. Descriptor 4, a pipe only this
    process holds, tells the server PID 1's pid, then the status ``waitpid`` gave for it (the
    server need not wait for this process's own exit, which unmaps a copy of the preloaded
    interpreter); it then ends as PID 1 ended (the same exit code, or the same signal).
    """
    leader = 0

    def server_died(signum: int, frame: object) -> None:
        if leader:
            os.kill(leader, signal.SIGKILL)  # our unreaped child: its pid cannot be reused
        os._exit(75)

    signal.signal(signal.SIGTERM, server_died)
    cgroup_tree.join(cgroup_procs)  # before the namespaces: its cgroup is their cgroup root
    confine.unshare_namespaces(as_root=os.getuid() == 0)
    # after unshare (a new user namespace clears it): then make sure the server is still there
    if not confine.die_with_parent(signal.SIGTERM, server):
        os._exit(75)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until `leader` is known
    pid = os.fork()  # PID 1 of the new namespace
    if pid == 0:
        os.close(4)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.setsid()  # kill(0, ...) by the job reaches its own processes only, never the keeper
        _job_main(job, cells, Isolation.NAMESPACES, view, counted=bool(cgroup_procs))
    leader = pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.write(4, f"{pid}\n".encode())
    pidfd = os.pidfd_open(pid)
    end = time.monotonic() + job.limits.timeout + KEEPER_GRACE
    while not select.select([pidfd], [], [], None if end is None else max(0.0, end - time.monotonic()))[0]:
        os.kill(pid, signal.SIGKILL)
        end = None
    # PID 1 has ended or is dying: once reaped its pid may be reused, so no handler may kill it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _, status = os.waitpid(pid, 0)
    try:
        os.write(4, f"{status}\n".encode())
    except OSError:  # the server has gone
        pass
    _end_as(status)


def _end_as(status: int) -> None:
    """Exit as the process whose ``waitpid`` status this is: its exit code, or its signal."""
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status))
    sig = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(128 + sig)


# ------------------------------------------------------------------ the server


@dataclass
class _Child:
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

    def event(self, status: int) -> dict:
        self.reported = True
        return {"event": "exited", "id": self.id, "code": os.waitstatus_to_exitcode(status),
                "timed_out": self.timed_out or time.monotonic() >= self.deadline}


class _Server:
    """What the loop holds: the configuration, the view, the run's cgroups, the jobs."""

    def __init__(self, config: ServerConfig, view: confine.View | None,
                 cgroups: cgroup_tree.Cgroups | None) -> None:
        self.config, self.view, self.cgroups = config, view, cgroups
        self.children: dict[int, _Child] = {}  # pidfd of Child.pid -> child
        self.pipes: dict[int, _Child] = {}  # Child.status_fd -> child
        self._numbers = iter(range(1, 1 << 62))

    def start(self, job: ChildJob) -> _Child | None:
        """Fork the job; None if it never started (then nothing of it is left)."""
        name, procs = "", ()
        if self.cgroups is not None:
            name = f"job{next(self._numbers)}"
            try:
                procs = self.cgroups.job(name, job.limits.memory_bytes, job.limits.processes)
            except OSError:  # then this job gets the lower limits of a machine without cgroups
                self.cgroups.remove_job(name)
                name, procs = "", ()
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
            _first_child(job, self.config.isolation, self.view, report, log, write_end, server, procs)
        for fd in (write_end, report, log):
            os.close(fd)
        data = b""
        while b"\n" not in data and (chunk := os.read(read_end, 64)):
            data += chunk
        line = data.split(b"\n", 1)[0]
        leader = int(line) if line.isdigit() else 0
        if not leader:
            os.close(read_end)
            os.waitpid(first, 0)
            if name:
                self.cgroups.remove_job(name)
            return None
        child = _Child(job.id, first, leader, -1, started + job.limits.timeout, self.config.isolation, name)
        if child.isolation is Isolation.NAMESPACES:
            child.leader_fd = os.pidfd_open(leader)
            child.status_fd = read_end
            self.pipes[read_end] = child
        else:
            os.close(read_end)
        self.children[os.pidfd_open(first)] = child
        return child

    def status(self, fd: int) -> dict | None:
        """What the keeper says on its pipe: PID 1's end (an ``exited`` event), or nothing."""
        child = self.pipes.pop(fd)
        data = os.read(fd, 64)
        os.close(fd)
        child.status_fd = -1
        line = data.split(b"\n", 1)[0].lstrip(b"-")
        if not data.endswith(b"\n") or not line.isdigit() or child.reported:
            return None  # the keeper died first: its own end is the job's (finish)
        return child.event(int(data.split(b"\n", 1)[0]))

    def finish(self, pidfd: int) -> dict | None:
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

    def take_down(self, child: _Child) -> None:
        """Kill whatever is left of a job whose keeper has ended, and remove its cgroups."""
        if child.leader_fd >= 0:  # the keeper may have been killed before PID 1
            _send_kill(child.leader_fd)
            os.close(child.leader_fd)
            child.leader_fd = -1
        elif child.isolation is not Isolation.NAMESPACES:
            _kill_group(child.pid)  # whatever it left running
        if child.cgroup:
            self.cgroups.remove_job(child.cgroup)

    def kill(self, child: _Child) -> None:
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
        os._exit(0)  # no teardown of torch: nothing is left to clean up


def _probe(server: _Server, work: Path) -> str:
    """Confine a child that runs nothing: "" when it worked, else why not."""
    folder = work / "probe"
    write_job_cells(folder, [])
    child = server.start(ChildJob("probe", str(folder), Limits(timeout=30), record=False))
    if child is None:
        return (folder / "log").read_text(errors="replace")[-2000:] or "the probe did not start"
    pidfd = next(fd for fd, c in server.children.items() if c is child)
    select.select([pidfd], [], [], 60)
    code = server.finish(pidfd)["code"]  # the keeper's own end: its pipe was not read
    if code != 0:
        return (folder / "log").read_text(errors="replace")[-2000:] or f"exit {code}"
    return ""


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _discover_cgroups(config: ServerConfig) -> cgroup_tree.Cgroups | None:
    if config.isolation is not Isolation.NAMESPACES or not config.cgroups:
        return None
    try:
        return cgroup_tree.discover()
    except OSError:
        return None


def serve(config: ServerConfig) -> None:
    """The fork server's loop: jobs on stdin; started / exited events on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import grader.autograde.preload  # noqa: F401  (numpy, torch, IPython, the learner package)

    view = config.view() if config.isolation is Isolation.NAMESPACES else None
    server = _Server(config, view, _discover_cgroups(config))
    if config.isolation is Isolation.NAMESPACES:
        confine.set_subreaper()  # a job's PID 1 whose keeper was killed comes back to us
        import tempfile

        with tempfile.TemporaryDirectory(prefix="attention-probe-") as probe_dir:
            why = _probe(server, Path(probe_dir))
            if why and server.cgroups is not None:  # cgroups that cannot be joined: go without
                server.cgroups.close()
                server.cgroups = None
                why = _probe(server, Path(probe_dir))
        if why:
            _emit({"event": "error", "message": why})
            return
    _emit({"event": "ready", "isolation": str(config.isolation),
           "cgroup": server.cgroups.kind if server.cgroups is not None else "none"})
    try:
        _serve_jobs(server)
    except BrokenPipeError:  # the parent has gone: take the children with us, quietly
        server.shut_down()


def _serve_jobs(server: _Server) -> None:
    """The loop: start jobs read on stdin, kill them at their limits, report their ends."""
    buffer = b""
    stdin = sys.stdin.buffer.fileno()
    children = server.children
    while True:
        now = time.monotonic()
        running = [c for c in children.values() if not c.timed_out and not c.reported]
        wait = min((c.deadline for c in running), default=None)
        ready, _, _ = select.select([stdin, *children, *server.pipes], [], [],
                                    None if wait is None else max(0.0, wait - now))
        now = time.monotonic()
        for child in running:
            if now >= child.deadline:
                child.timed_out = True
                server.kill(child)
        for fd in ready:
            if fd == stdin:
                chunk = os.read(stdin, 1 << 16)
                if not chunk:  # the parent has gone: take the children with us
                    server.shut_down()
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    job = ChildJob.from_json(line.decode())
                    if server.start(job) is None:
                        _emit({"event": "exited", "id": job.id, "code": 72, "timed_out": False})
                        continue
                    _emit({"event": "started", "id": job.id})
            elif fd in server.pipes:
                if event := server.status(fd):
                    _emit(event)
            elif fd in children:
                if event := server.finish(fd):
                    _emit(event)
        server.reap_orphans()
        if server.cgroups is not None and server.cgroups.pending:
            server.cgroups.retry_pending()


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


# ------------------------------------------------------------------ the parent's handle


@dataclass(frozen=True)
class Finished:
    job: ChildJob
    exitcode: int | None  # negative: killed by that signal
    timed_out: bool
    seconds: float


class IsolationUnavailable(RuntimeError):
    """The machine cannot confine grading children (no root, no user namespaces)."""


class Executor:
    """What the pipeline needs from whatever runs its jobs (this ForkServer, or a Dask cluster).

    ``config`` is the ``ServerConfig`` the jobs run under; ``wait_ready()`` blocks until jobs
    can start; ``submit(job)`` starts one; ``wait()`` blocks until at least one job ends and
    returns those that did; ``close()`` stops everything still running.
    """

    config: ServerConfig

    def wait_ready(self) -> None:
        raise NotImplementedError

    def submit(self, job: ChildJob) -> None:
        raise NotImplementedError

    def wait(self) -> list[Finished]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

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


class ForkServer(Executor):
    """The parent's side: start the server, submit jobs, collect finished ones."""

    def __init__(self, config: ServerConfig) -> None:
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
        env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg",
                   HOME=os.environ.get("HOME", "/"), PYTHONDONTWRITEBYTECODE="1")
        self.config = config
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.autograde.sandbox"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/",
        )
        # the configuration goes in on stdin, not argv: a child's /proc/self/cmdline is its own
        self.process.stdin.write((json.dumps(
            {"isolation": str(config.isolation), "hidden": list(config.hidden),
             "readonly": list(config.readonly), "cgroups": config.cgroups}) + "\n").encode())
        self.process.stdin.flush()
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
        self.process.stdin.write((json.dumps(asdict(job)) + "\n").encode())
        self.process.stdin.flush()

    def wait(self) -> list[Finished]:
        """Block until at least one job ends (the server enforces each job's time limit)."""
        finished: list[Finished] = []
        while not finished and self.running:
            # the server kills at the limit; this is only a backstop should the server stall
            backstop = min(t + j.limits.timeout + 30 for j, t in self.running.values())
            event = self._read_event(timeout=max(0.0, backstop - time.monotonic()))
            if event is None:
                raise RuntimeError("the grading fork server stopped answering")
            if event["event"] == "exited" and event["id"] in self.running:
                job, submitted = self.running.pop(event["id"])
                finished.append(Finished(job, event["code"], bool(event["timed_out"]),
                                         time.monotonic() - submitted))
        return finished

    def _read_event(self, timeout: float) -> dict | None:
        fd = self.process.stdout.fileno()
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
        return json.loads(line)

    def close(self) -> None:
        self.running.clear()
        if self.process.poll() is None:
            self.process.stdin.close()  # the server kills every child it still has, then exits
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()



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


if __name__ == "__main__":
    from grader import decline_iri_checker

    decline_iri_checker()
    raw = json.loads(sys.stdin.buffer.readline())  # the first line: the configuration
    serve(ServerConfig(Isolation(raw["isolation"]), tuple(raw.get("hidden", ())),
                       tuple(raw.get("readonly", ())), bool(raw.get("cgroups", True))))


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
