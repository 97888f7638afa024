"""The grader's side of the checks: judging a learner's raw outputs against the reference.

The learner package composes every message (:func:`attention_learner.checks.explain`); here
the expected values and the classic bugs' outputs come from the instructor's reference.

- :func:`judge` ``(exercise, params, inputs, got) -> str`` is what the autograder's parent
  calls on the arrays a submission sent back: "" when they pass, else the message.
- :func:`judge_case` is the same by exercise name; the learner package's ``check`` uses it
  for cases it ships no expected values for (hidden tests) when this package is installed
  (entry point ``attention_learner.judges``, its only registration).
- :func:`check` is ``check`` judged by the reference always, whatever data is shipped: the
  instructor's own tests use it. Both run the learner package's one ``run_check``.
"""

from __future__ import annotations

from typing import Any

from attention_learner.checks import check_close, run_check
from attention_learner.spec import Arrays, Inputs
from grader.exercises import get_exercise
from grader.exercises.spec import Exercise

__all__ = ["check", "check_close", "judge", "judge_case"]


def judge(spec: Exercise, params: dict[str, Any], inputs: Inputs, got: Arrays) -> str:
    """Compare ``got`` with the reference; return "" if it passes, else the explanation."""
    return spec.judge(params, inputs, got)


def judge_case(exercise: str, params: dict[str, Any], inputs: Inputs, got: Arrays) -> str:
    """:func:`judge` for the exercise called ``exercise``."""
    return judge(get_exercise(exercise), params, inputs, got)


def check(exercise: str, learner: Any, *, seed: int = 0, **params: Any) -> None:
    """Like the learner package's ``check``, but always judged here by the reference."""
    spec = get_exercise(exercise)
    run_check(spec.case, learner, seed, params, lambda inputs, got: judge(spec, params, inputs, got))
