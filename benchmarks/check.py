"""The learner's self-check: ``python -m grader check`` vs ``nbgrader validate``.

Both run the same half-done chapter 3 notebook (exercise 1 solved, the others still stubs),
three times each, as a learner would from a terminal, start-up included. Prints each time,
the medians and their ratio.

    .venv/bin/python benchmarks/check.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grading import ASSIGNMENT, VENV_BIN, env, half_done  # noqa: E402


def timed(cmd: list[str], cwd: Path) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode not in (0, 1):  # 1: some tests fail, as they should here
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return seconds, proc.stdout


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="attention-check-bench-"))
    try:
        notebook = tmp / f"{ASSIGNMENT}.ipynb"
        nbformat.write(half_done(), notebook)
        commands = {
            "python -m grader check": [sys.executable, "-m", "grader", "check", notebook.name],
            "nbgrader validate": [str(VENV_BIN / "nbgrader"), "validate", notebook.name],
        }
        times: dict[str, list[float]] = {name: [] for name in commands}
        outputs: dict[str, str] = {}
        for k in range(args.repeat):  # interleaved, so that a load spike hits both
            for name, cmd in commands.items():
                seconds, outputs[name] = timed(cmd, tmp)
                times[name].append(seconds)
                print(f"run {k + 1}: {name:<24} {seconds:6.2f} s", flush=True)
        print()
        for name, out in outputs.items():
            lines = [line.strip() for line in out.splitlines() if line.strip()]
            verdict = next((line for line in lines if line.startswith(("VALIDATION", "Success"))),
                           lines[-1] if lines else "(nothing)")
            print(f"{name} says: {verdict[:100]}")
        print()
        medians = {name: statistics.median(ts) for name, ts in times.items()}
        width = max(map(len, commands))
        print(f"{'command':<{width}}  {'median s':>8}  runs")
        for name, ts in times.items():
            print(f"{name:<{width}}  {medians[name]:>8.2f}  "
                  + ", ".join(f"{t:.2f}" for t in ts))
        ratio = medians["nbgrader validate"] / medians["python -m grader check"]
        print(f"\nratio (nbgrader validate / grader check): {ratio:.2f}x "
              f"on a half-done notebook, {args.repeat} runs each")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
