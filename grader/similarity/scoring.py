"""Scoring every pair of submissions of one exercise from their fingerprints.

An inverted index (fingerprint -> the submissions that have it) gives, for each submission,
the others it shares at least one fingerprint with; only those pairs are scored, so the
cost follows the number of shared fingerprints, not the square of the class. A fingerprint
held by more than :data:`MAX_COMMON_FRACTION` of the submissions (and by more than
:data:`COMMON_FLOOR`, so that in a small class a few copies still count) is common
knowledge and dropped.

The score of a pair is the weighted Jaccard index of their fingerprint sets: the weight of
what they share over the weight of what either has, each fingerprint weighing
``log(1 + N / df)`` when ``df`` of the ``N`` submissions hold it. Identical cells score 1,
cells with nothing in common 0, and cells that share only what many write close to 0: the
common part weighs little next to what each wrote alone.

Short identical code is evidence only if few others wrote it. A pair at or above the
threshold is reported when it shares at least :data:`MIN_SHARED` fingerprints (a match of
about ten tokens), and, if it shares fewer than :data:`LONG_MATCH` (about six lines), when
that shared code is not a *common answer*: held (at least :data:`ANSWER_SHARE` of its
weight) by more than :data:`COMMON_ANSWER_FRACTION` of the submissions, or
:data:`COMMON_FLOOR` of them in a small class. Thirty students who wrote a three-line answer
the same way are one common answer, listed as such, not 435 pairs; a ring of eight who hand
in the same twenty lines are pairs, however many they are.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from grader.similarity.winnowing import Fingerprints, K

MAX_COMMON_FRACTION = 0.5
COMMON_ANSWER_FRACTION = 0.05
ANSWER_SHARE = 0.8
COMMON_FLOOR = 5
MIN_SHARED = 4
LONG_MATCH = 20
MAX_SHOWN, MAX_REPEATS = 2000, 4  # matching lines: fingerprints grown, and places of each
GROWTH_PER_TOKEN = 32  # matching lines: tokens stepped over in all, per token of the two cells


@dataclass(frozen=True)
class Pair:
    a: int  # indices into the exercise's submissions, a < b
    b: int
    score: float
    shared: int  # fingerprints they share (of those that count)


@dataclass
class Scored:
    pairs: list[Pair]  # every pair reported (at or above the threshold), best first
    common_answers: list[Pair]  # pairs at or above the threshold whose shared code is a common answer
    compared: int  # pairs that shared a fingerprint, and were therefore scored
    counted: set[int]  # the fingerprints that count (neither given nor common)
    common: int  # fingerprints dropped as too common


def common_limit(n: int) -> float:
    """A fingerprint held by more submissions than this is dropped."""
    return max(COMMON_FLOOR, MAX_COMMON_FRACTION * n)


def common_answer_limit(n: int) -> float:
    """Code held by more submissions than this is a common answer."""
    return max(COMMON_FLOOR, COMMON_ANSWER_FRACTION * n)


class _Index:
    """The inverted index of one exercise: fingerprint -> the submissions holding it."""

    def __init__(self, prints: Sequence[Iterable[int]]) -> None:
        self.n = n = len(prints)
        holders: dict[int, list[int]] = {}
        for index, fingerprints in enumerate(prints):
            for f in fingerprints:
                holders.setdefault(f, []).append(index)
        limit = common_limit(n)
        self.counted = {f for f, who in holders.items() if len(who) <= limit}
        self.dropped = len(holders) - len(self.counted)
        self.weights = {f: math.log1p(n / len(holders[f])) for f in self.counted}
        self.own = [frozenset(f for f in fps if f in self.counted) for fps in prints]
        self.totals = np.array([sum(self.weights[f] for f in fps) for fps in self.own])
        linking = [f for f in self.counted if len(holders[f]) > 1]  # only these link two submissions
        self.column = {f: j for j, f in enumerate(linking)}
        self.postings = [np.array(holders[f], dtype=np.int64) for f in linking]
        self.sizes = np.array([len(p) for p in self.postings], dtype=np.int64)
        self.column_weight = np.array([self.weights[f] for f in linking])
        self._answers: dict[frozenset[int], int] = {}

    def sharing(self, fingerprints: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
        """For every submission: the weight and the number of ``fingerprints`` it holds."""
        ids = np.array([self.column[f] for f in fingerprints if f in self.column], dtype=np.int64)
        if ids.size == 0:
            return np.zeros(self.n), np.zeros(self.n, dtype=np.int64)
        members = np.concatenate([self.postings[j] for j in ids.tolist()])
        weight = np.bincount(
            members, weights=np.repeat(self.column_weight[ids], self.sizes[ids]), minlength=self.n
        )
        return weight, np.bincount(members, minlength=self.n)

    def holding(self, shared: frozenset[int]) -> int:
        """How many submissions hold ``shared`` (at least ANSWER_SHARE of its weight)."""
        if shared not in self._answers:
            weight, _ = self.sharing(shared)
            whole = sum(self.weights[f] for f in shared)
            self._answers[shared] = int(np.count_nonzero(weight >= ANSWER_SHARE * whole - 1e-9))
        return self._answers[shared]


def score_pairs(prints: Sequence[Iterable[int]], threshold: float) -> Scored:
    """Score the pairs of ``prints`` (each submission's fingerprints) that share any."""
    index = _Index(prints)
    answer_limit = common_answer_limit(index.n)
    pairs: list[Pair] = []
    common_answers: list[Pair] = []
    compared = 0
    for a, own in enumerate(index.own):
        shared_weight, shared_count = index.sharing(own)
        others = np.flatnonzero(shared_count[a + 1 :]) + a + 1
        compared += others.size
        if others.size == 0:
            continue
        together = shared_weight[others]
        union = index.totals[a] + index.totals[others] - together
        scores = np.divide(together, union, out=np.zeros_like(together), where=union > 0)
        keep = (scores >= threshold) & (shared_count[others] >= MIN_SHARED)
        for b, score, count in zip(
            others[keep].tolist(), scores[keep].tolist(), shared_count[others][keep].tolist(), strict=True
        ):
            pair = Pair(a, b, min(score, 1.0), count)
            if count < LONG_MATCH and index.holding(own & index.own[b]) > answer_limit:
                common_answers.append(pair)
            else:
                pairs.append(pair)
    pairs.sort(key=lambda p: (-p.score, p.a, p.b))
    return Scored(pairs, common_answers, compared, index.counted, index.dropped)


def clusters(n: int, pairs: Sequence[Pair]) -> list[list[int]]:
    """Connected components of ``pairs`` (two or more members each), largest first."""
    parent = list(range(n))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for pair in pairs:
        parent[root(pair.a)] = root(pair.b)
    groups: dict[int, list[int]] = {}
    for i in range(n):
        groups.setdefault(root(i), []).append(i)
    found = [sorted(g) for g in groups.values() if len(g) > 1]
    return sorted(found, key=lambda g: (-len(g), g))


def _extend(a: Fingerprints, b: Fingerprints, i: int, j: int, k: int) -> tuple[int, int]:
    """The longest run of equal own tokens through a[i:i+k] == b[j:j+k]: (start in a, length).
    Its cost is the run's length."""
    start, end = i, i + min(k, len(a.tokens) - i, len(b.tokens) - j)  # a short cell is one k-gram
    while (
        start > 0
        and start - i + j > 0
        and a.own[start - 1]
        and b.own[start - 1 - i + j]
        and a.tokens[start - 1] == b.tokens[start - 1 - i + j]
    ):
        start -= 1
    while (
        end < len(a.tokens)
        and end - i + j < len(b.tokens)
        and a.own[end]
        and b.own[end - i + j]
        and a.tokens[end] == b.tokens[end - i + j]
    ):
        end += 1
    return start, end - start


def matching_lines(
    a: Fingerprints, b: Fingerprints, counted: set[int], k: int = K
) -> tuple[dict[int, int], dict[int, int]]:
    """Which lines of each cell match, and the matching region each belongs to.

    Each fingerprint the two share (of those that count) is grown, token by token, into the
    longest run of equal tokens around it, never into code the learner was given. Returns,
    for each cell, line -> region number: regions are numbered in the order of the first
    cell, so that both sides can be coloured alike.

    The cost is linear in the cells' length: at most MAX_SHOWN x MAX_REPEATS² places are
    grown, the runs of one offset are disjoint (each is maximal), so a place inside one is
    found by bisection, and growing stops once GROWTH_PER_TOKEN steps per token are spent
    (the page then shows fewer matching lines, never more).
    """
    runs: list[tuple[int, int, int]] = []  # (start in a, start in b, length)
    by_offset: dict[int, tuple[list[int], list[int]]] = {}  # j - i -> (starts, lengths), sorted
    shared = sorted(
        (f for f in a.positions if f in b.positions and f in counted), key=lambda f: a.positions[f][0]
    )
    budget = GROWTH_PER_TOKEN * (len(a.tokens) + len(b.tokens))
    for f in shared[:MAX_SHOWN]:  # a cell of one line repeated thousands of times costs no more
        for i in a.positions[f][:MAX_REPEATS]:
            for j in b.positions[f][:MAX_REPEATS]:
                starts, lengths = by_offset.setdefault(j - i, ([], []))
                at = bisect.bisect_right(starts, i) - 1
                if at >= 0 and i < starts[at] + lengths[at]:
                    continue  # inside a run already found
                if budget <= 0:
                    break
                start, length = _extend(a, b, i, j, k)
                budget -= length
                runs.append((start, start - i + j, length))
                at = bisect.bisect_left(starts, start)
                starts.insert(at, start)
                lengths.insert(at, length)
    runs.sort()
    code_lines = a.code_lines
    lines_a: dict[int, int] = {}
    lines_b: dict[int, int] = {}
    region = -1
    last_line = None
    for s, t, n in runs:
        first_line = a.lines[s]
        # a new region unless this run continues the previous one (comments, blank lines and
        # prints between them hold no token, so they do not break it)
        if last_line is None or any(
            line in code_lines and line not in lines_a for line in range(last_line + 1, first_line)
        ):
            region += 1
        for offset in range(n):  # the given tokens a fingerprint straddles are not shown as matching
            if a.own[s + offset]:
                lines_a.setdefault(a.lines[s + offset], region)
            if b.own[t + offset]:
                lines_b.setdefault(b.lines[t + offset], region)
        last_line = max(last_line or 0, a.lines[s + n - 1])
    return lines_a, lines_b
