"""The system calls a grading job may not make: one seccomp filter, installed in every mode.

:func:`install` makes the calls below fail (never kill: an honest library that probes one
gets an error and goes on) in the job's PID 1 and all it starts; ``no_new_privs`` must be set
first (``confine.drop_privileges``). Three sets:

- :data:`ALWAYS_REFUSED`, with or without a cgroup: the kernel state that outlives a job or
  reaches another job of the same uid (as root every job is uid 65534, with no user
  namespace of its own): kernel keyrings (``add_key``, ``request_key``, ``keyctl``: a key in
  the user, session or persistent keyring outlives the grader), other processes' memory and
  descriptors (``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``, ``pidfd_getfd``), file
  system watches on the read-only trees every job shares (``inotify_init``/``1``,
  ``fanotify_init``), new namespaces (``unshare``, ``setns``, and ``clone`` with a namespace
  flag: a user namespace would hand the job capabilities over its own mounts), and kernel
  surface a notebook never needs (``userfaultfd``, ``bpf``, ``perf_event_open``,
  ``personality``, ``io_uring_setup``). ``clone3`` answers ENOSYS (its flags lie behind a
  pointer no filter can read): the C library then falls back to ``clone``;
- :data:`UNCOUNTED_MEMORY_CALLS`, where no cgroup counts the job's memory;
- :data:`NEW_TASK_CALLS`, where no cgroup counts it and a test cell has a memory budget: the
  job stays one process, so the address-space limit binds all that runs (SECURITY.md).
"""

from __future__ import annotations

import ctypes
import errno
import platform

from grader.autograde.confine import PR_SET_SECCOMP, ConfinementError, call, libc


class _SockFilter(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_uint16),
        ("jt", ctypes.c_uint8),
        ("jf", ctypes.c_uint8),
        ("k", ctypes.c_uint32),
    ]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_SockFilter))]


_BPF_LD_ABS, _BPF_JEQ, _BPF_JGE, _BPF_JSET, _BPF_RET = 0x20, 0x15, 0x35, 0x45, 0x06
_SECCOMP_MODE_FILTER, _RET_ALLOW, _RET_ERRNO = 2, 0x7FFF0000, 0x00050000
_ARG0_LOW = 16  # offsetof(seccomp_data, args[0]), its low 32 bits on a little-endian machine
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET | NEWTIME (0x80)
CLONE_NAMESPACE_FLAGS = (
    0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
)

ALWAYS_REFUSED = (
    "add_key",
    "request_key",
    "keyctl",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "inotify_init",
    "inotify_init1",
    "fanotify_init",
    "unshare",
    "setns",
    "userfaultfd",
    "bpf",
    "perf_event_open",
    "personality",
    "io_uring_setup",
)
UNCOUNTED_MEMORY_CALLS = ("memfd_create", "memfd_secret", "shmget", "socket", "socketpair", "io_uring_setup")
NEW_TASK_CALLS = ("clone", "clone3", "fork", "vfork", "execve", "execveat")

_X86_64 = {
    "memfd_create": 319,
    "memfd_secret": 447,
    "shmget": 29,
    "socket": 41,
    "socketpair": 53,
    "io_uring_setup": 425,
    "add_key": 248,
    "request_key": 249,
    "keyctl": 250,
    "ptrace": 101,
    "process_vm_readv": 310,
    "process_vm_writev": 311,
    "kcmp": 312,
    "pidfd_getfd": 438,
    "inotify_init": 253,
    "inotify_init1": 294,
    "fanotify_init": 300,
    "unshare": 272,
    "setns": 308,
    "userfaultfd": 323,
    "bpf": 321,
    "perf_event_open": 298,
    "personality": 135,
    "clone": 56,
    "clone3": 435,
    "fork": 57,
    "vfork": 58,
    "execve": 59,
    "execveat": 322,
}
_AARCH64 = {
    "memfd_create": 279,
    "memfd_secret": 447,
    "shmget": 194,
    "socket": 198,
    "socketpair": 199,
    "io_uring_setup": 425,
    "add_key": 217,
    "request_key": 218,
    "keyctl": 219,
    "ptrace": 117,
    "process_vm_readv": 270,
    "process_vm_writev": 271,
    "kcmp": 272,
    "pidfd_getfd": 438,
    "inotify_init1": 26,
    "fanotify_init": 262,
    "unshare": 97,
    "setns": 268,
    "userfaultfd": 282,
    "bpf": 280,
    "perf_event_open": 241,
    "personality": 92,
    "clone": 220,
    "clone3": 435,
    "execve": 221,
    "execveat": 281,
}
# architecture (AUDIT_ARCH_*), the call numbers (a name missing: no such call there), the
# first number of another ABI (x32), refused altogether: it would bypass the numbers
_SECCOMP_ARCH = {"x86_64": (0xC000003E, _X86_64, 0x40000000), "aarch64": (0xC00000B7, _AARCH64, None)}


def refused_calls(counted: bool, single_process: bool) -> tuple[str, ...]:
    """The calls a job refuses: ``counted``, a cgroup counts its memory; ``single_process``,
    it must stay one process (no cgroup, and a test cell with a memory budget)."""
    names = list(ALWAYS_REFUSED)
    if not counted:
        names += UNCOUNTED_MEMORY_CALLS
    if single_process:
        names += NEW_TASK_CALLS
    return tuple(dict.fromkeys(names))


def _program(
    arch: int, numbers: dict[str, int], other_abi: int | None, refused: tuple[str, ...]
) -> list[tuple[int, int, int, int]]:
    """The BPF program: (code, jump if true, jump if false, k) per instruction.

    Layout: 0 check the architecture, 2 load the call number, one comparison per refused
    call (each jumping to its return), ALLOW, the check of ``clone``'s flags, the returns.
    """
    outcome = {name: "eagain" if name in NEW_TASK_CALLS[:4] else "eperm" for name in refused}
    if "clone" not in refused:  # allowed, but never with a namespace flag
        outcome["clone"], outcome["clone3"] = "clone", "enosys"
    tests = [(_BPF_JGE, other_abi, "eperm")] if other_abi is not None else []
    tests += [(_BPF_JEQ, numbers[name], where) for name, where in outcome.items() if name in numbers]
    allow = 3 + len(tests)
    labels = {"clone": allow + 1, "eperm": allow + 4, "enosys": allow + 5, "eagain": allow + 6}
    program = [
        (_BPF_LD_ABS, 0, 0, 4),  # seccomp_data.arch
        (_BPF_JEQ, 0, labels["eperm"] - 2, arch),  # another architecture: refused
        (_BPF_LD_ABS, 0, 0, 0),
    ]  # seccomp_data.nr
    program += [
        (code, labels[where] - index - 1, 0, k) for index, (code, k, where) in enumerate(tests, start=3)
    ]
    program += [
        (_BPF_RET, 0, 0, _RET_ALLOW),
        (_BPF_LD_ABS, 0, 0, _ARG0_LOW),  # clone's flags
        (_BPF_JSET, labels["eperm"] - (allow + 2) - 1, 0, CLONE_NAMESPACE_FLAGS),
        (_BPF_RET, 0, 0, _RET_ALLOW),
    ]
    program += [(_BPF_RET, 0, 0, _RET_ERRNO | code) for code in (errno.EPERM, errno.ENOSYS, errno.EAGAIN)]
    return program


def install(counted: bool, single_process: bool = False) -> None:
    """From now on, in this process and all it starts, the calls of :func:`refused_calls`
    fail: EPERM, or EAGAIN for a new task (as at a task limit), ENOSYS for
    ``clone3`` while ``clone`` is allowed. ``no_new_privs`` must be set.

    Why each: the module's docstring. Where no cgroup counts the job's memory, the uncounted
    calls are the ways to hold memory that no address-space limit counts: a memfd written
    with ``write`` is never mapped, a SysV segment outlives its mapping, each socket queues up
    to twice ``net.core.wmem_max`` in the kernel (8 MB here), and io_uring makes sockets of
    its own. Every file lives on a size-limited tmpfs; the job has no network, so no socket
    serves it. Calls of another ABI (i386, x32) are refused altogether.
    """
    spec = _SECCOMP_ARCH.get(platform.machine())
    if spec is None:
        raise ConfinementError(0, f"seccomp: unknown architecture {platform.machine()}")
    arch, numbers, other_abi = spec
    program = _program(arch, numbers, other_abi, refused_calls(counted, single_process))
    filters = (_SockFilter * len(program))(*[_SockFilter(c, t, f, k) for c, t, f, k in program])
    fprog = _SockFprog(len(program), filters)
    call(
        libc.prctl(
            PR_SET_SECCOMP,
            ctypes.c_ulong(_SECCOMP_MODE_FILTER),
            ctypes.c_void_p(ctypes.addressof(fprog)),
            0,
            0,
        ),
        "seccomp",
    )
