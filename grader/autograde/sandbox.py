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

The server, not the child, tells the parent how each child ended: it holds a pidfd of every
job's PID 1 (a subreaper adopts it), kills it at the time limit by its own clock (a stopped
or sleeping child included), and reports exit codes it read from ``waitpid``.
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

from grader.autograde import confine


class Isolation(StrEnum):
    NAMESPACES = "namespaces"  # the full confinement of ``confine``
    WEAK = "weak"  # own process group, limits, no_new_privs only (the instructor accepted it)
    NONE = "none"  # the learner's own self-check on their own machine: limits only


@dataclass(frozen=True)
class Limits:
    timeout: float = 60.0  # wall-clock seconds for the whole notebook
    memory_bytes: int = 3 * 2**30  # address space on top of what the child starts with
    file_bytes: int = 64 * 2**20  # largest file the child may write (the report included)
    processes: int = 64  # processes and threads of the job's identity (namespaces only)
    tmp_bytes: int = 64 * 2**20  # size of its /tmp and /dev/shm


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


def _limits(limits: Limits, isolation: Isolation) -> dict[int, int]:
    values = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: int(limits.timeout) + 5,
        resource.RLIMIT_FSIZE: limits.file_bytes,
        resource.RLIMIT_AS: _current_address_space() + limits.memory_bytes,
    }
    if isolation is Isolation.NAMESPACES:  # counted per user namespace or for uid 65534 only
        values[resource.RLIMIT_NPROC] = limits.processes
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


def _job_main(job: ChildJob, cells: list, isolation: Isolation, view: confine.View | None) -> None:
    """Runs as the job's PID 1 (or its only process without namespaces). Never returns."""
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
        confine.set_limits(_limits(job.limits, isolation))
        if isolation is Isolation.NAMESPACES:
            confine.drop_privileges(as_root)
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
                 report: int, log: int, pid_pipe: int) -> None:
    """The forked child: read the cells, wire descriptors, enter namespaces, start PID 1."""
    status = 72
    try:
        cells = json.loads((Path(job.folder) / "job.json").read_text())["cells"]
        _wire_descriptors(report, log, pid_pipe)
        # A session of its own: kill(0, ...) in the job must not reach the grader's process
        # group (as an ordinary user the job keeps the grader's uid, so that would be allowed).
        os.setsid()
        if isolation is Isolation.NAMESPACES:
            confine.unshare_namespaces(as_root=os.getuid() == 0)
            pid = os.fork()  # PID 1 of the new namespace
            if pid == 0:
                os.close(4)
                _job_main(job, cells, isolation, view)
            os.write(4, str(pid).encode())
            status = 0
        else:  # the session's process group is killed as a whole at the end
            os.write(4, str(os.getpid()).encode())
            os.close(4)
            _job_main(job, cells, isolation, None)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(status)


# ------------------------------------------------------------------ the server


@dataclass
class _Child:
    id: str
    pid: int
    deadline: float
    isolation: Isolation
    timed_out: bool = False


def _start(job: ChildJob, config: ServerConfig, view: confine.View | None) -> int:
    """Fork the job's child; return the pid of its PID 1 (0 if it never started)."""
    folder = Path(job.folder)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC
    report = os.open(folder / "report", flags, 0o600)
    log = os.open(folder / "log", flags, 0o600)
    read_end, write_end = os.pipe()
    first = os.fork()
    if first == 0:
        os.close(read_end)
        _first_child(job, config.isolation, view, report, log, write_end)
    for fd in (write_end, report, log):
        os.close(fd)
    data = b""
    while chunk := os.read(read_end, 64):
        data += chunk
    os.close(read_end)
    if config.isolation is Isolation.NAMESPACES:
        os.waitpid(first, 0)  # it has handed PID 1 over to us (the subreaper) and left
    return int(data) if data.isdigit() else 0


def _probe(config: ServerConfig, view: confine.View | None, work: Path) -> str:
    """Confine a child that runs nothing: "" when it worked, else why not."""
    folder = work / "probe"
    write_job_cells(folder, [])
    pid = _start(ChildJob("probe", str(folder), Limits(timeout=30), record=False), config, view)
    if not pid:
        return (folder / "log").read_text(errors="replace")[-2000:]
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return (folder / "log").read_text(errors="replace")[-2000:] or f"exit {status}"
    return ""


def _emit(event: dict) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def serve(config: ServerConfig) -> None:
    """The fork server's loop: jobs on stdin; started / exited events on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import grader.autograde.preload  # noqa: F401  (numpy, torch, IPython, the learner package)

    view = config.view() if config.isolation is Isolation.NAMESPACES else None
    if config.isolation is Isolation.NAMESPACES:
        confine.set_subreaper()
        import tempfile

        with tempfile.TemporaryDirectory(prefix="attention-probe-") as probe_dir:
            why = _probe(config, view, Path(probe_dir))
        if why:
            _emit({"event": "error", "message": why})
            return
    _emit({"event": "ready", "isolation": str(config.isolation)})
    children: dict[int, _Child] = {}  # pidfd -> child
    try:
        _serve_jobs(config, view, children)
    except BrokenPipeError:  # the parent has gone: take the children with us, quietly
        for pidfd, child in children.items():
            _kill(pidfd, child)
        os._exit(0)


def _serve_jobs(config: ServerConfig, view: confine.View | None, children: dict[int, _Child]) -> None:
    """The loop: start jobs read on stdin, kill them at their limits, report their ends."""
    buffer = b""
    stdin = sys.stdin.buffer.fileno()
    while True:
        now = time.monotonic()
        wait = min((c.deadline for c in children.values() if not c.timed_out), default=None)
        ready, _, _ = select.select([stdin, *children], [], [],
                                    None if wait is None else max(0.0, wait - now))
        now = time.monotonic()
        for pidfd, child in children.items():
            if not child.timed_out and now >= child.deadline:
                child.timed_out = True
                _kill(pidfd, child)
        for fd in ready:
            if fd == stdin:
                chunk = os.read(stdin, 1 << 16)
                if not chunk:  # the parent has gone: take the children with us
                    for pidfd, child in children.items():
                        _kill(pidfd, child)
                    os._exit(0)  # no teardown of torch: nothing is left to clean up
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    job = ChildJob.from_json(line.decode())
                    started = time.monotonic()
                    pid = _start(job, config, view)
                    if not pid:
                        _emit({"event": "exited", "id": job.id, "code": 72, "timed_out": False})
                        continue
                    pidfd = os.pidfd_open(pid)
                    children[pidfd] = _Child(job.id, pid, started + job.limits.timeout, config.isolation)
                    _emit({"event": "started", "id": job.id})
            else:
                child = children.pop(fd)
                _, status = os.waitpid(child.pid, 0)
                if child.isolation is not Isolation.NAMESPACES:
                    _kill_group(child.pid)  # whatever it left running
                os.close(fd)
                _emit({"event": "exited", "id": child.id, "code": os.waitstatus_to_exitcode(status),
                       "timed_out": child.timed_out})


def _kill(pidfd: int, child: _Child) -> None:
    """SIGKILL through the pidfd (no pid reuse race); PID 1 takes its namespace with it."""
    try:
        signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if child.isolation is not Isolation.NAMESPACES:
        _kill_group(child.pid)


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
             "readonly": list(config.readonly)}) + "\n").encode())
        self.process.stdin.flush()
        self.running: dict[str, tuple[ChildJob, float]] = {}
        self._buffer = b""
        self._ready = False  # the server imports torch while the caller gets on with its work

    def wait_ready(self) -> None:
        if self._ready:
            return
        event = self._read_event(timeout=300)
        if event and event.get("event") == "error":
            raise IsolationUnavailable(event.get("message", ""))
        if not event or event.get("event") != "ready":
            raise RuntimeError("the grading fork server did not start")
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
                       tuple(raw.get("readonly", ()))))


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
