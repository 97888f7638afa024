"""The class that ``benchmarks/grading.py`` grades: nbgrader course folders of chapter 3
submissions in six variants (correct, stubbed, no sqrt(d_k) scaling, a warning printed from
the learner's own code, softmax over the wrong axis, half done), and a mixed class of
chapters 3, 6 and 8. ``check.py``, ``distributed.py`` and ``postgres.py`` build their classes
with it too.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import nbformat

from attention_learner.cell_rules import is_solution_cell, is_test_cell

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "03_scaled_dot_product"
SOURCE = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
RELEASED = ROOT / "chapters" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
VENV_BIN = Path(sys.executable).parent

SOLUTION_BLOCK = re.compile(r"^[ \t]*### BEGIN SOLUTION.*?### END SOLUTION[^\n]*\n?", re.S | re.M)
MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)
HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[^\n]*\n?", re.S | re.M)


def autograde_command(root: Path, out: Path, workers: int, *extra: str) -> list[str]:
    """``python -m grader autograde`` on the course at ``root`` (its ``submitted`` and
    ``source``) into ``out``, quietly, with ``workers`` workers, then ``extra``."""
    command = [sys.executable, "-m", "grader", "autograde", str(root / "submitted"), "--out", str(out)]
    return [*command, "--source", str(root / "source"), "--workers", str(workers), "--quiet", *extra]


def env() -> dict[str, str]:
    """The environment for nbgrader and our CLI: this venv's scripts first (nbgrader runs
    `alembic` by name), one thread per process as in grading."""
    path = str(VENV_BIN) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ, PATH=path, PYTHONWARNINGS="ignore::DeprecationWarning")


def _cell(nb: nbformat.NotebookNode, grade_id: str) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return cell
    raise KeyError(f"{SOURCE.name} has no cell {grade_id!r}: update this file's VARIANTS")


def _edit(nb: nbformat.NotebookNode, grade_id: str, old: str, new: str) -> None:
    cell = _cell(nb, grade_id)
    if old not in cell.source:
        raise ValueError(
            f"cell {grade_id!r} of {SOURCE.name} no longer contains {old!r}: "
            "update the variant in this file's VARIANTS"
        )
    cell.source = cell.source.replace(old, new)


def _as_learner(nb: nbformat.NotebookNode, keep_solutions: bool) -> nbformat.NotebookNode:
    """What a learner hands in: no hidden tests; solution regions filled in or stubbed."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if is_test_cell(cell):
            cell.source = HIDDEN.sub("", cell.source).rstrip() + "\n"
        if is_solution_cell(cell):
            if keep_solutions:
                cell.source = MARKER.sub("", cell.source)
            else:
                cell.source = SOLUTION_BLOCK.sub(
                    "    # YOUR CODE HERE\n    raise NotImplementedError()\n", cell.source
                )
        cell.outputs, cell.execution_count = [], None
    return nb


def source_notebook() -> nbformat.NotebookNode:
    return nbformat.read(SOURCE, as_version=4)


def stubs() -> nbformat.NotebookNode:
    """The released learner notebook (chapters/), or the source stubbed if it is missing."""
    if RELEASED.exists():
        return nbformat.read(RELEASED, as_version=4)
    return _as_learner(source_notebook(), keep_solutions=False)


def correct() -> nbformat.NotebookNode:
    return _as_learner(source_notebook(), keep_solutions=True)


def no_sqrt() -> nbformat.NotebookNode:
    """Exercise 1 forgets the 1/sqrt(d_k) scaling."""
    nb = source_notebook()
    _edit(nb, "scaled_dot_product_attention", " / math.sqrt(d_k)", "")
    return _as_learner(nb, keep_solutions=True)


def wrong_axis() -> nbformat.NotebookNode:
    """Exercise 2 takes the softmax over the queries instead of the keys."""
    nb = source_notebook()
    _edit(
        nb,
        "scaled_dot_product_attention_torch",
        "torch.softmax(scores, dim=-1)",
        "torch.softmax(scores, dim=-2)",
    )
    return _as_learner(nb, keep_solutions=True)


def warns() -> nbformat.NotebookNode:
    """Correct, but exercise 3 prints a warning from the learner's own code (stderr)."""
    nb = source_notebook()
    _edit(
        nb,
        "softmax_jacobian",
        "### BEGIN SOLUTION\n",
        '### BEGIN SOLUTION\n    import warnings\n\n    warnings.warn("is p really a probability vector?")\n',
    )
    return _as_learner(nb, keep_solutions=True)


def half_done() -> nbformat.NotebookNode:
    """Exercise 1 solved, every other exercise still a stub."""
    nb = stubs()
    solved = correct()
    _cell(nb, "scaled_dot_product_attention").source = _cell(solved, "scaled_dot_product_attention").source
    return nb


VARIANTS = {  # the order matters: --quick takes the first few
    "correct": correct,
    "stubs": stubs,
    "no_sqrt": no_sqrt,
    "warns": warns,
    "wrong_axis": wrong_axis,
    "half_done": half_done,
}


def make_course(root: Path, n: int, with_nbgrader_source: bool = True) -> list[tuple[str, str]]:
    """An nbgrader course in ``root``: source/<assignment>/ and n distinct submissions.

    Returns [(student_id, variant)]. Each notebook differs (a note with the student's id)
    so that no grader can skip one as a duplicate.
    """
    if with_nbgrader_source:
        shutil.copytree(SOURCE.parent, root / "source" / ASSIGNMENT)
    built = {name: make() for name, make in VARIANTS.items()}
    students = []
    for k in range(n):
        variant = list(VARIANTS)[k % len(VARIANTS)]
        student = f"s{k:04d}"
        nb = nbformat.from_dict(built[variant])
        nb.cells.append(nbformat.v4.new_markdown_cell(f"Handed in by {student} ({variant})."))
        target = root / "submitted" / student / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        students.append((student, variant))
    return students


MIXED = ("03_scaled_dot_product", "06_tiny_translator", "08_build_train_decode")


def make_mixed_course(root: Path, n: int) -> list[tuple[str, str]]:
    """A class doing chapters 3, 6 and 8 (a third each), each student handing in one of
    them, correct or stubbed (chapter 3: every variant above); [(student, variant)]."""
    built: dict[str, dict[str, nbformat.NotebookNode]] = {ASSIGNMENT: {k: f() for k, f in VARIANTS.items()}}
    for name in MIXED:
        shutil.copytree(ROOT / "solutions" / name, root / "source" / name)
        if name != ASSIGNMENT:
            solved = nbformat.read(ROOT / "solutions" / name / f"{name}.ipynb", as_version=4)
            built[name] = {
                "correct": _as_learner(solved, keep_solutions=True),
                "stubs": nbformat.read(ROOT / "chapters" / name / f"{name}.ipynb", as_version=4),
            }
    students = []
    for k in range(n):
        name = MIXED[k % len(MIXED)]
        variant = list(built[name])[(k // len(MIXED)) % len(built[name])]
        student = f"m{k:04d}"
        nb = nbformat.from_dict(built[name][variant])
        nb.cells.append(nbformat.v4.new_markdown_cell(f"Handed in by {student} ({variant})."))
        target = root / "submitted" / student / name / f"{name}.ipynb"
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        students.append((student, f"{name[:2]}:{variant}"))
    return students
