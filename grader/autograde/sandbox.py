"""``python -m grader.autograde.sandbox``: the fork server, one confined child per notebook.

The server imports numpy, torch, IPython and the learner package once (``preload``: never
the reference, never the exercises' expected values), then forks one child per job it reads
on stdin, so a child starts in milliseconds instead of paying the imports again. Its first
line on stdin is its configuration (``fork_protocol.ServerConfig``); the parent's side is
``fork_client.ForkServer``.

A job line names only an opaque id and a job folder the parent prepared, which holds
``job.json`` (the cells), ``home/`` (the files beside the notebook) and ``root/`` (an empty
mount point). Each job is two processes (``fork_child``): a keeper, which runs no learner
code and stays outside the job's PID namespace, and the job's PID 1, its child, which
confines itself and runs the cells; its only way out is the report. The keeper dies with the
server (a parent-death signal, checked against ``getppid()`` once set) and takes PID 1 with
it; it also kills PID 1 at the time limit by its own clock, should the server be stuck. PID
1's own death takes its whole namespace with it. Where the machine allows it, the job lives in
cgroups of its own (``cgroups``: memory, swap included, and tasks counted for the whole job);
elsewhere the per-process limits are lowered instead (SECURITY.md gives both worst cases).

The server, not the child, tells the parent how each child ended: it holds a pidfd of every
job's keeper and PID 1 (``fork_server``), kills PID 1 at the time limit by its own clock (a
stopped or sleeping child included), removes the job's cgroups with whatever is left in
them, and reports the exit code the keeper passed on from ``waitpid``. This module holds the
server's loop: the probe it starts with, then jobs in and events out.
"""

from __future__ import annotations

import gc
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from grader.autograde import cgroups as cgroup_tree
from grader.autograde import confine
from grader.autograde.fork_protocol import (
    ChildJob,
    Isolation,
    Limits,
    ServerConfig,
    exited_event,
    write_job_cells,
)
from grader.autograde.fork_server import Child, Server
from grader.autograde.results import ChildExit


def _probe(server: Server, work: Path) -> str:
    """Confine a child that runs nothing: "" when it worked, else why not."""
    folder = work / "probe"
    write_job_cells(folder, [])
    child = server.start(ChildJob("probe", str(folder), Limits(timeout=30), record=False))
    if child is None:
        return (folder / "log").read_text(errors="replace")[-2000:] or "the probe did not start"
    pidfd = next(fd for fd, c in server.children.items() if c is child)
    select.select([pidfd], [], [], 60)
    ended = server.finish(pidfd)  # the keeper's own end: its pipe was not read
    code = None if ended is None else ended["code"]
    if code != 0:
        return (folder / "log").read_text(errors="replace")[-2000:] or f"exit {code}"
    return ""


def _emit(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def _discover_cgroups(config: ServerConfig) -> cgroup_tree.Cgroups | None:
    if config.isolation is not Isolation.NAMESPACES or not config.cgroups:
        return None
    try:
        return cgroup_tree.discover()
    except OSError:
        return None


def serve(config: ServerConfig) -> None:
    """The fork server's loop: jobs on stdin; started / exited events on stdout."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    import grader.autograde.preload  # noqa: F401  (numpy, torch, IPython, the learner package)

    # every object loaded so far goes to the collector's permanent generation: a collection in
    # a child never walks them, so it writes none of their pages (each write is a page copied
    # out of the server's memory into the child's)
    gc.collect()
    gc.freeze()

    view = config.view() if config.isolation is Isolation.NAMESPACES else None
    server = Server(config, view, _discover_cgroups(config))
    if config.isolation is Isolation.NAMESPACES:
        confine.set_subreaper()  # a job's PID 1 whose keeper was killed comes back to us
        why = _confinement_problem(server)
        if why:
            _emit({"event": "error", "message": why})
            return
    _emit(
        {
            "event": "ready",
            "isolation": str(config.isolation),
            "cgroup": server.cgroups.kind if server.cgroups is not None else "none",
        }
    )
    try:
        _serve_jobs(server)
    except BrokenPipeError:  # the parent has gone: take the children with us, quietly
        server.shut_down()


def _confinement_problem(server: Server) -> str:
    """Probe the confinement, without cgroups if they cannot be joined: "" or why not."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="attention-probe-") as probe_dir:
        why = _probe(server, Path(probe_dir))
        if why and server.cgroups is not None:  # cgroups that cannot be joined: go without
            server.cgroups.close()
            server.cgroups = None
            why = _probe(server, Path(probe_dir))
    return why


def _serve_jobs(server: Server) -> None:
    """The loop: start jobs read on stdin, kill them at their limits, report their ends."""
    buffer = b""
    stdin = sys.stdin.buffer.fileno()
    children = server.children
    while True:
        now = time.monotonic()
        running = [c for c in children.values() if not c.timed_out and not c.reported]
        wait = min((c.deadline for c in running), default=None)
        ready, _, _ = select.select(
            [stdin, *children, *server.pipes], [], [], None if wait is None else max(0.0, wait - now)
        )
        _kill_overdue(server, running)
        for fd in ready:
            if fd == stdin:
                buffer = _start_jobs(server, buffer + _read_stdin(server, stdin))
            elif fd in server.pipes:
                if event := server.status(fd):
                    _emit(event)
            elif fd in children:
                if event := server.finish(fd):
                    _emit(event)
        server.reap_orphans()
        if server.cgroups is not None and server.cgroups.pending:
            server.cgroups.retry_pending()


def _kill_overdue(server: Server, running: list[Child]) -> None:
    """Kill every job past its time limit (by the server's clock, whatever the job does)."""
    now = time.monotonic()
    for child in running:
        if now >= child.deadline:
            child.timed_out = True
            server.kill(child)


def _read_stdin(server: Server, stdin: int) -> bytes:
    chunk = os.read(stdin, 1 << 16)
    if not chunk:  # the parent has gone: take the children with us
        server.shut_down()
    return chunk


def _start_jobs(server: Server, buffer: bytes) -> bytes:
    """Start the job of every whole line in ``buffer``; what is left of it."""
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        job = ChildJob.from_json(line.decode())
        if server.start(job) is None:
            _emit(exited_event(job.id, ChildExit.CHILD_NOT_STARTED, False))
            continue
        _emit({"event": "started", "id": job.id})
    return buffer


if __name__ == "__main__":
    from grader import decline_iri_checker

    decline_iri_checker()
    serve(ServerConfig.from_line(sys.stdin.buffer.readline()))  # the first line: the configuration
