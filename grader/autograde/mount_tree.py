"""A grading job's filesystem: a root of its own on an empty tmpfs, made its ``/``.

:func:`build_root` runs in the job's PID 1, inside its new mount namespace and before any
learner code exists. The root it builds holds the Python installation, the virtual
environment and the system libraries (``/usr``) read-only, the learner package, a minimal
``/etc`` of its own (``passwd`` and ``group`` naming only root, nobody and the job's
identity, ``nsswitch.conf``, ``hosts``, ``ld.so.cache``, ``localtime``: nothing else of the
machine's), an empty ``/tmp``, a minimal ``/dev``, its own ``/proc``, and a copy of its job
folder's files as ``/home/learner`` (size- and inode-limited tmpfs, like ``/tmp``: the only
places it can write). What it shows is a :class:`View`: the grader's checkout,
``solutions/``, the source, SUBMITTED, OUT, the gradebook and every other job's folder are
simply not in it; any of them that lies inside a mounted folder is covered by an empty mount.
"""

from __future__ import annotations

import ctypes
import os
import platform
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.autograde.confine import NOBODY, ConfinementError, call, libc

HOME = "/home/learner"  # the job folder, as the learner's code sees it

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2

# pivot_root has no glibc wrapper
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    call(
        libc.mount(
            None if source is None else source.encode(),
            target.encode(),
            None if fstype is None else fstype.encode(),
            ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {source} on {target}",
    )


@dataclass(frozen=True)
class View:
    """What a job's filesystem holds besides its home: read-only folders, covered folders."""

    readonly: tuple[str, ...]  # absolute paths, mounted read-only at the same place
    hidden: tuple[str, ...]  # absolute paths covered by an empty read-only mount if visible

    @classmethod
    def for_this_python(cls, extra_readonly: Iterable[str] = (), hidden: Iterable[str] = ()) -> View:
        """The folders a Python child needs: the system, this interpreter and its packages."""
        hidden = tuple(os.path.realpath(h) for h in hidden)
        wanted = ["/usr", sys.base_prefix, sys.prefix, *extra_readonly]
        wanted += [p for p in sys.path if p and os.path.isdir(p)]
        # systems that are not usr-merged keep the loader and libraries in real /lib folders
        wanted += [f"/{n}" for n in _SYSTEM_FOLDERS if os.path.isdir(f"/{n}") and not os.path.islink(f"/{n}")]
        kept: list[str] = []
        for path in sorted({os.path.realpath(p) for p in wanted if os.path.isdir(p)}, key=len):
            if path == "/" or any(_within(h, path) for h in hidden):  # "/": `python -m`'s cwd
                continue  # a folder that holds a secret (a checkout on sys.path) is never shown
            if not any(_within(path, k) for k in kept):
                kept.append(path)
        return cls(tuple(kept), hidden)


_SYSTEM_FOLDERS = ("bin", "sbin", "lib", "lib64", "lib32")


def _within(path: str, folder: str) -> bool:
    """Whether ``path`` is ``folder`` or lies inside it."""
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _ensure_dir(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _statvfs_flags(path: str) -> int:
    """Mount flags of the mount that holds ``path``, as mount(2) wants them on a remount."""
    f = os.statvfs(path).f_flag
    flags = 0
    for st, ms in (
        (os.ST_NOSUID, MS_NOSUID),
        (os.ST_NODEV, MS_NODEV),
        (os.ST_NOEXEC, MS_NOEXEC),
        (os.ST_NOATIME, MS_NOATIME),
        (os.ST_NODIRATIME, MS_NODIRATIME),
        (os.ST_RELATIME, MS_RELATIME),
    ):
        if f & st:
            flags |= ms
    return flags


def _bind(source: str, target: str, readonly: bool) -> None:
    if os.path.isdir(source):
        _ensure_dir(target)
    else:
        _ensure_dir(os.path.dirname(target))
        Path(target).touch()
    _mount(source, target, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | _statvfs_flags(source)
    if readonly:
        flags |= MS_RDONLY
    _mount(None, target, None, flags)


def _cover(target: str) -> None:
    """An empty, read-only folder over ``target`` (it exists inside the new root)."""
    if os.path.isdir(target):
        _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "size=4k,mode=0555")
    elif os.path.exists(target):
        _mount("/dev/null", target, None, MS_BIND)


HOME_INODES, TMP_INODES = 16_384, 4_096  # a submission holds at most 10,000 entries


def _write_etc(etc: str) -> None:
    """The job's own ``/etc``: what Python, numpy and torch read, nothing of the machine's
    users, host name or secrets (no shadow, hostname, ssl, ...)."""
    _ensure_dir(etc)
    uid, gid = (NOBODY, NOBODY) if os.getuid() == 0 else (os.getuid(), os.getgid())
    users = {
        0: "root:x:0:0:root:/root:/usr/sbin/nologin",
        NOBODY: f"nobody:x:{NOBODY}:{NOBODY}:nobody:{HOME}:/usr/sbin/nologin",
    }
    groups = {0: "root:x:0:", NOBODY: f"nogroup:x:{NOBODY}:"}
    users.setdefault(uid, f"learner:x:{uid}:{gid}:learner:{HOME}:/usr/sbin/nologin")
    groups.setdefault(gid, f"learner:x:{gid}:")
    files = {
        "passwd": "\n".join(users.values()) + "\n",
        "group": "\n".join(groups.values()) + "\n",
        "nsswitch.conf": "passwd: files\ngroup: files\nshadow: files\nhosts: files\n",
        "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    }
    for name, text in files.items():
        Path(etc, name).write_text(text)
    if os.path.isfile("/etc/ld.so.cache"):  # where the loader finds libraries by name
        _bind("/etc/ld.so.cache", etc + "/ld.so.cache", readonly=True)
    if os.path.islink("/etc/localtime"):  # into /usr/share/zoneinfo, which is there
        os.symlink(os.readlink("/etc/localtime"), etc + "/localtime")
    elif os.path.isfile("/etc/localtime") and os.path.getsize("/etc/localtime") < 2**16:
        shutil.copyfile("/etc/localtime", etc + "/localtime")


def build_root(new_root: str, view: View, home: str, tmp_bytes: int) -> None:
    """Populate ``new_root`` (an empty folder) and make it this namespace's ``/``.

    Runs as PID 1 of the new PID namespace, before any learner code: the new ``/proc`` must
    be mounted while the old root (with its fully visible ``/proc``) is still attached, as
    the kernel requires inside a user namespace.
    """
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks back out
    _mount("tmpfs", new_root, "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=0755")
    # The writable places first, so that read-only folders below them (a venv under /tmp,
    # say) are mounted on top of them and not hidden by them.
    _ensure_dir(new_root + "/tmp")
    _mount(
        "tmpfs",
        new_root + "/tmp",
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={tmp_bytes},nr_inodes={TMP_INODES},mode=1777",
    )
    _ensure_dir(new_root + "/dev")
    _mount("tmpfs", new_root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for node in ("null", "zero", "full", "random", "urandom"):
        _bind("/dev/" + node, f"{new_root}/dev/{node}", readonly=False)
    _ensure_dir(new_root + "/dev/shm")
    _mount(
        "tmpfs",
        new_root + "/dev/shm",
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={tmp_bytes},nr_inodes={TMP_INODES},mode=1777",
    )
    for name, target in (
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ):
        os.symlink(target, f"{new_root}/dev/{name}")
    _ensure_dir(new_root + "/proc")
    _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # The job's home is a size-limited tmpfs holding a copy of the job folder's files: the
    # child's writes cannot fill the grader's disk, and the job folder itself stays as given.
    _ensure_dir(new_root + HOME)
    _mount(
        "tmpfs",
        new_root + HOME,
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={tmp_bytes},nr_inodes={HOME_INODES},mode=0755",
    )
    shutil.copytree(home, new_root + HOME, symlinks=True, dirs_exist_ok=True)
    _write_etc(new_root + "/etc")  # on the root tmpfs: read-only with it, below
    for path in view.readonly:
        _bind(path, new_root + path, readonly=True)
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):  # usr-merged systems: symlinks
        if os.path.islink("/" + name) and not os.path.lexists(f"{new_root}/{name}"):
            os.symlink(os.readlink("/" + name), f"{new_root}/{name}")
    for path in view.hidden:  # a secret inside a mounted folder (OUT inside a venv, ...)
        inside = new_root + path
        if any(_within(path, r) and path != r for r in view.readonly) and os.path.lexists(inside):
            _cover(inside)
    old = new_root + "/.old_root"
    _ensure_dir(old)
    if _SYS_PIVOT_ROOT is None:
        raise ConfinementError(0, f"pivot_root: unknown system call number on {platform.machine()}")
    call(libc.syscall(_SYS_PIVOT_ROOT, new_root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    call(libc.umount2(b"/.old_root", MNT_DETACH), "umount old root")
    os.rmdir("/.old_root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
