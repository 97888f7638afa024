"""``python -m grader release``: solutions/<a>/<a>.ipynb -> chapters/<a>/<a>.ipynb, and the
expected values of the visible tests -> learner/attention_learner/data/.

The learner notebook is what nbgrader's generate_assignment makes of the source (solutions
replaced by ``raise NotImplementedError()``, hidden tests removed, cells locked and
checksummed); only the notebook is copied into chapters/, whose narrative pages live beside
it. A learner notebook is never edited by hand: a test fails when it is out of date.

The learner package judges the visible tests in a learner's kernel without any reference
code: for every visible ``check(...)`` call of a source notebook's test cells (the part above
``### BEGIN HIDDEN TESTS``) release computes the reference outputs and the outputs of every
classic bug of that exercise on the call's inputs, and writes them as ``.npz`` data
(:mod:`attention_learner.expected`). A test fails when that data is out of date too.

Before generating, release writes every exercise's rules (:mod:`attention_learner.rules`, the
one table of what earns nothing) into the marked block of the markdown cell that introduces
the exercise (:func:`state_rules`), so that the text and the judging cannot disagree; and it
derives every install instruction (the notebooks' install cell,
the documents' pip lines, ``binder/requirements.txt``) from the repository URL and the learner
package's version (:mod:`grader.course_location`).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import numpy as np

from attention_learner import expected as shipped_data
from attention_learner import rules as rule_table
from attention_learner.cell_rules import (
    check_calls,
    is_solution_cell,
    is_test_cell,
    nbgrader_meta,
    visible_part,
)
from grader.course_location import derive_install_references
from grader.exercises import get_exercise
from grader.nbgrader_course import generate_assignment, temporary_course
from grader.paths import CHAPTERS, SOLUTIONS


def assignments(source: Path = SOLUTIONS) -> list[str]:
    """Every assignment id that has a source notebook of its own name."""
    return sorted(p.parent.name for p in source.glob("*/*.ipynb") if p.stem == p.parent.name)


def release(
    names: list[str] | None = None,
    source: Path = SOLUTIONS,
    target: Path = CHAPTERS,
    say: Callable[[str], None] = print,
) -> list[Path]:
    """Generate the learner notebooks of ``names`` (default: all), copy them to ``target``, and
    write the expected values of their visible checks; returns the files written. ``say``
    gets one line per assignment: what was written, and how long it took."""
    names = names or assignments(source)
    unknown = sorted(set(names) - set(assignments(source)))
    if unknown:
        raise SystemExit(f"no source notebook for {', '.join(unknown)} in {source}")
    written = [path for n in names if (path := source / n / f"{n}.ipynb") and state_rules(path)]
    written += derive_install_references([source / n / f"{n}.ipynb" for n in names])
    with temporary_course(source) as api:
        for name in names:
            start = time.monotonic()
            released = generate_assignment(api, name) / f"{name}.ipynb"
            destination = target / name / f"{name}.ipynb"
            rewritten = not (destination.is_file() and destination.read_bytes() == released.read_bytes())
            if rewritten:  # unchanged: not rewritten, not reported
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(released, destination)
                written.append(destination)
            data = write_expected_data([name], source)
            written += data
            say(
                f"{name}: learner notebook {'written' if rewritten else 'up to date'}, "
                f"{len(data)} expected-data files written, in {time.monotonic() - start:.1f} s"
            )
    return written


def exercise_cells(nb: nbformat.NotebookNode) -> list[tuple[str, int]]:
    """(exercise, index of the markdown cell that introduces it) for every solution code cell of
    ``nb``: the nearest markdown cell above the solution."""
    found, markdown = [], None
    for index, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            markdown = index
        elif is_solution_cell(cell) and markdown is not None:
            found.append((nbgrader_meta(cell)["grade_id"], markdown))
    return found


def with_rules(text: str, exercises: list[str]) -> str:
    """``text`` (an exercise's markdown) whose rules block states the rules of ``exercises`` (those
    it introduces) today: the block between the markers is replaced, or appended when there is none."""
    block = rule_table.rules_text([r for ex in exercises for r in rule_table.exercise_rules(ex)])
    begin, end = text.find(rule_table.BEGIN), text.find(rule_table.END)
    if begin >= 0 and end > begin:
        return text[:begin] + block + text[end + len(rule_table.END) :]
    return text.rstrip("\n") + "\n\n" + block


def state_rules(path: Path) -> bool:
    """Write every exercise's rules into its markdown cell of the source notebook ``path``;
    whether the file changed."""
    nb = nbformat.read(path, as_version=4)
    changed = False
    introduced: dict[int, list[str]] = {}
    for exercise, index in exercise_cells(nb):
        introduced.setdefault(index, []).append(exercise)
    for index, exercises in introduced.items():
        cell = nb.cells[index]
        updated = with_rules(cell.source, exercises)
        if updated != cell.source:
            cell.source, changed = updated, True
    if changed:
        nbformat.write(nb, path)
    return changed


def write_expected_data(
    names: list[str], source: Path = SOLUTIONS, folder: Path = shipped_data.DATA
) -> list[Path]:
    """Write the expected values of the visible checks of ``names`` into ``folder``; returns
    the files written. A file is rewritten only when a value moved by more than the rounding
    that differs between machines, so a release on an unchanged checkout writes nothing."""
    written = []
    for name in names:
        for exercise, cases in expected_data(name, source).items():
            if shipped_data.write_exercise(exercise, cases, folder):
                written.append(shipped_data.data_file(exercise, folder))
    return written


def learner_notebook_text(name: str, source: Path = SOLUTIONS) -> str:
    """What ``release`` would write for ``name`` today, as text (for the sync test)."""
    with temporary_course(source) as api:
        released = generate_assignment(api, name) / f"{name}.ipynb"
        return nbformat.writes(nbformat.read(released, as_version=4))


def visible_checks(name: str, source: Path = SOLUTIONS) -> list[tuple[str, int, dict[str, Any]]]:
    """(exercise, seed, params) of every ``check(...)`` call in the visible part of the test
    cells of ``name``'s source notebook, in order. Their arguments must be literals."""
    nb = nbformat.read(source / name / f"{name}.ipynb", as_version=4)
    calls = []
    for cell in nb.cells:
        if not is_test_cell(cell):
            continue
        try:
            calls += check_calls(visible_part(cell.source))
        except ValueError as exc:
            raise SystemExit(
                f"{name}, cell {cell.metadata.nbgrader.get('grade_id')}: a visible check() needs "
                f"literal arguments so that its expected values can be shipped ({exc})"
            ) from exc
    return calls


def expected_data(name: str, source: Path = SOLUTIONS) -> dict[str, dict[str, shipped_data.Shipped]]:
    """exercise -> case key -> the reference's and the classic bugs' outputs, for every
    visible check of ``name``."""
    data: dict[str, dict[str, shipped_data.Shipped]] = {}
    for exercise, seed, params in visible_checks(name, source):
        spec = get_exercise(exercise)
        inputs = spec.make_inputs(np.random.default_rng(seed), **params)
        data.setdefault(exercise, {})[shipped_data.case_key(seed, params)] = spec.answers(inputs)
    return data
