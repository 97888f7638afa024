"""Submissions that match a known solution: the course's own, and any folder of published answers.

The commonest copying is not between two students but from an answer both found: the
course's reference solution, or one posted online. When most of a class hands in the same
answer, every fingerprint of it is held by more than half of the submissions and
``scoring`` drops it as common knowledge, so pairs alone cannot show it. Each submission is
therefore also compared with every known solution of its exercise, one by one.

Where the known solutions are. A folder given with ``--against`` (and the source, always)
holds notebooks in either of nbgrader's layouts:

- ``DIR/<assignment>/<notebook>.ipynb``, a source or release folder (the course's
  ``solutions/``, a published copy of it);
- ``DIR/<name>/<assignment>/<notebook>.ipynb``, a submitted folder (answers collected from
  elsewhere, one subfolder per author).

Each known notebook is read as a submission is (``submitted``: the exercise's cell and
every cell a learner could edit, locked cells decided from the source, what was given left
out), under the same guards although the folder is the instructor's and trusted. So a
submission and the solution it was copied from give the same fingerprints, whatever the
``### BEGIN SOLUTION`` markers, comments, names or layout.

The score of a submission against a known solution is the plain Jaccard index of their
fingerprint sets, ``|A ∩ B| / |A ∪ B|``: no fingerprint is dropped as common and none is
weighted by its rarity in the class, because a known solution is evidence however many
handed it in. A match at or above the report's threshold that shares at least
:data:`~grader.similarity.scoring.MIN_SHARED` fingerprints is listed. The cost is the
submissions times the known solutions of the exercise, each comparison linear in the
fingerprints. Submissions that each score :data:`NEAR_KNOWN` or more against the same known
solution are near-identical to each other, and ``run`` makes them one cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from grader.similarity.scoring import MIN_SHARED
from grader.similarity.winnowing import Fingerprints

# submissions at least this close to the same known solution are one cluster: a copy of the
# reference with one of its ten statements rewritten scores 0.86 to 0.91 against it (chapter 3),
# and two such copies are at least 2 x 0.8 - 1 = 0.6 alike (Jaccard distance is a metric)
NEAR_KNOWN = 0.8


@dataclass(frozen=True)
class KnownScore:
    entry: int  # index into the exercise's submissions
    known: int  # index into its known solutions
    score: float  # Jaccard index of the two fingerprint sets
    shared: int  # fingerprints they share


def known_notebooks(folder: Path, assignment: str, notebook: str) -> list[tuple[str, Path]]:
    """(label, path) of every copy of ``<assignment>/<notebook>.ipynb`` under ``folder``, in
    both layouts, sorted; the label is the path under the folder's parent, as the report shows it."""
    name = f"{notebook}.ipynb"
    candidates = [folder / assignment / name]
    if folder.is_dir():
        candidates += [
            sub / assignment / name
            for sub in sorted(folder.iterdir())
            if sub.is_dir() and not sub.is_symlink() and sub.name != assignment
        ]
    return [(str(path.relative_to(folder.parent)), path) for path in candidates if path.is_file()]


def jaccard(a: Fingerprints, b: Fingerprints) -> tuple[float, int]:
    """(``|A ∩ B| / |A ∪ B|``, ``|A ∩ B|``) of the two fingerprint sets; 0 when both are empty."""
    small, large = (a.positions, b.positions) if len(a) <= len(b) else (b.positions, a.positions)
    shared = sum(1 for f in small if f in large)
    union = len(a) + len(b) - shared
    return (shared / union if union else 0.0), shared


def match_known(entries: list[Fingerprints], known: list[Fingerprints], threshold: float) -> list[KnownScore]:
    """Every (submission, known solution) scoring ``threshold`` or more with at least
    MIN_SHARED shared fingerprints, best first."""
    found = []
    for i, entry in enumerate(entries):
        for j, solution in enumerate(known):
            score, shared = jaccard(entry, solution)
            if score >= threshold and shared >= MIN_SHARED:
                found.append(KnownScore(i, j, score, shared))
    return sorted(found, key=lambda s: (-s.score, s.entry, s.known))
