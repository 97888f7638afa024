"""Where checks send raw outputs when the grader runs a submission.

In a learner's Jupyter kernel and under plain nbgrader nothing is recorded and the checks
decide on the spot. Under ``python -m grader autograde`` the child process that runs the
submission turns recording on; each check then only builds its inputs, calls the learner's
code and appends the raw arrays here, without judging (the child has nothing to judge with):
the parent process, which the learner's code cannot reach, decides from them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class CheckRecord:
    """One ``check`` call: which case (exercise, seed, params) and what the learner returned."""

    exercise: str
    seed: int
    params: dict[str, Any]
    outputs: dict[str, np.ndarray] | None  # None when the learner's code raised
    error: str = ""
    reached: tuple[str, ...] = ()  # what the call reached that the exercise forbids (op_trace)


@dataclass
class Recorder:
    """The records of a run, by the index of the cell that made them, and the run's salt."""

    current_cell: int = -1
    records: dict[int, list[CheckRecord]] = field(default_factory=dict)
    salt: int = 0

    def add(self, record: CheckRecord) -> None:
        self.records.setdefault(self.current_cell, []).append(record)


#: the "exercise" of a record that ``check_close`` makes (a hand-worked example, no case)
CLOSE_CHECK = "check_close"

__all__ = [
    "CLOSE_CHECK",
    "CheckRecord",
    "Recorder",
    "drawn_seed",
    "grading_seed",
    "is_recording",
    "record",
    "start_recording",
    "stop_recording",
]

_recorder: Recorder | None = None


def start_recording(salt: int = 0) -> Recorder:
    """Turn recording on for this process (the grading child does, before any learner code).

    ``salt`` is the job's secret, chosen by the grader's parent for each submission: every
    check then draws its inputs from :func:`grading_seed`, not from the seed written in the
    notebook, so a submission cannot have prepared answers for them (the shipped expected
    values of the visible cases are worth nothing there). 0 keeps the notebook's seeds.
    """
    global _recorder
    _recorder = Recorder(salt=int(salt))
    return _recorder


def stop_recording() -> None:
    """Turn recording off again: checks decide on the spot, as in a learner's kernel (a grading
    child never does; tests that record in their own process do)."""
    global _recorder
    _recorder = None


def grading_seed(salt: int, exercise: str, seed: int, params: dict[str, Any]) -> int:
    """The seed one case is drawn from under the grader: a hash of the job's salt and the
    case (exercise, notebook seed, params), so the same params give fresh inputs per job."""
    if not salt:
        return int(seed)
    from attention_learner.expected import canonical  # the case's params as its key has them

    case = json.dumps([exercise, int(seed), canonical(params)], sort_keys=True, default=str)
    digest = hashlib.blake2b(f"{int(salt)}:{case}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1  # a non-negative 63-bit seed


def drawn_seed(exercise: str, seed: int, params: dict[str, Any]) -> int:
    """The seed a check in this process draws its inputs from: the notebook's own seed in a
    learner's kernel, :func:`grading_seed` under the grader."""
    return grading_seed(_recorder.salt, exercise, seed, params) if _recorder is not None else int(seed)


def record(record: CheckRecord) -> bool:
    """Keep ``record`` if recording is on; True when it was kept (the grader will judge it)."""
    if _recorder is not None:
        _recorder.add(record)
        return True
    return False


def is_recording() -> bool:
    """Whether the grader runs this process (its checks record; the parent judges them)."""
    return _recorder is not None
