"""Where checks send raw outputs when the grader runs a submission.

In a learner's Jupyter kernel and under plain nbgrader nothing is recorded and the checks
decide on the spot. Under ``python -m grader autograde`` the child process that runs the
submission turns recording on; each check then only builds its inputs, calls the learner's
code and appends the raw arrays here, without judging (the child has nothing to judge with):
the parent process, which the learner's code cannot reach, decides from them.
"""

from __future__ import annotations

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


@dataclass
class Recorder:
    """The records of a run, by the index of the cell that made them."""

    current_cell: int = -1
    records: dict[int, list[CheckRecord]] = field(default_factory=dict)

    def add(self, record: CheckRecord) -> None:
        self.records.setdefault(self.current_cell, []).append(record)


__all__ = ["CheckRecord", "Recorder", "is_recording", "record", "start_recording"]

_recorder: Recorder | None = None


def start_recording() -> Recorder:
    """Turn recording on for this process (the grading child does, before any learner code)."""
    global _recorder
    _recorder = Recorder()
    return _recorder


def record(record: CheckRecord) -> bool:
    """Keep ``record`` if recording is on; True when it was kept (the grader will judge it)."""
    if _recorder is not None:
        _recorder.add(record)
        return True
    return False


def is_recording() -> bool:
    """Whether the grader runs this process (its checks record; the parent judges them)."""
    return _recorder is not None
