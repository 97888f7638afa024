"""The registry of exercises: contract name -> :class:`~grader.exercises.spec.Exercise`.

Each chapter module (``ch03`` for 03_scaled_dot_product, ...) lists its exercises in
``EXERCISES``: the learner package's cases of that chapter (``attention_learner.cases.chNN``)
with the reference and the classic bugs added (:func:`grader.exercises.spec.exercise`). The
chapter list and the loading loop are the learner registry's
(:mod:`attention_learner.registry`). A chapter module imports shared modules and its own
learner counterpart only, never another chapter.
"""

from __future__ import annotations

from functools import cache

from attention_learner.registry import CHAPTER_MODULES, load_chapters, lookup
from grader.exercises.spec import Exercise

__all__ = ["CHAPTER_MODULES", "all_exercises", "get_exercise"]


@cache
def all_exercises() -> dict[str, Exercise]:
    """Every exercise of every chapter whose module exists, by name."""
    return load_chapters("grader.exercises", "EXERCISES")


def get_exercise(name: str) -> Exercise:
    """The exercise called ``name``, or a KeyError that lists the known ones."""
    return lookup(all_exercises(), name)
