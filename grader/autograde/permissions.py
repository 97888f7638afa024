"""The modes of what a run writes into OUT: what the umask allows, or group-readable.

Files are written through a temporary file (``reports.write_atomically``), which Python
creates with mode 600 whatever the umask; each is given the mode an ordinary ``open`` would
have given it (666 less the umask). With ``--group-readable`` (a TA group reads OUT, and
formgrader runs as one of them) files also get group read, and the folders the run makes
group read and search, whatever the umask says. The group itself is the folder's: give OUT
to the TA group once with ``chgrp ta OUT && chmod g+s OUT`` and everything below inherits it.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

_lock = threading.Lock()
_state = {"group_readable": False, "umask": None}


def configure(group_readable: bool) -> None:
    """Set the rule for this process's outputs (called once per run, before anything is written)."""
    _state["group_readable"] = group_readable


def umask() -> int:
    """The process's umask, read once (reading it means setting it, so never in parallel)."""
    with _lock:
        if _state["umask"] is None:
            mask = os.umask(0o077)
            os.umask(mask)
            _state["umask"] = mask
        return _state["umask"]


def file_mode() -> int:
    mode = 0o666 & ~umask()
    return mode | stat.S_IRGRP if _state["group_readable"] else mode


def make_folders(folder: Path) -> None:
    """``mkdir -p``; with group-readable, each folder made (and ``folder``) gets g+rx."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    if _state["group_readable"]:
        for made in [*missing, folder]:
            share_folder(made)


def share_folder(folder: Path) -> None:
    """With group-readable: g+rx on ``folder`` (ours; another user's is left alone)."""
    if not _state["group_readable"]:
        return
    try:
        mode = folder.stat().st_mode
        if mode & 0o050 != 0o050:
            folder.chmod(stat.S_IMODE(mode) | 0o050)
    except OSError:
        pass


def share_file(path: Path) -> None:
    """With group-readable: g+r on a file another library wrote (the SQLite gradebook)."""
    if not _state["group_readable"]:
        return
    try:
        mode = path.stat().st_mode
        path.chmod(stat.S_IMODE(mode) | stat.S_IRGRP)
    except OSError:
        pass
