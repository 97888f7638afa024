"""The registry of cases: exercise name -> :class:`~attention_learner.spec.Case`.

Each chapter module (``ch03`` for 03_scaled_dot_product, ...) lists its cases in ``CASES``:
input builders, call adapters, descriptions and hints, and nothing that knows the answer.
They are loaded on first use by :func:`attention_learner.registry.load_chapters`. A chapter
module imports shared modules only (``attention_learner.conventions``, ``.torch_cases``,
``.attention_hints``, ``.inputs``, ``.spec``), never another chapter.
"""

from __future__ import annotations

from functools import cache

from attention_learner.registry import CHAPTER_MODULES, load_chapters, lookup
from attention_learner.spec import Case

__all__ = ["CHAPTER_MODULES", "all_cases", "get_case"]


@cache
def all_cases() -> dict[str, Case]:
    """Every case of every chapter whose module exists, by name."""
    return load_chapters("attention_learner.cases", "CASES")


def get_case(name: str) -> Case:
    """The case called ``name``, or a KeyError that lists the known ones."""
    case: Case = lookup(all_cases(), name)
    return case
