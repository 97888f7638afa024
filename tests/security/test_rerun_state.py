"""The "unchanged, keep the old grade" state: what it covers, and what is always re-graded."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import grader
from grader.autograde.folder_walk import code_fingerprint
from grader.autograde.results import Status, SubmissionResult
from grader.autograde.results import unchanged as _unchanged

pytestmark = [pytest.mark.security, pytest.mark.grading]


def test_editing_the_grader_code_changes_the_fingerprint(tmp_path, monkeypatch):
    copy = tmp_path / "grader"
    shutil.copytree(Path(grader.__file__).parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(grader, "__file__", str(copy / "__init__.py"))
    before = code_fingerprint()
    assert code_fingerprint() == before
    checks = copy / "checks.py"
    checks.write_text(checks.read_text() + "\n# a tolerance was changed here\n")
    assert code_fingerprint() != before


@pytest.mark.parametrize(
    "status,kept", [("graded", True), ("invalid", True), ("timeout", False), ("crashed", False)]
)
def test_only_finished_results_are_kept(tmp_path, status, kept):
    previous = tmp_path / "results.json"
    result = SubmissionResult("ann", "03_scaled_dot_product", "abc", "namespaces", Status(status))
    previous.write_text(json.dumps(result.to_json(), indent=1))
    assert _unchanged(previous, "abc") is kept
    assert _unchanged(previous, "abd") is False
    assert _unchanged(tmp_path / "missing.json", "abc") is False
    # a results.json that does not read back as a whole result (hand-made, cut short) is
    # graded again, whatever its status says
    previous.write_text(json.dumps({"fingerprint": "abc", "status": status}))
    assert _unchanged(previous, "abc") is False
