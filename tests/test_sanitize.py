"""The sanitizer's metadata check (grader/autograde/sanitize.py) against nbgrader's own.

``CheckCellMetadataOnce`` runs nbgrader's ``CheckCellMetadata`` with the metadata schema
compiled once; on every notebook, valid or tampered with, it must decide exactly as
nbgrader does, and give nbgrader its ``jsonschema`` back afterwards.
"""

from __future__ import annotations

import copy

import jsonschema
import pytest
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.preprocessors import CheckCellMetadata

from grader.autograde.sanitize import CheckCellMetadataOnce
from tests.notebook_runner import grade_id, is_test_cell, source_notebook

A = "03_scaled_dot_product"


def tampered(edit) -> object:
    """The source notebook with ``edit(metadata)`` applied to its first test cell's metadata."""
    nb = copy.deepcopy(source_notebook(A))
    cell = next(c for c in nb.cells if is_test_cell(c))
    edit(cell.metadata.nbgrader)
    return nb


EDITS = {
    "unchanged": lambda m: None,
    "points as text": lambda m: m.update(points="ten"),
    "grade as text": lambda m: m.update(grade="yes"),
    "unknown key": lambda m: m.update(extra_credit=True),
    "no grade id": lambda m: m.pop("grade_id"),
    "old schema": lambda m: m.update(schema_version=1),
    "negative points": lambda m: m.update(points=-5),
}


def outcome(preprocessor, nb) -> str:
    try:
        preprocessor.preprocess(nb, {})
    except Exception as exc:  # the kind of refusal is what must agree
        return type(exc).__name__
    return "accepted"


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_decides_as_nbgrader_does(edit):
    ours = outcome(CheckCellMetadataOnce(), tampered(EDITS[edit]))
    theirs = outcome(CheckCellMetadata(), tampered(EDITS[edit]))
    assert ours == theirs
    assert nbgrader_format.jsonschema is jsonschema  # given back, also after a refusal


def test_a_schema_violation_is_refused():
    """Not every edit above may pass: the comparison would then prove nothing."""
    assert outcome(CheckCellMetadataOnce(), tampered(EDITS["points as text"])) != "accepted"
    assert outcome(CheckCellMetadataOnce(), tampered(EDITS["unchanged"])) == "accepted"
    assert grade_id(next(c for c in source_notebook(A).cells if is_test_cell(c)))
