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


def test_a_child_starts_with_the_servers_objects_frozen_and_its_imports_done():
    """The cheap proxy of each job's start-up cost (issue 32; no timing): a child is forked
    with every object the server loaded in the collector's permanent generation (a collection
    in the child never walks them, so it copies none of their pages: this halved each job's
    execution, 200 ms to 93 ms on chapter 3) and with what a case's first draw imports
    already imported (numpy 2.4 imports ``numpy.random`` lazily: ~130 ms in every child)."""
    import json

    from grader.paths import ROOT

    probe = "import gc, sys\nprint(gc.get_freeze_count() > 100_000, 'numpy.random' in sys.modules)"
    spec = {"cgroups": False, "jobs": [{"cells": [probe], "limits": {"timeout": 60}}]}
    done = subprocess.run(
        [sys.executable, "-m", "tests.security.job_runner"],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    job = json.loads(done.stdout)["jobs"][0]
    assert job["stdout"] == ["True True\n"], job
