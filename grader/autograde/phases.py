"""Where a run's wall time goes: named phases, summed by cheap timers, written on request.

``GRADER_PHASES=<file>`` in the environment turns the timers on; at the end of the command
the totals are written there as JSON (``benchmarks/grading.py`` reads them). Without it
:func:`phase` is a context manager that does nothing, and :func:`add` returns at once, so
the grader pays one dictionary lookup per call.

A phase's seconds are summed over every time it ran; phases of the parent's own loop
(``parent.*``, ``write.*``) never overlap each other, so their sum is the parent's busy
time, and the rest of the wall is the parent waiting for its workers. ``job.seconds`` is
summed over jobs that run side by side, so it can exceed the wall.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "GRADER_PHASES"


def _process_started() -> float:
    """The ``perf_counter`` reading at this process's start (from /proc: clock ticks since boot)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return time.perf_counter() - max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return time.perf_counter()


STARTED = _process_started()  # so that start-up's imports count

_totals: dict[str, float] = {}
_counts: dict[str, int] = {}


def enabled() -> bool:
    return bool(os.environ.get(ENV))


def add(name: str, seconds: float, count: int = 1) -> None:
    """Add ``seconds`` (and ``count`` events) to the phase ``name``; nothing when off."""
    if not enabled():
        return
    _totals[name] = _totals.get(name, 0.0) + seconds
    _counts[name] = _counts.get(name, 0) + count


def count(name: str, events: int = 1) -> None:
    """Count events without time (reference computations, bug outputs)."""
    add(name, 0.0, events)


def mark(name: str) -> None:
    """Record the seconds since the interpreter started, as ``name`` (once)."""
    if enabled() and name not in _totals:
        add(name, time.perf_counter() - STARTED)


def start() -> float:
    """A start for :func:`stop` (0.0 when off: no clock is read)."""
    return time.perf_counter() if enabled() else 0.0


def stop(name: str, started: float) -> None:
    """Add the seconds since ``started`` (from :func:`start`) to ``name``."""
    if started:
        add(name, time.perf_counter() - started)


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Time the ``with`` block as part of ``name``."""
    if not enabled():
        yield
        return
    start = time.perf_counter()
    try:
        yield
    finally:
        add(name, time.perf_counter() - start)


def snapshot() -> dict[str, dict[str, float]]:
    """name -> {"seconds": total, "count": events}, plus ``wall``: seconds since start."""
    return {
        "wall": {"seconds": time.perf_counter() - STARTED, "count": 1},
        **{name: {"seconds": _totals[name], "count": _counts[name]} for name in sorted(_totals)},
    }


def write() -> None:
    """Write the totals to the file ``GRADER_PHASES`` names (nothing when off)."""
    target = os.environ.get(ENV)
    if not target:
        return
    Path(target).write_text(json.dumps(snapshot(), indent=1) + "\n", encoding="utf-8")
