"""One hostile submission never denies the others a similarity report (issue 29, round 3).

The attacks, each planted in one class of chapter 3 among honest work (ten independent
solutions and the course's, each with a scratch cell of its own added):

- nesting: a notebook whose JSON is nested 5,000 deep (the report stopped on a
  RecursionError), cells nested 99,000 deep in parentheses, 45,000 in ``+``, 100,000 in
  unary minus (each under the size limit), 3,000 nested lambdas, and a minus 900 deep that
  parses but is too deep to walk;
- size: one 186,000-character cell of assignments (the pairwise reordering took minutes);
- hiding: a copy moved into an added cell (only solution cells were read), into one whose
  metadata claims it is a locked test, into another exercise's cell, and a copy padded with
  a dead ``np.shape(Q)`` (and ``Q.shape``, ``len(Q)``) after every statement, and a copy in a
  notebook whose cells' metadata are lists, not dicts (no grade id can be read).

The report must come out, list each nested one as not compared with the reason, read the
big cell within seconds, find every hidden copy, and still flag no honest pair. It reads the
submissions' files, so it runs through ``python -m grader similarity`` as root and as uid
65534 owning them (``setpriv``). Beside it: the reading is linear in the code's size
(counted in Python lines executed, not in seconds), the linear reordering gives exactly the
pairwise one, and a submission that uses up its time budget is listed, not waited for.
"""

from __future__ import annotations

import ast
import csv
import html
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from grader.paths import ROOT, SOLUTIONS
from grader.similarity import DEFAULT_THRESHOLD
from grader.similarity.exercises import nbgrader_metadata
from tests.security.grade_as import run_as
from tests.test_similarity import CH3, COURSE, INDEPENDENT, SDPA, _notebook, write_class

pytestmark = [pytest.mark.security, pytest.mark.grading, pytest.mark.xdist_group("security")]

IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
JACOBIAN = "softmax_jacobian"
HONEST = {f"indep{n:02d}": code for n, code in enumerate(INDEPENDENT, start=1)} | {"course": COURSE}
# who copied whom, and how it was hidden
COPIES = {
    "mover": "course",
    "mover_locked": "indep02",
    "mover_other": "indep03",
    "padded": "indep06",
    "badmeta": "course",
}
NESTED = ["deepjson", "deepparens", "deepplus", "deepminus", "deeplambda", "deepread"]
BIG_CELL_CHARACTERS = 186_000


def _scratch(n: int) -> str:
    """An honest learner's own scratch cell (tries the function on small inputs)."""
    return (
        f"Q = np.ones(({n % 3 + 1}, 4))\nK = np.ones(({n % 4 + 2}, 4))\nV = np.ones(({n % 4 + 2}, 3))\n"
        f"out, w = scaled_dot_product_attention(Q, K, V)\nprint(out.shape, w.sum(axis=-1))\n"
    )


def _pad(code: str) -> str:
    """``code`` with a dead expression after every statement of every block."""
    tree = ast.parse(code)
    dead = ["np.shape(Q)", "Q.shape", "len(Q)"]
    for node in ast.walk(tree):
        for name in ("body", "orelse"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                padded = []
                for n, statement in enumerate(block):
                    padded += [statement, ast.parse(dead[n % len(dead)]).body[0]]
                setattr(node, name, padded)
    return ast.unparse(tree)


def big_cell(characters: int, names: int = 90, run: int = 100) -> str:
    """Runs of ``run`` tuple assignments of ``names`` names each, ``characters`` long: the
    shape that made the pairwise reordering quadratic (pairs x names x names)."""
    lines, total, s = [], 0, 0
    while total < characters:
        line = (
            ", ".join(f"w{s}_{i}" for i in range(names))
            + " = "
            + ", ".join(f"a{s % run}_{i}" for i in range(names))
        )
        if s % run == run - 1:
            line += "\nassert True"  # ends the run of assignments
        lines.append(line)
        total += len(line) + 1
        s += 1
    return "\n".join(lines)[:characters].rsplit("\n", 1)[0]


def _added_cell(code: str, metadata: dict | None = None) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(code)
    if metadata:
        cell.metadata["nbgrader"] = metadata
    return cell


def _write(submitted: Path, student: str, nb: nbformat.NotebookNode) -> None:
    folder = submitted / student / CH3
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{CH3}.ipynb")


def build_class(submitted: Path) -> None:
    for n, (student, code) in enumerate(HONEST.items()):
        nb = _notebook(CH3, SDPA, code)
        nb.cells.append(_added_cell(_scratch(n)))
        _write(submitted, student, nb)
    nb = _notebook(CH3, SDPA, None)  # the answer below the test, in a cell of its own
    nb.cells.append(_added_cell(COURSE))
    _write(submitted, "mover", nb)
    nb = _notebook(CH3, SDPA, None)  # in a cell that calls itself a locked test
    nb.cells.insert(
        5,
        _added_cell(
            INDEPENDENT[1],
            {
                "grade_id": "test_made_up",
                "locked": True,
                "grade": True,
                "solution": False,
                "points": 0,
                "schema_version": 3,
            },
        ),
    )
    _write(submitted, "mover_locked", nb)
    nb = _notebook(CH3, SDPA, None)  # in the next exercise's cell, after its stub
    (jacobian,) = [c for c in nb.cells if nbgrader_metadata(c).get("grade_id") == JACOBIAN]
    jacobian.source += "\n\n\n" + INDEPENDENT[2]
    _write(submitted, "mover_other", nb)
    _write(submitted, "padded", _notebook(CH3, SDPA, _pad(INDEPENDENT[5])))
    _write(submitted, "big", _notebook(CH3, SDPA, big_cell(BIG_CELL_CHARACTERS)))
    plus = f"def {SDPA}(Q, K, V, mask=None):\n    return " + " + ".join(["Q"] * 45_000)
    for student, code in [
        ("deepparens", "x = " + "(" * 99_000 + "1" + ")" * 99_000),
        ("deepplus", plus),
        ("deepminus", "x = " + "-" * 100_000 + "1"),
        ("deeplambda", "f = " + "lambda: " * 3_000 + "1"),
        ("deepread", "x = " + "-" * 900 + "1"),
    ]:  # parses; too deep to walk
        _write(submitted, student, _notebook(CH3, SDPA, code))
    text = json.loads(nbformat.writes(_notebook(CH3, SDPA, COURSE)))
    text["cells"][0]["metadata"]["deep"] = "HERE"
    deep = json.dumps(text).replace('"HERE"', "[" * 5_000 + "]" * 5_000)
    (submitted / "deepjson" / CH3).mkdir(parents=True)
    (submitted / "deepjson" / CH3 / f"{CH3}.ipynb").write_text(deep, encoding="utf-8")
    text = json.loads(nbformat.writes(_notebook(CH3, SDPA, COURSE)))
    for cell in text["cells"]:
        cell["metadata"] = ["not", "a", "dict"]  # no grade id anywhere: every cell is the learner's
    (submitted / "badmeta" / CH3).mkdir(parents=True)
    (submitted / "badmeta" / CH3 / f"{CH3}.ipynb").write_text(json.dumps(text), encoding="utf-8")


@pytest.fixture(scope="module", params=IDENTITIES)
def reported(request):
    """The class, reported once by the command as ``identity``: its CSV, page and time."""
    root = Path(tempfile.mkdtemp(prefix="attention-similarity-"))
    os.chmod(root, 0o755)
    submitted, out = root / "submitted", root / "report"
    build_class(submitted)
    command = [
        sys.executable,
        "-m",
        "grader",
        "similarity",
        str(submitted),
        "--out",
        str(out),
        "--source",
        str(SOLUTIONS),
    ]
    command, env = run_as(request.param, command, root, env={**os.environ, "HOME": str(root)})
    try:
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900, env=env)
        seconds = time.monotonic() - started
        print(f"{request.param}: the report took {seconds:.1f} s ({done.stdout.strip()})")
        rows, page = [], ""
        if done.returncode == 0:
            with open(out / "similarity.csv", newline="", encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            page = (out / "similarity.html").read_text(encoding="utf-8")
        yield {"done": done, "seconds": seconds, "rows": rows, "page": page}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _pairs(reported: dict, exercise: str = SDPA) -> dict[frozenset[str], float]:
    return {
        frozenset((r["student_a"], r["student_b"])): float(r["score"])
        for r in reported["rows"]
        if r["exercise"] == exercise
    }


def _not_compared(page: str) -> dict[str, list[str]]:
    """student -> the reasons the page's "Not compared" table gives for them."""
    table = page.split('id="not-compared"', 1)[1].split("</section>", 1)[0]
    found: dict[str, list[str]] = {}
    for student, why in re.findall(r'<td class="id">(.*?)</td><td>(.*?)</td></tr>', table):
        found.setdefault(html.unescape(student), []).append(html.unescape(why))
    return found


@pytest.mark.slow  # the class is reported once per identity (about 5 s)
def test_nested_submissions_are_listed_and_the_others_reported(reported):
    done = reported["done"]
    assert done.returncode == 0 and done.stderr == "", done.stderr[-2000:]
    skipped = _not_compared(reported["page"])
    for student in NESTED:
        assert student in skipped, (student, skipped)
    assert any("nested too deeply" in why for why in skipped["deepjson"]), skipped["deepjson"]
    assert any("nested too deeply" in why or "does not parse" in why for why in skipped["deepparens"])
    for student in ("deepplus", "deepminus", "deeplambda", "deepread"):
        assert any("nested too deeply" in why for why in skipped[student]), (student, skipped[student])
    assert not set(skipped) - set(NESTED), skipped  # nobody else is left out
    assert frozenset(("mover", "course")) in _pairs(reported)  # and the class is reported


@pytest.mark.slow  # the class is reported once per identity (about 5 s)
def test_a_186000_character_cell_is_read_within_seconds(reported):
    assert reported["done"].returncode == 0, reported["done"].stderr[-2000:]
    print(f"the whole class, with a {BIG_CELL_CHARACTERS:,}-character cell: {reported['seconds']:.1f} s")
    assert reported["seconds"] < 30
    assert "big" not in _not_compared(reported["page"])  # read, not skipped


@pytest.mark.slow  # the class is reported once per identity (about 5 s)
def test_hidden_copies_are_found(reported):
    pairs = _pairs(reported)
    for copier, original in COPIES.items():
        score = pairs.get(frozenset((copier, original)), 0.0)
        print(f"{copier} ~ {original}: {score:.2f}")
        assert score >= DEFAULT_THRESHOLD, (copier, original, pairs)
    page = reported["page"]
    assert "added cell" in page and f"({JACOBIAN}): {SDPA}" in page  # the page shows where it was


@pytest.mark.slow  # the class is reported once per identity (about 5 s)
def test_honest_work_is_still_not_flagged(reported):
    assert reported["done"].returncode == 0 and reported["rows"], reported["done"].stderr[-2000:]
    assert not set(HONEST) & set(_not_compared(reported["page"]))  # compared, every one
    flagged = [pair for r in reported["rows"] if (pair := {r["student_a"], r["student_b"]}) <= set(HONEST)]
    assert flagged == []
    assert all(set(pair) - set(HONEST) for pair in _pairs(reported, JACOBIAN))


# --- linear in the code's size -----------------------------------------------------------


def _lines_executed(function, *args) -> int:
    """Python lines of the similarity package executed by ``function(*args)``: its operations,
    counted (the clock would measure the machine's load as well)."""
    package = str(Path(ROOT / "grader" / "similarity"))
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
        return local

    def calls(frame, event, arg):
        return local if frame.f_code.co_filename.startswith(package) else None

    sys.settrace(calls)
    try:
        function(*args)
    finally:
        sys.settrace(None)
    return count


def _read(code: str) -> None:
    from grader.similarity.normalise import normalise, parse_cell

    normalise(parse_cell(code))


@pytest.mark.parametrize("shape", ["names per assignment", "assignments", "one long dotted write chain"])
def test_reading_grows_linearly_with_the_code(shape):
    """Doubling the cell about doubles the work: at most 2.4 times, where the pairwise
    reordering did 4 times (pairs x names x names)."""

    def cell(scale: int) -> str:
        if shape == "names per assignment":
            return "\n".join(
                ", ".join(f"w{s}_{i}" for i in range(10 * scale))
                + " = "
                + ", ".join(f"a{s}_{i}" for i in range(10 * scale))
                for s in range(40)
            )
        lines = range(40 * scale)
        if shape == "assignments":
            return "\n".join(f"self.m{s % 7}.x{s} = self.m{(s + 3) % 7}.y + v{s % 5}" for s in lines)
        return "\n".join(f"x.a{s % 3}.b{s % 5} = y{s}" if s % 4 else f"x.a{s % 3} = x" for s in lines)

    small, large = cell(1), cell(2)
    work = [_lines_executed(_read, small), _lines_executed(_read, large)]
    print(f"{shape}: {len(small):,} -> {len(large):,} characters, {work[0]:,} -> {work[1]:,} lines run")
    assert 1.5 < len(large) / len(small) < 2.5
    assert work[1] / work[0] < 1.2 * len(large) / len(small)


def _pairwise_order(effects, read) -> list[int]:
    """The order as it was decided before: every pair of assignments compared (the reference)."""
    import heapq

    def overlap(a, b):
        return any(x == y or x.startswith(y + ".") or y.startswith(x + ".") for x in a for y in b)

    r = len(effects)
    waits, unblocks = [0] * r, [[] for _ in range(r)]
    for j in range(r):
        for i in range(j):
            (w1, r1), (w2, r2) = effects[i], effects[j]
            if overlap(w1, r2) or overlap(r1, w2) or overlap(w1, w2):
                waits[j] += 1
                unblocks[i].append(j)
    ready = [(read[j], j) for j in range(r) if not waits[j]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, first = heapq.heappop(ready)
        order.append(first)
        for j in unblocks[first]:
            waits[j] -= 1
            if not waits[j]:
                heapq.heappush(ready, (read[j], j))
    return order


def test_the_linear_reordering_is_the_pairwise_one():
    from grader.similarity.ordering import canonical_order

    rng = random.Random(29)
    names = ["a", "a.b", "a.b.c", "a.c", "b", "b.a", "self", "self.W", "self.W.x", "self.V", "c"]
    for _ in range(3_000):
        r = rng.randint(1, 12)
        effects = [
            ({n for n in names if rng.random() < 0.15}, {n for n in names if rng.random() < 0.2})
            for _ in range(r)
        ]
        read = [([rng.choice("xyz") for _ in range(rng.randint(1, 3))], [j]) for j in range(r)]
        assert canonical_order(effects, read) == _pairwise_order(effects, read), effects


def test_a_submission_over_its_time_budget_is_listed_not_waited_for(tmp_path, monkeypatch):
    from grader.similarity import guards
    from grader.similarity.run import compare

    write_class(tmp_path, {"alice": COURSE, "bob": COURSE})
    monkeypatch.setattr(guards, "SECONDS_PER_NOTEBOOK", 0.0)
    report = compare(tmp_path, SOLUTIONS, DEFAULT_THRESHOLD)
    why = {(s.student, s.exercise): s.why for s in report.skipped}
    assert "took over 0 s" in why[("alice", SDPA)] and "took over 0 s" in why[("bob", SDPA)]
