"""Finding, making and removing a run's cgroups (``grader/autograde/cgroups.py``).

The cgroup v1 case is what these machines have (as root): it is exercised for real here and,
with jobs in it, in ``test_resources_round2.py``. Their cgroup v2 hierarchy delegates neither
``memory`` nor ``pids``, so the v2 case is checked against a stand-in folder: which folder is
chosen and which limits are written, not what the kernel does with them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.autograde import cgroups as cgroup_tree

pytestmark = [pytest.mark.security, pytest.mark.grading]

MOUNTINFO_V2 = "30 25 0:26 / {point} rw,nosuid - cgroup2 cgroup2 rw\n"
MOUNTINFO_V1 = (
    "31 25 0:27 / {point}/memory rw - cgroup cgroup rw,memory\n"
    "32 25 0:28 /docker/abc {point}/pids rw - cgroup cgroup rw,pids\n"
)


def test_v1_folders_follow_the_mount_root():
    """A hierarchy mounted from a sub-cgroup (a container's) maps /proc/self/cgroup paths."""
    bases = cgroup_tree.discover_bases(
        MOUNTINFO_V1.format(point="/cg"), "4:memory:/grading\n8:pids:/docker/abc/grading\n"
    )
    assert bases == [Path("/cg/memory/grading"), Path("/cg/pids/grading")]


def test_v2_where_the_subtree_is_delegated(tmp_path):
    own = tmp_path / "user.slice" / "grader"
    own.mkdir(parents=True)
    (own / "cgroup.controllers").write_text("cpu memory pids\n")
    (own / "cgroup.subtree_control").write_text("memory pids\n")
    found = cgroup_tree.discover(MOUNTINFO_V2.format(point=tmp_path), "0::/user.slice/grader\n")
    assert found is not None and found.kind == "v2" and found.bases == (own,)
    run = found.runs[0]
    assert run.is_dir() and run.name == f"attention-{os.getpid()}-{cgroup_tree._starttime(os.getpid())}"
    assert (run / "cgroup.subtree_control").read_text() == "+memory +pids"
    run.joinpath("cgroup.subtree_control").unlink()
    found.close()
    assert not run.exists()
    limits = dict(found._limits(3 * 2**30, 16))  # what job() writes into each job's folder
    assert limits == {
        "memory.max": str(3 * 2**30),
        "memory.swap.max": "0",
        "memory.oom.group": "1",
        "pids.max": "16",
    }


def test_v2_without_the_controllers_is_not_used(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("hugetlb\n")  # these machines' v2 root
    assert cgroup_tree.discover(MOUNTINFO_V2.format(point=tmp_path), "0::/\n") is None


def test_v2_that_refuses_the_controllers_is_not_used(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    (tmp_path / "cgroup.subtree_control").mkdir()  # writing it fails, as EBUSY would
    assert cgroup_tree.discover(MOUNTINFO_V2.format(point=tmp_path), "0::/\n") is None


@pytest.mark.skipif(os.getuid() != 0, reason="cgroup v1 folders can be made by root only")
def test_a_dead_servers_run_folder_is_removed_and_a_live_ones_kept():
    bases = [b for b in cgroup_tree.discover_bases() if b.is_dir()]
    assert bases, "as root these machines have cgroup v1 memory and pids"
    dead = [base / "attention-999999999-1" for base in bases]
    alive = [base / f"attention-{os.getpid()}-{cgroup_tree._starttime(os.getpid())}" for base in bases]
    try:
        for folder in dead + alive:
            (folder / "job7").mkdir(parents=True)
        assert not cgroup_tree.remove_stale(bases)
        assert not any(f.exists() for f in dead)
        assert all((f / "job7").is_dir() for f in alive)
    finally:
        for folder in dead + alive:
            for job in (folder / "job7", folder):
                if job.exists():
                    job.rmdir()
