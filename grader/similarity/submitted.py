"""What a submission holds for one exercise: every cell the learner could edit, read under the guards.

nbgrader grades a notebook after overwriting each cell whose grade id is a locked cell of the
source (a test, the setup) with the source's text; every other code cell runs as the learner
wrote it. So for an exercise, what is compared is, in this order:

1. the cell carrying its grade id (the first, if the learner duplicated it);
2. every *added* code cell, in notebook order: one whose grade id is none of the source's
   cells (or that has none, or repeats one already seen), so an answer moved out of its
   cell is still read (a cell that is, stripped, the text of one of the source's unlocked
   cells, such as the install cell, is given code, and not shown);
3. from the other exercises' cells, each top-level definition of a name that only this
   exercise's source cell defines (the answer moved into another exercise's cell).

Locked or not is decided by the SOURCE notebook's metadata, matched by grade id
(:attr:`Exercise.locked_ids`); what a submitted cell's own metadata claims (``locked``,
``grade``, ``solution``) is never read, so a cell cannot hide by calling itself a test.

The parts are shown as one text (each part after the first under a comment line naming its
cell), and each is parsed and normalised alone, its tokens' lines moved to that text's. The
size guards of :mod:`~grader.similarity.guards` apply: the exercise's own cell over the
limit is not compared; an added cell over it, the cells after :data:`MAX_ADDED_CELLS` and
whatever would pass :data:`MAX_ENTRY_CHARACTERS` are left out, each with a note.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from nbformat import NotebookNode

from grader.similarity.exercises import Exercise, nbgrader_metadata
from grader.similarity.guards import (
    MAX_ADDED_CELLS,
    MAX_CELL_CHARACTERS,
    MAX_ENTRY_CHARACTERS,
    Budget,
    NotCompared,
)
from grader.similarity.normalise import Tokens, normalise, parse_cell


@dataclass(frozen=True)
class Part:
    text: str
    where: str  # "" for the exercise's own cell, else which cell it came from


@dataclass
class Submitted:
    """What one submission holds for one exercise."""

    parts: list[Part]
    missing: str | None = None  # why the exercise's own cell is not among the parts
    notes: list[str] = field(default_factory=list)  # cells left out, and why

    @property
    def text(self) -> str:
        """The parts as one text, as the report shows it."""
        return "".join(_shown(part) for part in self.parts)


def _shown(part: Part) -> str:
    """The part's lines (at least one), each ending in a newline, under its comment line."""
    body = "".join(line + "\n" for line in part.text.splitlines()) or "\n"
    return body if not part.where else f"# ---- {part.where} ----\n{body}"


def _source(cell: NotebookNode) -> str | None:
    source = cell.get("source", "")
    return source if isinstance(source, str) else None


def submitted_parts(nb: NotebookNode, exercise: Exercise, budget: Budget | None = None) -> Submitted:
    """The cells of ``nb`` the learner could edit that are read for ``exercise``."""
    own: NotebookNode | None = None
    added: list[tuple[int, NotebookNode]] = []
    others: list[tuple[int, str, NotebookNode]] = []  # another exercise's cell
    seen: set[str] = set()
    for number, cell in enumerate(nb.cells, start=1):
        if budget is not None:
            budget.step()
        grade_id = nbgrader_metadata(cell).get("grade_id")
        grade_id = grade_id if isinstance(grade_id, str) else None
        if grade_id == exercise.grade_id and own is None:
            own = cell
        elif cell.get("cell_type") != "code" or grade_id in exercise.locked_ids:
            pass  # not code, or overwritten by the source's text before it runs
        elif grade_id in exercise.solution_ids and grade_id not in seen:
            others.append((number, grade_id, cell))
        elif (stripped := (_source(cell) or "").strip()) and stripped not in exercise.given_texts:
            added.append((number, cell))  # (a given cell kept as given is no code of the learner's)
        if grade_id is not None:
            seen.add(grade_id)
    result = Submitted([])
    if own is None:
        result.missing = f"no cell has the grade id {exercise.grade_id!r}"
    elif own.get("cell_type") != "code":
        result.missing = f"the cell {exercise.grade_id!r} is a {own.get('cell_type')} cell, not code"
    elif (text := _source(own)) is None:
        raise NotCompared("the cell has no text")
    elif len(text) > MAX_CELL_CHARACTERS:
        raise NotCompared(f"the cell has {len(text):,} characters, over the {MAX_CELL_CHARACTERS:,} compared")
    else:
        result.parts.append(Part(text, ""))
    total = sum(len(p.text) for p in result.parts)
    candidates = [(n, f"added cell {n}", _source(c) or "") for n, c in added]
    candidates += [
        (n, f"from cell {n} ({g}): {name}", text)
        for n, g, c in others
        for name, text in _definitions(c, exercise.answer_names)
    ]
    for count, (number, where, text) in enumerate(sorted(candidates, key=lambda c: c[0])):
        if count == MAX_ADDED_CELLS:
            result.notes.append(
                f"{len(candidates) - count} more cells after the first {MAX_ADDED_CELLS} "
                f"added ones were not read (from cell {number} on)"
            )
            break
        if len(text) > MAX_CELL_CHARACTERS:
            result.notes.append(
                f"{where} has {len(text):,} characters, over the {MAX_CELL_CHARACTERS:,} compared: left out"
            )
        elif total + len(text) > MAX_ENTRY_CHARACTERS:
            result.notes.append(
                f"{where} and the cells after it were not read: over "
                f"{MAX_ENTRY_CHARACTERS:,} characters in all"
            )
            break
        else:
            total += len(text)
            result.parts.append(Part(text, where))
    return result


def _definitions(cell: NotebookNode, names: frozenset[str]) -> list[tuple[str, str]]:
    """(name, its source) for each top-level def or class of ``cell`` that defines one of ``names``."""
    text = _source(cell)
    if not names or text is None or len(text) > MAX_CELL_CHARACTERS:
        return []
    try:
        tree = parse_cell(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # compared (or listed as not parsing) under its own exercise
    lines = text.splitlines()
    found = []
    for statement in tree.body:
        if (
            isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            and statement.name in names
        ):
            first = min([statement.lineno, *(d.lineno for d in statement.decorator_list)])
            found.append((statement.name, "\n".join(lines[first - 1 : statement.end_lineno])))
    return found


def submitted_tokens(
    submitted: Submitted,
    exercise: Exercise,
    budget: Budget | None = None,
    cache: dict[str, Tokens] | None = None,
) -> tuple[Tokens, list[str]]:
    """The parts' tokens, on the lines of :attr:`Submitted.text`, and notes on parts left
    out because they do not parse. The exercise's own cell not parsing is a NotCompared."""
    tokens: list[str] = []
    lines: list[int] = []
    notes: list[str] = []
    offset = 0  # lines of the text before this part (its comment line included)
    for part in submitted.parts:
        if part.where:
            offset += 1
        try:
            read = _tokens(part.text, exercise, budget, cache)
        except NotCompared as exc:
            if not part.where:
                raise
            notes.append(f"{part.where}: {exc}; left out")
        else:
            tokens += read.tokens
            lines += [offset + line for line in read.lines]
        offset += len(part.text.splitlines()) or 1
    return Tokens(tokens, lines), notes


def _tokens(text: str, exercise: Exercise, budget: Budget | None, cache: dict[str, Tokens] | None) -> Tokens:
    if cache is not None and text in cache:
        return cache[text]
    if budget is not None:
        budget.check()
    try:
        tree = parse_cell(text)
    except SyntaxError as exc:
        raise NotCompared(f"the cell does not parse: {exc.msg} (line {exc.lineno})") from None
    except ValueError as exc:  # a null byte in the source
        raise NotCompared(f"the cell does not parse: {exc}") from None
    except (RecursionError, MemoryError):
        raise NotCompared("the cell is nested too deeply to be parsed") from None
    try:
        read = normalise(tree, exercise.given_aliases, budget=budget)
    except RecursionError:
        raise NotCompared("the cell is nested too deeply to be compared") from None
    if cache is not None:
        cache[text] = read
    return read
