"""A Dask worker's side of grading: its warm fork server, and the tasks that use it.

One per worker process: a private folder and a :class:`~grader.autograde.fork_client.ForkServer`,
started by the ``--preload`` hook (``distributed.dask_setup`` calls :func:`start_warm_server`)
or on first use, confined exactly as on one machine: no network namespace, so no way to the
scheduler. :func:`run_packed_job` unpacks a job into that folder, runs it and returns the raw
outcome: exit code, timed out, seconds, the report's bytes (capped) and the log's tail.
Nothing of a job stays on the worker, so Dask may run a task twice (a worker died) without
harm. :func:`warm_up` starts (or checks) the server at the isolation the client asked for.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.autograde.child_report import MAX_REPORT_BYTES
from grader.autograde.executor import IsolationUnavailable
from grader.autograde.fork_client import ForkServer, choose_isolation, grading_config
from grader.autograde.fork_protocol import Isolation, ServerConfig
from grader.autograde.job_pack import unpack_job

LOG_TAIL_BYTES = 64 * 2**10  # the pipeline reads the last few hundred characters of a log
WEAK_VARIABLE = "ATTENTION_ACCEPT_WEAK_ISOLATION"


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
        atexit.register(shut_down)
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
    if (
        server is not None
        and server.process.poll() is None
        and server.config.isolation is isolation
        and _covers(server.config, hidden)
    ):
        return server
    if server is not None:
        server.close()
        _STATE.server = None
    if isolation is Isolation.NAMESPACES and choose_isolation(accept_weak=True) is not Isolation.NAMESPACES:
        raise IsolationUnavailable(
            "this grading worker cannot confine children in namespaces "
            "(not root, and user namespaces are disabled)"
        )
    known = tuple(server.config.hidden) if server is not None else ()
    _STATE.server = ForkServer(_worker_config(isolation, (*known, *hidden)))
    return _STATE.server


def shut_down() -> None:
    """Close this worker's server and remove its private folder."""
    with _LOCK:
        if _STATE.server is not None:
            _STATE.server.close()
            _STATE.server = None
        if _STATE.root is not None:
            shutil.rmtree(_STATE.root, ignore_errors=True)
            _STATE.root = None


def start_warm_server(worker: Any) -> None:
    """Start this worker's fork server now (the ``--preload`` hook's work).

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
            return {
                "exitcode": finished.exitcode,
                "timed_out": finished.timed_out,
                "seconds": finished.seconds,
                "report": report,
                "log": log,
                "worker": _worker_address(),
            }
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
