"""A grading job as plain data, for a worker on another machine: packed by the client, unpacked there.

:func:`pack_job` holds ``job.json`` and every file under the job's ``home/``, as bytes, with
the job's limits, record flag and salt, the isolation it must run at and the folders its
server must hide; no path of the client's disk. :func:`unpack_job` rebuilds a job folder like
the client's on the worker, refusing any file name that would leave it.
"""

from __future__ import annotations

import errno
from dataclasses import asdict
from pathlib import Path, PurePosixPath
from typing import Any

from grader.autograde.folder_walk import TRUSTED, walk_folder
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits
from grader.autograde.safe_open import read_small

MAX_PACKED_BYTES = 256 * 2**20  # job.json and the files beside a notebook, per job


def pack_job(job: ChildJob, hidden: tuple[str, ...], isolation: Isolation) -> dict[str, Any]:
    """Everything a worker needs to run ``job``, as plain data: no path of the client's disk.

    ``hidden`` are the client's secret folders (SUBMITTED, OUT, the source, ...): on a
    LocalCluster they are on the worker's disk too, so the worker's server hides them as well.
    Raises ValueError when the job's files are over ``MAX_PACKED_BYTES``.
    """
    folder = Path(job.folder)
    files: dict[str, bytes] = {}
    total = 0
    home = folder / "home"
    over = f"the files beside the notebook are over {MAX_PACKED_BYTES // 2**20} MB"
    # the parent copied them (without symlinks); the one walker lists them, following none
    for file in walk_folder(home, TRUSTED, read=False).files:
        try:
            data = read_small(file.path, MAX_PACKED_BYTES - total)
        except OSError as exc:
            if exc.errno == errno.EFBIG:
                raise ValueError(over) from exc
            raise
        total += len(data)
        files[file.relative.as_posix()] = data
    return {
        "id": job.id,
        "job_json": (folder / "job.json").read_bytes(),
        "files": files,
        "limits": asdict(job.limits),
        "record": job.record,
        "salt": job.salt,
        "isolation": str(isolation),
        "hidden": list(hidden),
    }


def _safe_relative(name: str) -> PurePosixPath:
    path = PurePosixPath(name)
    if path.is_absolute() or not path.parts or any(p in ("..", ".", "") for p in path.parts):
        raise ValueError(f"refusing a packed file name {name!r}")
    return path


def unpack_job(packed: dict[str, Any], folder: Path) -> ChildJob:
    """The worker's half: a job folder like the client's (``job.json``, ``home/``, ``root/``)."""
    (folder / "home").mkdir(parents=True)
    (folder / "root").mkdir()
    (folder / "job.json").write_bytes(packed["job_json"])
    for name, data in packed["files"].items():
        target = folder / "home" / _safe_relative(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return ChildJob(
        str(packed["id"]),
        str(folder),
        Limits(**packed["limits"]),
        bool(packed["record"]),
        int(packed.get("salt", 0)),
    )
