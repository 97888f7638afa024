"""The registry of exercises: contract name -> :class:`~grader.exercises.spec.Exercise`.

Each chapter module (``ch03`` for 03_scaled_dot_product, ...) lists its exercises in
``EXERCISES``: the learner package's cases of that chapter (``attention_learner.cases.chNN``)
with the reference and the classic bugs added. They are loaded on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from attention_learner.cases import get_case
from grader.exercises.spec import Exercise, Inputs

CHAPTER_MODULES = ("ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07")


def exercise(
    name: str,
    reference: Callable[[Inputs], dict[str, Any]],
    bugs: Mapping[str, Callable[[Inputs], dict[str, Any]]] | None = None,
) -> Exercise:
    """The learner package's case ``name`` with its reference and classic bugs."""
    return Exercise(get_case(name), reference, dict(bugs or {}))


@cache
def all_exercises() -> dict[str, Exercise]:
    """Every exercise of every chapter whose module exists, by name."""
    found: dict[str, Exercise] = {}
    for module_name in CHAPTER_MODULES:
        try:
            module = importlib.import_module(f"grader.exercises.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"grader.exercises.{module_name}":
                raise
            continue
        for spec in module.EXERCISES:
            found[spec.name] = spec
    return found


def get_exercise(name: str) -> Exercise:
    exercises = all_exercises()
    if name not in exercises:
        raise KeyError(f"unknown exercise {name!r}; known: {', '.join(sorted(exercises))}")
    return exercises[name]
