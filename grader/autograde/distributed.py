"""Grading past one machine: the ``Executor`` protocol on a Dask distributed cluster.

The pipeline talks to its executor through four calls (``wait_ready``, ``submit``, ``wait``,
``close``, plus ``run``) and a ``config`` (``executor.Executor``); :class:`DaskExecutor`
answers them with a Dask cluster instead of one local fork server, so the pipeline's logic is
the same on one laptop and on a hundred machines:

- the client (the ``autograde`` command) prepares each job folder as it always does, then
  *packs* it (``job_pack``: ``job.json`` and every file under ``home/``, as bytes, with the
  job's limits and record flag) and submits ``dask_worker.run_packed_job`` with that pack.
  The job travels with the task; workers need no shared disk, only this package installed;
- on a worker, that task runs the job on the worker process's warm fork server
  (``dask_worker``: started once per worker process, by this module's ``--preload`` hooks
  :func:`dask_setup` / :func:`dask_teardown` or on first use) and returns the raw outcome;
- the client alone writes: it puts the report and log into the local job folder and hands a
  :class:`~grader.autograde.executor.Finished` to the pipeline, which judges, scores and
  writes OUT and the gradebook as results arrive;
- a task whose worker dies while running it is retried on another worker; when that worker
  dies too (the scheduler's ``allowed-failures`` is 1), the future fails with
  ``KilledWorker`` and the submission is recorded as ``crashed``.

Workers: ``dask worker tcp://SCHEDULER:8786 --nthreads 1 --preload grader.autograde.distributed``.
``ATTENTION_ACCEPT_WEAK_ISOLATION=1`` in a worker's environment lets its preloaded server run
without namespaces; a task still runs only at the isolation the client asked for.
"""

from __future__ import annotations

import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.autograde import dask_worker
from grader.autograde.dask_worker import run_packed_job, warm_up
from grader.autograde.executor import Executor, Finished, IsolationUnavailable
from grader.autograde.fork_protocol import ChildJob, ServerConfig
from grader.autograde.job_pack import pack_job
from grader.autograde.results import ChildExit

ALLOWED_FAILURES = 1  # a task is retried once after its worker died, then it is KilledWorker

KILLED_WORKER_LOG = (
    "the grading worker died twice while running this notebook (its process was killed or ran "
    "out of memory), so the notebook was not retried again\n"
)


def dask_setup(worker: Any) -> None:
    """``--preload grader.autograde.distributed``: start this worker's fork server now
    (``dask_worker.start_warm_server``: namespaces when the machine allows them, weak
    isolation only with ``ATTENTION_ACCEPT_WEAK_ISOLATION=1``)."""
    dask_worker.start_warm_server(worker)


def dask_teardown(worker: Any) -> None:
    """The worker closes: its fork server and private folder go with it."""
    dask_worker.shut_down()


def cluster_settings() -> dict[str, Any]:
    """Dask settings for a cluster this process starts (a LocalCluster's scheduler runs here).

    A task is retried once after its worker died, then fails with KilledWorker. Every task
    that waits in a dying worker's own queue counts as a suspect too, so an innocent notebook
    queued twice behind a poison one would be recorded as crashed: the command keeps one
    notebook per worker thread in flight (``--workers``' default with ``--scheduler``), and
    saturation 1.0 keeps the scheduler from filling workers' queues when it queues tasks.
    """
    return {
        "distributed.scheduler.allowed-failures": ALLOWED_FAILURES,
        "distributed.scheduler.worker-saturation": 1.0,
    }


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
        # distributed's Client and LocalCluster carry few annotations (their methods are
        # untyped): they are held as Any, and their constructors are the untyped calls below
        self.client: Any
        self._cluster: Any = None
        self._own_client = True
        if isinstance(address, distributed.Client):
            self.client, self._own_client = address, False
        elif isinstance(address, str) and address.startswith("local:"):
            workers = int(address.split(":", 1)[1])
            if workers <= 0:
                raise ValueError(f"local:N needs N > 0, got {address!r}")
            http = (
                {"dashboard": True, "dashboard_address": dashboard}
                if dashboard
                else {"dashboard": False, "dashboard_address": "127.0.0.1:0"}
            )
            with dask.config.set(cluster_settings()):
                self._cluster = distributed.LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    host="127.0.0.1",
                    preload=["grader.autograde.distributed"],
                    scheduler_kwargs=http,
                )
            self.client = distributed.Client(self._cluster)  # type: ignore[no-untyped-call]
        else:
            self.client = distributed.Client(address)  # type: ignore[no-untyped-call]
        self._run = uuid.uuid4().hex[:12]  # keys of two runs on one cluster never collide
        self.running: dict[str, tuple[ChildJob, Any, float]] = {}  # key -> job, future, submitted
        self._ready = False

    def slots(self) -> int:
        """Worker threads in the cluster right now (at least one)."""
        self.client.wait_for_workers(1)
        threads: dict[str, int] = self.client.nthreads()  # worker address -> its threads
        return max(1, sum(threads.values()))

    def wait_ready(self) -> None:
        """Every worker present now starts its warm server at the client's isolation."""
        if self._ready:
            return
        self.client.wait_for_workers(1)
        hidden = list(self.config.hidden)
        futures = [
            self.client.submit(
                warm_up,
                str(self.config.isolation),
                hidden,
                pure=False,
                workers=[address],
                allow_other_workers=False,
                key=f"attention-warm-{self._run}-{n}",
            )
            for n, address in enumerate(self.client.scheduler_info()["workers"])
        ]
        for isolation in self.client.gather(futures):  # raises IsolationUnavailable as is
            if isolation != str(self.config.isolation):
                raise IsolationUnavailable(
                    f"a grading worker runs at isolation {isolation}, not {self.config.isolation}"
                )
        self._ready = True

    def submit(self, job: ChildJob) -> None:
        self.wait_ready()
        key = f"attention-grade-{self._run}-{job.id}"
        try:
            packed = pack_job(job, self.config.hidden, self.config.isolation)
        except (OSError, ValueError) as exc:  # never reaches a worker: a crash of its own
            self.running[key] = (
                job,
                _Failed(f"the job could not be sent to a worker: {exc}\n"),
                time.monotonic(),
            )
            return
        future = self.client.submit(run_packed_job, packed, key=key, pure=False, retries=0)
        self.running[key] = (job, future, time.monotonic())

    def wait(self, timeout: float | None = None) -> list[Finished]:
        """Block until at least one job ends (or for at most ``timeout`` seconds, if given);
        write each one's report and log into its job folder."""
        import distributed

        if not self.running:
            return []
        done = [k for k, (_, f, _) in self.running.items() if isinstance(f, _Failed) or f.done()]
        if not done:
            futures = [f for _, f, _ in self.running.values()]
            try:
                # distributed.wait carries no annotations
                distributed.wait(futures, timeout=timeout, return_when="FIRST_COMPLETED")  # type: ignore[no-untyped-call]
            except TimeoutError:  # distributed's own is the builtin on Python 3.11+
                return []
            done = [k for k, (_, f, _) in self.running.items() if isinstance(f, _Failed) or f.done()]
        return [self._finish(key, *self.running.pop(key)) for key in done]

    def _finish(self, key: str, job: ChildJob, future: Any, submitted: float) -> Finished:
        from distributed import KilledWorker

        folder = Path(job.folder)
        seconds = time.monotonic() - submitted
        if isinstance(future, _Failed):
            return self._write(
                folder, job, b"", future.log.encode(), ChildExit.CHILD_NOT_STARTED, False, seconds
            )
        if future.status == "finished":
            outcome = future.result()
            return self._write(
                folder,
                job,
                outcome["report"],
                outcome["log"],
                outcome["exitcode"],
                bool(outcome["timed_out"]),
                float(outcome["seconds"]),
            )
        if future.status == "cancelled":  # the scheduler lost it (restarted, or closed under us)
            log = "the Dask scheduler cancelled this notebook's task before it ended\n"
            return self._write(folder, job, b"", log.encode(), ChildExit.CHILD_NOT_STARTED, False, seconds)
        error = future.exception()
        if isinstance(error, IsolationUnavailable):
            raise error
        if isinstance(error, KilledWorker):
            return self._write(
                folder, job, b"", KILLED_WORKER_LOG.encode(), -signal.SIGKILL, False, seconds
            )  # as a killed process reads
        log = f"the grading worker failed on this notebook: {type(error).__name__}: {error}\n"
        return self._write(folder, job, b"", log.encode(), ChildExit.CHILD_NOT_STARTED, False, seconds)

    @staticmethod
    def _write(
        folder: Path,
        job: ChildJob,
        report: bytes,
        log: bytes,
        exitcode: int | None,
        timed_out: bool,
        seconds: float,
    ) -> Finished:
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
