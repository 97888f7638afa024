"""Opening what a submission holds without following anything: the one idiom every reader uses.

A submission is a folder its student controls, who may swap any entry of it (or the folder
itself) for a symlink, a FIFO or another file at any moment, even between two system calls
of the grader. So nothing in it is opened by a path that crosses a name the student
controls: a folder is opened once (:func:`open_folder`: ``O_DIRECTORY | O_NOFOLLOW``) and
everything below it is reached relative to that descriptor, one name at a time
(``openat``/``fstatat``). :func:`open_regular` opens one name without following it, refuses
anything but a regular file, and, given the ``lstat`` the caller judged (its size, its
owner), checks that the file opened is that very file (same ``st_dev`` and ``st_ino``), so
a swap between the look and the open is seen, not read. :func:`read_small` reads a bounded
file (a secret, a timestamp) whole or refuses it.

Every reader of submission files goes through these: ``folder_walk`` (the walker, its copy
and fingerprint), ``notebook_file``, ``deadlines.read_timestamp`` and the watcher.
"""

from __future__ import annotations

import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

CHUNK = 2**20
FOLDER_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def same_file(a: os.stat_result, b: os.stat_result) -> bool:
    """Whether two stats are of one inode (a swap in between gives another)."""
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def open_folder(name: str | Path, dir_fd: int | None = None, expect: os.stat_result | None = None) -> int:
    """A descriptor on the folder ``name`` (relative to ``dir_fd`` if given), never through
    a symlink in its last component; ``expect``: it must be that folder (same inode)."""
    fd = os.open(name, FOLDER_FLAGS, dir_fd=dir_fd)
    if expect is not None and not same_file(os.fstat(fd), expect):
        os.close(fd)
        raise OSError(errno.ESTALE, "it was replaced while it was being read")
    return fd


def open_regular(name: str | Path, dir_fd: int | None = None, expect: os.stat_result | None = None) -> int:
    """A descriptor on ``name`` if it is a regular file, opened without following a symlink
    (relative to ``dir_fd`` if given); with ``expect``, only if it is still that file."""
    fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    if expect is not None and not same_file(st, expect):
        os.close(fd)
        raise OSError(errno.ESTALE, "it was replaced while it was being read")
    return fd


def lstat_at(name: str, dir_fd: int) -> os.stat_result:
    """``fstatat(dir_fd, name, AT_SYMLINK_NOFOLLOW)``."""
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def read_small(name: str | Path, limit: int, dir_fd: int | None = None) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes; a larger one is refused
    (``EFBIG``) after reading ``limit + 1`` bytes at most, a symlink or FIFO unread."""
    fd = open_regular(name, dir_fd)
    try:
        if os.fstat(fd).st_size > limit:
            raise OSError(errno.EFBIG, f"over {limit:,} bytes")
        data = b""
        while len(data) <= limit and (chunk := os.read(fd, limit + 1 - len(data))):
            data += chunk
    finally:
        os.close(fd)
    if len(data) > limit:
        raise OSError(errno.EFBIG, f"over {limit:,} bytes")
    return data


def read_chunks(fd: int, limit: int | None) -> Iterator[bytes]:
    """``fd``'s bytes in chunks; ``EFBIG`` once more than ``limit`` came (it grew since its stat)."""
    read = 0
    while chunk := os.read(fd, CHUNK):
        read += len(chunk)
        if limit is not None and read > limit:
            raise OSError(errno.EFBIG, f"grew over {limit:,} bytes while it was read")
        yield chunk


def hash_file(name: str, dir_fd: int, st: os.stat_result, limit: int | None, copy: Path | None) -> bytes:
    """The sha256 of the regular file ``name`` in ``dir_fd`` (the very file ``st`` is of), read
    once; with ``copy``, written there as it is read (removed again if the read fails)."""
    fd = open_regular(name, dir_fd, expect=st)
    out = None
    try:
        digest = hashlib.sha256()
        out = open(copy, "xb") if copy is not None else None
        for chunk in read_chunks(fd, limit):
            digest.update(chunk)
            if out is not None:
                out.write(chunk)
        return digest.digest()
    except BaseException:
        if out is not None and copy is not None:  # out is open only when there is a copy
            out.close()
            out = None
            copy.unlink()
        raise
    finally:
        os.close(fd)
        if out is not None:
            out.close()
