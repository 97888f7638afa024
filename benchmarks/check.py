"""The learner's check, measured: ``attention-check`` (the learner package alone) and
``python -m grader check`` against ``nbgrader validate``, on the same notebook, in one run.

All three run the same chapter 3 notebook (the solutions filled in, so that every cell runs
its full work), ``--repeat`` times each, interleaved, as a learner would from a terminal,
start-up included. The notebook's own run time is the sum of its cells' execution times as
the kernel reports them (nbclient's timing metadata); ``attention-check``'s overhead is its
median wall time minus that. Prints each run, the medians, the ratios and the overhead.

    .venv/bin/python benchmarks/check.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
# the sibling module, found through sys.path at run time (mypy knows it as benchmarks.grading_course)
from grading_course import ASSIGNMENT, VENV_BIN, correct, env  # type: ignore[import-not-found]  # noqa: E402

OVERHEAD_LIMIT = 1.5  # seconds over the notebook's own run time, the learner check's budget


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: a test fails
        raise SystemExit(
            f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return seconds, proc.stdout


def cell_seconds(notebook: Path) -> float:
    """The notebook's own run time: its cells' execution times, summed, in a fresh kernel."""
    from attention_learner.notebook_check import executed_notebook

    total = 0.0
    for cell in executed_notebook(notebook).cells:
        timing = cell.metadata.get("execution", {})
        start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
        if start and end:
            total += (datetime.fromisoformat(end) - datetime.fromisoformat(start)).total_seconds()
    return total


def report(times: dict[str, list[float]], own: list[float], repeat: int) -> None:
    medians = {name: statistics.median(ts) for name, ts in times.items()}
    width = max(map(len, times))
    print(f"{'command':<{width}}  {'median s':>8}  runs")
    for name, ts in times.items():
        print(f"{name:<{width}}  {medians[name]:>8.2f}  " + ", ".join(f"{t:.2f}" for t in ts))
    own_median = statistics.median(own)
    print(f"{'(the cells themselves)':<{width}}  {own_median:>8.2f}  " + ", ".join(f"{t:.2f}" for t in own))
    validate = medians["nbgrader validate"]
    for name in ("attention-check", "python -m grader check"):
        print(f"ratio nbgrader validate / {name}: {validate / medians[name]:.2f}x")
    overhead = medians["attention-check"] - own_median
    verdict = "within" if overhead <= OVERHEAD_LIMIT else "OVER"
    print(
        f"attention-check overhead over the notebook's own run: {overhead:.2f} s "
        f"({verdict} the {OVERHEAD_LIMIT} s budget), {repeat} runs each"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="attention-check-bench-"))
    try:
        notebook = tmp / f"{ASSIGNMENT}.ipynb"
        nbformat.write(correct(), notebook)
        commands = {
            "attention-check": [str(VENV_BIN / "attention-check"), notebook.name],
            "python -m grader check": [sys.executable, "-m", "grader", "check", notebook.name],
            "nbgrader validate": [str(VENV_BIN / "nbgrader"), "validate", notebook.name],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        own: list[float] = []
        outputs: dict[str, str] = {}
        for k in range(args.repeat):  # interleaved, so that a load spike hits all of them
            for name, cmd in commands.items():
                seconds, outputs[name] = timed(cmd, tmp)
                times[name].append(seconds)
                print(f"run {k + 1}: {name:<24} {seconds:6.2f} s", flush=True)
            own.append(cell_seconds(notebook))
        print()
        for name, out in outputs.items():
            lines = [line.strip() for line in out.splitlines() if line.strip()]
            verdict = next(
                (
                    line
                    for line in lines
                    if "visible tests pass" in line or line.startswith(("VALIDATION", "Success"))
                ),
                lines[-1] if lines else "",
            )
            print(f"{name} says: {verdict[:100]}")
        print()
        report(times, own, args.repeat)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
