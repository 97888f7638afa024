"""Where no confinement is possible the run refuses, unless the instructor accepts weak isolation."""

from __future__ import annotations

import json
import shutil

import nbformat
import pytest

from grader.autograde import confine, fork_client
from grader.autograde.executor import IsolationUnavailable
from grader.autograde.fork_client import ForkServer
from grader.autograde.fork_protocol import Isolation, ServerConfig
from grader.autograde.pipeline import GradeOptions
from grader.autograde.session import autograde
from grader.paths import SOLUTIONS
from tests.notebook_runner import learner_notebook

pytestmark = [pytest.mark.security, pytest.mark.grading]

A = "03_scaled_dot_product"


def test_refuses_without_root_or_user_namespaces(monkeypatch):
    monkeypatch.setattr(fork_client.os, "getuid", lambda: 1000)
    monkeypatch.setattr(confine, "can_use_user_namespaces", lambda: False)
    with pytest.raises(IsolationUnavailable, match="accept-weak-isolation"):
        fork_client.choose_isolation(accept_weak=False)
    assert fork_client.choose_isolation(accept_weak=True) is Isolation.WEAK


def test_namespaces_are_chosen_where_they_work():
    assert fork_client.choose_isolation(accept_weak=False) is Isolation.NAMESPACES


@pytest.mark.slow
def test_weak_isolation_is_written_into_every_result(tmp_path):
    source = tmp_path / "source"
    shutil.copytree(SOLUTIONS / A, source / A)
    (tmp_path / "submitted" / "ann" / A).mkdir(parents=True)
    nbformat.write(learner_notebook(A), tmp_path / "submitted" / "ann" / A / f"{A}.ipynb")
    work = tmp_path / "work"
    work.mkdir()
    server = ForkServer(ServerConfig(Isolation.WEAK))
    autograde(
        tmp_path / "submitted",
        tmp_path / "out",
        source,
        server=server,
        work=work,
        options=GradeOptions(workers=1, timeout=60, progress=False),
    )
    result = json.loads((tmp_path / "out" / "ann" / A / "results.json").read_text())
    assert result["isolation"] == "weak"
    assert any("weak isolation" in flag for flag in result["flags"])
    assert result["status"] == "graded" and result["score"] == 0
