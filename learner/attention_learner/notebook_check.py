"""A learner's check of a whole notebook, with nothing but this package: ``attention-check
NOTEBOOK`` (or ``python -m attention_learner check NOTEBOOK``).

It runs every code cell of the notebook in a fresh Jupyter kernel (nbclient and ipykernel, in
the notebook's own folder, as "Restart and Run All" would) and prints, for each visible test
cell, PASS or FAIL with its points and the message of its check. Pass and fail follow the
grader's rules (:mod:`attention_learner.cell_rules`); the checks judge against the expected
values shipped with this package. Grading adds hidden tests, so a pass here is necessary, not
sufficient.
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from attention_learner.cell_rules import TestResult, TestStatus, cell_outcome, cell_points, is_test_cell
from attention_learner.startup import decline_iri_checker

if TYPE_CHECKING:  # nbformat is imported where a notebook is read, not at start-up
    from nbformat import NotebookNode


def executed_notebook(path: Path, timeout: float = 120.0) -> NotebookNode:
    """``path`` run top to bottom in a fresh kernel (errors kept in the outputs, not raised)."""
    import nbformat
    from nbclient import NotebookClient

    nb: NotebookNode = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]  # nbformat: unannotated
    client = NotebookClient(
        nb,
        timeout=timeout,
        allow_errors=True,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.resolve().parent)}},
        # the kernel's log would warn on the terminal that its loopback ports are unencrypted
        extra_arguments=["--IPKernelApp.log_level=ERROR"],
        shutdown_kernel="immediate",  # its outputs are in: no need to wait for a clean exit
    )
    with warnings.catch_warnings():
        # jupyter_client warns once per kernel that its loopback TCP ports are unencrypted
        warnings.filterwarnings("ignore", message=".*without encryption.*")
        client.execute()
    return nb


def outcomes_of(nb: NotebookNode, notebook: str = "") -> list[TestResult]:
    """One outcome per test cell of an executed notebook (named ``notebook``), in order."""
    outcomes = []
    for cell in nb.cells:
        if not is_test_cell(cell):
            continue
        meta = cell.metadata["nbgrader"]
        max_points = cell_points(cell)
        if cell.get("execution_count") is None:
            outcomes.append(
                TestResult(
                    notebook,
                    meta["grade_id"],
                    0.0,
                    max_points,
                    TestStatus.NOT_RUN,
                    "did not run: the notebook stopped before it",
                )
            )
            continue
        status, message = cell_outcome(cell.outputs)
        points = max_points if status is TestStatus.PASSED else 0.0
        outcomes.append(TestResult(notebook, meta["grade_id"], points, max_points, status, message))
    return outcomes


def format_report(path: Path, outcomes: list[TestResult]) -> str:
    """The outcomes as a learner reads them: one PASS/FAIL line per test, messages indented."""
    lines = [f"Checking {path.name} (visible tests only; grading adds hidden ones)", ""]
    for o in outcomes:
        mark = "PASS" if o.passed else "FAIL"
        lines.append(f"  {mark}  {o.grade_id}  ({o.points:g}/{o.max_points:g})")
        lines += [f"        {m}" for m in o.message.splitlines()]
    score = sum(o.points for o in outcomes)
    total = sum(o.max_points for o in outcomes)
    passed = sum(o.passed for o in outcomes)
    lines += ["", f"{passed} of {len(outcomes)} visible tests pass: {score:g} of {total:g} points"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line; exit status 0 when every visible test passes, 1 when one fails, 2 on
    bad usage."""
    parser = argparse.ArgumentParser(
        prog="attention-check",
        description="Run an exercise notebook of 'Attention, built by hand' and explain its visible tests.",
    )
    parser.add_argument(
        "command", nargs="?", choices=["check"], default="check", help=argparse.SUPPRESS
    )  # `python -m attention_learner check NB`
    parser.add_argument("notebook", type=Path, help="the .ipynb file to check")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per cell (default 120)")
    args = parser.parse_args(argv)
    decline_iri_checker()
    if not args.notebook.is_file():
        parser.error(f"no such notebook: {args.notebook}")
    started = time.perf_counter()
    try:
        nb = executed_notebook(args.notebook, args.timeout)
    except Exception as exc:  # not a notebook, no kernel, a cell past its timeout
        print(f"Could not run {args.notebook.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    outcomes = outcomes_of(nb, args.notebook.stem)
    print(format_report(args.notebook, outcomes))
    print(f"(ran in {time.perf_counter() - started:.1f} s)")
    return 0 if all(o.passed for o in outcomes) else 1
