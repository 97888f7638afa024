"""Confining a grading child: its own namespaces, a minimal filesystem, hard limits, no privileges.

The fork server calls :func:`enter` in each freshly forked child, before any learner code
exists in it. What the child ends up with (see SECURITY.md for the threat model):

- new PID, mount, network, IPC, UTS and cgroup namespaces: it sees only its own processes,
  has no network at all (not even loopback), and everything it starts dies when it does (it
  is PID 1 of its namespace: the kernel kills the whole namespace with it);
- a root filesystem of its own, built on an empty tmpfs: the Python installation, the
  virtual environment and the system libraries (``/usr``) read-only, the learner package,
  a minimal ``/etc`` of its own (``passwd`` and ``group`` naming only root, nobody and the
  job's identity, ``nsswitch.conf``, ``hosts``, ``ld.so.cache``, ``localtime``: nothing
  else of the machine's), an empty ``/tmp``, a minimal ``/dev``, its own ``/proc``, and a
  copy of its job folder's files as ``/home/learner`` (size- and inode-limited tmpfs, like
  ``/tmp``: the only places it can write). The grader's checkout, ``solutions/``, the
  source, SUBMITTED, OUT, the gradebook and every other job's folder are simply not in it;
  any of them that lies inside a mounted folder is covered by an empty mount;
- another identity: as root, uid/gid 65534 (nobody) with no capabilities; as an ordinary
  user, a user namespace in which it keeps its uid but holds no capability;
- ``no_new_privs``, and limits whose hard value equals the soft one; where no cgroup counts
  the job's memory (``cgroups``), a seccomp filter refuses the calls that hold memory no
  limit counts (:func:`refuse_uncounted_memory`).

Linux only; Python 3.11 has no ``os.unshare``, so the system calls go through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import shutil
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

NOBODY = 65534
HOME = "/home/learner"  # the job folder, as the learner's code sees it

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
MNT_DETACH = 2

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER, PR_SET_SECCOMP = 36, 22
CAP_LAST = 63
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# pivot_root has no glibc wrapper
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(platform.machine())

_libc = ctypes.CDLL(None, use_errno=True)


class ConfinementError(OSError):
    """A system call of the confinement failed: the child must not run learner code."""


def _call(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    _call(
        _libc.mount(
            None if source is None else source.encode(), target.encode(),
            None if fstype is None else fstype.encode(), ctypes.c_ulong(flags),
            None if data is None else data.encode(),
        ),
        f"mount {source} on {target}",
    )


def _prctl(option: int, value: int) -> None:
    _call(_libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def set_subreaper() -> None:
    """Orphaned descendants (each job's PID 1) become this process's children."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int, parent: int | None = None) -> bool:
    """Receive ``sig`` when the parent ends; False if it had already ended (``parent``: its
    pid, checked after the request, when this process can see it)."""
    _prctl(PR_SET_PDEATHSIG, sig)
    return parent is None or os.getppid() == parent


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


# ------------------------------------------------------------------ step 1: in the forked child


def unshare_namespaces(as_root: bool) -> None:
    """New namespaces for this process's future children (PID) and for itself (the rest;
    in its cgroup namespace, the cgroup it is in now is the root).

    Must run in a single-threaded process (a freshly forked child is). As an ordinary user,
    a user namespace comes first; it maps this process's own uid and gid to themselves, the
    only mapping an unprivileged process may write.
    """
    flags = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP
    uid, gid = os.getuid(), os.getgid()
    if not as_root:
        flags |= CLONE_NEWUSER
    _call(_libc.unshare(flags), "unshare")
    if not as_root:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


# ------------------------------------------------------------------ step 2: in the job's PID 1


def _ensure_dir(path: str) -> None:
    os.makedirs(path, mode=0o755, exist_ok=True)


def _statvfs_flags(path: str) -> int:
    """Mount flags of the mount that holds ``path``, as mount(2) wants them on a remount."""
    f = os.statvfs(path).f_flag
    flags = 0
    for st, ms in ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC),
                   (os.ST_NOATIME, MS_NOATIME), (os.ST_NODIRATIME, MS_NODIRATIME),
                   (os.ST_RELATIME, MS_RELATIME)):
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
    users = {0: "root:x:0:0:root:/root:/usr/sbin/nologin",
             NOBODY: f"nobody:x:{NOBODY}:{NOBODY}:nobody:{HOME}:/usr/sbin/nologin"}
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
    _mount("tmpfs", new_root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={tmp_bytes},nr_inodes={TMP_INODES},mode=1777")
    _ensure_dir(new_root + "/dev")
    _mount("tmpfs", new_root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "size=64k,nr_inodes=64,mode=0755")
    for node in ("null", "zero", "full", "random", "urandom"):
        _bind("/dev/" + node, f"{new_root}/dev/{node}", readonly=False)
    _ensure_dir(new_root + "/dev/shm")
    _mount("tmpfs", new_root + "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={tmp_bytes},nr_inodes={TMP_INODES},mode=1777")
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new_root}/dev/{name}")
    _ensure_dir(new_root + "/proc")
    _mount("proc", new_root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    # The job's home is a size-limited tmpfs holding a copy of the job folder's files: the
    # child's writes cannot fill the grader's disk, and the job folder itself stays as given.
    _ensure_dir(new_root + HOME)
    _mount("tmpfs", new_root + HOME, "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={tmp_bytes},nr_inodes={HOME_INODES},mode=0755")
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
    _call(_libc.syscall(_SYS_PIVOT_ROOT, new_root.encode(), old.encode()), "pivot_root")
    os.chdir("/")
    _call(_libc.umount2(b"/.old_root", MNT_DETACH), "umount old root")
    os.rmdir("/.old_root")
    _mount(None, "/", None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)


def set_limits(limits: dict[int, int]) -> None:
    """Each limit with its hard value equal to the soft one: nobody can raise it again."""
    for kind, value in limits.items():
        _, hard = resource.getrlimit(kind)
        if hard != resource.RLIM_INFINITY:
            value = min(value, hard)
        resource.setrlimit(kind, (value, value))


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def drop_privileges(as_root: bool) -> None:
    """No capability left, no way to gain one: uid 65534 as root, an empty capset otherwise."""
    for cap in range(CAP_LAST + 1):  # the bounding set, while CAP_SETPCAP is still ours
        if _libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            _call(-1, f"drop capability {cap} from the bounding set")
    _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if as_root:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)  # leaving uid 0 clears every capability
    else:
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        _call(_libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_DUMPABLE, 0)


class _SockFilter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8),
                ("k", ctypes.c_uint32)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_BPF_LD_ABS, _BPF_JEQ, _BPF_JGE, _BPF_RET = 0x20, 0x15, 0x35, 0x06
_SECCOMP_MODE_FILTER, _RET_ALLOW, _RET_ERRNO = 2, 0x7FFF0000, 0x00050000
# architecture (AUDIT_ARCH_*), the calls refused, the first number of another ABI (x32)
_SECCOMP_ARCH = {
    "x86_64": (0xC000003E, {"memfd_create": 319, "memfd_secret": 447, "shmget": 29, "socket": 41,
                            "socketpair": 53, "io_uring_setup": 425}, 0x40000000),
    "aarch64": (0xC00000B7, {"memfd_create": 279, "memfd_secret": 447, "shmget": 194, "socket": 198,
                             "socketpair": 199, "io_uring_setup": 425}, None),
}
UNCOUNTED_MEMORY_CALLS = ("memfd_create", "memfd_secret", "shmget", "socket", "socketpair",
                          "io_uring_setup")


def refuse_uncounted_memory() -> None:
    """The calls of UNCOUNTED_MEMORY_CALLS fail with EPERM from now on, in this process and all
    it starts (a seccomp filter; ``no_new_privs`` must be set).

    Where no cgroup counts a job's memory, these are the ways to hold memory that no
    address-space limit counts: a memfd written with ``write`` is never mapped, a SysV
    segment outlives its mapping, each socket queues up to twice ``net.core.wmem_max`` in
    the kernel (8 MB here), and io_uring makes sockets of its own. Every file lives on a
    size-limited tmpfs; the job has no network, so no socket serves it. Calls of another ABI
    (i386, x32) are refused altogether: they would bypass the numbers.
    """
    spec = _SECCOMP_ARCH.get(platform.machine())
    if spec is None:
        raise ConfinementError(0, f"seccomp: unknown architecture {platform.machine()}")
    arch, calls, other_abi = spec
    refused = [calls[name] for name in UNCOUNTED_MEMORY_CALLS]
    checks = [(_BPF_JGE, other_abi)] if other_abi is not None else []
    checks += [(_BPF_JEQ, number) for number in refused]
    program = [(_BPF_LD_ABS, 0, 0, 4),  # seccomp_data.arch
               (_BPF_JEQ, 0, len(checks) + 2, arch),  # another architecture: to "refuse"
               (_BPF_LD_ABS, 0, 0, 0)]  # seccomp_data.nr
    program += [(code, len(checks) - k, 0, value) for k, (code, value) in enumerate(checks)]
    program += [(_BPF_RET, 0, 0, _RET_ALLOW), (_BPF_RET, 0, 0, _RET_ERRNO | 1)]  # refuse: EPERM
    filters = (_SockFilter * len(program))(*[_SockFilter(c, t, f, k) for c, t, f, k in program])
    fprog = _SockFprog(len(program), filters)
    _call(_libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                      ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0), "seccomp")


def can_use_user_namespaces() -> bool:
    """Whether this kernel lets an ordinary user create user namespaces (a quick sysctl read)."""
    try:
        if Path("/proc/sys/kernel/unprivileged_userns_clone").read_text().strip() == "0":
            return False
    except OSError:
        pass
    try:
        return int(Path("/proc/sys/user/max_user_namespaces").read_text()) > 0
    except (OSError, ValueError):
        return False
