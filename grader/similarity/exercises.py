"""What is compared: the source's exercises, what the learner was given for each, and the
submitted cells.

An exercise is a code cell of a source notebook whose nbgrader metadata has
``solution: true``, named by its grade id. What the learner was given is the released
notebook's code: every code cell that is not a solution, as it stands (the setup cell with
its imports, the install cell, the tests), and every solution cell with each
``### BEGIN SOLUTION`` ... ``### END SOLUTION`` block replaced by nbgrader's stub (a cell
without the markers is all stub). Its k-grams are never credited to a submission.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from nbformat import NotebookNode

from grader.autograde.notebook_file import InvalidNotebook, read_notebook
from grader.similarity.normalise import Tokens, bound_names, import_aliases, normalise, parse_cell
from grader.similarity.winnowing import all_hashes

# nbgrader's ClearSolutions: the markers, and the code stub it writes for Python
BEGIN = re.compile(r"^([ \t]*)#+\s*BEGIN SOLUTION\b.*$")
END = re.compile(r"^[ \t]*#+\s*END SOLUTION\b.*$")
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
# a solution cell is a few dozen lines; one a hundred times longer is not compared (its cost
# would be the report's)
MAX_CELL_CHARACTERS = 200_000


def nbgrader_metadata(cell: NotebookNode) -> dict:
    meta = cell.get("metadata", {}).get("nbgrader")
    return meta if isinstance(meta, dict) else {}


def is_solution_cell(cell: NotebookNode) -> bool:
    meta = nbgrader_metadata(cell)
    return cell.get("cell_type") == "code" and bool(meta.get("solution")) and isinstance(
        meta.get("grade_id"), str)


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


def exercise_label(assignment: str, notebook: str, grade_id: str) -> str:
    """The grade id, prefixed by its notebook unless that is the assignment's own notebook."""
    return grade_id if notebook == assignment else f"{notebook}:{grade_id}"


@dataclass
class Exercise:
    assignment: str
    notebook: str
    grade_id: str
    label: str
    given_aliases: dict[str, str]  # the source's imports, usable without importing them
    given_hashes: set[int]  # every k-gram of what the learner was given


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
    seen: set[str] = set()
    exercises = []
    for cell in code:
        if is_solution_cell(cell) and (grade_id := nbgrader_metadata(cell)["grade_id"]) not in seen:
            seen.add(grade_id)
            exercises.append(Exercise(assignment, notebook, grade_id,
                                      exercise_label(assignment, notebook, grade_id), aliases, given))
    return exercises


class NotCompared(Exception):
    """Why one submitted cell cannot be compared (the report lists it)."""


def submitted_cell(nb: NotebookNode, grade_id: str) -> NotebookNode:
    """The submitted code cell carrying ``grade_id`` (the first, if a learner duplicated it)."""
    for cell in nb.cells:
        if nbgrader_metadata(cell).get("grade_id") == grade_id:
            if cell.get("cell_type") != "code":
                raise NotCompared(f"the cell {grade_id!r} is a {cell.get('cell_type')} cell, not code")
            return cell
    raise NotCompared(f"no cell has the grade id {grade_id!r}")


def cell_tokens(cell: NotebookNode, exercise: Exercise) -> Tokens:
    source = cell.get("source", "")
    if not isinstance(source, str):
        raise NotCompared("the cell has no text")
    if len(source) > MAX_CELL_CHARACTERS:
        raise NotCompared(f"the cell has {len(source):,} characters, over the "
                          f"{MAX_CELL_CHARACTERS:,} compared")
    try:
        tree = parse_cell(source)
    except SyntaxError as exc:
        raise NotCompared(f"the cell does not parse: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # a null byte in the source
        raise NotCompared(f"the cell does not parse: {exc}") from None
    except (RecursionError, MemoryError):
        raise NotCompared("the cell is nested too deeply to be parsed") from None
    try:
        return normalise(tree, exercise.given_aliases)
    except RecursionError:
        raise NotCompared("the cell is nested too deeply to be compared") from None


def open_notebook(path: Path) -> NotebookNode:
    """The notebook, or NotCompared saying why it cannot be read."""
    try:
        return read_notebook(path)
    except InvalidNotebook as exc:
        raise NotCompared(str(exc)) from None
