"""The judge pool: trusted processes that compute what verdicts compare with, beside the jobs.

A job's checks draw their inputs from its secret salt, so each submission needs its own
reference answers (and, for a failing check, the classic bugs' outputs). Computed in the
parent's loop, one job after another, they made the parent the bottleneck while the workers
waited. Here they are computed by processes forked from the parent when the run starts
(before any submission is read, and before the parent has imported torch: a child forked
from a process that has computed with torch can hang): the parent asks for a job's references when it
prepares the job, and by the time the child has run they are there. The learner's code never
runs in these processes and they never see the learner's arrays: they receive (exercise,
seed, parameters) and answer with arrays, which the parent compares (``judging``).
"""

from __future__ import annotations

import multiprocessing
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np

from attention_learner.expected import case_key
from attention_learner.recording import CLOSE_CHECK, grading_seed

Case = tuple[str, int, dict[str, Any]]  # (exercise, the salted seed, parameters)
Reference = tuple[tuple[str, str], dict[str, Any], dict[str, np.ndarray]]  # key, inputs, outputs


def _start_worker() -> None:
    import torch

    from grader.exercises import all_exercises

    torch.set_num_threads(1)  # as in every grading child: the cores belong to the jobs
    all_exercises()


def import_exercises() -> threading.Thread:
    """Import the exercises (and torch) in a thread of the parent, started after the pool
    has forked: the parent needs them to judge, and imports them while it waits for the fork
    server and the solution run instead of before its first job."""
    from grader.exercises import all_exercises

    thread = threading.Thread(target=all_exercises, name="import exercises", daemon=True)
    thread.start()
    return thread


def _ready() -> bool:
    return True


def references(cases: list[Case]) -> list[Reference]:
    """In a judge process: each case's inputs and reference outputs."""
    from grader.exercises import all_exercises

    specs, answers = all_exercises(), []
    for exercise, seed, params in cases:
        spec = specs.get(exercise)
        if spec is None:  # the parent's verdict says so (judging.judge_arrays)
            continue
        inputs = spec.make_inputs(np.random.default_rng(seed), **params)
        answers.append(((exercise, case_key(seed, params)), inputs, spec.expected(inputs)))
    return answers


def bug_outputs(case: Case) -> list[tuple[str, dict[str, np.ndarray]]]:
    """In a judge process: the classic bugs' outputs for one case (its inputs drawn again
    from the same seed: the same arrays the parent holds)."""
    from grader.exercises import all_exercises

    exercise, seed, params = case
    spec = all_exercises()[exercise]
    return spec.bug_outputs(spec.make_inputs(np.random.default_rng(seed), **params))


def memory_budgets() -> dict[str, int | None]:
    """In a judge process: each exercise's memory budget (``Exercise.memory_budget``)."""
    from grader.exercises import all_exercises

    return {name: spec.memory_budget for name, spec in all_exercises().items()}


def salted_cases(salt: int, checks: Iterable[Any]) -> list[Case]:
    """The cases a job's checks (``ExpectedCheck``) are judged on, under its ``salt``."""
    return [
        (c.exercise, grading_seed(salt, c.exercise, c.seed, c.params), c.params)
        for c in checks
        if c.exercise != CLOSE_CHECK
    ]


class JudgePool:
    """``processes`` trusted judge processes, forked now; ``close()`` ends them."""

    def __init__(self, processes: int = 1) -> None:
        # forked while this process has not imported torch (the CLI's parent: nothing to copy
        # but imports); a process that may have computed with torch already (a test calling
        # autograde in-process) starts fresh interpreters instead, which a fork of it could hang
        method = "spawn" if "torch" in sys.modules else "fork"
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context(method), initializer=_start_worker
        )
        # a fork-context pool forks all its processes at the first submit, before its own
        # manager thread starts: so now, while the parent is still single-threaded (not
        # waited for: the processes import torch while the parent gets on with its work)
        self._pool.submit(_ready)
        self._budgets: dict[str, int | None] | None = None

    def references(self, cases: list[Case]) -> Future[list[Reference]]:
        """A future of :func:`references` on ``cases``."""
        return self._pool.submit(references, cases)

    def memory_budgets(self) -> dict[str, int | None]:
        """Each exercise's memory budget, from the pool (the parent need not import them)."""
        if self._budgets is None:
            self._budgets = self._pool.submit(memory_budgets).result()
        return self._budgets

    def bug_outputs(self, case: Case) -> list[tuple[str, dict[str, np.ndarray]]]:
        """The classic bugs' outputs for ``case``, computed in the pool (the caller waits)."""
        return self._pool.submit(bug_outputs, case).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)  # none left running after the run
