"""The registry of exercises: contract name -> :class:`~grader.exercises.spec.Exercise`.

Each chapter module (``ch03`` for 03_scaled_dot_product, ...) lists its exercises in
``EXERCISES``; they are loaded on first use.
"""

from __future__ import annotations

import importlib
from functools import cache

from grader.exercises.spec import Exercise

CHAPTER_MODULES = ("ch01", "ch02", "ch03", "ch04", "ch05")


@cache
def all_exercises() -> dict[str, Exercise]:
    found: dict[str, Exercise] = {}
    for module_name in CHAPTER_MODULES:
        try:
            module = importlib.import_module(f"grader.exercises.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"grader.exercises.{module_name}":
                raise
            continue
        for exercise in module.EXERCISES:
            found[exercise.name] = exercise
    return found


def get_exercise(name: str) -> Exercise:
    exercises = all_exercises()
    if name not in exercises:
        raise KeyError(f"unknown exercise {name!r}; known: {', '.join(sorted(exercises))}")
    return exercises[name]
