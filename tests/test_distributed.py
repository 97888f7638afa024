"""Grading on a Dask cluster (``autograde --scheduler``) against grading on one machine.

The module starts one LocalCluster of two worker processes (one thread each, the scheduler's
``allowed-failures`` at 1, each worker preloading its fork server) in the test process, and
passes its ``tcp://`` address to the command, so the command takes the path of an existing
cluster. One small chapter 3 class is graded on it and on one machine; the tests compare the
two, kill a worker in the middle of a run, feed it a notebook that kills its worker every
time (``tests/dask_poison.py``), grade into PostgreSQL, and try to reach the scheduler from
inside a submission.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import nbformat
import pytest

from tests.notebook_runner import learner_notebook, solved_notebook, with_cell
from tests.security.grade_as import autograde_command

distributed = pytest.importorskip("distributed")  # the 'cluster' extra (also in 'test')

from tests.dask_poison import POISON, PoisonPlugin  # noqa: E402  (imports distributed)

pytestmark = [pytest.mark.grading, pytest.mark.slow, pytest.mark.ch03, pytest.mark.xdist_group("distributed")]

A = "03_scaled_dot_product"
FULL = 10.0
JACOBIAN = "def softmax_jacobian(p):\n    return np.diag(p) - np.outer(p, p)\n"
TIMEOUT = "8"  # seconds per notebook: the infinite loop costs this much, twice


def _write(submitted: Path, notebooks: dict[str, nbformat.NotebookNode]) -> None:
    for student, nb in notebooks.items():
        folder = submitted / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")


def _command(submitted: Path, out: Path, *extra: str) -> list[str]:
    return autograde_command(submitted, out, *extra, timeout=TIMEOUT, workers=None)


def _env() -> dict[str, str]:
    return dict(os.environ, PATH=str(Path(sys.executable).parent) + ":" + os.environ.get("PATH", ""))


def _results(out: Path) -> dict[str, dict]:
    return {p.parent.parent.name: json.loads(p.read_text()) for p in out.glob("*/*/results.json")}


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.fixture(scope="module")
def cluster():
    """Two worker processes with one thread each, and the settings the command would use."""
    import dask

    from grader.autograde.distributed import cluster_settings

    with dask.config.set(cluster_settings()):
        local = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            preload=["grader.autograde.distributed"],
        )
        client = distributed.Client(local)
        client.register_plugin(PoisonPlugin())
        try:
            yield {"address": local.scheduler_address, "client": client}
        finally:
            client.close()
            local.close()


def _scheduler_port(cluster) -> tuple[str, int]:
    host, port = cluster["address"].removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


@pytest.fixture(scope="module")
def graded(cluster, tmp_path_factory):
    """The same class graded on the cluster and on one machine (the poison only on the cluster)."""
    host, port = _scheduler_port(cluster)
    solved = solved_notebook(A)
    probe = (
        f"import socket\ntry:\n    socket.create_connection(({host!r}, {port}), timeout=3).close()\n"
        "    print('REACHED the scheduler')\nexcept OSError as exc:\n"
        "    print('NO ROUTE', type(exc).__name__)\n" + JACOBIAN
    )
    common = {
        "correct": solved,
        "stub": learner_notebook(A),
        "partial": with_cell(
            solved, "softmax_jacobian", "def softmax_jacobian(p):\n    return np.outer(p, p) - np.diag(p)\n"
        ),
        "infinite_loop": with_cell(solved, "softmax_jacobian", "while True:\n    pass\n"),
        "crash": with_cell(solved, "softmax_jacobian", "import os\nos._exit(3)\n"),
        "net_probe": with_cell(solved, "softmax_jacobian", probe),
    }
    root = tmp_path_factory.mktemp("distributed")
    _write(
        root / "submitted",
        {**common, "poison": with_cell(solved, "softmax_jacobian", f"# {POISON}\n" + JACOBIAN)},
    )
    _write(root / "submitted_local", common)
    runs = {}
    for name, submitted, extra in (
        ("cluster", "submitted", ("--scheduler", cluster["address"])),
        ("local", "submitted_local", ("--workers", "2")),
    ):
        started = time.monotonic()
        run = subprocess.run(
            _command(root / submitted, root / name, *extra),
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
        assert run.returncode == 0, run.stderr[-4000:]
        runs[name] = {"out": root / name, "stdout": run.stdout, "seconds": time.monotonic() - started}
    return {"root": root, "runs": runs, "students": set(common), "port": port, "host": host}


def _verdicts(result: dict) -> tuple:
    return (
        result["status"],
        result["score"],
        result["max_score"],
        tuple((t["grade_id"], t["points"], t["status"]) for t in result["tests"]),
    )


def test_cluster_grades_like_one_machine(graded):
    on_cluster = _results(graded["runs"]["cluster"]["out"])
    on_one = _results(graded["runs"]["local"]["out"])
    assert set(on_one) == graded["students"]
    assert set(on_cluster) == graded["students"] | {"poison"}
    for student in graded["students"]:
        assert _verdicts(on_cluster[student]) == _verdicts(on_one[student]), student
    assert on_cluster["correct"]["score"] == FULL and on_cluster["stub"]["score"] == 0
    assert on_cluster["partial"]["score"] == FULL - 2
    assert on_cluster["infinite_loop"]["status"] == "timeout"
    assert on_cluster["crash"]["status"] == "crashed"
    assert on_cluster["correct"]["isolation"] == on_one["correct"]["isolation"]


def test_poison_submission_is_one_crashed_row(graded, cluster):
    """Its worker dies, the task is retried once on another worker, which dies too."""
    out = graded["runs"]["cluster"]["out"]
    poison = _results(out)["poison"]
    assert poison["status"] == "crashed"
    assert "died twice" in poison["message"] and "SIGKILL" in poison["message"]
    assert all(t["points"] == 0 for t in poison["tests"])
    rows = _csv(out / "grades.csv")
    assert [r["student_id"] for r in rows].count("poison") == 1
    assert len(rows) == len(graded["students"]) + 1
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gradebook:
        assert gradebook.find_submission(A, "poison").score == 0
        assert len(gradebook.assignment_submissions(A)) == len(graded["students"]) + 1
    cluster["client"].wait_for_workers(2, timeout=120)  # the nanny restarts both workers


def test_a_submission_cannot_reach_the_scheduler(graded):
    """The scheduler answers the test process; from inside a submission there is no route."""
    import socket

    socket.create_connection((graded["host"], graded["port"]), timeout=5).close()
    nb = nbformat.read(
        graded["runs"]["cluster"]["out"] / "autograded" / "net_probe" / A / f"{A}.ipynb", as_version=4
    )
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "NO ROUTE" in printed and "REACHED" not in printed
    assert _results(graded["runs"]["cluster"]["out"])["net_probe"]["score"] == FULL


def test_worker_killed_mid_run_loses_and_duplicates_nothing(cluster, tmp_path):
    """SIGKILL a worker process while it runs a notebook: the task runs again elsewhere."""
    client = cluster["client"]
    client.wait_for_workers(2, timeout=120)
    slow = with_cell(solved_notebook(A), "softmax_jacobian", "import time\ntime.sleep(2)\n" + JACOBIAN)
    students = [f"s{n}" for n in range(6)]
    _write(tmp_path / "submitted", dict.fromkeys(students, slow))
    out = tmp_path / "out"
    process = subprocess.Popen(
        _command(tmp_path / "submitted", out, "--scheduler", cluster["address"]),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    killed = None
    deadline = time.monotonic() + 300
    while killed is None and time.monotonic() < deadline and process.poll() is None:
        if list(out.glob("*/*/results.json")):  # past the solution run, in the class
            busy = {
                w: keys
                for w, keys in client.processing().items()
                if any(str(k).startswith("attention-grade-") for k in keys)
            }
            if busy:
                worker = sorted(busy)[0]
                killed = client.run(os.getpid, workers=[worker])[worker]
                os.kill(killed, signal.SIGKILL)
        time.sleep(0.2)
    stdout, stderr = process.communicate(timeout=600)
    assert killed is not None, "no grading task was seen running"
    assert process.returncode == 0, stderr[-4000:]
    results = _results(out)
    assert set(results) == set(students)
    assert all(r["status"] == "graded" and r["score"] == FULL for r in results.values()), results
    assert sorted(r["student_id"] for r in _csv(out / "grades.csv")) == students
    import sqlite3

    with sqlite3.connect(out / "gradebook.db") as db:
        assert db.execute("SELECT count(*) FROM submitted_assignment").fetchone()[0] == len(students)
        grades = db.execute("SELECT count(*) FROM grade").fetchone()[0]
        cells = db.execute("SELECT count(*) FROM grade_cells").fetchone()[0]
    assert grades == len(students) * cells
    assert "6 graded" in stdout
    client.wait_for_workers(2, timeout=120)


@pytest.mark.postgres
def test_results_land_in_postgres_that_nbgrader_exports(cluster, tmp_path):
    psycopg = pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    from tests.pg_server import URL_VARIABLE, PostgresServer, find_bin_dir

    server = None
    base = os.environ.get(URL_VARIABLE)
    if not base:
        if find_bin_dir() is None:
            pytest.skip(f"PostgreSQL is not installed and {URL_VARIABLE} is not set")
        server = PostgresServer.start()
        base = server.url
    libpq = make_url(base).set(drivername="postgresql").render_as_string(hide_password=False)
    name = f"attention_dask_{uuid.uuid4().hex[:12]}"
    try:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(f'CREATE DATABASE "{name}"')
        url = make_url(base).set(database=name).render_as_string(hide_password=False)
        solved = solved_notebook(A)
        flipped = "def softmax_jacobian(p):\n    return np.outer(p, p) - np.diag(p)\n"
        _write(tmp_path / "submitted", {"ann": solved, "bob": with_cell(solved, "softmax_jacobian", flipped)})
        run = subprocess.run(
            _command(
                tmp_path / "submitted", tmp_path / "out", "--scheduler", cluster["address"], "--db", url
            ),
            capture_output=True,
            text=True,
            timeout=600,
            env=_env(),
        )
        assert run.returncode == 0, run.stderr[-4000:]
        assert not (tmp_path / "out" / "gradebook.db").exists()
        course = tmp_path / "course"
        course.mkdir()
        exported = tmp_path / "export.csv"
        export = subprocess.run(
            [
                str(Path(sys.executable).parent / "nbgrader"),
                "export",
                "--db",
                url,
                f"--CourseDirectory.root={course}",
                f"--CsvExportPlugin.to={exported}",
            ],
            cwd=course,
            capture_output=True,
            text=True,
            env=_env(),
            timeout=300,
        )
        assert export.returncode == 0, export.stderr[-4000:]
        rows = {r["student_id"]: r for r in _csv(exported)}
        assert set(rows) == {"ann", "bob"}
        assert float(rows["ann"]["score"]) == FULL and float(rows["bob"]["score"]) == FULL - 2
    finally:
        with psycopg.connect(libpq, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            server.stop()


def test_pack_round_trip_and_refused_names(tmp_path):
    """The job travels as bytes: what the worker unpacks is what the client prepared."""
    from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, write_job_cells
    from grader.autograde.job_pack import pack_job, unpack_job

    folder = tmp_path / "j1"
    write_job_cells(folder, [(0, "x = 1", False), (2, "assert x == 1", True)])
    (folder / "home" / "data").mkdir()
    (folder / "home" / "data" / "table.csv").write_bytes(b"a,b\n1,2\n")
    (folder / "home" / "link").symlink_to("/etc/passwd")
    job = ChildJob("j1", str(folder), Limits(timeout=7.0), record=False)
    packed = pack_job(job, ("/secret",), Isolation.NAMESPACES)
    assert set(packed["files"]) == {"data/table.csv"}  # a symlink is never sent
    unpacked = unpack_job(packed, tmp_path / "worker" / "j1")
    assert unpacked.limits == Limits(timeout=7.0) and unpacked.record is False and unpacked.id == "j1"
    assert (tmp_path / "worker" / "j1" / "job.json").read_bytes() == (folder / "job.json").read_bytes()
    assert (tmp_path / "worker" / "j1" / "home" / "data" / "table.csv").read_bytes() == b"a,b\n1,2\n"
    for k, bad in enumerate(("../escape", "/etc/cron.d/x", "a/../../b")):
        with pytest.raises(ValueError):
            unpack_job({**packed, "files": {bad: b"x"}}, tmp_path / "worker" / f"bad{k}")
