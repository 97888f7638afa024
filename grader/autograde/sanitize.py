"""Putting a submitted notebook back in shape with nbgrader's own preprocessors.

ClearOutput, DeduplicateIds, OverwriteKernelspec, OverwriteCells (with missing grade cells
added back; the source's cell records read once per run) and CheckCellMetadata (its schema
compiled once), as ``nbgrader autograde`` runs them; then what we add: notes on what was
restored. (No text rule about the reference package: the grading child cannot import it, so
a solution that tries simply fails with an ImportError.)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cache

import jsonschema
import nbformat
from nbformat import NotebookNode
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.preprocessors import CheckCellMetadata, ClearOutput, DeduplicateIds, OverwriteKernelspec

from grader.autograde.gradebook import SharedOverwriteCells, SourceCells
from grader.autograde.lend import lend


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
    resources = {
        "nbgrader": {"db_url": db_url, "assignment": assignment, "notebook": notebook,
                     "student": student}
    }
    for preprocessor in (ClearOutput(), DeduplicateIds()):
        nb, resources = preprocessor.preprocess(nb, resources)
    for cell in nb.cells:  # DeduplicateIds leaves {} on the copies it drops: "old format"
        if cell.get("metadata", {}).get("nbgrader", None) == {}:
            del cell["metadata"]["nbgrader"]
    for preprocessor in (
        OverwriteKernelspec(),
        SharedOverwriteCells(source_cells),
        CheckCellMetadataOnce(),
    ):
        nb, resources = preprocessor.preprocess(nb, resources)
    nb = nbformat.from_dict(nb)  # cells nbgrader added back are plain dicts
    return Sanitized(nb, notes)


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's CheckCellMetadata, with its metadata schema checked and compiled once.

    nbgrader validates every cell's metadata with ``jsonschema.validate(metadata, schema)``,
    which first validates the schema itself against JSON Schema's meta-schema: about 80 ms of
    the 250 ms a submission spent here (cProfile, 60 submissions). For the length of
    nbgrader's own ``preprocess``, the name ``jsonschema`` in its validator module is lent
    :class:`_CompiledSchemas`, whose ``validate`` raises the same error.
    """

    def preprocess(self, nb: NotebookNode, resources: dict) -> tuple[NotebookNode, dict]:
        with lend(nbgrader_format, "jsonschema", _CompiledSchemas):
            return super().preprocess(nb, resources)


class _CompiledSchemas:
    """``jsonschema.validate`` without re-checking a schema it has seen before."""

    @staticmethod
    def validate(instance: object, schema: dict) -> None:
        validator = _compiled(json.dumps(schema, sort_keys=True))
        error = jsonschema.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:  # what jsonschema.validate raises, after its schema check
            raise error


@cache
def _compiled(schema_json: str) -> jsonschema.protocols.Validator:
    schema = json.loads(schema_json)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def _describe_tampering(nb: NotebookNode, source: NotebookNode) -> list[str]:
    """Human-readable notes on test and locked cells that were deleted, edited or retyped."""
    notes = []
    submitted: dict[str, list[NotebookNode]] = {}
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and meta.get("grade_id"):
            submitted.setdefault(meta["grade_id"], []).append(cell)
    for cell in source.cells:
        meta = cell.metadata.get("nbgrader")
        if not meta or not (meta.get("grade") or meta.get("locked")) or meta.get("solution"):
            continue
        grade_id = meta["grade_id"]
        copies = submitted.get(grade_id, [])
        kind = "test cell" if meta.get("grade") else "locked cell"
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
