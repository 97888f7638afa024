"""A course run as an instructor runs one, with nbgrader's own tools on the grader's OUT.

One chapter 3 class goes through a temporary nbgrader exchange: the assignment is released
with ``nbgrader release_assignment``, two students hand it in with ``nbgrader submit`` (so
their folders carry nbgrader's ``timestamp.txt`` and ``submission_secret.txt``), the
instructor collects with ``nbgrader collect``, adds three more folders by hand (a stub, an
endless loop, a folder without a notebook) and grades with a due date and a late policy;
bob's timestamp is set 2.5 hours after the due date. The tests then read OUT as nbgrader's
course directory: formgrader serves its gradebook over HTTP, ``nbgrader release_feedback``
and each student's ``nbgrader fetch_feedback`` deliver the feedback, ``nbgrader export``
reads the late penalty; and they grade the class again to check what a re-run keeps.

The helpers at the top (an exchange, a student's nbgrader configuration, the nbgrader
command) are shared with ``tests/test_watch.py``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import socket
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import nbformat
import pytest

from grader.paths import CHAPTERS, SOLUTIONS
from tests.notebook_runner import learner_notebook, solved_notebook, with_cell

pytestmark = [pytest.mark.grading, pytest.mark.ch03, pytest.mark.xdist_group("course_run")]

A = "03_scaled_dot_product"
FULL = 10.0
COURSE = "attention"
BIN = Path(sys.executable).parent
DUE = "2099-03-02 17:00:00 Europe/Berlin"  # 16:00 UTC; the real submissions are on time
LATE_STAMP = "2099-03-02 18:30:00.000000 UTC"  # 2.5 hours late: 3 started hours


# ------------------------------------------------------------------ an nbgrader exchange


def env() -> dict[str, str]:
    return dict(os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""))


def nbgrader(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    run = subprocess.run([str(BIN / "nbgrader"), *args], cwd=cwd, capture_output=True, text=True,
                         env=env(), timeout=300)  # fmt: skip
    if check:
        assert run.returncode == 0, f"nbgrader {' '.join(args)}:\n{run.stderr[-3000:]}"
    return run


def make_exchange(root: Path) -> Path:
    """An exchange root as nbgrader wants it (everyone may write), holding nothing yet."""
    exchange = root / "exchange"
    exchange.mkdir(parents=True)
    exchange.chmod(0o777)
    return exchange


def write_config(folder: Path, exchange: Path, **traits: str) -> None:
    """nbgrader_config.py for the course ``attention`` on ``exchange``, plus ``traits``."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "c = get_config()",
        f"c.CourseDirectory.course_id = {COURSE!r}",
        f"c.Exchange.root = {str(exchange)!r}",
    ]
    lines += [f"c.{name} = {value!r}" for name, value in traits.items()]
    (folder / "nbgrader_config.py").write_text("\n".join(lines) + "\n")


def release(root: Path, exchange: Path) -> Path:
    """The instructor's course folder with the learner notebook released into the exchange."""
    course = root / "course"
    write_config(course, exchange)
    (course / "release" / A).mkdir(parents=True)
    (course / "release" / A / f"{A}.ipynb").write_bytes((CHAPTERS / A / f"{A}.ipynb").read_bytes())
    nbgrader("release_assignment", A, "--force", cwd=course)
    return course


def student_home(root: Path, exchange: Path, student: str, nb) -> Path:
    """A student's folder with their configuration and their work on the assignment."""
    home = root / "students" / student
    write_config(
        home, exchange, **{"Exchange.cache": str(home / ".cache"), "CourseDirectory.student_id": student}
    )
    (home / A).mkdir(parents=True)
    nbformat.write(nb, home / A / f"{A}.ipynb")
    return home


def autograde(*args: str, umask: int | None = None) -> subprocess.CompletedProcess:
    def set_umask() -> None:
        if umask is not None:
            os.umask(umask)

    return subprocess.run([sys.executable, "-m", "grader", "autograde", *args], capture_output=True,
                          text=True, timeout=600, env=env(), preexec_fn=set_umask)  # fmt: skip


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


# ------------------------------------------------------------------ the class


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    root = tmp_path_factory.mktemp("course_run")
    exchange = make_exchange(root)
    instructor = release(root, exchange)
    homes = {
        "ann": student_home(root, exchange, "ann", solved_notebook(A)),
        "bob": student_home(root, exchange, "bob", solved_notebook(A)),
    }
    for home in homes.values():
        nbgrader("submit", A, cwd=home)
    nbgrader("collect", A, cwd=instructor)
    submitted = instructor / "submitted"
    (submitted / "bob" / A / "timestamp.txt").write_text(LATE_STAMP)
    loop = with_cell(solved_notebook(A), "softmax_jacobian", "while True:\n    pass\n")
    for student, nb in {"carl": learner_notebook(A), "loop": loop}.items():
        (submitted / student / A).mkdir(parents=True)
        nbformat.write(nb, submitted / student / A / f"{A}.ipynb")
    (submitted / "no_notebook" / A).mkdir(parents=True)
    (submitted / "no_notebook" / A / "notes.txt").write_text("forgot it\n")
    out = root / "grading"
    command = [
        str(submitted),
        "--out",
        str(out),
        "--timeout",
        "4",
        "--quiet",
        "--due",
        DUE,
        "--late-policy",
        "subtract-per-hour:1",
    ]
    run = autograde(*command, umask=0o022)
    assert run.returncode == 0, run.stderr[-3000:]
    return {
        "root": root,
        "exchange": exchange,
        "instructor": instructor,
        "homes": homes,
        "submitted": submitted,
        "out": out,
        "command": command,
        "stdout": run.stdout,
    }


def result(course, student: str) -> dict:
    return json.loads((course["out"] / student / A / "results.json").read_text())


# ------------------------------------------------------------------ OUT is an nbgrader course


def test_out_is_an_nbgrader_course_directory(course):
    out = course["out"]
    assert (out / "source" / A / f"{A}.ipynb").read_bytes() == (SOLUTIONS / A / f"{A}.ipynb").read_bytes()
    assert (out / "autograded" / "ann" / A / f"{A}.ipynb").is_file()
    for student in ("ann", "bob"):
        feedback = out / "feedback" / student / A
        assert (feedback / f"{A}.html").is_file()
        for name in ("timestamp.txt", "submission_secret.txt"):  # what release_feedback reads
            assert (feedback / name).read_bytes() == (course["submitted"] / student / A / name).read_bytes()
            assert (out / "autograded" / student / A / name).is_file()  # as nbgrader's autograde
    # a folder that did not come through the exchange has no secret to release feedback under
    assert not list((out / "feedback").glob(f"carl/{A}/*"))
    assert (out / "carl" / A / "feedback.html").is_file()
    config = (out / "nbgrader_config.py").read_text()
    assert f"c.CourseDirectory.root = {str(out.resolve())!r}" in config
    assert "ClearHiddenTests" in config
    assert not (out / "submitted").exists()  # formgrader's autograde button has nothing to run


def test_feedback_pages_never_show_hidden_test_code(course):
    source = json.loads((SOLUTIONS / A / f"{A}.ipynb").read_text())
    hidden = [
        line.strip()
        for cell in source["cells"]
        for block in re.findall(
            r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", "".join(cell["source"]), re.S
        )
        for line in block.splitlines()
        if line.strip()
    ]
    assert hidden
    page = (course["out"] / "feedback" / "bob" / A / f"{A}.html").read_text()
    assert not [line for line in hidden if line in page]


# ------------------------------------------------------------------ deadlines


def test_late_submission_gets_nbgraders_penalty(course):
    bob, ann = result(course, "bob"), result(course, "ann")
    assert bob["timestamp"] == "2099-03-02T18:30:00+00:00"
    assert bob["late_by_seconds"] == 9000
    assert bob["penalty"] == 3 and bob["raw_score"] == FULL and bob["score"] == FULL - 3
    assert ann["late_by_seconds"] == 0 and ann["penalty"] == 0 and ann["score"] == FULL
    assert result(course, "carl")["timestamp"] is None and result(course, "carl")["late_by_seconds"] is None
    page = (course["out"] / "feedback" / "bob" / A / f"{A}.html").read_text()
    assert "2 h 30 min after the due date" in page and "late penalty 3 points" in page


def test_grades_csv_has_the_deadline_columns_before_flags(course):
    with open(course["out"] / "grades.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert header[:5] == ["student_id", "assignment", "score", "max_score", "status"]
    assert header[-4:] == ["timestamp", "late_by_seconds", "penalty", "flags"]
    assert all(column.startswith("test_") for column in header[5:-4])
    rows = {r["student_id"]: r for r in read_csv(course["out"] / "grades.csv")}
    bob = rows["bob"]
    assert (bob["score"], bob["late_by_seconds"], bob["penalty"]) == ("7", "9000", "3")
    assert rows["carl"]["timestamp"] == "" and rows["carl"]["late_by_seconds"] == ""


def test_gradebook_records_due_date_timestamp_and_penalty_as_nbgrader(course, tmp_path):
    exported = tmp_path / "export.csv"
    nbgrader("export", f"--CsvExportPlugin.to={exported}", cwd=course["out"])
    rows = {r["student_id"]: r for r in read_csv(exported)}
    assert rows["bob"]["duedate"] == "2099-03-02 16:00:00"
    assert rows["bob"]["timestamp"] == "2099-03-02 18:30:00"
    assert float(rows["bob"]["raw_score"]) == FULL
    assert float(rows["bob"]["late_submission_penalty"]) == 3.0 and float(rows["bob"]["score"]) == 7.0
    assert float(rows["ann"]["late_submission_penalty"]) == 0.0


def test_deadline_options_parse_and_refuse_in_one_line(tmp_path):
    from grader.deadlines import LatePolicy, SubtractPerHour, parse_due

    assert str(parse_due("2026-03-02 17:00 Europe/Berlin")) == "2026-03-02 16:00:00"
    assert str(parse_due("2026-03-02 17:00:30 +01:00")) == "2026-03-02 16:00:30"
    assert LatePolicy.parse("subtract-per-hour:0.5").points_per_hour == 0.5
    assert SubtractPerHour(points_per_hour=2).late_submission_penalty("s", 10, 1) == 2  # a started hour
    for option, value in (
        ("--due", "tomorrow"),
        ("--due", "2026-03-02 17:00 Mars/Olympus"),
        ("--late-policy", "half"),
        ("--late-policy", "subtract-per-hour:-1"),
    ):
        run = autograde(str(tmp_path), "--out", str(tmp_path / "out"), option, value)
        assert run.returncode == 2 and run.stderr.count("\n") == 1 and option in run.stderr, run.stderr


# ------------------------------------------------------------------ formgrader


def _get(url: str, token: str | None) -> tuple[int, object]:
    request = urllib.request.Request(url, headers={"Authorization": f"token {token}"} if token else {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, None


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_formgrader_serves_the_gradebook_on_loopback_with_a_token(course):
    command = [sys.executable, "-m", "grader", "formgrader", str(course["out"]), "--port", "0"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env()
    )
    try:
        line = process.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:(\d+))/formgrader\?token=([0-9a-f]+)", line)
        assert match, line
        base, port, token = match.group(1), int(match.group(2)), match.group(3)
        status, assignments = _get(f"{base}/formgrader/api/assignments", token)  # Manage Assignments
        assert status == 200
        (listed,) = [a for a in assignments if a["name"] == A]
        assert listed["source_path"] == f"source/{A}" and listed["duedate"] == "2099-03-02T16:00:00"
        status, submissions = _get(f"{base}/formgrader/api/submissions/{A}", token)
        assert status == 200
        scores = {s["student"]: s["score"] for s in submissions}
        for student in ("ann", "bob", "carl"):
            assert scores[student] == result(course, student)["raw_score"], student
        # "Manual Grading": the notebooks of the assignment, each student's submission of it
        status, notebooks = _get(f"{base}/formgrader/api/submitted_notebooks/{A}/{A}", token)
        assert status == 200 and {n["student"] for n in notebooks} >= {"ann", "bob", "carl"}
        assert _get(f"{base}/formgrader/api/assignments", None)[0] in (302, 403)  # no token, no data
        assert _get(f"{base}/formgrader/api/assignments", "0" * 48)[0] in (302, 403)
        with socket.socket() as probe:  # loopback only: not on the machine's other addresses
            probe.settimeout(2)
            other = socket.gethostbyname(socket.gethostname())
            if not other.startswith("127."):
                assert probe.connect_ex((other, port)) != 0
    finally:
        process.send_signal(2)
        assert process.wait(timeout=30) == 0
    assert "stopped" in process.stdout.read()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", port)) != 0  # the Jupyter server went with it


# ------------------------------------------------------------------ feedback through the exchange


def test_release_and_fetch_feedback_deliver_each_student_their_own(course):
    nbgrader(
        "release_feedback",
        A,
        f"--course={COURSE}",
        f"--Exchange.root={course['exchange']}",
        cwd=course["out"],
    )
    pages = {}
    for student, home in course["homes"].items():
        nbgrader("fetch_feedback", A, cwd=home)
        (page,) = (home / A / "feedback").rglob("*.html")
        pages[student] = page.read_text()
    assert "<code>ann</code>" in pages["ann"] and "bob" not in pages["ann"]
    assert "<code>bob</code>" in pages["bob"] and "ann" not in pages["bob"]
    assert "late penalty 3 points" in pages["bob"]


# ------------------------------------------------------------------ what a run reports and re-runs


def _summary_counts(stdout: str) -> dict[str, int]:
    found = re.search(
        r"grades\.csv: (\d+) rows, (\d+) graded, (\d+) timeouts, (\d+) crashes, (\d+) invalid", stdout
    )
    assert found, stdout
    names = ["rows", "graded", "timeout", "crashed", "invalid"]
    return dict(zip(names, map(int, found.groups()), strict=True))


def _csv_counts(out: Path) -> dict[str, int]:
    rows = read_csv(out / "grades.csv")
    counts = {"rows": len(rows)}
    for status in ("graded", "timeout", "crashed", "invalid"):
        counts[status] = sum(r["status"] == status for r in rows)
    return counts


def test_summary_counts_are_grades_csvs(course):
    assert _summary_counts(course["stdout"]) == _csv_counts(course["out"])
    assert _csv_counts(course["out"])["invalid"] == 1 and _csv_counts(course["out"])["timeout"] == 1


def test_output_files_are_private_under_umask_022(course):
    """OUT is the instructor's alone (grader/autograde/permissions.py); test_out_private holds every path."""
    out = course["out"]
    for path in [
        out / "grades.csv",
        out / "ann" / A / "results.json",
        out / "ann" / A / "feedback.html",
        out / "autograded" / "ann" / A / f"{A}.ipynb",
        out / "feedback" / "ann" / A / f"{A}.html",
        out / "source" / A / f"{A}.ipynb",
        out / "nbgrader_config.py",
        out / "gradebook.db",
    ]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE((out / "ann" / A).stat().st_mode) == 0o700


def test_reruns_retry_a_timeout_once_then_keep_it(course, tmp_path):
    """Four runs in a row on a copy of two of the class's folders (ann's and the endless
    loop's), so that no edit of the grader's code in between makes them re-grade: run 2
    (umask 077, --group-readable) grades only the timeout again; run 3 keeps it; run 4 with
    --retry-timeouts grades it again. The counts agree with grades.csv every time."""
    import shutil

    submitted, out = tmp_path / "submitted", tmp_path / "grading"
    for student in ("ann", "loop"):
        shutil.copytree(course["submitted"] / student, submitted / student)
    command = [str(submitted), "--out", str(out), "--timeout", "4", "--quiet"]
    first = autograde(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads((out / "loop" / A / "results.json").read_text())["attempts"] == 1
    second = autograde(*command, "--group-readable", umask=0o077)
    assert second.returncode == 0, second.stderr[-3000:]
    assert second.stdout.startswith("0 graded, 1 unchanged (kept)"), second.stdout
    loop = json.loads((out / "loop" / A / "results.json").read_text())
    assert loop["status"] == "timeout" and loop["attempts"] == 2
    assert _summary_counts(second.stdout) == _csv_counts(out)
    assert stat.S_IMODE((out / "grades.csv").stat().st_mode) == 0o640  # the group's, whatever the umask
    assert stat.S_IMODE((out / "loop" / A / "results.json").stat().st_mode) == 0o640
    assert stat.S_IMODE((out / "loop" / A).stat().st_mode) == 0o750
    third = autograde(*command)
    assert third.returncode == 0 and third.stdout.startswith("0 graded, 2 unchanged (kept)"), third.stdout
    assert _summary_counts(third.stdout) == _csv_counts(out)
    fourth = autograde(*command, "--retry-timeouts")
    assert fourth.stdout.startswith("0 graded, 1 unchanged (kept)"), fourth.stdout
    assert json.loads((out / "loop" / A / "results.json").read_text())["attempts"] == 3


def test_database_errors_are_one_line_saying_what_to_fix(course, tmp_path):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    run = autograde(
        str(course["submitted"]),
        "--out",
        str(tmp_path / "out"),
        "--quiet",
        "--db",
        f"postgresql+psycopg://grader:s3cret@127.0.0.1:{port}/course",
    )
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.startswith("error: cannot open the gradebook postgresql+psycopg://grader:***@")
    assert "s3cret" not in run.stderr and "is the database server running" in run.stderr


def test_local_dask_cluster_starts_no_dashboard(course, tmp_path):
    pytest.importorskip("distributed")
    holder = socket.socket()
    try:
        holder.bind(("0.0.0.0", 8787))
        holder.listen()
    except OSError:
        pass  # taken already: the dashboard would have to move, and say so, just the same
    try:
        started = time.monotonic()
        run = autograde(
            str(course["submitted"]),
            "--out",
            str(tmp_path / "out"),
            "--quiet",
            "--timeout",
            "4",
            "--scheduler",
            "local:1",
        )
    finally:
        holder.close()
    assert run.returncode == 0, run.stderr[-3000:]
    assert "8787" not in run.stderr and "dashboard" not in run.stderr.lower(), run.stderr[-2000:]
    assert time.monotonic() - started < 300
