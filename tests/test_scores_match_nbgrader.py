"""Our scores equal plain `nbgrader autograde`'s on chapter 3 submissions: correct, stubbed,
partly wrong (no sqrt(d_k), softmax over the wrong axis), half done, and one whose own code
prints a warning. The benchmark script builds them and compares every test cell; it exits 1
on any difference."""

from __future__ import annotations

import subprocess
import sys

import pytest

from grader.paths import ROOT

pytestmark = [pytest.mark.grading, pytest.mark.slow, pytest.mark.ch03]


def test_every_test_cell_scores_as_in_nbgrader():
    run = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "grading.py"), "--n", "6"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "scores agree on 6 of 6 submissions" in run.stdout, run.stdout[-3000:]
    for variant in ("correct", "stubs", "no_sqrt", "warns", "wrong_axis", "half_done"):
        assert variant in run.stdout
