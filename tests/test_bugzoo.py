"""The bug zoo: each known-wrong implementation must fail its exercise's hidden tests, with
the diagnosis named in ``expect`` (see tests/bugzoo/__init__.py)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import tests.bugzoo
from tests.notebook_runner import (
    assignments,
    exercise_of,
    grade_id,
    is_test_cell,
    run_cells,
    source_notebook,
)


def _cases():
    for info in sorted(pkgutil.iter_modules(tests.bugzoo.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"tests.bugzoo.{info.name}")
        mark = getattr(pytest.mark, info.name[:4])
        for bug in module.BUGS:
            yield pytest.param(
                module.ASSIGNMENT, bug, marks=mark, id=f"{info.name}-{bug.exercise}-{bug.name}"
            )


CASES = list(_cases())


def test_every_exercise_of_every_chapter_has_a_zoo():
    """Each solution cell of each assignment's source has at least one known-wrong version."""
    zoo = {(c.values[0], c.values[1].exercise) for c in CASES}
    missing = [
        (assignment, grade_id(cell))
        for assignment in assignments()
        for cell in source_notebook(assignment).cells
        if cell.metadata.get("nbgrader", {}).get("solution")
        and not is_test_cell(cell)
        and cell.cell_type == "code"
        and (assignment, grade_id(cell)) not in zoo
    ]
    assert not missing, f"exercises without a bug in tests/bugzoo: {missing}"


@pytest.mark.parametrize("assignment,bug", CASES)
def test_bug_fails_hidden_tests(assignment, bug):
    outcome = run_cells(source_notebook(assignment), replace={bug.exercise: bug.code})
    mine = {k: v for k, v in outcome.items() if exercise_of(k) == bug.exercise}
    assert mine, f"no test cell belongs to {bug.exercise}"
    failures = [v for v in mine.values() if v]
    assert failures, f"bug {bug.name!r} passed every test of {bug.exercise}"
    if bug.expect:
        assert any(bug.expect in f for f in failures), (
            f"no failure names the bug ({bug.expect!r}); messages:\n" + "\n---\n".join(failures)
        )
