"""The fork server's pidfd of a job's PID 1 (``fork_server.leader_pidfd``).

A job that fails at once can end, and be reaped by its keeper, before the server opens a
pidfd of it. That used to raise ``ProcessLookupError`` in the server's loop and stop the
grading of the whole class (seen once in a full run as uid 65534); now the job's PID 1 is
simply gone, with nothing of it left to kill.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys

from grader.autograde.fork_server import leader_pidfd


def test_a_reaped_process_has_no_pidfd_and_raises_nothing():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    pid = process.pid
    process.wait()  # reaped: the pid names no process now
    assert leader_pidfd(pid) == -1


def test_a_live_process_has_a_pidfd_that_tells_when_it_ends():
    process = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    fd = leader_pidfd(process.pid)
    try:
        assert fd >= 0
        assert select.select([fd], [], [], 0)[0] == []  # still running
        process.stdin.close()
        assert select.select([fd], [], [], 30)[0] == [fd]  # readable once it has ended
    finally:
        process.wait()
        os.close(fd)
