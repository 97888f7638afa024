"""Let uid 65534 reach this interpreter for as long as any test process needs it.

pyenv lives under /root (mode 0700) on CI, so tests that run the grader as uid 65534 add o+x
to each folder above the real interpreter that lacks it. With ``pytest -n 2`` two processes
need that at once, and one restoring the modes while the other still grades as uid 65534
stops that one's Python from starting. So the opening is counted across processes: every
holder makes sure the path is open, each process holds it once until it exits, and the last
one alive to leave restores the modes that were changed (the holders are pids, so a killed
process counts no more).
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
            state = json.loads(STATE.read_text()) if STATE.exists() else {}
        except (OSError, ValueError):
            state = {}
        state = change({"holders": list(state.get("holders", [])), "modes": list(state.get("modes", []))})
        STATE.write_text(json.dumps(state))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _open(state: dict) -> dict:
    """Add this process to the holders (dropping the pids that are gone) and make sure every
    folder above the interpreter has o+x, whatever another test restored meanwhile; a mode
    is recorded only the first time this changes it."""
    state["holders"] = [pid for pid in state["holders"] if pid != os.getpid() and _alive(pid)]
    if not state["holders"]:
        state["modes"] = []
    recorded = {folder for folder, _ in state["modes"]}
    for folder in Path(os.path.realpath(sys.executable)).parents:
        mode = folder.stat().st_mode & 0o7777
        if not mode & 0o001:
            os.chmod(folder, mode | 0o001)
            if str(folder) not in recorded:
                state["modes"].append([str(folder), mode])
    state["holders"].append(os.getpid())
    return state


def _close(state: dict) -> dict:
    """Leave the holders; the last one alive restores the modes that were changed."""
    state["holders"] = [pid for pid in state["holders"] if pid != os.getpid() and _alive(pid)]
    if not state["holders"]:
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
    if os.getuid() != 0:
        return
    _locked_state(_open)  # again on every call: another test may have shut the path meanwhile
    if not _held:
        _held = True
        atexit.register(_locked_state, _close)
