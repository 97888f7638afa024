"""Refusing the calls that hold memory no limit counts: a seccomp filter for a job without a cgroup.

Where no cgroup counts a job's memory (``cgroups``), :func:`refuse_uncounted_memory` makes
the calls of :data:`UNCOUNTED_MEMORY_CALLS` fail with EPERM in the job's PID 1 and all it
starts. ``no_new_privs`` must be set first (``confine.drop_privileges``).
"""

from __future__ import annotations

import ctypes
import platform

from grader.autograde.confine import PR_SET_SECCOMP, ConfinementError, call, libc


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
    call(libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(_SECCOMP_MODE_FILTER),
                      ctypes.c_void_p(ctypes.addressof(fprog)), 0, 0), "seccomp")
