"""The canonical order of a run of consecutive assignments, in time linear in their size.

Two assignments of a run may trade places unless one writes what the other reads or writes,
a dotted name counting as the same as every name it starts with or that starts with it
(``self`` and ``self.W_q`` are one, ``self.W_q`` and ``self.W_k`` are two). The order read is
the topological order of that relation that takes, whenever several assignments are free,
the one whose tokens sort first; so any order a learner could have written them in reads the
same.

Deciding the relation pair by pair costs r² pairs times the product of their names (a cell of
100 assignments of 100 names each took 32 s, and a longer run was not reordered at all).
Here each access is filed under every name of its chain instead: a write of ``a.b.c`` is a
*write* of ``a.b.c`` and a *write below* of ``a`` and ``a.b``; a read likewise a *read* and
*reads below*. Two assignments conflict exactly when, under one name, one *writes* and the
other accesses it in any way, or one *reads* and the other *writes below* (u and v overlap
iff one is a prefix of the other: under the shorter one, the longer is *below*). Under each
name the accesses since the last write form groups that alternate between reads and writes
below (reads below conflict with writes only): each group follows the one before through
one extra node standing for the whole group, an assignment that both reads a name and
writes below it follows every group, and a write follows everything since the last write.
Each access adds a constant number of edges (amortised), and every edge is a conflict or a
chain of conflicts, so the constraints are exactly those of the pairwise relation, and the
order the same, for a run of any length: O(A) for A accesses, plus the heap's
O(r log r) comparisons of token lists.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from grader.similarity.guards import Budget

WRITE, READ, WRITE_BELOW, READ_BELOW, MIXED = "W", "R", "Wb", "Rb", "M"  # MIXED: a read and a write below


@dataclass
class _Name:
    """The accesses filed under one name since its last write."""

    write: int | None = None  # the last assignment that wrote it
    since: list[int] = field(default_factory=list)  # every access after that write
    mixed: int | None = None  # the last MIXED access after it
    group_kind: str | None = None  # READ or WRITE_BELOW: the current group, after ``mixed``
    group: list[int] = field(default_factory=list)
    group_entry: int | None = None  # the node every member of the current group follows


class _Graph:
    """Nodes 0..r-1 are the assignments; later nodes each stand for a group of them."""

    def __init__(self, r: int) -> None:
        self.r = r
        self.after: list[set[int]] = [set() for _ in range(r)]  # node -> the nodes it follows

    def node(self, follows: Sequence[int]) -> int:
        self.after.append(set(follows))
        return len(self.after) - 1

    def follow(self, j: int, follows: Sequence[int | None]) -> None:
        self.after[j].update(i for i in follows if i is not None and i != j)


def _kind(accesses: set[str]) -> str:
    """One access per name and assignment: the kinds it made of that name, combined."""
    if WRITE in accesses:
        return WRITE
    if READ in accesses and WRITE_BELOW in accesses:
        return MIXED
    for kind in (READ, WRITE_BELOW):
        if kind in accesses:
            return kind
    return READ_BELOW


def _file(graph: _Graph, name: _Name, j: int, kind: str) -> None:
    """Record assignment ``j``'s access of ``name``: the edges it needs, then the state."""
    if kind == WRITE:
        graph.follow(j, [name.write, *name.since])
        name.write, name.since, name.mixed = j, [], None
        name.group_kind, name.group, name.group_entry = None, [], None
        return
    name.since.append(j)
    if kind == READ_BELOW:
        graph.follow(j, [name.write])
    elif kind == MIXED:
        graph.follow(j, [name.write, name.mixed, *name.group])
        name.mixed, name.group_kind, name.group, name.group_entry = j, None, [], None
    elif name.group_kind == kind:
        graph.follow(j, [name.group_entry])
        name.group.append(j)
    else:  # a new group: after every member of the one before, or after the last MIXED or write
        entry = (
            graph.node(name.group) if name.group else (name.mixed if name.mixed is not None else name.write)
        )
        graph.follow(j, [entry])
        name.group_kind, name.group, name.group_entry = kind, [j], entry


def _accesses(writes: set[str], reads: set[str], ids: dict[tuple[int, str], int]) -> dict[int, set[str]]:
    """name id -> the kinds of access, for every name of every chain of ``writes`` and ``reads``."""
    found: dict[int, set[str]] = {}
    for names, exact, below in ((writes, WRITE, WRITE_BELOW), (reads, READ, READ_BELOW)):
        for dotted in names:
            parts = dotted.split(".")
            parent = -1
            for depth, part in enumerate(parts):
                parent = ids.setdefault((parent, part), len(ids))
                found.setdefault(parent, set()).add(exact if depth == len(parts) - 1 else below)
    return found


def canonical_order(
    effects: Sequence[tuple[set[str], set[str]]],
    read: Sequence[tuple[list[str], list[int]]],
    budget: Budget | None = None,
) -> list[int]:
    """The order to read a run in: ``effects[j]`` is (what assignment j writes, what it reads),
    as names or dotted names; ``read[j]`` its tokens and lines, which break ties."""
    r = len(effects)
    graph = _Graph(r)
    names: dict[int, _Name] = {}
    ids: dict[tuple[int, str], int] = {}  # (parent name id, part) -> name id: a chain in O(its length)
    for j, (writes, reads) in enumerate(effects):
        accesses = _accesses(writes, reads, ids)
        if budget is not None:
            budget.step(len(accesses))
        for name_id, kinds in accesses.items():
            _file(graph, names.setdefault(name_id, _Name()), j, _kind(kinds))
    waits = [len(after) for after in graph.after]
    unblocks: list[list[int]] = [[] for _ in graph.after]
    for node, after in enumerate(graph.after):
        for i in after:
            unblocks[i].append(node)
    ready = [(read[j], j) for j in range(r) if not waits[j]]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        _, first = heapq.heappop(ready)
        order.append(first)
        done = [first]
        while done:  # a group's node is passed as soon as its last member is read
            for node in unblocks[done.pop()]:
                waits[node] -= 1
                if not waits[node]:
                    if node < r:
                        heapq.heappush(ready, (read[node], node))
                    else:
                        done.append(node)
    return order
