"""Build the learner package's wheel the way pip would, from a clean copy of its source.

Two test modules need the wheel (what it holds; a fresh venv that installs it). Building
from ``learner/`` in place would leave ``build/`` and ``*.egg-info`` in the checkout, and a
stale ``build/lib`` keeps modules that were since removed, which setuptools would pack into
the wheel: so the source is copied first, without those folders.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from grader.paths import ROOT

LEARNER = ROOT / "learner"


def build_learner_wheel(folder: Path) -> Path:
    """The wheel of ``learner/`` built in ``folder`` (no build isolation, so no network).

    Raises AssertionError with pip's own output if the build fails (the backend needs
    setuptools>=77, which the test extra pins).
    """
    source = folder / "source"
    shutil.copytree(
        LEARNER, source, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__")
    )
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         str(source), "-w", str(folder / "wheel")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, f"building the learner wheel failed:\n{done.stdout}\n{done.stderr}"
    (wheel,) = (folder / "wheel").glob("attention_learner-*.whl")
    return wheel
