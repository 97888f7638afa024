"""The modes of what a run writes into OUT: private to the instructor, or shared with a group.

OUT holds the source with its solutions and hidden tests, every student's notebook and the
gradebook, so by default only its owner may read it: folders 0700, files 0600, whatever the
umask says. With ``--group-readable`` (a TA group reads OUT, and formgrader runs as one of
them) folders are 0750 and files 0640: the group reads, others never do. The group itself
is the folder's: give OUT to the TA group once with ``chgrp ta OUT && chmod g+s OUT`` and
everything below inherits it (the set-group-ID bit of a folder is kept, and so is a group
write bit given by hand, as to the gradebook and its folder for a TA who grades in formgrader).

Three layers hold the rule: every file the grader writes gets :func:`file_mode`
(``reports.write_atomically``) and every folder it makes :func:`folder_mode`
(:func:`make_folders`); while a grading session is open the process's umask is
:func:`output_umask`, so what other code writes there (SQLite's gradebook, the watcher's
copies) is no wider; and :func:`restrict_tree` gives every folder and file of OUT that the
grader owns its mode when a session opens (an earlier run's, under an older rule) and closes.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from grader.autograde import safe_open

_state = {"group_readable": False}
PRIVATE_FOLDER, PRIVATE_FILE = 0o700, 0o600
GROUP_FOLDER, GROUP_FILE = 0o750, 0o640


def configure(group_readable: bool) -> None:
    """Set the rule for this process's outputs (called once per run, before anything is written)."""
    _state["group_readable"] = group_readable


def file_mode() -> int:
    return GROUP_FILE if _state["group_readable"] else PRIVATE_FILE


def folder_mode() -> int:
    return GROUP_FOLDER if _state["group_readable"] else PRIVATE_FOLDER


def output_umask() -> int:
    """The umask under which nothing written is wider than the rule: 077, or 027 shared."""
    return 0o777 & ~folder_mode()


def make_folders(folder: Path) -> None:
    """``mkdir -p``; each folder made gets :func:`folder_mode`."""
    missing = []
    probe = folder
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    folder.mkdir(parents=True, exist_ok=True)
    for made in missing:
        set_folder_mode(made)


def set_folder_mode(folder: Path) -> None:
    """:func:`folder_mode` on ``folder`` (its set-group-ID bit kept); another user's is left alone."""
    try:
        fd = safe_open.open_folder(folder)
    except OSError:
        return
    try:
        _restrict(fd)
    finally:
        os.close(fd)


def set_file_mode(path: Path) -> None:
    """:func:`file_mode` on a file another library wrote (the SQLite gradebook)."""
    try:
        fd = safe_open.open_regular(path)
    except OSError:
        return
    try:
        _restrict(fd)
    finally:
        os.close(fd)


def restrict_tree(root: Path) -> int:
    """Give ``root`` and every folder and regular file under it that this process's user owns
    its mode; symlinks are never followed, other entries are left alone. Returns how many
    modes changed."""
    changed = 0
    try:
        top = safe_open.open_folder(root)
    except OSError:
        return 0
    stack = [top]
    while stack:
        fd = stack.pop()
        try:
            changed += _restrict(fd)
            for entry in os.scandir(fd):
                if entry.is_symlink() or not (entry.is_dir(follow_symlinks=False)
                                              or entry.is_file(follow_symlinks=False)):  # fmt: skip
                    continue
                opener = (
                    safe_open.open_folder if entry.is_dir(follow_symlinks=False) else safe_open.open_regular
                )
                try:
                    child = opener(entry.name, fd)
                except OSError:  # gone, or not ours to open
                    continue
                if entry.is_dir(follow_symlinks=False):
                    stack.append(child)
                else:
                    try:
                        changed += _restrict(child)
                    finally:
                        os.close(child)
        except OSError:
            pass
        finally:
            os.close(fd)
    return changed


def _restrict(fd: int) -> int:
    """Set the rule's mode on an open folder or regular file of ours; 1 if it changed."""
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        return 0
    # shared: a group write the instructor gave (a TA grading by hand writes the gradebook) stays
    kept = info.st_mode & stat.S_IWGRP if _state["group_readable"] else 0
    if stat.S_ISDIR(info.st_mode):
        mode = folder_mode() | kept | (info.st_mode & stat.S_ISGID)
    elif stat.S_ISREG(info.st_mode):
        mode = file_mode() | kept
    else:
        return 0
    if stat.S_IMODE(info.st_mode) == mode:
        return 0
    os.fchmod(fd, mode)
    return 1
