"""Ctrl-C in the grading parent (grader/autograde/interrupts.py): never lost to a library."""

from __future__ import annotations

import os
import signal

import pytest

from grader.autograde.interrupts import Interrupts


def swallowing_library_call() -> None:
    """A library that catches everything, as some finalizers and cleanup paths do."""
    try:
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):  # the handler runs at the next bytecode boundary
            pass
    except BaseException:  # noqa: BLE001 - the point of the test
        pass


def test_a_swallowed_interrupt_is_raised_again_at_the_next_check():
    before = signal.getsignal(signal.SIGINT)
    with Interrupts() as interrupts:
        interrupts.check()  # nothing yet
        swallowing_library_call()
        assert interrupts.seen
        with pytest.raises(KeyboardInterrupt):
            interrupts.check()
    assert signal.getsignal(signal.SIGINT) is before


def test_an_interrupt_still_raises_where_it_lands():
    with Interrupts(), pytest.raises(KeyboardInterrupt):
        os.kill(os.getpid(), signal.SIGINT)
        for _ in range(1000):
            pass
