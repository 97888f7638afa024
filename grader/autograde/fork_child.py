"""A grading job's own processes: the forked child, its keeper, and the job's PID 1.

The fork server forks :func:`first_child` for every job. It reads the job's cells, wires its
descriptors (0 = /dev/null, 1 and 2 = ``log``, 3 = ``report``; every other descriptor the
server holds is closed) and takes a session of its own. With namespaces it becomes the job's
*keeper* (:func:`_keeper`), which runs no learner code and stays outside the job's PID
namespace: it joins the job's cgroups, unshares, forks the job's PID 1 and watches it (dying
with the server, killing PID 1 at the time limit by its own clock). PID 1 (:func:`_job_main`)
confines itself (``mount_tree``, ``confine``, ``seccomp``: a filesystem that holds only what
the notebook needs, another identity, hard limits) and runs the cells; its only way out is
the report. Without namespaces the forked child runs the cells itself.
"""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from grader.autograde import cgroups as cgroup_tree
from grader.autograde import confine, mount_tree, seccomp
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, budgeted_memory
from grader.autograde.results import ChildExit


def _wire_descriptors(report: int, log: int, keep: int) -> None:
    """0 = /dev/null, 1 and 2 = log, 3 = report; ``keep`` moves to 4; all others closed."""
    import fcntl

    null = os.open(os.devnull, os.O_RDONLY)
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (null, log, log, report, keep)]
    for target, fd in enumerate(high):  # out of the way first, so no dup2 clobbers a source
        os.dup2(fd, target, inheritable=True)
    os.closerange(5, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


# RLIMIT_NPROC as root counts every process of uid 65534 on the machine, all jobs together:
# with a cgroup (pids.max holds each job) only a backstop, without one the only bound.
SHARED_UID_TASKS = {True: 1024, False: 64}


def _limits(limits: Limits, isolation: Isolation, counted: bool, as_root: bool) -> dict[int, int]:
    """The job's rlimits; ``counted``: a cgroup counts the job's memory and tasks."""
    memory = (
        limits.memory_bytes
        if counted or isolation is not Isolation.NAMESPACES
        else limits.process_memory_bytes
    )
    values = {
        resource.RLIMIT_CORE: 0,
        resource.RLIMIT_CPU: int(limits.timeout) + 5,
        resource.RLIMIT_FSIZE: limits.file_bytes,
        resource.RLIMIT_AS: confine.address_space() + memory,
    }
    if isolation is Isolation.NAMESPACES:  # per job in its own user namespace, else per uid
        values[resource.RLIMIT_NPROC] = SHARED_UID_TASKS[counted] if as_root else limits.processes
        values[resource.RLIMIT_NOFILE] = limits.files
    return values


def _learner_environment(home: str) -> dict[str, str]:
    """The child's whole environment: nothing of the grader's (no URLs, no tokens)."""
    return {
        "HOME": home,
        "IPYTHONDIR": os.path.join(home, ".ipython"),
        "TMPDIR": "/tmp",
        "PATH": os.path.dirname(sys.executable) + ":/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "NBGRADER_EXECUTION": "autograde",
        "MPLCONFIGDIR": "/tmp",
    }


def _job_main(
    job: ChildJob,
    cells: list[dict[str, Any]],
    isolation: Isolation,
    view: mount_tree.View | None,
    counted: bool = False,
) -> None:
    """Runs as the job's PID 1 (or its only process without namespaces). Never returns.

    ``counted``: the job is in cgroups of its own; without them the per-process limits are
    lowered and the calls that hold memory outside every limit are refused (and, when a test
    cell has a memory budget, those that start a second process: ``seccomp``).
    """
    status = ChildExit.JOB_NOT_STARTED
    try:
        folder = Path(job.folder)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # too-large writes fail, not kill
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        as_root = os.getuid() == 0
        if isolation is Isolation.NAMESPACES:
            assert view is not None, "a job in namespaces is given its view (_keeper)"
            mount_tree.build_root(str(folder / "root"), view, str(folder / "home"), job.limits.tmp_bytes)
            home = mount_tree.HOME
            if as_root:  # the job's files become the job identity's own
                for base, dirs, files in os.walk(home):
                    for name in (base, *(os.path.join(base, n) for n in dirs + files)):
                        os.lchown(name, confine.NOBODY, confine.NOBODY)
        else:  # HOME is the private job folder: no IPython profile lands beside a notebook
            home = str(folder / "home") if (folder / "home").is_dir() else os.getcwd()
        confine.set_limits(_limits(job.limits, isolation, counted, as_root))
        if isolation is Isolation.NAMESPACES:
            confine.drop_privileges(as_root)
            # every mode: no keyring, no other process's memory, no new namespace; without a
            # cgroup also no uncounted memory and, under a memory budget, no second process
            budgeted = budgeted_memory(job.limits, cells) is not None
            seccomp.install(counted, single_process=budgeted and not counted)
            # changing identity cleared the parent-death signal: ask again (the keeper also
            # kills this process when it dies of the server's death)
            confine.die_with_parent(signal.SIGKILL)
        elif isolation is Isolation.WEAK:
            confine.set_no_new_privs()
            seccomp.install(counted=True)  # the state shared across jobs, at least
        os.chdir(home)
        os.environ.clear()
        os.environ.update(_learner_environment(home if isolation is Isolation.NAMESPACES else str(folder)))
        from grader.autograde.execution import CellJob, execute_cells

        status = ChildExit.CELL_LOOP_FAILED
        execute_cells(
            [
                CellJob(
                    c["index"],
                    c["source"],
                    c["hidden"],
                    c.get("memory_bytes"),
                    bool(c.get("warnings_on_stdout")),
                )
                for c in cells
            ],
            3,
            job.record,
            job.salt,
        )
        status = ChildExit.OK
    except BaseException:  # noqa: BLE001 - report the sandbox's own failure in the log
        traceback.print_exc()
    finally:
        os._exit(status)  # no interpreter teardown: the learner may have left threads behind


def first_child(
    job: ChildJob,
    isolation: Isolation,
    view: mount_tree.View | None,
    report: int,
    log: int,
    pid_pipe: int,
    server: int,
    cgroup_procs: tuple[str, ...],
) -> None:
    """The forked child: read the cells, wire descriptors, then keep the job (namespaces) or
    run it (without them)."""
    status = ChildExit.CHILD_NOT_STARTED
    try:
        cells = json.loads((Path(job.folder) / "job.json").read_text())["cells"]
        _wire_descriptors(report, log, pid_pipe)
        # A session of its own: kill(0, ...) in the job must not reach the grader's process
        # group (as an ordinary user the job keeps the grader's uid, so that would be allowed).
        os.setsid()
        if isolation is Isolation.NAMESPACES:
            _keeper(job, cells, view, server, cgroup_procs)
        # without namespaces this process runs the cells, and dies with the server (unless
        # the learner's code undoes that: weak isolation); its group is killed at the end
        if not confine.die_with_parent(signal.SIGKILL, server):
            return
        os.write(4, f"{os.getpid()}\n".encode())
        os.close(4)
        _job_main(job, cells, isolation, None)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
    finally:
        os._exit(status)


KEEPER_GRACE = 2.0  # seconds past the time limit after which the keeper kills PID 1 itself


def _keeper(
    job: ChildJob,
    cells: list[dict[str, Any]],
    view: mount_tree.View | None,
    server: int,
    cgroup_procs: tuple[str, ...],
) -> None:
    """Join the job's cgroups, enter its namespaces, start its PID 1, and keep it. Never returns.

    This process runs no learner code and stays outside the job's PID namespace, where no
    process of the job can name it. When the server dies (however: a SIGKILL of the whole
    grading process group included) its parent-death signal makes it kill PID 1 and go; at
    the time limit plus KEEPER_GRACE it kills PID 1 itself. Descriptor 4, a pipe only this
    process holds, tells the server PID 1's pid, then the status ``waitpid`` gave for it (the
    server need not wait for this process's own exit, which unmaps a copy of the preloaded
    interpreter); it then ends as PID 1 ended (the same exit code, or the same signal).
    """
    leader = 0

    def server_died(signum: int, frame: object) -> None:
        if leader:
            os.kill(leader, signal.SIGKILL)  # our unreaped child: its pid cannot be reused
        os._exit(ChildExit.SERVER_GONE)

    signal.signal(signal.SIGTERM, server_died)
    budget = budgeted_memory(job.limits, cells)
    if budget is not None and cgroup_procs:  # every process of the job, for the whole job
        cgroup_tree.lower_memory(cgroup_procs, budget)
    cgroup_tree.join(cgroup_procs)  # before the namespaces: its cgroup is their cgroup root
    confine.unshare_namespaces(as_root=os.getuid() == 0)
    # after unshare (a new user namespace clears it): then make sure the server is still there
    if not confine.die_with_parent(signal.SIGTERM, server):
        os._exit(ChildExit.SERVER_GONE)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # until `leader` is known
    pid = os.fork()  # PID 1 of the new namespace
    if pid == 0:
        os.close(4)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        os.setsid()  # kill(0, ...) by the job reaches its own processes only, never the keeper
        _job_main(job, cells, Isolation.NAMESPACES, view, counted=bool(cgroup_procs))
    leader = pid
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
    os.write(4, f"{pid}\n".encode())
    pidfd = os.pidfd_open(pid)
    end: float | None = time.monotonic() + job.limits.timeout + KEEPER_GRACE
    while not select.select([pidfd], [], [], None if end is None else max(0.0, end - time.monotonic()))[0]:
        os.kill(pid, signal.SIGKILL)
        end = None
    # PID 1 has ended or is dying: once reaped its pid may be reused, so no handler may kill it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    _, status = os.waitpid(pid, 0)
    try:
        os.write(4, f"{status}\n".encode())
    except OSError:  # the server has gone
        pass
    _end_as(status)


def _end_as(status: int) -> None:
    """Exit as the process whose ``waitpid`` status this is: its exit code, or its signal."""
    if not os.WIFSIGNALED(status):
        os._exit(os.waitstatus_to_exitcode(status))
    sig = os.WTERMSIG(status)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {sig})
    os.kill(os.getpid(), sig)
    os._exit(ChildExit.killed_by(sig))
