"""The nbgrader adapters (grader/autograde/nbgrader_adapters.py) fit the installed nbgrader,
and every name they lend inside nbgrader is nbgrader's own again after the call.

The adapters rebind names inside nbgrader's modules for the length of one call; one that
outlived its call would change nbgrader for everything else in the process, and an nbgrader
release outside the range they were written for may have moved the names they lend.
"""

from __future__ import annotations

from importlib.metadata import version

import jsonschema
import nbformat
import nbgrader.api
import pytest
from nbgrader.converters.autograde import Autograde
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.preprocessors import latesubmissions, overwritecells, overwritekernelspec, saveautogrades
from packaging.specifiers import SpecifierSet

from grader.autograde import nbgrader_adapters as adapters
from grader.autograde.gradebook import SourceCells


class Refused(Exception):
    """What the stand-in gradebook raises on any lookup."""


class StandInGradebook:
    """Records that nbgrader asked it (and so that the lent name was in place), then refuses."""

    def __init__(self, module: object) -> None:
        self.module = module
        self.lent_when_asked: list[bool] = []

    def __getattr__(self, name: str) -> object:
        self.lent_when_asked.append(self.module.Gradebook is not nbgrader.api.Gradebook)
        raise Refused(name)


def test_the_installed_nbgrader_is_one_the_adapters_are_written_for():
    installed = version("nbgrader")
    assert installed in SpecifierSet(adapters.NBGRADER_VERSIONS), (
        f"nbgrader {installed} is outside {adapters.NBGRADER_VERSIONS}: check every name "
        "grader/autograde/nbgrader_adapters.py lends, then widen the range"
    )


def test_lend_gives_the_name_back_also_after_an_error():
    original = nbgrader_format.jsonschema
    with pytest.raises(Refused), adapters.lend(nbgrader_format, "jsonschema", object()):
        assert nbgrader_format.jsonschema is not original
        raise Refused
    assert nbgrader_format.jsonschema is original


@pytest.mark.parametrize("module", [overwritecells, overwritekernelspec, latesubmissions, saveautogrades])
def test_the_lent_gradebook_is_given_back(module):
    with adapters.lent_gradebook(module, object()):
        assert module.Gradebook is not nbgrader.api.Gradebook
    assert module.Gradebook is nbgrader.api.Gradebook


def _notebook_with_a_grade_cell() -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(
        "assert True",
        metadata={
            "nbgrader": {
                "grade": True,
                "solution": False,
                "locked": True,
                "points": 1,
                "grade_id": "test_x",
                "schema_version": 3,
            }
        },
    )
    return nbformat.v4.new_notebook(cells=[cell])


@pytest.mark.parametrize(
    "module, make",
    [
        (overwritecells, lambda gb: adapters.SharedOverwriteCells(SourceCells(gb))),
        (overwritekernelspec, lambda gb: adapters.SharedOverwriteKernelspec(SourceCells(gb))),
        (latesubmissions, lambda gb: adapters.SharedAssignLatePenalties(gb)),
        (saveautogrades, lambda gb: adapters.SharedSaveAutoGrades(gb)),
    ],
    ids=["OverwriteCells", "OverwriteKernelspec", "AssignLatePenalties", "SaveAutoGrades"],
)
def test_each_shared_preprocessor_uses_the_run_gradebook_and_gives_nbgrader_its_own_back(module, make):
    gradebook = StandInGradebook(module)
    resources = adapters.nbgrader_resources("sqlite:///never-opened.db", "a", "a", "ann")
    with pytest.raises(Refused):
        make(gradebook).preprocess(_notebook_with_a_grade_cell(), resources)
    assert gradebook.lent_when_asked and all(gradebook.lent_when_asked)
    assert module.Gradebook is nbgrader.api.Gradebook


def test_the_compiled_schemas_are_given_back():
    with adapters.compiled_metadata_schemas():
        assert nbgrader_format.jsonschema is not jsonschema
    assert nbgrader_format.jsonschema is jsonschema
    adapters.CheckCellMetadataOnce().preprocess(_notebook_with_a_grade_cell(), {})
    assert nbgrader_format.jsonschema is jsonschema


def test_the_in_process_alembic_head_is_given_back():
    original = nbgrader.api.get_alembic_version
    with adapters.alembic_head_in_process():
        assert nbgrader.api.get_alembic_version is not original
        head = nbgrader.api.get_alembic_version()
    assert head and isinstance(head, str)
    assert nbgrader.api.get_alembic_version is original


def test_the_sanitizing_preprocessors_are_nbgraders_in_its_order():
    ours = adapters.sanitizing_preprocessors(SourceCells(StandInGradebook(overwritecells)))
    theirs = Autograde.class_traits()["sanitize_preprocessors"].default()
    assert len(ours) == len(theirs)
    assert all(isinstance(mine, kind) for mine, kind in zip(ours, theirs, strict=True))
