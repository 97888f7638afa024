"""Ctrl-C during a run: it stops the run, even where a library would have swallowed it.

Python turns SIGINT into a KeyboardInterrupt wherever the parent happens to be, which may
be deep inside nbgrader, SQLAlchemy or a finalizer that catches and drops it; the run then
went on to the end as if nothing had happened. Here the handler also remembers the signal,
and the grading loop calls :meth:`Interrupts.check` between steps, so the interrupt is
raised again at the next step of our own code. What was written before it stays written.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType


class Interrupts:
    """``with Interrupts() as interrupts``: SIGINT raises KeyboardInterrupt and is remembered."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: signal._HANDLER = None  # what signal.signal returned (the stubs' alias)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():  # signals reach it only
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:  # fmt: skip
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        """Raise KeyboardInterrupt if SIGINT came at any time since the ``with`` began."""
        if self.seen:
            raise KeyboardInterrupt
