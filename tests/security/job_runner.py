"""Run a few one-cell jobs in the grading sandbox, as whatever identity runs this script.

``python -m tests.security.job_runner`` (from the repository root, as root or through
``setpriv`` as uid 65534) reads one JSON object on stdin::

    {"cgroups": true, "jobs": [{"cells": ["source", ...], "limits": {"timeout": 20, ...}}]}

starts a fork server configured as grading configures it (``choose_isolation``,
``grading_config``), runs the jobs one after another and prints one JSON object:
``{"isolation", "cgroup", "server_pid", "jobs": [{"exitcode", "timed_out", "stdout",
"errors", "log"}]}``, ``stdout`` being each cell's printed text.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from dataclasses import fields, replace
from pathlib import Path

from grader.autograde.child_report import read_report
from grader.autograde.fork_client import ForkServer, choose_isolation, grading_config
from grader.autograde.fork_protocol import ChildJob, Limits, write_job_cells


def main() -> None:
    spec = json.loads(sys.stdin.read())
    work = Path(tempfile.mkdtemp(prefix="attention-jobs-"))
    results = []
    try:
        isolation = choose_isolation(accept_weak=False)
        config = grading_config(isolation, [work])
        if not spec.get("cgroups", True):
            config = replace(config, cgroups=False)
        with ForkServer(config) as server:
            server.wait_ready()
            for k, job in enumerate(spec["jobs"]):
                folder = work / f"j{k}"
                write_job_cells(folder, [(i, source, False) for i, source in enumerate(job["cells"])])
                known = {f.name for f in fields(Limits)}  # (an older sandbox has fewer)
                limits = Limits(**{k: v for k, v in job.get("limits", {}).items() if k in known})
                finished = server.run(ChildJob(f"j{k}", str(folder), limits, record=False))
                report = read_report(folder / "report")
                results.append(
                    {
                        "exitcode": finished.exitcode,
                        "timed_out": finished.timed_out,
                        "stdout": [
                            "".join(
                                o.get("text", "")
                                for o in line.outputs
                                if o.get("output_type") == "stream" and o.get("name") == "stdout"
                            )
                            for _, line in sorted(report.items())
                        ],
                        "errors": [
                            f"{o.get('ename')}: {o.get('evalue')}"
                            for _, line in sorted(report.items())
                            for o in line.outputs
                            if o.get("output_type") == "error"
                        ],
                        "log": (folder / "log").read_text(errors="replace")[-3000:],
                    }
                )
            answer = {
                "isolation": str(isolation),
                "cgroup": getattr(server, "cgroup", "none"),
                "server_pid": server.process.pid,
                "jobs": results,
            }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
