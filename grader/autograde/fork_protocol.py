"""What the parent and the fork server agree on: a job, its limits, the server's configuration.

The parent writes a job's folder (:func:`write_job_cells`: ``job.json``, ``home/``, an empty
``root/``) and sends the server one :class:`ChildJob` per line; the server runs under one
:class:`ServerConfig`, sent as its first line. The events the server answers with are
``ready`` / ``error`` once, then ``started`` and ``exited`` per job (:func:`exited_event`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from grader.autograde import mount_tree


class Isolation(StrEnum):
    NAMESPACES = "namespaces"  # the full confinement of ``confine`` and ``mount_tree``
    WEAK = "weak"  # own process group, limits, no_new_privs only (the instructor accepted it)
    NONE = "none"  # the learner's own self-check on their own machine: limits only


@dataclass(frozen=True)
class Limits:
    timeout: float = 60.0  # wall-clock seconds for the whole notebook
    # The job's memory: in its cgroup every page counts (all its processes, tmpfs, memfd),
    # and each process's address space on top of what it starts with.
    memory_bytes: int = 3 * 2**30
    # Without a cgroup: each process's address space on top of what it starts with.
    process_memory_bytes: int = 256 * 2**20
    file_bytes: int = 64 * 2**20  # largest file the child may write (the report included)
    processes: int = 16  # tasks (processes and threads) of the job, its keeper included (namespaces)
    files: int = 64  # open descriptors per process (namespaces)
    tmp_bytes: int = 64 * 2**20  # size of its home, /tmp and /dev/shm (each)


#: what a job whose notebook has a memory budget may hold besides the budgeted cell's own
#: allocations, in its cgroup: the pages it writes of the preloaded interpreter, IPython, the
#: other cells (an honest chapter 7 notebook peaks at 138 MiB in all, the budgeted cell included)
BUDGET_HEADROOM = 128 * 2**20


def budgeted_memory(limits: Limits, cells: list[dict[str, Any]]) -> int | None:
    """The memory of a whole job one of whose ``cells`` (``job.json``'s) has a memory budget:
    the smallest budget + BUDGET_HEADROOM, at most ``limits.memory_bytes``; None without one.

    Read by the trusted side only (the keeper, and PID 1 before any learner code), from what
    the parent wrote: no learner code can change it.
    """
    budgets = [int(c["memory_bytes"]) for c in cells if c.get("memory_bytes")]
    return min(min(budgets) + BUDGET_HEADROOM, limits.memory_bytes) if budgets else None


@dataclass(frozen=True)
class ChildJob:
    id: str  # opaque: says nothing about the student
    folder: str  # job.json, home/, root/ and, written by the child through its fds, report, log
    limits: Limits = field(default_factory=Limits)
    record: bool = True  # record check arguments for the parent (off for the self-check)
    salt: int = 0  # the per-job secret the checks draw their inputs from (0: the notebook's seeds)

    @classmethod
    def from_json(cls, text: str) -> ChildJob:
        data = json.loads(text)
        data["limits"] = Limits(**data["limits"])
        return cls(**data)


def write_job_cells(
    folder: Path,
    cells: list[tuple[int, str, bool]],
    memory_budgets: dict[int, int] | None = None,
    warnings_on_stdout: bool = False,
) -> None:
    """The parent's half of a job: the cells (index, source, is a test cell) for the child,
    for some cells the bytes they may allocate (``execution.execute_cells`` lowers the
    address-space limit to that before the cell runs), and whether warnings are shown on
    stdout (this course's notebooks, where a warning costs no points)."""
    budgets = memory_budgets or {}
    (folder / "home").mkdir(parents=True, exist_ok=True)
    (folder / "root").mkdir(exist_ok=True)
    (folder / "job.json").write_text(
        json.dumps(
            {
                "cells": [
                    {
                        "index": i,
                        "source": s,
                        "hidden": h,
                        "memory_bytes": budgets.get(i),
                        "warnings_on_stdout": warnings_on_stdout,
                    }
                    for i, s, h in cells
                ]
            }
        )
    )


@dataclass(frozen=True)
class ServerConfig:
    isolation: Isolation
    hidden: tuple[str, ...] = ()  # folders no child may see (source, OUT, SUBMITTED, work, grader)
    readonly: tuple[str, ...] = ()  # extra folders a child needs read-only
    cgroups: bool = True  # a cgroup per job where the machine allows it (False: tests only)

    def view(self) -> mount_tree.View:
        return mount_tree.View.for_this_python(self.readonly, self.hidden)

    def to_line(self) -> str:
        """The server's first line on stdin (never argv: a child's /proc/self/cmdline is its own)."""
        return (
            json.dumps(
                {
                    "isolation": str(self.isolation),
                    "hidden": list(self.hidden),
                    "readonly": list(self.readonly),
                    "cgroups": self.cgroups,
                }
            )
            + "\n"
        )

    @classmethod
    def from_line(cls, line: bytes) -> ServerConfig:
        raw = json.loads(line)
        return cls(
            Isolation(raw["isolation"]),
            tuple(raw.get("hidden", ())),
            tuple(raw.get("readonly", ())),
            bool(raw.get("cgroups", True)),
        )


def exited_event(job_id: str, code: int, timed_out: bool) -> dict[str, Any]:
    """How the server tells the parent that a job has ended (from ``waitpid``, never the job)."""
    return {"event": "exited", "id": job_id, "code": code, "timed_out": timed_out}
