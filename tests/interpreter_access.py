"""Let uid 65534 reach this interpreter for as long as any test process needs it.

pyenv lives under /root (mode 0700) on CI, so tests that run the grader as uid 65534 add o+x
to each folder above the real interpreter that lacks it. With ``pytest -n 2`` two processes
need that at once, and one restoring the modes while the other still grades as uid 65534
stops that one's Python from starting. So the opening is counted across processes: the first
holder opens the path, each process holds it once until it exits, and the last to leave
restores the modes it found (a count left by a killed process keeps the path open, never
shut under a running test).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import sys
from pathlib import Path

STATE = Path("/tmp/attention-tests-interpreter-access.json")
LOCK = Path("/tmp/attention-tests-interpreter-access.lock")
_held = False


def _locked_state(change) -> None:
    """Apply ``change(state) -> state`` to the shared state under an exclusive file lock."""
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            state = json.loads(STATE.read_text()) if STATE.exists() else {"holders": 0, "modes": []}
        except (OSError, ValueError):
            state = {"holders": 0, "modes": []}
        state = change(state)
        STATE.write_text(json.dumps(state))


def _open(state: dict) -> dict:
    if state["holders"] == 0:
        state["modes"] = []
        for folder in Path(os.path.realpath(sys.executable)).parents:
            mode = folder.stat().st_mode & 0o7777
            if not mode & 0o001:
                os.chmod(folder, mode | 0o001)
                state["modes"].append([str(folder), mode])
    state["holders"] += 1
    return state


def _close(state: dict) -> dict:
    state["holders"] = max(0, state["holders"] - 1)
    if state["holders"] == 0:
        for folder, mode in state["modes"]:
            try:
                os.chmod(folder, mode)
            except OSError:
                pass
        state["modes"] = []
    return state


def hold() -> None:
    """Open the interpreter's path to others (o+x) until this process exits (idempotent)."""
    global _held
    if _held or os.getuid() != 0:
        return
    _locked_state(_open)
    _held = True
    atexit.register(_locked_state, _close)
