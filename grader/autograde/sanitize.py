"""Putting a submitted notebook back in shape with nbgrader's own preprocessors.

The preprocessors ``nbgrader autograde`` sanitizes with, in its order and as adapted in
``nbgrader_adapters.sanitizing_preprocessors`` (test and locked cells restored from the
source's records, missing grade cells added back, the metadata checked); then what we add:
notes on what was deleted, edited or retyped. (No text rule about the reference package: the
grading child cannot import it, so a solution that tries simply fails with an ImportError.)
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from nbformat import NotebookNode

from attention_learner.cell_rules import is_grade_cell, is_locked_cell, nbgrader_meta
from grader.autograde.gradebook import SourceCells
from grader.autograde.nbgrader_adapters import nbgrader_resources, sanitizing_preprocessors
from grader.autograde.notebook_file import notebook_node


@dataclass
class Sanitized:
    nb: NotebookNode
    notes: list[str] = field(default_factory=list)


def sanitize(
    nb: NotebookNode,
    source: NotebookNode,
    source_cells: SourceCells,
    db_url: str,
    assignment: str,
    notebook: str,
    student: str,
) -> Sanitized:
    """Restore test and locked cells from the gradebook; note what changed and flag cheats."""
    notes = _describe_tampering(nb, source)
    resources = nbgrader_resources(db_url, assignment, notebook, student)
    for preprocessor in sanitizing_preprocessors(source_cells):
        nb, resources = preprocessor.preprocess(nb, resources)
    nb = notebook_node(nb)  # cells nbgrader added back are plain dicts
    return Sanitized(nb, notes)


def _describe_tampering(nb: NotebookNode, source: NotebookNode) -> list[str]:
    """Human-readable notes on test and locked cells that were deleted, edited or retyped."""
    notes = []
    submitted: dict[str, list[NotebookNode]] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id"):
            submitted.setdefault(meta["grade_id"], []).append(cell)
    for cell in source.cells:
        if not is_locked_cell(cell):
            continue
        grade_id = nbgrader_meta(cell)["grade_id"]
        copies = submitted.get(grade_id, [])
        kind = "test cell" if is_grade_cell(cell) else "locked cell"
        if not copies:
            notes.append(f"{kind} {grade_id!r} was deleted; it was restored from the source")
            continue
        if len(copies) > 1:
            notes.append(f"grade id {grade_id!r} appeared {len(copies)} times; one copy was kept")
        mine = copies[-1]
        if mine.get("cell_type") != cell.cell_type:
            notes.append(f"{kind} {grade_id!r} had its type changed; it was restored")
        elif not str(mine.get("source", "")).strip():
            notes.append(f"{kind} {grade_id!r} was emptied; it was restored from the source")
        elif _visible(mine.get("source", "")) != _visible(cell.source):
            notes.append(f"{kind} {grade_id!r} was edited; the original was restored")
    return notes


def _visible(text: str) -> str:
    """A test cell's text without its hidden block, as the learner's copy shows it."""
    text = "".join(text) if isinstance(text, list) else text
    return re.sub(r"### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS\n?", "", text, flags=re.S).strip()
