"""The registry of cases: exercise name -> :class:`~attention_learner.spec.Case`.

Each chapter module (``ch03`` for 03_scaled_dot_product, ...) lists its cases in ``CASES``:
input builders, call adapters, descriptions and hints, and nothing that knows the answer.
They are loaded on first use.
"""

from __future__ import annotations

import importlib
from functools import cache

from attention_learner.spec import Case

CHAPTER_MODULES = ("ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07")


@cache
def all_cases() -> dict[str, Case]:
    """Every case of every chapter whose module exists, by name."""
    found: dict[str, Case] = {}
    for module_name in CHAPTER_MODULES:
        try:
            module = importlib.import_module(f"attention_learner.cases.{module_name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"attention_learner.cases.{module_name}":
                raise
            continue
        for case in module.CASES:
            found[case.name] = case
    return found


def get_case(name: str) -> Case:
    """The case called ``name``, or a KeyError that lists the known ones."""
    cases = all_cases()
    if name not in cases:
        raise KeyError(f"unknown exercise {name!r}; known: {', '.join(sorted(cases))}")
    return cases[name]
