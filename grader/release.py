"""``python -m grader release``: solutions/<a>/<a>.ipynb -> chapters/<a>/<a>.ipynb.

The learner notebook is what nbgrader's generate_assignment makes of the source (solutions
replaced by ``raise NotImplementedError()``, hidden tests removed, cells locked and
checksummed); only the notebook is copied into chapters/, whose narrative pages live beside
it. A learner notebook is never edited by hand: a test fails when it is out of date.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import nbformat

from grader.nbgrader_course import generate_assignment, temporary_course
from grader.paths import CHAPTERS, SOLUTIONS


def assignments(source: Path = SOLUTIONS) -> list[str]:
    """Every assignment id that has a source notebook of its own name."""
    return sorted(p.parent.name for p in source.glob("*/*.ipynb") if p.stem == p.parent.name)


def release(names: list[str] | None = None, source: Path = SOLUTIONS, target: Path = CHAPTERS) -> list[Path]:
    """Generate the learner notebooks of ``names`` (default: all) and copy them to ``target``."""
    names = names or assignments(source)
    unknown = sorted(set(names) - set(assignments(source)))
    if unknown:
        raise SystemExit(f"no source notebook for {', '.join(unknown)} in {source}")
    written = []
    with temporary_course(source) as api:
        for name in names:
            released = generate_assignment(api, name) / f"{name}.ipynb"
            destination = target / name / f"{name}.ipynb"
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(released, destination)
            written.append(destination)
    return written


def learner_notebook_text(name: str, source: Path = SOLUTIONS) -> str:
    """What ``release`` would write for ``name`` today, as text (for the sync test)."""
    with temporary_course(source) as api:
        released = generate_assignment(api, name) / f"{name}.ipynb"
        return nbformat.writes(nbformat.read(released, as_version=4))
