"""Lending a name inside a library module for the length of one call.

The parent runs nbgrader's own preprocessors unchanged (no copy of their code to drift from
upstream). Where one of them builds something expensive on every call, the name it looks up
in its module is lent a cheaper equivalent for that call only, and given back afterwards,
even on error: see ``gradebook.py`` (one open gradebook) and ``sanitize.py`` (a metadata
schema compiled once). The parent calls nbgrader from one thread, so nothing else sees it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def lend(module: Any, name: str, value: Any) -> Iterator[None]:
    """Within the ``with`` block, ``module.<name>`` is ``value``; the original afterwards."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)
