"""One home for what a notebook cell is and what it is worth: ``attention_learner/cell_rules.py``.

Whether a cell is a test, a solution, a locked or a grade cell, and how many points it carries,
is read from its nbgrader metadata in ``cell_rules`` alone. Any other module that reads the flag
itself (``meta.get("solution")``, ``nbgrader["grade"]``, ``.get("points", 0)``) is a second
definition, which this test names by file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from attention_learner import cell_rules

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "learner" / "attention_learner" / "cell_rules.py"
TREES = ("grader", "learner", "benchmarks", "book_figures", "_ext")
#: reading one of nbgrader's cell flags, or a cell's points with a default
FLAG_READ = re.compile(r"""(\.get\(\s*|\[\s*)["'](grade|solution|locked)["']|\.get\(\s*["']points["']\s*,""")


def _sources():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if ".venv" not in path.parts and "_build" not in path.parts:
                yield path


def test_only_cell_rules_reads_the_cell_flags_and_points():
    readers = []
    for path in _sources():
        if path == HOME:
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if FLAG_READ.search(line):
                readers.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert readers == [], "a second definition of a cell rule:\n" + "\n".join(readers)
    assert FLAG_READ.search(HOME.read_text(encoding="utf-8"))  # the pattern still finds the home


def test_the_pattern_finds_a_second_definition(tmp_path):
    """What the scan above would report, on lines written the ways the old copies were."""
    copies = [
        'if meta.get("solution"):',
        "kind = meta['grade']",
        'float(m.get("points", 0))',
        'bool(meta.get( "locked"))',
    ]
    assert all(FLAG_READ.search(line) for line in copies)
    assert not any(FLAG_READ.search(line) for line in ['t["points"]', 'meta["grade_id"]', 'get("grade_id")'])


def _cell(cell_type="code", **nbgrader):
    make = nbformat.v4.new_code_cell if cell_type == "code" else nbformat.v4.new_markdown_cell
    cell = make("x = 1")
    if nbgrader:
        cell.metadata["nbgrader"] = nbgrader
    return cell


@pytest.mark.parametrize(
    "cell, test, solution, locked, grade, points",
    [
        (_cell(grade=True, solution=False, points=2, grade_id="t"), True, False, True, True, 2.0),
        (_cell(grade=False, solution=True, grade_id="s"), False, True, False, False, 0.0),
        (_cell(grade=True, solution=True, points=3, grade_id="m"), False, True, False, True, 3.0),
        (
            _cell("markdown", grade=True, solution=True, points=1, grade_id="w"),
            False,
            False,
            False,
            True,
            1.0,
        ),
        (_cell(locked=True, grade_id="g"), False, False, True, False, 0.0),
        (_cell(), False, False, False, False, 0.0),
        ({"cell_type": "code", "metadata": ["not", "a", "dict"]}, False, False, False, False, 0.0),
    ],
)
def test_the_rules_on_each_kind_of_cell(cell, test, solution, locked, grade, points):
    assert cell_rules.is_test_cell(cell) is test
    assert cell_rules.is_solution_cell(cell) is solution
    assert cell_rules.is_locked_cell(cell) is locked
    assert cell_rules.is_grade_cell(cell) is grade
    assert cell_rules.cell_points(cell) == points


#: a label built as ``<notebook>:<grade_id>`` (grades.csv's columns, the similarity report's
#: exercises): an f-string with a name or attribute, a colon, then a grade id
LABEL_BUILT = re.compile(r"""f["']\{[\w.]*notebook\}:\{[\w.]*grade_id\}["']""")


def test_only_cell_rules_builds_a_grade_label():
    builders = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _sources()
        if path != HOME
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if LABEL_BUILT.search(line)
    ]
    assert builders == [], "a second definition of the grade label:\n" + "\n".join(builders)
    assert LABEL_BUILT.search(HOME.read_text(encoding="utf-8"))  # the pattern still finds the home
    assert LABEL_BUILT.search('return f"{test.notebook}:{test.grade_id}"')  # the old copy's form


def test_a_grade_label_names_the_notebook_only_when_it_is_not_the_assignments():
    assert cell_rules.grade_label("03_x", "03_x", "test_softmax") == "test_softmax"
    assert cell_rules.grade_label("03_x", "extra", "test_softmax") == "extra:test_softmax"
