"""One similarity run: find the submissions and the known solutions, fingerprint each exercise,
score the pairs and the matches with a known solution, write the report."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from grader.autograde.reports import printable, write_atomically, write_csv
from grader.autograde.submissions import find_submissions
from grader.similarity.exercises import Exercise, SourceAssignment, open_notebook, read_source
from grader.similarity.guards import Budget, NotCompared
from grader.similarity.html_report import render
from grader.similarity.known import NEAR_KNOWN, jaccard, known_notebooks, match_known
from grader.similarity.normalise import Tokens
from grader.similarity.scoring import LONG_MATCH, Pair, clusters, matching_lines, score_pairs
from grader.similarity.submitted import Submitted, submitted_parts, submitted_tokens
from grader.similarity.winnowing import Fingerprints, fingerprint

CSV_HEADER = ["assignment", "exercise", "student_a", "student_b", "score", "shared_lines"]
KNOWN_HEADER = ["assignment", "exercise", "student", "known_solution", "score", "shared_lines"]
ALL_EXERCISES = "(all)"  # the exercise column of a submission that could not be read at all


class SourceProblem(ValueError):
    """The source has nothing to compare against (the command's usage error)."""


@dataclass
class Entry:
    """One submitted cell of one exercise, ready to compare."""

    student: str
    source: str  # the cells' text, for the report (the exercise's cell, then the others read)
    prints: Fingerprints  # what was given removed


@dataclass
class Match:
    pair: Pair
    a: Entry
    b: Entry
    lines_a: dict[int, int]  # line of a's cell -> matching region number
    lines_b: dict[int, int]

    @property
    def shared_lines(self) -> int:
        return min(len(self.lines_a), len(self.lines_b))


@dataclass
class KnownMatch:
    """A submission that matches a known solution of its exercise."""

    entry: Entry
    known: Entry  # its ``student`` is the known solution's notebook path, under its folder
    score: float  # Jaccard index of the fingerprint sets (``known``)
    shared: int  # fingerprints shared
    lines_entry: dict[int, int]  # line of the submission -> matching region number
    lines_known: dict[int, int]

    @property
    def shared_lines(self) -> int:
        return min(len(self.lines_entry), len(self.lines_known))


@dataclass
class Group:
    students: list[str]
    best: float  # the highest score of a pair inside it


@dataclass
class ExerciseResult:
    exercise: Exercise
    entries: list[Entry]
    matches: list[Match]  # every pair at or above the threshold, best first
    clusters: list[Group]  # linked by reported pairs, or identical once normalised
    common_answers: list[Group]  # submissions sharing a short answer that many wrote
    compared: int  # pairs scored (they shared a fingerprint)
    nothing_own: int  # submissions with no code of their own (the stub, or nothing new)
    common: int  # fingerprints dropped as shared by too many submissions
    known: list[KnownMatch] = field(default_factory=list)  # best first
    known_solutions: int = 0  # known solutions of this exercise compared with


@dataclass
class Skip:
    assignment: str
    exercise: str
    student: str
    why: str


@dataclass
class Report:
    threshold: float
    source: Path
    against: list[Path] = field(default_factory=list)  # the folders of known solutions, the source first
    results: list[ExerciseResult] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    notes: list[Skip] = field(default_factory=list)  # compared, but some cells were left out or moved
    submissions: int = 0
    seconds: float = 0.0

    @property
    def pairs_compared(self) -> int:
        return sum(r.compared for r in self.results)

    @property
    def matches(self) -> list[tuple[ExerciseResult, Match]]:
        found = [(r, m) for r in self.results for m in r.matches]
        return sorted(
            found,
            key=lambda rm: (
                -rm[1].pair.score,
                rm[0].exercise.assignment,
                rm[0].exercise.label,
                rm[1].a.student,
                rm[1].b.student,
            ),
        )

    @property
    def known(self) -> list[tuple[ExerciseResult, KnownMatch]]:
        found = [(r, k) for r in self.results for k in r.known]
        return sorted(
            found,
            key=lambda rk: (
                -rk[1].score,
                rk[0].exercise.assignment,
                rk[0].exercise.label,
                rk[1].entry.student,
                rk[1].known.student,
            ),
        )

    def line(self) -> str:
        return (
            f"{self.submissions} submissions, {len(self.results)} exercises, "
            f"{self.pairs_compared} pairs scored, {len(self.matches)} at or above "
            f"{self.threshold:g}, {sum(len(r.clusters) for r in self.results)} clusters, "
            f"{len(self.known)} matching a known solution, {len(self.skipped)} not compared"
        )


def _by_notebook(assignment: SourceAssignment) -> dict[str, list[Exercise]]:
    """The assignment's exercises, by the notebook they are in."""
    found: dict[str, list[Exercise]] = {}
    for exercise in assignment.exercises:
        found.setdefault(exercise.notebook, []).append(exercise)
    return found


def _collect(assignment: SourceAssignment, subs, report: Report) -> dict[str, list[Entry]]:
    """The entries of each exercise of ``assignment`` (by label); what cannot be compared
    goes to ``report.skipped``, cells left out of what is compared to ``report.notes``."""
    entries: dict[str, list[Entry]] = {e.label: [] for e in assignment.exercises}
    seen: dict[tuple[str, str], tuple[Fingerprints, list[str]]] = {}
    by_notebook = _by_notebook(assignment)
    for sub in subs:
        student = sub.student
        if sub.problem:
            report.skipped.append(Skip(assignment.name, ALL_EXERCISES, student, sub.problem))
            continue
        for notebook, exercises in by_notebook.items():
            path = sub.notebooks.get(notebook)
            if path is None:
                for exercise in exercises:
                    report.skipped.append(
                        Skip(
                            assignment.name,
                            exercise.label,
                            student,
                            f"no notebook {notebook}.ipynb was handed in",
                        )
                    )
                continue
            budget = Budget()  # for the whole notebook: every exercise of it
            try:
                nb = open_notebook(path)
            except NotCompared as exc:
                for exercise in exercises:
                    report.skipped.append(Skip(assignment.name, exercise.label, student, str(exc)))
                continue
            cache: dict = {}  # a cell read for several exercises is normalised once
            for exercise in exercises:
                try:
                    entry = _entry(nb, exercise, student, budget, cache, seen)
                except NotCompared as exc:
                    report.skipped.append(Skip(assignment.name, exercise.label, student, str(exc)))
                    continue
                except (RecursionError, MemoryError) as exc:  # a guard the reader did not foresee
                    why = "nested too deeply" if isinstance(exc, RecursionError) else "too large"
                    report.skipped.append(
                        Skip(
                            assignment.name,
                            exercise.label,
                            student,
                            f"the submission is {why} to be compared",
                        )
                    )
                    continue
                except Exception as exc:  # a shape no one foresaw: this one is listed, the rest go on
                    report.skipped.append(
                        Skip(
                            assignment.name,
                            exercise.label,
                            student,
                            f"could not be compared ({type(exc).__name__})",
                        )
                    )
                    continue
                entries[exercise.label].append(entry)
                report.notes += [
                    Skip(assignment.name, exercise.label, student, note)
                    for note in seen[(exercise.label, entry.source)][1]
                ]
    return entries


def _entry(
    nb,
    exercise: Exercise,
    student: str,
    budget: Budget,
    cache: dict,
    seen: dict[tuple[str, str], tuple[Fingerprints, list[str]]],
) -> Entry:
    """One submission's entry for ``exercise``; the same cells (a stub, a copy) are read once."""
    parts = submitted_parts(nb, exercise, budget)
    key = (exercise.label, parts.text)
    if key not in seen:
        seen[key] = _fingerprinted(parts, exercise, budget, cache)
    return Entry(student, parts.text, seen[key][0])


def _fingerprinted(
    parts: Submitted, exercise: Exercise, budget: Budget, cache: dict
) -> tuple[Fingerprints, list[str]]:
    """The fingerprints of what ``parts`` hold for ``exercise`` (what was given left out), and
    notes on what was left out or missing; NotCompared when nothing is the learner's own."""
    tokens, notes = submitted_tokens(parts, exercise, budget, cache)
    prints = fingerprint(tokens, exercise.given_hashes)
    if parts.missing is not None:
        if not prints.positions:  # nothing of the learner's own anywhere else either
            raise NotCompared(parts.missing)
        notes.insert(0, f"{parts.missing}: the other cells the learner could edit were compared")
    return prints, parts.notes + notes


def _known(assignment: SourceAssignment, folders: list[Path], report: Report) -> dict[str, list[Entry]]:
    """The known solutions of each exercise of ``assignment`` (by label), read from ``folders``
    as a submission is; one that cannot be read goes to ``report.skipped``."""
    known: dict[str, list[Entry]] = {e.label: [] for e in assignment.exercises}
    by_notebook = _by_notebook(assignment)
    for notebook, exercises in by_notebook.items():
        for folder in folders:
            for label, path in known_notebooks(folder, assignment.name, notebook):
                budget, cache = Budget(), dict[str, Tokens]()
                try:
                    nb = open_notebook(path)
                except NotCompared as exc:
                    report.skipped.append(Skip(assignment.name, ALL_EXERCISES, f"(known) {label}", str(exc)))
                    continue
                for exercise in exercises:
                    parts = submitted_parts(nb, exercise, budget)
                    if parts.missing is not None:  # a known notebook without this exercise is no answer to it
                        continue
                    try:
                        prints, _ = _fingerprinted(parts, exercise, budget, cache)
                    except NotCompared as exc:
                        report.skipped.append(
                            Skip(assignment.name, exercise.label, f"(known) {label}", str(exc))
                        )
                        continue
                    known[exercise.label].append(Entry(label, parts.text, prints))
    return known


def _identical(entries: list[Entry]) -> list[Pair]:
    """Pairs linking each submission to the first of those with the same fingerprints, of at
    least LONG_MATCH of them (about six lines of the learner's own code, once normalised)."""
    first: dict[frozenset[int], int] = {}
    links = []
    for i, entry in enumerate(entries):
        if len(entry.prints) >= LONG_MATCH:
            j = first.setdefault(frozenset(entry.prints.positions), i)
            if j != i:
                links.append(Pair(j, i, 1.0, len(entry.prints)))
    return links


def _near_the_same_known(entries: list[Entry], matches: list[KnownMatch]) -> list[Pair]:
    """Pairs linking the submissions that each score NEAR_KNOWN or more against the same known
    solution, each scored by the plain Jaccard of the two (at least ``2 NEAR_KNOWN - 1``: the
    Jaccard distance obeys the triangle inequality)."""
    index = {id(e): i for i, e in enumerate(entries)}
    near: dict[int, list[int]] = {}  # a known solution (by id) -> the submissions near it
    for match in matches:
        if match.score >= NEAR_KNOWN:
            near.setdefault(id(match.known), []).append(index[id(match.entry)])
    links = []
    for members in near.values():
        first, *rest = sorted(members)
        for i in rest:
            score, shared = jaccard(entries[first].prints, entries[i].prints)
            links.append(Pair(first, i, score, shared))
    return links


def _score(exercise: Exercise, entries: list[Entry], known: list[Entry], threshold: float) -> ExerciseResult:
    """The pairs, clusters, common answers and known-solution matches of one exercise.

    Clusters are the connected components of the reported pairs, of the links between
    identical submissions (:func:`_identical`) and of those near the same known solution
    (:func:`_near_the_same_known`): ten students handing in the same answer, or the reference
    each changed in a statement, are one cluster of ten even when that answer is so common in
    the class that ``scoring`` drops its fingerprints and reports no pair of them."""
    scored = score_pairs([e.prints.positions for e in entries], threshold)
    matches = []
    for pair in scored.pairs:
        a, b = entries[pair.a], entries[pair.b]
        lines_a, lines_b = matching_lines(a.prints, b.prints, scored.counted)
        matches.append(Match(pair, a, b, lines_a, lines_b))

    found_known = []
    for s in match_known([e.prints for e in entries], [k.prints for k in known], threshold):
        entry, solution = entries[s.entry], known[s.known]
        own = set(entry.prints.positions) | set(solution.prints.positions)
        lines_entry, lines_known = matching_lines(entry.prints, solution.prints, own)
        found_known.append(KnownMatch(entry, solution, s.score, s.shared, lines_entry, lines_known))

    def groups(pairs: list[Pair]) -> list[Group]:
        found = []
        for members in clusters(len(entries), pairs):
            inside = set(members)
            best = max(p.score for p in pairs if p.a in inside)
            found.append(Group([entries[i].student for i in members], best))
        return found

    nothing_own = sum(1 for e in entries if not any(f in scored.counted for f in e.prints.positions))
    return ExerciseResult(
        exercise,
        entries,
        matches,
        groups(scored.pairs + _identical(entries) + _near_the_same_known(entries, found_known)),
        groups(scored.common_answers),
        scored.compared,
        nothing_own,
        scored.common,
        found_known,
        len(known),
    )


def compare(submitted: Path, source: Path, threshold: float, against: list[Path] | None = None) -> Report:
    """Every pair of submissions of every exercise, and every submission against each known
    solution (the source's, and those in the ``against`` folders), scored; nothing written."""
    start = time.monotonic()
    assignments = read_source(source)
    if not any(a.exercises for a in assignments.values()):
        problems = [p for a in assignments.values() for p in a.problems]
        raise SourceProblem(
            f"the source {source} has no notebook with a solution cell"
            + (f" ({'; '.join(problems)})" if problems else "")
        )
    subs = find_submissions(submitted, {name: a.notebooks for name, a in assignments.items()})
    folders: list[Path] = []  # the source first, then each --against folder once
    for folder in [source, *(against or [])]:
        if all(folder.resolve() != f.resolve() for f in folders):
            folders.append(folder)
    report = Report(threshold, source, folders, submissions=len(subs))
    for name, assignment in assignments.items():
        mine = [s for s in subs if s.assignment == name]
        if not mine:
            continue
        for problem in assignment.problems:
            report.skipped.append(Skip(name, ALL_EXERCISES, "(source)", problem))
        entries = _collect(assignment, mine, report)
        known = _known(assignment, folders, report)
        for exercise in assignment.exercises:
            report.results.append(_score(exercise, entries[exercise.label], known[exercise.label], threshold))
    report.seconds = time.monotonic() - start
    return report


def write_report(report: Report, out: Path) -> tuple[Path, Path]:
    """REPORT/similarity.csv (one row per pair at or above the threshold, best first),
    REPORT/known_solutions.csv (one row per submission matching a known solution, best first)
    and REPORT/similarity.html; each is replaced whole, never half-written."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        [
            r.exercise.assignment,
            r.exercise.label,
            m.a.student,
            m.b.student,
            round(m.pair.score, 4),
            m.shared_lines,
        ]
        for r, m in report.matches
    ]
    csv_path, html_path = out / "similarity.csv", out / "similarity.html"
    write_csv(csv_path, CSV_HEADER, rows)
    known_rows = [
        [
            r.exercise.assignment,
            r.exercise.label,
            k.entry.student,
            k.known.student,
            round(k.score, 4),
            k.shared_lines,
        ]
        for r, k in report.known
    ]
    write_csv(out / "known_solutions.csv", KNOWN_HEADER, known_rows)
    write_atomically(html_path, printable(render(report)))
    return csv_path, html_path


def similarity_report(
    submitted: Path, out: Path, source: Path, threshold: float, against: list[Path] | None = None
) -> Report:
    report = compare(submitted, source, threshold, against)
    write_report(report, out)
    return report
