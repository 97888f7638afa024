"""What is compared: the source's exercises, what the learner was given for each, and the
submitted cells.

An exercise is a code cell of a source notebook whose nbgrader metadata has
``solution: true``, named by its grade id. What the learner was given is the released
notebook's code: every code cell that is not a solution, as it stands (the setup cell with
its imports, the install cell, the tests), and every solution cell with each
``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block replaced by nbgrader's stub (a cell
without the markers is all stub). Its k-grams are never credited to a submission.

Which cells of a submission the learner could edit is decided here too, from the source:
the grade ids of the source's locked cells (those nbgrader's autograde overwrites with the
source's text) and of its solution cells. ``submitted`` reads a submission with them, never
with what the submitted cells' own metadata claims.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from attention_learner import cell_rules
from attention_learner.cell_rules import grade_label, is_locked_cell
from attention_learner.cell_rules import nbgrader_meta as nbgrader_metadata
from grader.autograde.notebook_file import InvalidNotebook, read_notebook
from grader.similarity.guards import NotCompared
from grader.similarity.normalise import normalise, parse_cell
from grader.similarity.scope import bound_names, import_aliases
from grader.similarity.winnowing import all_hashes

# nbgrader's ClearSolutions: the markers, and the code stub it writes for Python
BEGIN = re.compile(r"^([ \t]*)#+\s*BEGIN SOLUTION\b.*$")
END = re.compile(r"^[ \t]*#+\s*END SOLUTION\b.*$")
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")


def is_solution_cell(cell: NotebookNode) -> bool:
    """A solution cell (``cell_rules``) that names its exercise."""
    return cell_rules.is_solution_cell(cell) and isinstance(nbgrader_metadata(cell).get("grade_id"), str)


def top_level_definitions(tree: ast.Module) -> set[str]:
    """The functions and classes a cell defines at its top level."""
    return {s.name for s in tree.body if isinstance(s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)}


def released(source: str) -> str:
    """A solution cell as the learner receives it: each solution block replaced by the stub."""
    lines = source.splitlines()
    if not any(BEGIN.match(line) for line in lines):
        return "\n".join(STUB)
    out: list[str] = []
    inside = False
    for line in lines:
        begin = BEGIN.match(line)
        if begin and not inside:
            inside = True
            out += [begin.group(1) + stub for stub in STUB]
        elif inside and END.match(line):
            inside = False
        elif not inside:
            out.append(line)
    return "\n".join(out)


@dataclass
class Exercise:
    assignment: str
    notebook: str
    grade_id: str
    label: str
    given_aliases: dict[str, str]  # the source's imports, usable without importing them
    given_hashes: set[int]  # every k-gram of what the learner was given
    # decided by the source notebook, by grade id, for reading a submission of it
    locked_ids: frozenset[str] = frozenset()  # cells nbgrader overwrites: never the learner's code
    solution_ids: frozenset[str] = frozenset()  # every exercise's cell in this notebook
    answer_names: frozenset[str] = frozenset()  # what only this exercise's source cell defines
    given_texts: frozenset[str] = frozenset()  # the source's other code cells, stripped: no added code


@dataclass
class SourceAssignment:
    name: str
    notebooks: list[str]  # notebook stems, as find_submissions expects them
    exercises: list[Exercise] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # source notebooks that cannot be read


def _parsed(source: str) -> ast.Module | None:
    try:
        return parse_cell(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # not Python: nothing given
        return None


def read_source(source: Path) -> dict[str, SourceAssignment]:
    """Every assignment of an nbgrader source directory: <source>/<assignment>/*.ipynb."""
    assignments = {}
    for folder in sorted(p for p in source.iterdir() if p.is_dir() and not p.is_symlink()):
        paths = sorted(folder.glob("*.ipynb"))
        if not paths:
            continue
        assignment = SourceAssignment(folder.name, [p.stem for p in paths])
        for path in paths:
            try:
                nb = read_notebook(path)
            except InvalidNotebook as exc:
                assignment.problems.append(str(exc))
                continue
            assignment.exercises += _exercises(folder.name, path.stem, nb)
        assignments[folder.name] = assignment
    return assignments


def _exercises(assignment: str, notebook: str, nb: NotebookNode) -> list[Exercise]:
    code = [c for c in nb.cells if c.get("cell_type") == "code"]
    trees = [_parsed(released(c.source) if is_solution_cell(c) else c.source) for c in code]
    aliases: dict[str, str] = {}
    for cell, tree in zip(code, trees, strict=True):
        if tree is not None and not is_solution_cell(cell):
            aliases.update(import_aliases(ast.walk(tree)))
    # each given cell read alone, and as if pasted into a solution cell with all the others
    # (where the names the others bind, the exercises' functions among them, are the cell's)
    together = set().union(*(bound_names(ast.walk(t)) for t in trees if t is not None))
    given: set[int] = set()
    for tree in trees:
        if tree is not None:
            given |= all_hashes(normalise(tree, aliases)) | all_hashes(normalise(tree, aliases, together))
    locked = frozenset(
        g
        for c in nb.cells
        if is_locked_cell(c) and isinstance(g := nbgrader_metadata(c).get("grade_id"), str)
    )
    defines: dict[str, set[str]] = {}  # grade id -> what its source cell defines
    for cell in code:
        if is_solution_cell(cell):
            original = _parsed(cell.source)  # the solution itself, not the stub
            defines.setdefault(nbgrader_metadata(cell)["grade_id"], set()).update(
                top_level_definitions(original) if original is not None else set()
            )
    given_texts = frozenset(c.source.strip() for c in code if not is_solution_cell(c))
    exercises = []
    for grade_id, names in defines.items():
        others = set().union(*(n for g, n in defines.items() if g != grade_id))
        label = grade_label(assignment, notebook, grade_id)
        exercises.append(
            Exercise(
                assignment,
                notebook,
                grade_id,
                label,
                aliases,
                given,
                locked,
                frozenset(defines),
                frozenset(names - others),
                given_texts,
            )
        )
    return exercises


def open_notebook(path: Path) -> NotebookNode:
    """The notebook, or NotCompared saying why it cannot be read (JSON nested deeper than
    the parser follows included: one such notebook is listed, it does not end the report)."""
    try:
        return read_notebook(path)
    except InvalidNotebook as exc:
        raise NotCompared(str(exc)) from None
    except RecursionError:
        raise NotCompared(f"{path.name} is nested too deeply to be read as JSON") from None
    except MemoryError:
        raise NotCompared(f"{path.name} is too large to be read") from None
