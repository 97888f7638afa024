"""A test-only Dask worker plugin: a notebook that carries POISON kills its grading worker.

A confined grading child cannot kill its worker (that is the point of the sandbox), so the
test simulates what a poison submission does to a worker from outside the sandbox: when a
worker process receives a packed job whose cells hold ``POISON``, it SIGKILLs itself before
running it, every time (on the first worker and on the one the task is retried on). The
plugin wraps ``grader.autograde.dask_worker.run_packed_job`` in the worker process only;
the scheduler hands it to every worker, including those the nanny restarts.

Kept out of the test module so that a worker unpickling it imports nothing heavy.
"""

from __future__ import annotations

import os
import signal
from typing import Any

from distributed import WorkerPlugin

POISON = "POISON: this notebook's task kills its grading worker"


class PoisonPlugin(WorkerPlugin):
    name = "attention-test-poison"

    def setup(self, worker: Any) -> None:
        from grader.autograde import dask_worker as module

        original = getattr(module.run_packed_job, "__wrapped__", module.run_packed_job)

        def run_packed_job(packed: dict[str, Any]) -> dict[str, Any]:
            if POISON.encode() in packed["job_json"]:
                os.kill(os.getpid(), signal.SIGKILL)
            return original(packed)

        run_packed_job.__wrapped__ = original
        module.run_packed_job = run_packed_job
