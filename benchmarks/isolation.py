"""What confinement costs per job: the same tiny job, confined and not, in one run.

Starts two fork servers (``Isolation.NAMESPACES``, what grading uses, and
``Isolation.NONE``, limits only, what ``python -m grader check --unconfined`` uses), runs N jobs of one
small cell on each, one at a time, and prints the median wall time per job and the
difference: the price of the namespaces, the minimal root and the dropped privileges.

    .venv/bin/python benchmarks/isolation.py [--n 30]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from grader.autograde.fork_client import ForkServer, choose_isolation
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, ServerConfig, write_job_cells

CELL = "import numpy as np\nx = np.ones(3).sum()\nprint(x)\n"


def per_job_seconds(isolation: Isolation, n: int, work: Path) -> list[float]:
    times = []
    with ForkServer(ServerConfig(isolation, hidden=(str(work),))) as server:
        server.wait_ready()
        for k in range(n):
            folder = work / f"{isolation}-{k}"
            write_job_cells(folder, [(0, CELL, False)])
            start = time.perf_counter()
            finished = server.run(ChildJob(f"j{k}", str(folder), Limits(timeout=30)))
            times.append(time.perf_counter() - start)
            if finished.exitcode != 0:
                raise SystemExit(f"{isolation} job failed: {(folder / 'log').read_text()}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=30)
    args = parser.parse_args()
    confined = choose_isolation(accept_weak=False)
    with tempfile.TemporaryDirectory(prefix="attention-isolation-") as tmp:
        work = Path(tmp)
        plain = statistics.median(per_job_seconds(Isolation.NONE, args.n, work))
        boxed = statistics.median(per_job_seconds(confined, args.n, work))
    print(f"jobs per mode: {args.n} (one cell, numpy), median wall time per job")
    print(f"  limits only (Isolation.NONE):   {plain * 1000:7.1f} ms")
    print(f"  confined ({confined}):          {boxed * 1000:7.1f} ms")
    print(f"  cost of confinement per job:    {(boxed - plain) * 1000:7.1f} ms")


if __name__ == "__main__":
    main()
