"""Similarity against known solutions (issue 34, item 7): ``--against DIR``.

In a class of twelve where ten hand in the course's published reference solution, every
fingerprint of that solution is held by more than half of the class, so the pairs between
students drop it as common and the report used to say "0 pairs, 0 clusters". Here the ten
must all be in the known-solution table, and be one cluster of ten; a student who wrote
their own answer must be in neither; and a folder of published answers given with
``--against`` must be compared too.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import nbformat
import pytest

from grader.cli import main
from grader.paths import SOLUTIONS
from grader.similarity.exercises import nbgrader_metadata
from grader.similarity.run import compare
from tests.test_similarity import CH3, INDEPENDENT, SDPA, write_class

COPIERS = [f"copier{n:02d}" for n in range(1, 11)]
OWN = ["own01", "own02"]
KNOWN = f"{SOLUTIONS.name}/{CH3}/{CH3}.ipynb"  # how the report names the course's own solution


def reference_solution(grade_id: str = SDPA) -> str:
    """The course's solution of ``grade_id`` as a learner copies it from the published
    notebook: the code between nbgrader's markers, the marker lines themselves left out."""
    nb = nbformat.read(SOLUTIONS / CH3 / f"{CH3}.ipynb", as_version=4)
    (cell,) = [c for c in nb.cells if nbgrader_metadata(c).get("grade_id") == grade_id]
    marker = re.compile(r"^\s*#+\s*(BEGIN|END) SOLUTION")
    return "\n".join(line for line in cell.source.splitlines() if not marker.match(line)) + "\n"


def _class(submitted: Path) -> Path:
    students: dict[str, str | None] = dict.fromkeys(COPIERS, reference_solution())
    students.update(zip(OWN, INDEPENDENT[:2], strict=True))
    return write_class(submitted, students)


def _result(report, grade_id: str = SDPA):
    (result,) = [r for r in report.results if r.exercise.grade_id == grade_id]
    return result


def test_ten_who_hand_in_the_reference_are_all_listed_and_one_cluster(tmp_path):
    report = compare(_class(tmp_path / "submitted"), SOLUTIONS, 0.5)
    result = _result(report)
    assert result.known_solutions == 1  # the course's own notebook, read like a submission
    listed = {k.entry.student: k for k in result.known}
    assert sorted(listed) == COPIERS  # every copier, and neither student who wrote their own
    for match in listed.values():
        assert match.known.student == KNOWN
        assert match.score == pytest.approx(1.0)
        assert match.shared_lines > 5
    # ten identical of twelve: their fingerprints are too common for pairs, yet one cluster
    assert [sorted(c.students) for c in result.clusters] == [COPIERS]
    assert result.clusters[0].best == pytest.approx(1.0)
    assert "10 matching a known solution" in report.line()


def _tweaked() -> dict[str, str]:
    """The reference with one statement written another way, four ways."""
    ref = reference_solution()
    edits = {
        "sum": ("total = e.sum(axis=-1, keepdims=True)", "total = np.sum(e, axis=-1, keepdims=True)"),
        "mask": ("scores = np.where(mask, scores, -np.inf)", "scores = np.where(mask, scores, -1e9)"),
        "return": ("return weights @ V, weights", "out = weights @ V\n    return out, weights"),
        "scale": ("/ math.sqrt(d_k)", "/ np.sqrt(d_k)"),
    }
    tweaked = {}
    for name, (old, new) in edits.items():
        assert ref.count(old) == 1, old
        tweaked[f"tweak_{name}"] = ref.replace(old, new)
    return tweaked


def test_copies_of_the_reference_changed_in_a_statement_are_one_cluster(tmp_path):
    students: dict[str, str | None] = {**dict.fromkeys(COPIERS[:6], reference_solution()), **_tweaked()}
    students.update(zip(OWN, INDEPENDENT[:2], strict=True))
    result = _result(compare(write_class(tmp_path / "submitted", students), SOLUTIONS, 0.5))
    near = sorted([*COPIERS[:6], *_tweaked()])
    assert sorted(k.entry.student for k in result.known) == near
    assert [sorted(c.students) for c in result.clusters] == [near]


def test_a_student_who_wrote_their_own_is_not_listed(tmp_path):
    submitted = write_class(tmp_path / "submitted", dict(zip(OWN, INDEPENDENT[:2], strict=True)))
    result = _result(compare(submitted, SOLUTIONS, 0.5))
    assert result.known_solutions == 1 and len(result.entries) == 2
    assert result.known == []


def _published(folder: Path, author: str, code: str) -> Path:
    """``folder/<author>/<assignment>/<notebook>.ipynb``: a published answer, in the submitted layout."""
    return write_class(folder, {author: code})


def test_a_folder_of_published_answers_given_with_against_is_used(tmp_path):
    published = _published(tmp_path / "published", "answers_site", INDEPENDENT[2])
    submitted = write_class(
        tmp_path / "submitted",
        {"from_the_web": INDEPENDENT[2], "own01": INDEPENDENT[0], "own02": INDEPENDENT[1]},
    )
    assert _result(compare(submitted, SOLUTIONS, 0.5)).known == []  # not known without --against
    out = tmp_path / "report"
    assert main(["similarity", str(submitted), "--out", str(out), "--against", str(published)]) == 0
    with (out / "known_solutions.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["student"], r["known_solution"], float(r["score"])) for r in rows] == [
        ("from_the_web", f"published/answers_site/{CH3}/{CH3}.ipynb", 1.0)
    ]
    page = (out / "similarity.html").read_text()
    assert "Matching a known solution" in page and "answers_site" in page


def test_against_a_folder_in_the_source_layout(tmp_path):
    """``DIR/<assignment>/<notebook>.ipynb``: a published copy of a source folder."""
    published = tmp_path / "published"
    _published(tmp_path / "staging", "x", INDEPENDENT[3])
    (published / CH3).mkdir(parents=True)
    (tmp_path / "staging" / "x" / CH3 / f"{CH3}.ipynb").rename(published / CH3 / f"{CH3}.ipynb")
    submitted = write_class(tmp_path / "submitted", {"copied": INDEPENDENT[3], "own01": INDEPENDENT[0]})
    result = _result(compare(submitted, SOLUTIONS, 0.5, [published]))
    assert result.known_solutions == 2
    assert [(k.entry.student, k.known.student) for k in result.known] == [
        ("copied", f"published/{CH3}/{CH3}.ipynb")
    ]


def test_against_a_missing_folder_is_a_usage_error(tmp_path, capsys):
    submitted = write_class(tmp_path / "submitted", {"own01": INDEPENDENT[0]})
    missing = tmp_path / "no"
    assert main(["similarity", str(submitted), "--out", str(tmp_path / "r"), "--against", str(missing)]) == 2
    assert f"the --against folder {missing} is not a directory" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_the_source_given_again_is_read_once_and_a_broken_submission_stops_nobody(tmp_path):
    submitted = write_class(
        tmp_path / "submitted", {"copier01": reference_solution(), "own01": INDEPENDENT[0]}
    )
    broken = submitted / "broken" / CH3
    broken.mkdir(parents=True)
    (broken / f"{CH3}.ipynb").write_text("{" * 100_000)  # not JSON, and deeper than the parser follows
    report = compare(submitted, SOLUTIONS, 0.5, [SOLUTIONS, SOLUTIONS / ".." / SOLUTIONS.name])
    result = _result(report)
    assert report.against == [SOLUTIONS] and result.known_solutions == 1
    assert [k.entry.student for k in result.known] == ["copier01"]
    assert {s.student for s in report.skipped} == {"broken"}
