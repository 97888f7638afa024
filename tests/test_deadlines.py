"""Late policies as nbgrader applies them, and the small things an instructor reads (issue 34, item 8).

- ``subtract-per-hour:P`` takes P points per *started* hour, ``subtract-percent-per-hour:P``
  P percent of the notebook's score per started hour; both run through nbgrader's own
  ``AssignLatePenalties`` on a gradebook made with nbgrader's API, an extension included
  (nbgrader's ``SubmittedAssignment.extension`` moves the due date for one student);
- ``--help`` says what P is and what ``check``'s timeout is;
- ``release`` says one line per assignment, with the time it took.
"""

from __future__ import annotations

import contextlib
from datetime import datetime, timedelta
from pathlib import Path

import nbformat
import pytest
from nbgrader.api import Gradebook
from nbgrader.preprocessors import AssignLatePenalties

from grader.autograde.nbgrader_adapters import alembic_head_in_process
from grader.deadlines import DeadlineError, LatePolicy, SubtractPercentPerHour, SubtractPerHour

A = "03_scaled_dot_product"
DUE = datetime(2027, 1, 15, 22, 59)  # naive UTC, the gradebook's convention


def test_percent_policy_is_read_and_bounded():
    policy = LatePolicy.parse("subtract-percent-per-hour:10")
    assert (policy.method, policy.points_per_hour, str(policy)) == (
        "subtract-percent-per-hour",
        10.0,
        "subtract-percent-per-hour:10",
    )
    for bad in (
        "subtract-percent-per-hour:0",
        "subtract-percent-per-hour:101",
        "subtract-percent-per-hour:x",
        "subtract-percent-per-hour:nan",
        "subtract-percent-per-hour",
    ):
        with pytest.raises(DeadlineError, match="percent"):
            LatePolicy.parse(bad)


@pytest.mark.parametrize(
    ("seconds", "points", "percent"),
    [
        (1, 2.0, 1.0),  # one second late is a started hour
        (3600, 2.0, 1.0),  # exactly one hour
        (3601, 4.0, 2.0),  # a second into the second hour
        (29 * 60, 2.0, 1.0),  # nbgrader's example plugin (nearest hour) would take nothing here
        (200 * 3600, 400.0, 10.0),  # the percent form never takes more than the score
    ],
)
def test_started_hours(seconds, points, percent):
    assert SubtractPerHour(points_per_hour=2).late_submission_penalty("s", 10.0, seconds) == points
    assert SubtractPercentPerHour(percent_per_hour=10).late_submission_penalty(
        "s", 10.0, seconds
    ) == pytest.approx(percent)


@pytest.fixture
def gradebook_url(tmp_path: Path) -> str:
    """ann and bob, both handed in 2 h 10 min after the due date, 8 of 10 points; bob has a
    three-hour extension (nbgrader's own column)."""
    url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with alembic_head_in_process():
        gradebook = Gradebook(url)
    try:
        gradebook.update_or_create_assignment(A, duedate=DUE)
        gradebook.add_notebook(A, A)
        gradebook.add_grade_cell("test_0", A, A, max_score=10.0, cell_type="code")
        for student in ("ann", "bob"):
            gradebook.add_student(student)
            submission = gradebook.add_submission(A, student, timestamp=DUE + timedelta(hours=2, minutes=10))
            if student == "bob":
                submission.extension = timedelta(hours=3)
            gradebook.find_grade("test_0", A, A, student).auto_score = 8.0
        gradebook.db.commit()
    finally:
        gradebook.close()
    return url


@pytest.mark.parametrize(
    ("policy", "ann_penalty"),
    [
        ("subtract-per-hour:1", 3.0),  # 2 h 10 min: three started hours
        ("subtract-percent-per-hour:10", 2.4),  # 30% of 8
        ("zero", 8.0),
        ("none", 0.0),
    ],
)
def test_nbgrader_applies_the_policy_and_the_extension(gradebook_url, policy, ann_penalty):
    for student in ("ann", "bob"):
        resources = {
            "nbgrader": {"db_url": gradebook_url, "assignment": A, "notebook": A, "student": student}
        }
        AssignLatePenalties(config=LatePolicy.parse(policy).nbgrader_config()).preprocess(
            nbformat.v4.new_notebook(), resources
        )
    with contextlib.closing(Gradebook(gradebook_url)) as gradebook:
        ann, bob = (gradebook.find_submission(A, s) for s in ("ann", "bob"))
        assert ann.late_submission_penalty == pytest.approx(ann_penalty)
        assert bob.total_seconds_late == 0 and not bob.late_submission_penalty  # within the extension


def test_help_says_what_p_and_the_timeout_are(capsys):
    from grader.cli import build_parser

    parser = build_parser()
    for command in ("autograde", "check"):
        with pytest.raises(SystemExit):
            parser.parse_args([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "per started hour" in text and "nearest hour" in text and "subtract-percent-per-hour:P" in text
    assert "(default: 120)" in text


def test_release_says_one_line_per_assignment(tmp_path, monkeypatch):
    import grader.release as release_module

    source = tmp_path / "solutions"
    for name in ("01_a", "02_b"):
        (source / name).mkdir(parents=True)
        (source / name / f"{name}.ipynb").write_text("{}")
    made = tmp_path / "made"
    made.mkdir()
    (made / "01_a.ipynb").write_text("new")
    (made / "02_b.ipynb").write_text("same")
    (tmp_path / "chapters" / "02_b").mkdir(parents=True)
    (tmp_path / "chapters" / "02_b" / "02_b.ipynb").write_text("same")
    monkeypatch.setattr(release_module, "state_rules", lambda path: False)
    monkeypatch.setattr(release_module, "derive_install_references", lambda paths: [])
    monkeypatch.setattr(release_module, "temporary_course", lambda source: contextlib.nullcontext(None))
    monkeypatch.setattr(release_module, "generate_assignment", lambda api, name: made)
    monkeypatch.setattr(
        release_module,
        "write_expected_data",
        lambda names, source: [tmp_path / f"{names[0]}.npz"] if names == ["01_a"] else [],
    )
    lines: list[str] = []
    written = release_module.release(None, source, tmp_path / "chapters", say=lines.append)
    assert [line.split(" in ")[0] for line in lines] == [
        "01_a: learner notebook written, 1 expected-data files written,",
        "02_b: learner notebook up to date, 0 expected-data files written,",
    ]
    assert all(line.endswith(" s") for line in lines)
    assert written == [tmp_path / "chapters" / "01_a" / "01_a.ipynb", tmp_path / "01_a.npz"]


def test_extensions_csv_is_read_with_its_errors_named(tmp_path):
    from grader.deadlines import read_extensions

    path = tmp_path / "extensions.csv"
    path.write_text(
        f"student_id,assignment,due,extra_hours\nann,{A},2027-01-16 23:59 Europe/Berlin,\nbob,{A},,36\n",
        encoding="utf-8",
    )
    table = read_extensions(path)
    assert table[("ann", A)].due == datetime(2027, 1, 16, 22, 59)
    assert table[("bob", A)].delta(DUE) == timedelta(hours=36)
    assert table[("ann", A)].delta(DUE) == timedelta(days=1) and table[("ann", A)].delta(None) is None
    for body, words in (
        (f"ann,{A},,\n", "either due or extra_hours"),
        (f"ann,{A},2027-01-16 23:59 UTC,3\n", "either due or extra_hours"),
        (f"ann,{A},,-2\n", "above 0"),
        (f"ann,{A},soon,\n", "line 2"),
        (f"ann,{A},,1\nann,{A},,2\n", "listed twice"),
    ):
        path.write_text("student_id,assignment,due,extra_hours\n" + body, encoding="utf-8")
        with pytest.raises(DeadlineError, match=words):
            read_extensions(path)


def test_extensions_csv_reaches_nbgraders_late_penalty(gradebook_url, tmp_path):
    from grader.deadlines import apply_extension

    (tmp_path / "extensions.csv").write_text(  # ann: one extra hour (still 1 h 10 min late); bob: none
        f"student_id,assignment,due,extra_hours\nann,{A},,1\n", encoding="utf-8"
    )
    config = LatePolicy.parse("subtract-per-hour:1").nbgrader_config()
    with alembic_head_in_process():
        gradebook = Gradebook(gradebook_url)
    try:
        for student in ("ann", "bob"):
            apply_extension(gradebook, A, student, tmp_path)
        gradebook.db.commit()
    finally:
        gradebook.close()
    for student in ("ann", "bob"):
        resources = {
            "nbgrader": {"db_url": gradebook_url, "assignment": A, "notebook": A, "student": student}
        }
        AssignLatePenalties(config=config).preprocess(nbformat.v4.new_notebook(), resources)
    with contextlib.closing(Gradebook(gradebook_url)) as gradebook:
        ann, bob = (gradebook.find_submission(A, s) for s in ("ann", "bob"))
        assert ann.late_submission_penalty == pytest.approx(2.0)  # two started hours
        assert bob.extension is None  # the table is the truth once it exists: bob's 3 h went
        assert bob.late_submission_penalty == pytest.approx(3.0)


def test_due_sets_one_named_assignment_never_all(tmp_path):
    from grader.cli import build_parser
    from grader.course_cli import course_grade_options

    source, submitted = tmp_path / "source", tmp_path / "submitted"
    for assignment in ("01_a", "02_b", "03_c"):
        (source / assignment).mkdir(parents=True)
    (submitted / "ann" / "01_a").mkdir(parents=True)
    (submitted / "ann" / "notes").mkdir()  # not an assignment of the source: not counted
    base = ["autograde", str(submitted), "--out", str(tmp_path / "out"), "--source", str(source)]

    def due(*values: str) -> dict:
        return course_grade_options(
            build_parser().parse_args(base + [a for v in values for a in ("--due", v)])
        )["due"]

    assert due("2027-01-15 23:59 UTC") == {"01_a": datetime(2027, 1, 15, 23, 59)}  # the one graded
    (submitted / "bob" / "02_b").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"grades 2 assignments \(01_a, 02_b\), so say which one"):
        due("2027-01-15 23:59 UTC")
    assert due("02_b=2027-01-15 23:59 UTC", "03_c=2027-02-01 12:00 +01:00") == {
        "02_b": datetime(2027, 1, 15, 23, 59),
        "03_c": datetime(2027, 2, 1, 11, 0),
    }
    assert due() == {}  # every assignment keeps its gradebook's date
    with pytest.raises(ValueError, match="'04_d' is not an assignment of the source"):
        due("04_d=2027-01-15 23:59 UTC")
    with pytest.raises(ValueError, match="02_b is given two dates"):
        due("02_b=2027-01-15 23:59 UTC", "02_b=2027-01-16 23:59 UTC")
    watch = ["autograde", "--watch", str(tmp_path / "inbound"), "--out", str(tmp_path / "out")]
    watch += ["--source", str(source), "--due", "2027-01-15 23:59 UTC"]
    with pytest.raises(ValueError, match="a watcher grades every assignment, so say which one"):
        course_grade_options(build_parser().parse_args(watch))


def test_an_edited_extension_changes_that_students_fingerprint_only(tmp_path):
    from grader.deadlines import EXTENSIONS_FILE, extension_key

    before = {s: extension_key(tmp_path, s, A) for s in ("ann", "bob")}
    table = tmp_path / EXTENSIONS_FILE
    table.write_text(f"student_id,assignment,due,extra_hours\nann,{A},,1\n", encoding="utf-8")
    once = {s: extension_key(tmp_path, s, A) for s in ("ann", "bob")}
    table.write_text(f"student_id,assignment,due,extra_hours\nann,{A},,2\n", encoding="utf-8")
    twice = {s: extension_key(tmp_path, s, A) for s in ("ann", "bob")}
    assert len({before["ann"], once["ann"], twice["ann"]}) == 3  # each edit grades ann again
    assert once["bob"] == twice["bob"]  # bob's row (none) did not change: not graded again
    assert extension_key(tmp_path, "ann", "01_other") == once["bob"]


def test_the_servers_clock_decides_and_a_far_claim_is_flagged():
    from grader.deadlines import CLOCK_SKEW_LIMIT, HandedIn, judge_time

    arrived = datetime(2027, 1, 16, 10, 0)
    forged = HandedIn(arrived - timedelta(days=45))
    assert judge_time(forged, None).at == forged.at  # collect-and-grade: nbgrader's rule
    judged = judge_time(forged, arrived)
    assert (judged.at, judged.claimed) == (arrived, forged.at)
    assert "45 d before the server received it" in judged.flag, judged.flag
    near = judge_time(HandedIn(arrived + CLOCK_SKEW_LIMIT), arrived)  # a slow laptop clock
    assert (near.at, near.flag) == (arrived, "")
    far = judge_time(HandedIn(arrived + CLOCK_SKEW_LIMIT + timedelta(seconds=1)), arrived)
    assert "after the server received it" in far.flag, far.flag
    assert judge_time(HandedIn(), arrived) == judge_time(HandedIn(), arrived).__class__(arrived)
