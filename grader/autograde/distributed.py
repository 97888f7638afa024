"""Grading past one machine: the fork server's interface, on a Dask distributed cluster.

The pipeline talks to its executor through four calls (``submit``, ``wait``, ``run``,
``close``) and a ``config``; :class:`DaskExecutor` answers them with a Dask cluster instead of
one local fork server, so the pipeline's logic is the same on one laptop and on a hundred
machines:

- the client (the ``autograde`` command) prepares each job folder as it always does, then
  *packs* it (``job.json`` and every file under ``home/``, as bytes, with the job's limits
  and record flag) and submits :func:`run_packed_job` with that pack. The job travels with
  the task; workers need no shared disk, only this package installed;
- on a worker, :func:`run_packed_job` unpacks into a private folder, runs the job on the
  worker process's warm :class:`~grader.autograde.fork_client.ForkServer` (started once per
  worker process, by the ``--preload`` hook or on first use, confined exactly as on one
  machine: no network namespace, so no way to the scheduler), and returns the raw outcome:
  exit code, timed out, seconds, the report's bytes (capped) and the log's tail;
- the client alone writes: it puts the report and log into the local job folder and hands a
  :class:`~grader.autograde.executor.Finished` to the pipeline, which judges, scores and
  writes OUT and the gradebook as results arrive. A task has no side effect outside its
  worker's private folder, so Dask may run it twice (a worker died) without harm;
- a task whose worker dies while running it is retried on another worker; when that worker
  dies too (the scheduler's ``allowed-failures`` is 1), the future fails with
  ``KilledWorker`` and the submission is recorded as ``crashed``.

Workers: ``dask worker tcp://SCHEDULER:8786 --nthreads 1 --preload grader.autograde.distributed``.
``ATTENTION_ACCEPT_WEAK_ISOLATION=1`` in a worker's environment lets its preloaded server run
without namespaces; a task still runs only at the isolation the client asked for.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from grader.autograde.child_report import MAX_REPORT_BYTES
from grader.autograde.executor import Executor, Finished, IsolationUnavailable
from grader.autograde.fork_client import ForkServer, choose_isolation, grading_config
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, ServerConfig

MAX_PACKED_BYTES = 256 * 2**20  # job.json and the files beside a notebook, per job
LOG_TAIL_BYTES = 64 * 2**10  # the pipeline reads the last few hundred characters of a log
ALLOWED_FAILURES = 1  # a task is retried once after its worker died, then it is KilledWorker
WEAK_VARIABLE = "ATTENTION_ACCEPT_WEAK_ISOLATION"

KILLED_WORKER_LOG = (
    "the grading worker died twice while running this notebook (its process was killed or ran "
    "out of memory), so the notebook was not retried again\n"
)


# ------------------------------------------------------------------ the pack (client -> worker)


def pack_job(job: ChildJob, hidden: tuple[str, ...], isolation: Isolation) -> dict[str, Any]:
    """Everything a worker needs to run ``job``, as plain data: no path of the client's disk.

    ``hidden`` are the client's secret folders (SUBMITTED, OUT, the source, ...): on a
    LocalCluster they are on the worker's disk too, so the worker's server hides them as well.
    Raises ValueError when the job's files are over ``MAX_PACKED_BYTES``.
    """
    folder = Path(job.folder)
    files: dict[str, bytes] = {}
    total = 0
    home = folder / "home"
    for base, dirs, names in os.walk(home):  # the parent copied them without symlinks
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(base, d)))
        for name in sorted(names):
            path = Path(base) / name
            if path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            total += len(data)
            if total > MAX_PACKED_BYTES:
                raise ValueError(f"the files beside the notebook are over {MAX_PACKED_BYTES // 2**20} MB")
            files[path.relative_to(home).as_posix()] = data
    return {"id": job.id, "job_json": (folder / "job.json").read_bytes(), "files": files,
            "limits": asdict(job.limits), "record": job.record, "salt": job.salt,
            "isolation": str(isolation),
            "hidden": list(hidden)}


def _safe_relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(p in ("..", ".", "") for p in path.parts):
        raise ValueError(f"refusing a packed file name {name!r}")
    return path


def unpack_job(packed: dict[str, Any], folder: Path) -> ChildJob:
    """The worker's half: a job folder like the client's (``job.json``, ``home/``, ``root/``)."""
    (folder / "home").mkdir(parents=True)
    (folder / "root").mkdir()
    (folder / "job.json").write_bytes(packed["job_json"])
    for name, data in packed["files"].items():
        target = folder / "home" / _safe_relative(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return ChildJob(str(packed["id"]), str(folder), Limits(**packed["limits"]), bool(packed["record"]),
                    int(packed.get("salt", 0)))


# ------------------------------------------------------------------ the worker's warm server


@dataclass
class _WorkerState:
    """One per worker process: its private folder and its fork server (or none yet)."""

    root: Path | None = None
    server: ForkServer | None = None


_STATE = _WorkerState()
_LOCK = threading.Lock()  # one submit + wait conversation with the server at a time


def _worker_root(worker: Any = None) -> Path:
    if _STATE.root is None:
        base = getattr(worker, "local_directory", None) if worker is not None else None
        if base is None:
            try:
                from distributed import get_worker

                base = get_worker().local_directory
            except (ImportError, ValueError):
                base = None
        _STATE.root = Path(tempfile.mkdtemp(prefix="attention-worker-", dir=base)).resolve()
        _STATE.root.chmod(0o700)
        atexit.register(_shutdown)
    return _STATE.root


def _worker_config(isolation: Isolation, hidden: tuple[str, ...]) -> ServerConfig:
    return grading_config(isolation, [_worker_root(), *(Path(h) for h in hidden)])


def _covers(config: ServerConfig, hidden: list[str]) -> bool:
    """Whether a server with ``config`` already keeps every folder of ``hidden`` from a child.

    A folder is safe when the child's filesystem does not reach it (it lies in no read-only
    folder of the view) or when the server covers it already.
    """
    view = config.view()
    for path in hidden:
        real = os.path.realpath(path)
        shown = any(real == r or real.startswith(r.rstrip("/") + "/") for r in view.readonly)
        covered = any(real == h or real.startswith(h.rstrip("/") + "/") for h in view.hidden)
        if shown and not covered:
            return False
    return True


def _server_for(isolation: Isolation, hidden: list[str]) -> ForkServer:
    """The worker's warm server, (re)started when it runs at another isolation or would show
    a folder the client wants hidden. Call with ``_LOCK`` held."""
    server = _STATE.server
    if server is not None and server.process.poll() is None and server.config.isolation is isolation \
            and _covers(server.config, hidden):
        return server
    if server is not None:
        server.close()
        _STATE.server = None
    if isolation is Isolation.NAMESPACES and choose_isolation(accept_weak=True) is not Isolation.NAMESPACES:
        raise IsolationUnavailable("this grading worker cannot confine children in namespaces "
                                   "(not root, and user namespaces are disabled)")
    known = tuple(server.config.hidden) if server is not None else ()
    _STATE.server = ForkServer(_worker_config(isolation, (*known, *hidden)))
    return _STATE.server


def _shutdown() -> None:
    with _LOCK:
        if _STATE.server is not None:
            _STATE.server.close()
            _STATE.server = None
        if _STATE.root is not None:
            shutil.rmtree(_STATE.root, ignore_errors=True)
            _STATE.root = None


def dask_setup(worker: Any) -> None:
    """``--preload grader.autograde.distributed``: start this worker's fork server now.

    It imports torch in its own process while the worker registers, so the first task finds
    it warm. Namespaces when the machine allows them; weak isolation only with
    ``ATTENTION_ACCEPT_WEAK_ISOLATION=1`` (otherwise the server starts on first use).
    """
    accept_weak = os.environ.get(WEAK_VARIABLE) == "1"
    try:
        isolation = choose_isolation(accept_weak)
    except IsolationUnavailable:
        return  # a task says what it needs; it will fail with a clear message then
    with _LOCK:
        _worker_root(worker)
        if _STATE.server is None:
            _STATE.server = ForkServer(_worker_config(isolation, ()))


def dask_teardown(worker: Any) -> None:
    _shutdown()


def warm_up(isolation: str, hidden: list[str]) -> str:
    """A task that starts (or checks) this worker's server; returns its isolation."""
    with _LOCK:
        server = _server_for(Isolation(isolation), hidden)
        server.wait_ready()
        return str(server.config.isolation)


def run_packed_job(packed: dict[str, Any]) -> dict[str, Any]:
    """Run one packed notebook job on this worker's warm fork server; return its raw outcome.

    Returns ``{"exitcode", "timed_out", "seconds", "report", "log", "worker"}``: the report's
    bytes (at most ``MAX_REPORT_BYTES`` + 1, so that the client still sees it is too large)
    and the last ``LOG_TAIL_BYTES`` of the log. Nothing of the job stays on the worker.
    """
    with _LOCK:
        root = _worker_root()
        folder = root / f"{packed['id']}-{uuid.uuid4().hex[:8]}"
        try:
            job = unpack_job(packed, folder)
            server = _server_for(Isolation(packed["isolation"]), list(packed["hidden"]))
            try:
                finished = server.run(job)
            except RuntimeError:  # the server died under us: the next task starts a fresh one
                server.close()
                _STATE.server = None
                raise
            report = _read_head(folder / "report", MAX_REPORT_BYTES + 1)
            log = _read_tail(folder / "log", LOG_TAIL_BYTES)
            return {"exitcode": finished.exitcode, "timed_out": finished.timed_out,
                    "seconds": finished.seconds, "report": report, "log": log,
                    "worker": _worker_address()}
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _read_head(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read(limit)
    except OSError:
        return b""


def _read_tail(path: Path, limit: int) -> bytes:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - limit))
            return handle.read()
    except OSError:
        return b""


def _worker_address() -> str:
    try:
        from distributed import get_worker

        return str(get_worker().address)
    except (ImportError, ValueError):
        return ""


# ------------------------------------------------------------------ the client's executor


def cluster_settings() -> dict[str, Any]:
    """Dask settings for a cluster this process starts (a LocalCluster's scheduler runs here).

    A task is retried once after its worker died, then fails with KilledWorker. Every task
    that waits in a dying worker's own queue counts as a suspect too, so an innocent notebook
    queued twice behind a poison one would be recorded as crashed: the command keeps one
    notebook per worker thread in flight (``--workers``' default with ``--scheduler``), and
    saturation 1.0 keeps the scheduler from filling workers' queues when it queues tasks.
    """
    return {"distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
            "distributed.scheduler.worker-saturation": 1.0}


class DaskExecutor(Executor):
    """The ForkServer interface on a Dask cluster: ``submit``, ``wait``, ``run``, ``close``.

    ``address``: ``tcp://host:8786`` / ``tls://...`` (an existing scheduler), ``local:N``
    (a LocalCluster of N worker processes with one thread each, started here and closed by
    :meth:`close`), or a ``distributed.Client`` the caller owns. ``config`` is the client's
    server configuration: its isolation is what every worker must provide, and its hidden
    folders are hidden on every worker too.

    A ``local:N`` cluster starts no dashboard unless ``dashboard`` names an address for one
    (``"127.0.0.1:8787"``): its scheduler's HTTP server (health and metrics only) listens on
    a free loopback port, so a second run never meets "Port 8787 is already in use".
    """

    def __init__(self, address: Any, config: ServerConfig, dashboard: str | None = None) -> None:
        import dask
        import distributed

        self.config = config
        self._cluster = None
        self._own_client = True
        if isinstance(address, distributed.Client):
            self.client, self._own_client = address, False
        elif isinstance(address, str) and address.startswith("local:"):
            workers = int(address.split(":", 1)[1])
            if workers <= 0:
                raise ValueError(f"local:N needs N > 0, got {address!r}")
            http = {"dashboard": True, "dashboard_address": dashboard} if dashboard else {
                "dashboard": False, "dashboard_address": "127.0.0.1:0"}
            with dask.config.set(cluster_settings()):
                self._cluster = distributed.LocalCluster(
                    n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None,
                    host="127.0.0.1", preload=["grader.autograde.distributed"], scheduler_kwargs=http)
            self.client = distributed.Client(self._cluster)
        else:
            self.client = distributed.Client(address)
        self._run = uuid.uuid4().hex[:12]  # keys of two runs on one cluster never collide
        self.running: dict[str, tuple[ChildJob, Any, float]] = {}  # key -> job, future, submitted
        self._ready = False

    def slots(self) -> int:
        """Worker threads in the cluster right now (at least one)."""
        self.client.wait_for_workers(1)
        return max(1, sum(self.client.nthreads().values()))

    def wait_ready(self) -> None:
        """Every worker present now starts its warm server at the client's isolation."""
        if self._ready:
            return
        self.client.wait_for_workers(1)
        hidden = list(self.config.hidden)
        futures = [self.client.submit(warm_up, str(self.config.isolation), hidden, pure=False,
                                      workers=[address], allow_other_workers=False,
                                      key=f"attention-warm-{self._run}-{n}")
                   for n, address in enumerate(self.client.scheduler_info()["workers"])]
        for isolation in self.client.gather(futures):  # raises IsolationUnavailable as is
            if isolation != str(self.config.isolation):
                raise IsolationUnavailable(f"a grading worker runs at isolation {isolation}, "
                                           f"not {self.config.isolation}")
        self._ready = True

    def submit(self, job: ChildJob) -> None:
        self.wait_ready()
        key = f"attention-grade-{self._run}-{job.id}"
        try:
            packed = pack_job(job, self.config.hidden, self.config.isolation)
        except (OSError, ValueError) as exc:  # never reaches a worker: a crash of its own
            self.running[key] = (job, _Failed(f"the job could not be sent to a worker: {exc}\n"),
                                 time.monotonic())
            return
        future = self.client.submit(run_packed_job, packed, key=key, pure=False, retries=0)
        self.running[key] = (job, future, time.monotonic())

    def wait(self) -> list[Finished]:
        """Block until at least one job ends; write its report and log into the job folder."""
        import distributed

        if not self.running:
            return []
        done = [k for k, (_, f, _) in self.running.items() if isinstance(f, _Failed) or f.done()]
        if not done:
            futures = [f for _, f, _ in self.running.values()]
            distributed.wait(futures, return_when="FIRST_COMPLETED")
            done = [k for k, (_, f, _) in self.running.items() if isinstance(f, _Failed) or f.done()]
        return [self._finish(key, *self.running.pop(key)) for key in done]

    def _finish(self, key: str, job: ChildJob, future: Any, submitted: float) -> Finished:
        from distributed import KilledWorker

        folder = Path(job.folder)
        seconds = time.monotonic() - submitted
        if isinstance(future, _Failed):
            return self._write(folder, job, b"", future.log.encode(), 72, False, seconds)
        if future.status == "finished":
            outcome = future.result()
            return self._write(folder, job, outcome["report"], outcome["log"], outcome["exitcode"],
                               bool(outcome["timed_out"]), float(outcome["seconds"]))
        if future.status == "cancelled":  # the scheduler lost it (restarted, or closed under us)
            log = "the Dask scheduler cancelled this notebook's task before it ended\n"
            return self._write(folder, job, b"", log.encode(), 72, False, seconds)
        error = future.exception()
        if isinstance(error, IsolationUnavailable):
            raise error
        if isinstance(error, KilledWorker):
            return self._write(folder, job, b"", KILLED_WORKER_LOG.encode(), -9, False, seconds)
        log = f"the grading worker failed on this notebook: {type(error).__name__}: {error}\n"
        return self._write(folder, job, b"", log.encode(), 72, False, seconds)

    @staticmethod
    def _write(folder: Path, job: ChildJob, report: bytes, log: bytes, exitcode: int | None,
               timed_out: bool, seconds: float) -> Finished:
        """The one writer: the client puts what the worker returned where the pipeline reads it."""
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "report").write_bytes(report)
        (folder / "log").write_bytes(log)
        return Finished(job, exitcode, timed_out, seconds)

    def close(self) -> None:
        """Cancel what is still queued; close the client, and the LocalCluster if it is ours."""
        futures = [f for _, f, _ in self.running.values() if not isinstance(f, _Failed)]
        self.running.clear()
        try:
            if futures:
                self.client.cancel(futures)
        except (OSError, RuntimeError):  # the scheduler is gone already: nothing left to cancel
            pass
        finally:
            if self._own_client:
                self.client.close()
            if self._cluster is not None:
                self._cluster.close()
                self._cluster = None



@dataclass(frozen=True)
class _Failed:
    """A job that never reached a worker (its files were too large to send)."""

    log: str

