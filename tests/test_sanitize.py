"""The sanitizer's metadata check (grader/autograde/nbgrader_adapters.py) against nbgrader's own.

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

from grader.autograde.nbgrader_adapters import CheckCellMetadataOnce
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


def test_source_cells_answer_as_the_gradebook_does(tmp_path):
    """Each record once, with the gradebook's values; a missing one fails every time."""
    from nbgrader.api import Gradebook, MissingEntry

    from grader.autograde.gradebook import SourceCells
    from grader.nbgrader_course import generate_assignment, temporary_course
    from grader.paths import SOLUTIONS

    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with temporary_course(SOLUTIONS, db_url) as api:
        generate_assignment(api, A)
    gradebook = Gradebook(db_url)
    try:
        cells = SourceCells(gradebook)
        test_id = grade_id(next(c for c in source_notebook(A).cells if is_test_cell(c)))
        row = gradebook.find_source_cell(test_id, A, A)
        first = cells.find_source_cell(test_id, A, A)
        assert (first.source, first.checksum, first.locked, first.cell_type) == (
            row.source, row.checksum, row.locked, row.cell_type)  # fmt: skip
        assert cells.find_source_cell(test_id, A, A) is first  # read once
        assert cells.find_graded_cell(test_id, A, A).max_score == gradebook.find_graded_cell(
            test_id, A, A).max_score  # fmt: skip
        for _ in range(2):
            with pytest.raises(MissingEntry):
                cells.find_source_cell("no_such_cell", A, A)
    finally:
        gradebook.close()
