"""One fresh, limited child process per submission, forked from a preloaded server.

``python -m grader.autograde.sandbox`` is a small fork server: it imports numpy, torch and
IPython once (``preload``), then forks one child per job it reads on stdin, so a child
starts in milliseconds instead of paying the imports again. Each child becomes the leader of
its own process group (``setsid``) so that everything it starts is killed with it, lowers its
own limits (address space, CPU time, file size, no core dumps), runs in a fresh temporary
directory and reports only through files. Jobs and events travel as JSON lines: nothing is
unpickled on either side.
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
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Limits:
    timeout: float = 60.0  # wall-clock seconds for the whole submission
    memory_bytes: int = 3 * 2**30  # address space on top of what the child starts with
    file_bytes: int = 64 * 2**20  # largest file the child may write


@dataclass(frozen=True)
class ChildJob:
    key: str  # the caller's name for this job
    cells: list[tuple[int, str]]  # (index in the notebook, source) of each code cell
    workdir: str  # the learner's code runs here: a fresh temporary directory
    results_file: str  # JSON lines, one per finished cell (outside workdir)
    record_dir: str | None  # check records; None = do not record
    log_file: str  # what the child writes to its file descriptors 1 and 2
    limits: Limits = field(default_factory=Limits)

    @classmethod
    def from_json(cls, text: str) -> ChildJob:
        data = json.loads(text)
        data["limits"] = Limits(**data["limits"])
        data["cells"] = [tuple(c) for c in data["cells"]]
        return cls(**data)


# ------------------------------------------------------------------ the child


def _limit(kind: int, value: int) -> None:
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(kind, (value, hard))


def _current_address_space() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def child_main(job: ChildJob) -> None:
    """Runs in the forked child: confine it, then run the cells. Never returns."""
    status = 70
    try:
        os.setsid()  # a process group of our own: the parent kills the whole group
        log = os.open(job.log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too-large writes fail, not kill
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _limit(resource.RLIMIT_CORE, 0)
        _limit(resource.RLIMIT_CPU, int(job.limits.timeout) + 5)
        _limit(resource.RLIMIT_FSIZE, job.limits.file_bytes)
        _limit(resource.RLIMIT_AS, _current_address_space() + job.limits.memory_bytes)
        os.chdir(job.workdir)
        os.environ["NBGRADER_EXECUTION"] = "autograde"
        os.environ["HOME"] = job.workdir
        from grader.autograde.execution import CellJob, execute_cells

        cells = [CellJob(index, source) for index, source in job.cells]
        record_dir = Path(job.record_dir) if job.record_dir else None
        execute_cells(cells, Path(job.results_file), record_dir)
        status = 0
    finally:
        os._exit(status)  # no interpreter teardown: the learner may have left threads behind


# ------------------------------------------------------------------ the server


def serve() -> None:
    """The fork server's loop: read jobs on stdin, fork, report starts and exits on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import grader.autograde.preload  # noqa: F401  (numpy, torch, IPython, the exercises)

    out = sys.stdout
    children: dict[int, tuple[str, int]] = {}  # pidfd -> (key, pid)
    buffer = b""
    stdin = sys.stdin.buffer.fileno()
    print(json.dumps({"event": "ready"}), file=out, flush=True)
    while True:
        ready, _, _ = select.select([stdin, *children], [], [])
        for fd in ready:
            if fd == stdin:
                chunk = os.read(stdin, 1 << 16)
                if not chunk:  # the parent has gone: take the children with us
                    for _, pid in children.values():
                        _kill_group(pid)
                    sys.stdout.flush()
                    os._exit(0)  # no teardown of torch: nothing is left to clean up
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    job = ChildJob.from_json(line.decode())
                    pid = os.fork()
                    if pid == 0:
                        child_main(job)
                    children[os.pidfd_open(pid)] = (job.key, pid)
                    print(json.dumps({"event": "started", "key": job.key, "pid": pid}),
                          file=out, flush=True)
            else:
                key, pid = children.pop(fd)
                os.close(fd)
                _, status = os.waitpid(pid, 0)
                code = os.waitstatus_to_exitcode(status)
                print(json.dumps({"event": "exited", "key": key, "pid": pid, "code": code}),
                      file=out, flush=True)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# ------------------------------------------------------------------ the parent's handle


@dataclass
class Running:
    job: ChildJob
    submitted: float
    pid: int | None = None


@dataclass(frozen=True)
class Finished:
    job: ChildJob
    exitcode: int | None  # negative: killed by that signal
    timed_out: bool
    seconds: float


class ForkServer:
    """The parent's side: start the server, submit jobs, collect finished ones."""

    def __init__(self) -> None:
        env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", MPLBACKEND="Agg")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "grader.autograde.sandbox"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env,
        )
        self.running: dict[str, Running] = {}
        self._buffer = b""
        self._ready = False  # the server imports torch while the caller gets on with its work

    def _wait_ready(self) -> None:
        if not self._ready:
            event = self._read_event(timeout=300)
            if not event or event.get("event") != "ready":
                raise RuntimeError("the grading fork server did not start")
            self._ready = True

    def submit(self, job: ChildJob) -> None:
        self._wait_ready()
        self.running[job.key] = Running(job, time.monotonic())
        line = json.dumps(asdict(job)) + "\n"
        self.process.stdin.write(line.encode())
        self.process.stdin.flush()

    def wait(self) -> list[Finished]:
        """Block until at least one job ends or passes its timeout."""
        finished: list[Finished] = []
        while not finished and self.running:
            now = time.monotonic()
            deadline = min(r.submitted + r.job.limits.timeout for r in self.running.values())
            event = self._read_event(timeout=max(0.0, deadline - now))
            now = time.monotonic()
            if event and event["event"] == "started" and event["key"] in self.running:
                run = self.running[event["key"]]
                run.pid = event["pid"]
                run.submitted = now  # the clock starts when the child exists
            elif event and event["event"] == "exited" and event["key"] in self.running:
                run = self.running.pop(event["key"])
                _kill_group(event["pid"])  # whatever it left running
                finished.append(Finished(run.job, event["code"], False, now - run.submitted))
            for key, run in list(self.running.items()):
                if run.pid is not None and now >= run.submitted + run.job.limits.timeout:
                    _kill_group(run.pid)
                    del self.running[key]
                    finished.append(Finished(run.job, None, True, now - run.submitted))
        return finished

    def _read_event(self, timeout: float) -> dict | None:
        fd = self.process.stdout.fileno()
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], timeout)
            if not ready:
                return None
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                raise RuntimeError("the grading fork server stopped")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self) -> None:
        for run in self.running.values():
            if run.pid is not None:
                _kill_group(run.pid)
        self.running.clear()
        if self.process.poll() is None:
            self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()

    def __enter__(self) -> ForkServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


if __name__ == "__main__":
    serve()
