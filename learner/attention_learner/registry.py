"""The course's chapter list and the one loop that loads a registry from chapter modules.

Both registries, the learner's cases (``attention_learner.cases``) and the grader's exercises
(``grader.exercises``), are one module per chapter (``ch03`` for 03_scaled_dot_product, ...)
holding a list of named items. They are loaded here, so that adding a chapter means adding its
name to :data:`CHAPTER_MODULES` once. The grader depends on this package, never the reverse.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

CHAPTER_MODULES = ("ch01", "ch02", "ch03", "ch04", "ch05", "ch06", "ch07", "ch08", "ch09")


def load_chapters(
    package: str, attribute: str, chapters: tuple[str, ...] = CHAPTER_MODULES
) -> dict[str, Any]:
    """Every item of ``package.<chapter>.<attribute>`` for each chapter module that exists,
    by its ``name``, in chapter order.

    A chapter module that does not exist (yet) is skipped; an import error raised inside an
    existing module (a missing dependency, a typo) is not.
    """
    found: dict[str, Any] = {}
    for chapter in chapters:
        module_name = f"{package}.{chapter}"
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            continue
        for item in getattr(module, attribute):
            found[item.name] = item
    return found


def lookup(registry: Mapping[str, Any], name: str) -> Any:
    """``registry[name]``, or a KeyError that lists the known names."""
    if name not in registry:
        raise KeyError(f"unknown exercise {name!r}; known: {', '.join(sorted(registry))}")
    return registry[name]
