"""Confining a grading child's processes: its own namespaces, another identity, hard limits.

The fork server's job processes (``fork_child``) call these before any learner code exists
in them (see SECURITY.md for the threat model):

- :func:`unshare_namespaces`: new PID, mount, network, IPC, UTS and cgroup namespaces: the
  job sees only its own processes, has no network at all (not even loopback), and everything
  it starts dies when it does (it is PID 1 of its namespace: the kernel kills the whole
  namespace with it). Its filesystem is ``mount_tree``'s;
- :func:`drop_privileges`: another identity: as root, uid/gid 65534 (nobody) with no
  capabilities; as an ordinary user, a user namespace in which it keeps its uid but holds no
  capability; ``no_new_privs`` in both;
- :func:`set_limits`: limits whose hard value equals the soft one. ``seccomp`` then refuses,
  in every mode, the calls that reach state shared across jobs (keyrings, other processes,
  new namespaces) and, where no cgroup counts the job's memory (``cgroups``), those that
  hold memory no limit counts.

Also here: the libc calls the other confinement modules share (:func:`call`, :data:`libc`),
the parent-death signal and the subreaper. Linux only; Python 3.11 has no ``os.unshare``, so
the system calls go through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import resource
from pathlib import Path

NOBODY = 65534

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP, PR_SET_NO_NEW_PRIVS = 1, 4, 24, 38
PR_SET_CHILD_SUBREAPER, PR_SET_SECCOMP = 36, 22
CAP_LAST = 63
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

libc = ctypes.CDLL(None, use_errno=True)


class ConfinementError(OSError):
    """A system call of the confinement failed: the child must not run learner code."""


def call(result: int, what: str) -> None:
    """Raise :class:`ConfinementError` with errno's text unless the libc call returned 0."""
    if result != 0:
        errno = ctypes.get_errno()
        raise ConfinementError(errno, f"{what}: {os.strerror(errno)}")


def _prctl(option: int, value: int) -> None:
    call(libc.prctl(option, ctypes.c_ulong(value), 0, 0, 0), f"prctl({option})")


def set_no_new_privs() -> None:
    """Nothing this process or its children execute can gain a privilege (setuid, file caps)."""
    _prctl(PR_SET_NO_NEW_PRIVS, 1)


def set_subreaper() -> None:
    """Orphaned descendants (each job's PID 1) become this process's children."""
    _prctl(PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(sig: int, parent: int | None = None) -> bool:
    """Receive ``sig`` when the parent ends; False if it had already ended (``parent``: its
    pid, checked after the request, when this process can see it)."""
    _prctl(PR_SET_PDEATHSIG, sig)
    return parent is None or os.getppid() == parent


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
    call(libc.unshare(flags), "unshare")
    if not as_root:
        Path("/proc/self/setgroups").write_text("deny")
        Path("/proc/self/uid_map").write_text(f"{uid} {uid} 1")
        Path("/proc/self/gid_map").write_text(f"{gid} {gid} 1")


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
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_privileges(as_root: bool) -> None:
    """No capability left, no way to gain one: uid 65534 as root, an empty capset otherwise."""
    for cap in range(CAP_LAST + 1):  # the bounding set, while CAP_SETPCAP is still ours
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and ctypes.get_errno() != 22:
            call(-1, f"drop capability {cap} from the bounding set")
    set_no_new_privs()
    if as_root:
        os.setgroups([])
        os.setresgid(NOBODY, NOBODY, NOBODY)
        os.setresuid(NOBODY, NOBODY, NOBODY)  # leaving uid 0 clears every capability
    else:
        header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
        data = (_CapData * 2)()
        call(libc.capset(ctypes.byref(header), data), "capset")
    _prctl(PR_SET_DUMPABLE, 0)


def address_space() -> int:
    """This process's address space (VmSize), in bytes: what an address-space limit adds to."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


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
