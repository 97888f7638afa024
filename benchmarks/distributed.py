"""Grading on one machine and on a Dask LocalCluster of 1 and 2 workers, in one run.

Builds N distinct chapter 3 submissions (``benchmarks/grading_course.py``'s six variants) in a
temporary folder, then grades them three times with the same command, start-up included:

1. ``python -m grader autograde ... --workers 2`` (one machine: the local fork server);
2. ``... --scheduler local:1`` (a LocalCluster of one worker process, one thread);
3. ``... --scheduler local:2`` (two worker processes).

For each run it prints the wall time, the steady-state throughput (submissions per second
between the first and the last ``results.json`` written, so start-up is left out), and the
CPU seconds the command's own process spent per submission (the parent: preparing,
judging, writing; with ``local:N`` the in-process scheduler too), and checks that every run
gave every submission the same status and score. Then it times ``--jobs`` tiny jobs run one
at a time on a bare ForkServer and on a DaskExecutor (``local:1``): the difference is the
distributed path's overhead per job (packing, two network hops, unpacking, the bytes back).

    .venv/bin/python benchmarks/distributed.py [--n 200] [--jobs 30] [--keep]
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Python put this script's folder first on sys.path, where this file would shadow Dask's
# own ``distributed``: take it off, and load the sibling grading_course.py by its path instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("attention_bench_course", _HERE / "grading_course.py")
if _spec is None or _spec.loader is None:
    raise ImportError(f"cannot load {_HERE / 'grading_course.py'}")
_course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_course)
ASSIGNMENT, env, make_course = _course.ASSIGNMENT, _course.env, _course.make_course

# The command's own CPU time (RUSAGE_SELF: not the fork server's, not the workers').
WRAPPER = (
    "import resource, sys\n"
    "from grader.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "usage = resource.getrusage(resource.RUSAGE_SELF)\n"
    "print('PARENT_CPU', usage.ru_utime + usage.ru_stime, file=sys.stderr)\n"
    "sys.exit(code)\n"
)
TINY_CELL = "import numpy as np\nx = float(np.ones(3).sum())\nprint(x)\n"


def grade(root: Path, out: Path, extra: list[str]) -> dict[str, float]:
    """One whole autograde command; its wall time, parent CPU and steady-state throughput."""
    command = [
        sys.executable,
        "-c",
        WRAPPER,
        "autograde",
        str(root / "submitted"),
        "--out",
        str(out),
        "--source",
        str(root / "source"),
        "--quiet",
        *extra,
    ]
    start = time.time()
    proc = subprocess.run(command, cwd=root, env=env(), capture_output=True, text=True)
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(command)}\n{proc.stderr[-3000:]}")
    cpu = float(next(line.split()[1] for line in proc.stderr.splitlines() if line.startswith("PARENT_CPU")))
    stamps = sorted(p.stat().st_mtime for p in out.glob("*/*/results.json"))
    steady = (len(stamps) - 1) / (stamps[-1] - stamps[0]) if len(stamps) > 1 else float("nan")
    return {"wall": wall, "cpu": cpu, "throughput": steady, "first": stamps[0] - start, "n": len(stamps)}


def outcomes(out: Path) -> dict[str, tuple[str, float]]:
    """student -> (status, score) of each graded submission, read through ``from_json``."""
    from grader.autograde.reports import read_results

    return {r.student_id: (str(r.status), r.score) for r in read_results(out) if r.assignment == ASSIGNMENT}


def per_job_overhead(jobs: int, work: Path) -> tuple[float, float]:
    """Median seconds per tiny job, one at a time: bare ForkServer, then DaskExecutor(local:1)."""
    from grader.autograde.distributed import DaskExecutor
    from grader.autograde.fork_client import ForkServer, choose_isolation, grading_config
    from grader.autograde.fork_protocol import ChildJob, Limits
    from grader.autograde.fork_protocol import write_job_cells as write

    config = grading_config(choose_isolation(accept_weak=False), [work])
    medians = []
    for name, make in (
        ("fork server", lambda: ForkServer(config)),
        ("dask local:1", lambda: DaskExecutor("local:1", config)),
    ):
        times = []
        with make() as executor:
            executor.wait_ready()
            for k in range(jobs + 2):  # the first two warm the path up and are not counted
                folder = work / f"{name.split()[0]}-{k}"
                write(folder, [(0, TINY_CELL, False)])
                start = time.perf_counter()
                finished = executor.run(ChildJob(f"j{k}", str(folder), Limits(timeout=30)))
                if finished.exitcode != 0:
                    raise SystemExit(f"{name}: a tiny job failed: {(folder / 'log').read_text()[-800:]}")
                if k >= 2:
                    times.append(time.perf_counter() - start)
        medians.append(statistics.median(times))
    return medians[0], medians[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=200, help="submissions (default 200)")
    parser.add_argument("--jobs", type=int, default=30, help="tiny jobs for the overhead (default 30)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="attention-dask-bench-"))
    try:
        make_course(root, args.n)
        fork, dask = per_job_overhead(args.jobs, root / "tiny")
        print(
            f"  tiny jobs: fork server {1000 * fork:.1f} ms, Dask {1000 * dask:.1f} ms",
            file=sys.stderr,
            flush=True,
        )
        runs = {
            "one machine, --workers 2": ["--workers", "2"],
            "Dask local:1 (1 worker)": ["--scheduler", "local:1"],
            "Dask local:2 (2 workers)": ["--scheduler", "local:2"],
        }
        measured, scores = {}, {}
        for k, (label, extra) in enumerate(runs.items()):
            out = root / f"out{k}"
            measured[label] = grade(root, out, extra)
            scores[label] = outcomes(out)
            print(f"  {label}: done in {measured[label]['wall']:.1f} s", file=sys.stderr, flush=True)
        reference = scores["one machine, --workers 2"]
        differ = [label for label, s in scores.items() if s != reference]
        print(f"\n{args.n} chapter 3 submissions, same files, one run each (start-up included):\n")
        print(
            "| run | wall s | submissions/s (whole) | submissions/s (steady) | first result s "
            "| parent CPU ms/submission |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        for label, m in measured.items():
            print(
                f"| {label} | {m['wall']:.1f} | {args.n / m['wall']:.2f} | {m['throughput']:.2f} "
                f"| {m['first']:.1f} | {1000 * m['cpu'] / args.n:.0f} |"
            )
        one, two = (measured[label]["throughput"] for label in list(runs)[1:])
        base = measured["one machine, --workers 2"]["throughput"]
        print(
            f"\nsteady-state: 2 Dask workers / 1 = {two / one:.2f}x; "
            f"Dask local:2 vs one machine = {two / base:.2f}x "
            f"({1000 * (1 / two - 1 / base) * 2:+.0f} ms per submission per worker)"
        )
        print(
            f"tiny job, one at a time (median of {args.jobs}): fork server {1000 * fork:.1f} ms, "
            f"Dask local:1 {1000 * dask:.1f} ms: overhead {1000 * (dask - fork):.1f} ms per job"
        )
        if differ:
            print(f"\nSCORES DIFFER from the one-machine run in: {', '.join(differ)}")
            return 1
        print("\nevery run gave every submission the same status and score")
        return 0
    finally:
        if args.keep:
            print(f"kept {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
