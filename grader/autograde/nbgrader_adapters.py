"""Every place where the grader adapts nbgrader's internals, each for the length of one call.

The parent runs nbgrader's own preprocessors unchanged (no copy of their code to drift from
upstream). Where one of them builds something expensive on every call, the name it looks up
in its module is lent a cheaper equivalent for that call only and given back afterwards,
even on error (:func:`lend`). The parent calls nbgrader from one thread, so nothing else
sees a lent name. Written for the nbgrader releases of :data:`NBGRADER_VERSIONS`
(``tests/test_nbgrader_adapters.py`` checks the installed one and that every name is given
back):

- ``Gradebook`` in ``overwritecells``, ``overwritekernelspec``, ``latesubmissions`` and
  ``saveautogrades``: these preprocessors open (and migrate-check) a new gradebook for every
  notebook, over 10 ms each; the ``Shared*`` subclasses lend them the run's open one
  (:func:`lent_gradebook`), and the first two the source's records read once per run;
- ``jsonschema`` in ``nbgrader.nbgraderformat.common``: CheckCellMetadata re-checks its
  schema against the meta-schema for every cell; :func:`compiled_metadata_schemas` lends a
  validator that compiles each schema once;
- ``nbgrader.api.get_alembic_version``: a new gradebook asks ``alembic heads`` in a
  subprocess (4 s here); :func:`alembic_head_in_process` answers from the migration scripts.

:func:`sanitizing_preprocessors` is nbgrader autograde's list of sanitizing preprocessors,
written once, with these adapters in place.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jsonschema
import nbgrader
import nbgrader.api
from nbformat import NotebookNode
from nbgrader.api import Gradebook
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.preprocessors import (
    AssignLatePenalties,
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    OverwriteCells,
    OverwriteKernelspec,
    SaveAutoGrades,
    latesubmissions,
    overwritecells,
    overwritekernelspec,
    saveautogrades,
)

if TYPE_CHECKING:
    from nbgrader.preprocessors import NbGraderPreprocessor

    from grader.autograde.gradebook import SourceCells

# nbgrader has neither annotations nor stubs: its preprocessors are Any to mypy, so each class
# below that adapts one subclasses Any (``type: ignore[misc]``), and each ``preprocess`` says
# the types nbgrader's own docstrings give: (notebook, resources) -> (notebook, resources).
Resources = dict[str, Any]

NBGRADER_VERSIONS = ">=0.9,<0.10"  # the releases whose internals these adapters are written for


@contextmanager
def lend(module: Any, name: str, value: Any) -> Iterator[None]:
    """Within the ``with`` block, ``module.<name>`` is ``value``; the original afterwards."""
    original = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, original)


def nbgrader_resources(db_url: str, assignment: str, notebook: str, student: str) -> dict[str, Any]:
    """The ``resources`` nbgrader's gradebook preprocessors read: which notebook, which gradebook."""
    return {
        "nbgrader": {"db_url": db_url, "assignment": assignment, "notebook": notebook, "student": student}
    }


# ------------------------------------------------------------------ one open gradebook


class _Lent:
    """The run's open gradebook, lent to one nbgrader preprocessor: ``with`` leaves it open.

    With ``source_cells``, the lookups named in ``cached`` answer from there.
    """

    def __init__(
        self, gradebook: Gradebook, source_cells: SourceCells | None = None, cached: tuple[str, ...] = ()
    ) -> None:
        self._gradebook = gradebook
        self._source_cells = source_cells
        self._cached = cached

    def __getattr__(self, name: str) -> Any:
        if self._source_cells is not None and name in self._cached:
            return getattr(self._source_cells, name)
        return getattr(self._gradebook, name)

    def __enter__(self) -> _Lent:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


def lent_gradebook(
    module: Any, gradebook: Gradebook, source_cells: SourceCells | None = None, cached: tuple[str, ...] = ()
) -> AbstractContextManager[None]:
    """For the duration of one call, ``module``'s ``Gradebook(db_url)`` is the run's ``gradebook``
    (its lookups named in ``cached`` answered by ``source_cells``)."""
    lent = _Lent(gradebook, source_cells, cached)
    return lend(module, "Gradebook", lambda *args, **kwargs: lent)


class SharedOverwriteCells(OverwriteCells):  # type: ignore[misc]
    """nbgrader's OverwriteCells (missing grade cells added back), on the run's gradebook,
    with the source's cell records read once per run (``gradebook.SourceCells``)."""

    def __init__(self, source_cells: SourceCells, **kwargs: Any) -> None:
        super().__init__(add_missing_cells=True, **kwargs)
        self.source_cells = source_cells

    def preprocess(self, nb: NotebookNode, resources: Resources) -> tuple[NotebookNode, Resources]:
        with lent_gradebook(
            overwritecells,
            self.source_cells.gradebook,
            self.source_cells,
            ("find_source_cell", "find_graded_cell"),
        ):
            nb, resources = super().preprocess(nb, resources)
        return nb, resources


class SharedOverwriteKernelspec(OverwriteKernelspec):  # type: ignore[misc]
    """nbgrader's OverwriteKernelspec (the source's kernelspec wins), on the run's gradebook,
    with the source notebook's record read once per run (``gradebook.SourceCells``)."""

    def __init__(self, source_cells: SourceCells, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.source_cells = source_cells

    def preprocess(self, nb: NotebookNode, resources: Resources) -> tuple[NotebookNode, Resources]:
        with lent_gradebook(
            overwritekernelspec, self.source_cells.gradebook, self.source_cells, ("find_notebook",)
        ):
            nb, resources = super().preprocess(nb, resources)
        return nb, resources


class _OnTheRunsGradebook:
    """An nbgrader preprocessor whose module (``lends_in``) is lent the run's gradebook."""

    lends_in: Any

    def __init__(self, gradebook: Gradebook, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.shared = gradebook

    def preprocess(self, nb: NotebookNode, resources: Resources) -> tuple[NotebookNode, Resources]:
        with lent_gradebook(self.lends_in, self.shared):
            # a mixin: super() is the nbgrader preprocessor after it in the subclass's MRO
            nb, resources = super().preprocess(nb, resources)  # type: ignore[misc]
        return nb, resources


class SharedAssignLatePenalties(_OnTheRunsGradebook, AssignLatePenalties):  # type: ignore[misc]
    """nbgrader's AssignLatePenalties (the plugin's penalty per notebook, between 0 and the
    notebook's score), on the run's gradebook; ``config`` carries the plugin and its setting."""

    lends_in = latesubmissions


class SharedSaveAutoGrades(_OnTheRunsGradebook, SaveAutoGrades):  # type: ignore[misc]
    """nbgrader's SaveAutoGrades (determine_grade -> auto_score), on the run's gradebook."""

    lends_in = saveautogrades


# ------------------------------------------------------------------ the metadata schema


class _CompiledSchemas:
    """``jsonschema.validate`` without re-checking a schema it has seen before."""

    @staticmethod
    def validate(instance: Any, schema: dict[str, Any]) -> None:
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


def compiled_metadata_schemas() -> AbstractContextManager[None]:
    """For the duration of one call, nbgrader's metadata validator checks each schema once."""
    return lend(nbgrader_format, "jsonschema", _CompiledSchemas)


class CheckCellMetadataOnce(CheckCellMetadata):  # type: ignore[misc]
    """nbgrader's CheckCellMetadata, with its metadata schema checked and compiled once.

    nbgrader validates every cell's metadata with ``jsonschema.validate(metadata, schema)``,
    which first validates the schema itself against JSON Schema's meta-schema: about 80 ms of
    the 250 ms a submission spent here (cProfile, 60 submissions). For the length of
    nbgrader's own ``preprocess``, the name ``jsonschema`` in its validator module is lent
    :class:`_CompiledSchemas`, whose ``validate`` raises the same error.
    """

    def preprocess(self, nb: NotebookNode, resources: Resources) -> tuple[NotebookNode, Resources]:
        with compiled_metadata_schemas():
            nb, resources = super().preprocess(nb, resources)
        return nb, resources


# ------------------------------------------------------------------ a new gradebook's revision


def _alembic_head() -> str:
    """The newest gradebook schema revision, read in-process from nbgrader's migration scripts
    (the same answer as ``alembic heads``)."""
    from alembic.config import Config as AlembicConfig
    from alembic.script import ScriptDirectory

    config = AlembicConfig()
    config.set_main_option("script_location", str(Path(nbgrader.__file__).parent / "alembic"))
    head = ScriptDirectory.from_config(config).get_current_head()
    if head is None:
        raise LookupError("nbgrader's alembic folder holds no migration")
    return head


def alembic_head_in_process() -> AbstractContextManager[None]:
    """For the duration of one call, a gradebook nbgrader creates is stamped without a subprocess."""
    return lend(nbgrader.api, "get_alembic_version", _alembic_head)


# ------------------------------------------------------------------ the sanitizing preprocessors


class DeduplicateIdsCleanly(DeduplicateIds):  # type: ignore[misc]
    """nbgrader's DeduplicateIds, without the empty ``nbgrader`` metadata it leaves on the
    copies it drops (an empty dict makes nbgrader call the notebook "old format")."""

    def preprocess(self, nb: NotebookNode, resources: Resources) -> tuple[NotebookNode, Resources]:
        nb, resources = super().preprocess(nb, resources)
        for cell in nb.cells:
            if cell.get("metadata", {}).get("nbgrader", None) == {}:
                del cell["metadata"]["nbgrader"]
        return nb, resources


def sanitizing_preprocessors(source_cells: SourceCells) -> list[NbGraderPreprocessor]:
    """nbgrader autograde's ``sanitize_preprocessors``, in its order, as adapted here."""
    return [
        ClearOutput(),
        DeduplicateIdsCleanly(),
        SharedOverwriteKernelspec(source_cells),
        SharedOverwriteCells(source_cells),
        CheckCellMetadataOnce(),
    ]
