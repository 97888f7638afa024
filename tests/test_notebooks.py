"""Every exercise notebook: well-formed for nbgrader, passes with its solutions, fails as
released, and chapters/ holds exactly what `python -m grader release` makes of solutions/."""

from __future__ import annotations

import re

import nbformat
import pytest

from grader.release import learner_notebook_text
from tests.notebook_runner import (
    assignments,
    grade_id,
    is_test_cell,
    learner_notebook,
    run_cells,
    source_notebook,
)

ASSIGNMENTS = assignments()


def marks(assignment: str) -> list:
    return [getattr(pytest.mark, f"ch{assignment[:2]}")]


PARAMS = [pytest.param(a, marks=marks(a), id=a) for a in ASSIGNMENTS]


def test_there_are_assignments():
    assert "03_scaled_dot_product" in ASSIGNMENTS


@pytest.mark.parametrize("assignment", PARAMS)
def test_source_is_well_formed(assignment):
    nb = source_notebook(assignment)
    nbformat.validate(nb)
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
    ids = [grade_id(c) for c in nb.cells if grade_id(c)]
    assert len(ids) == len(set(ids)), "duplicate grade ids"
    for cell in nb.cells:
        assert cell.metadata.get("nbgrader", None) != {}, "an empty nbgrader dict is 'old format'"
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, "outputs must be stripped"
        if is_test_cell(cell):
            assert re.fullmatch(r"test_[A-Za-z0-9_]+", grade_id(cell)), grade_id(cell)
            assert "check(" in cell.source, f"{grade_id(cell)} makes no check() call"
            exercise = grade_id(cell).removeprefix("test_").split("__")[0]
            assert exercise in ids, f"{grade_id(cell)} belongs to no solution cell"
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            assert "grader.reference" not in cell.source
        if cell.cell_type == "code":  # a notebook needs only the learner package, never the grader
            assert not re.search(r"^\s*(from|import)\s+grader\b", cell.source, re.M), (
                f"{grade_id(cell) or 'a cell'} imports the grader package"
            )


@pytest.mark.parametrize("assignment", PARAMS)
def test_solutions_pass_every_test(assignment):
    outcome = run_cells(source_notebook(assignment))
    assert outcome and all(v == "" for v in outcome.values()), outcome


@pytest.mark.parametrize("assignment", PARAMS)
def test_released_notebook_fails_every_test_cleanly(assignment):
    outcome = run_cells(learner_notebook(assignment))
    assert outcome and all(v for v in outcome.values()), outcome
    assert all("NotImplementedError" in v or "not implemented" in v for v in outcome.values())


@pytest.mark.parametrize("assignment", PARAMS)
def test_learner_notebook_has_no_solution_or_hidden_test(assignment):
    text = nbformat.writes(learner_notebook(assignment))
    assert "BEGIN SOLUTION" not in text and "BEGIN HIDDEN TESTS" not in text


@pytest.mark.parametrize("assignment", PARAMS)
def test_chapters_in_sync_with_solutions(assignment):
    committed = nbformat.writes(learner_notebook(assignment))
    assert committed == learner_notebook_text(assignment), (
        f"chapters/{assignment} is out of date: run `python -m grader release {assignment}`"
    )
