"""What one submission may cost the similarity report, and what it says when it costs more.

A submission is read under three guards, so that no one of them can stop or stall the report
for the class: its size (characters of a cell, cells added, characters compared), its depth
(a nesting the parser or the reader cannot follow is a :class:`NotCompared`, not a
``RecursionError`` that ends the run) and its time (a :class:`Budget` of seconds, checked as
the code is read). Whatever hits a guard is listed in the report with the reason, and every
other submission is compared as usual. The reading itself is linear in the code's size
(``normalise`` and ``ordering``), so the time guard is a backstop an honest notebook never
comes near: chapter 3's notebook reads in about 10 ms.
"""

from __future__ import annotations

import time

# a solution cell is a few dozen lines; one a hundred times longer is not compared
MAX_CELL_CHARACTERS = 200_000
# the cells a learner added: the first ones are read, the rest listed as not read
MAX_ADDED_CELLS = 500
# every cell read for one exercise of one submission, together
MAX_ENTRY_CHARACTERS = 1_000_000
# one submitted notebook, every exercise of it
SECONDS_PER_NOTEBOOK = 20.0
_CHECK_EVERY = 4096  # steps between two looks at the clock


class NotCompared(Exception):
    """Why one submitted cell cannot be compared (the report lists it)."""


class OverTime(NotCompared):
    """The submission used up its :class:`Budget`."""


class Budget:
    """Seconds one submitted notebook may take to read, and the steps counted so far.

    :meth:`step` is called for each node read and each access ordered; every
    ``_CHECK_EVERY`` steps it looks at the clock and raises :class:`OverTime` past the deadline.
    """

    def __init__(self, seconds: float | None = None) -> None:
        self.seconds = SECONDS_PER_NOTEBOOK if seconds is None else seconds
        self.deadline = time.monotonic() + self.seconds
        self.steps = 0
        self._next_check = _CHECK_EVERY

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps >= self._next_check:
            self._next_check = self.steps + _CHECK_EVERY
            self.check()

    def check(self) -> None:
        if time.monotonic() > self.deadline:
            raise OverTime(
                f"reading it took over {self.seconds:g} s (the report's limit for one notebook); not compared"
            )
