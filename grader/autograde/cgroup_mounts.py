"""Where this process's cgroups are, read from ``/proc/self/cgroup`` and ``/proc/self/mountinfo``.

Pure parsing, no file is touched: ``cgroups`` turns the answers into the folders under
which a fork server makes its run's cgroups (one per v1 hierarchy, or the v2 one).
"""

from __future__ import annotations

from pathlib import Path


def own_paths(proc_cgroup: str) -> tuple[dict[str, str], str | None]:
    """From /proc/self/cgroup: v1 controller -> the cgroup path, and the v2 path (or None)."""
    v1: dict[str, str] = {}
    v2 = None
    for line in proc_cgroup.splitlines():
        number, controllers, path = line.split(":", 2)
        if number == "0" and controllers == "":
            v2 = path
        for name in controllers.split(","):
            if name:
                v1[name] = path
    return v1, v2


def mounts(mountinfo: str) -> tuple[dict[str, tuple[str, str]], tuple[str, str] | None]:
    """From /proc/self/mountinfo: v1 controller -> (mount point, the cgroup it shows), and
    the same for the cgroup2 mount."""
    v1: dict[str, tuple[str, str]] = {}
    v2 = None
    for line in mountinfo.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        dash = fields.index("-")
        root, point, fstype = (f.replace("\\040", " ") for f in (fields[3], fields[4], fields[dash + 1]))
        if fstype == "cgroup":
            for option in fields[dash + 3].split(","):
                v1.setdefault(option, (point, root))
        elif fstype == "cgroup2" and v2 is None:
            v2 = (point, root)
    return v1, v2


def folder_of(mount: tuple[str, str], own: str) -> Path | None:
    """The folder of cgroup ``own`` in a hierarchy mounted as ``mount`` (None: not in it)."""
    point, root = mount
    root = root.rstrip("/")
    if own != root and not own.startswith(root + "/"):
        return None
    return Path(point + own[len(root) :].rstrip("/"))
