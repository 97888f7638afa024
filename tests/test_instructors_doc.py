"""INSTRUCTORS.md, run: every command of its fenced shell blocks, in order, in a temporary course.

The page is the instructor's walk through a term, and this test is that term, with two
students (``ann``, who solves the notebook, and ``bob``, who hands in the stub) and an
exchange in a temporary folder. How the blocks are run:

- a ``bash`` block is the instructor's: it runs with ``bash -e`` in a copy of this checkout
  (the clone the page talks about), with this virtualenv's tools first on PATH; only
  ``python -m grader release`` needs the copy to be a checkout of its own (it writes
  ``chapters/`` and the learner's data beside the package it runs from), so a block holding
  it gets PYTHONPATH pointing at the copy, and never writes into this checkout;
- a ``bash student`` block runs once for each student, in that student's home, whose
  ``nbgrader_config.py`` (written here, as a hub's image would) names the exchange, the
  student's cache and id; before ``nbgrader submit``, ann's notebook is replaced by a
  solved one (what "works on the notebook" stands for);
- a ``bash service`` block keeps running: it is started in the background, checked once
  it is up (the watcher says "watching"; formgrader's printed URL answers with the
  gradebook, and a hand grade is given to bob through its API, as its page does, which the
  Canvas export must carry, with a warning that results.json says otherwise), and stopped
  with SIGINT before the next instructor block, which it must survive with exit status 0;
- the ``python`` block (the JupyterHub service) is executed against a traitlets Config and
  its command parsed by the grader's own argument parser.

The page runs in a copy of the checkout's files that git tracks or does not ignore, so a
class already present in this working clone (its ``course/``, ``grading/``, ``similarity/``,
all ignored) is neither copied nor touched: the test compares those folders before and after.
Every path the term creates in the copy must be one that ``.gitignore`` ignores, and
``test_every_path_the_docs_write_is_ignored`` (fast) reads the same from the pages' commands,
so that one ``git add -A`` after a term publishes no student's work.

After the page, the term's own watcher command is started again for the issue's "Done when"
(issue 34): one notebook on the idle watcher, then 12 arrivals at once, among them an infinite
loop (which alone needs the whole 60 s timeout), a timestamp.txt 45 days early (flagged, the
server's arrival counts) and a student with a row in grading/extensions.csv (in the
gradebook's extension). Every classmate's feedback must come before the stuck one's, and all
12 within twice the time the slowest one needs alone; the latencies are printed.

Two substitutions make the page's paths the test's: the exchange ``/srv/nbgrader/exchange``
is a temporary folder, and formgrader's port is a free one. Three commands are not run, each
for the reason in ``NOT_RUN``; the test fails if any of them is no longer on the page, so
the list cannot rot.
"""

from __future__ import annotations

import base64
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import nbformat
import pytest

from grader.paths import ROOT
from tests.notebook_runner import solved_notebook

pytestmark = [pytest.mark.grading, pytest.mark.slow, pytest.mark.ch03, pytest.mark.xdist_group("instructors")]

A = "03_scaled_dot_product"
EXCHANGE = "/srv/nbgrader/exchange"
STUDENTS = ("ann", "bob")
RUSH = 12  # arrivals at once after the page, as in issue 34's "Done when"
TIMEOUT = 60.0  # the watcher's default notebook timeout: the stuck one alone needs at least this
LATENCY = re.compile(r"\] (\S+)\+" + A + r": (\w+) .*\(feedback ([0-9.]+) s after it arrived")
BIN = Path(sys.executable).parent
NOT_RUN = {  # a line's beginning -> why this test does not run it
    "make test": "it runs this test suite",
    "source .venv/bin/activate": "the test puts the virtualenv's tools first on PATH itself",
    'pip install "attention-learner @': "a learner's command, which needs the network",
}
FENCE = re.compile(r"^( *)```(\w[^\n]*)\n(.*?)^\1```", re.MULTILINE | re.DOTALL)


def blocks(text: str) -> list[tuple[str, str]]:
    """(info string, body) of every fenced block that has an info string, in order."""
    return [(m.group(2).strip(), textwrap.dedent(m.group(3))) for m in FENCE.finditer(text)]


def without_skipped(body: str, seen: set[str]) -> str:
    kept = []
    for line in body.splitlines():
        prefix = next((p for p in NOT_RUN if line.strip().startswith(p)), None)
        if prefix is None:
            kept.append(line)
        else:
            seen.add(prefix)
    return "\n".join(kept) + "\n"


WRITES = [  # (a command's words, whether what it names is a folder), in the instructor's blocks
    (re.compile(r"--out\s+([^\s`\\]+)"), True),
    (re.compile(r"(?:^|\s)mkdir -p\s+([^\s`]+)"), True),
    (re.compile(r"(?:^|\s)cd\s+([^\s`;&]+)"), True),
    (re.compile(r"(?:^|\s)-o\s+([^\s`]+)"), False),
    (re.compile(r">\s*([^\s`&]+)"), False),
    (re.compile(r"\.to=([^\s`]+)"), False),
]


def written_paths(text: str, fenced_only: bool = True) -> dict[str, bool]:
    """The top-level paths of a checkout that a page's commands write (or work in), each
    with whether it is a folder; absolute paths (the exchange, a hub's folders) are outside."""
    if fenced_only:
        text = "\n".join(body for info, body in blocks(text) if info in ("bash", "bash service"))
    text = re.sub(r"(^|\s)#[^\n]*", r"\1", text)  # a shell comment writes nothing
    found: dict[str, bool] = {}
    for pattern, folder in WRITES:
        for match in pattern.finditer(text):
            path = match.group(1).strip("\"'")
            outside = path.startswith(("/", "$", "-")) or path in ("..", ".")
            if outside or not re.fullmatch(r"[\w.+/-]+", path):
                continue
            top, slash, _rest = path.partition("/")
            found[top] = found.get(top, False) or folder or bool(slash)
    return found


def ignored_by_git(paths: dict[str, bool]) -> dict[str, bool]:
    """Whether this checkout's .gitignore ignores each top-level path (a folder: what it holds)."""
    return {
        name: subprocess.run(
            ["git", "check-ignore", "-q", "--no-index", f"{name}/anything.ipynb" if folder else name],
            cwd=ROOT,
        ).returncode
        == 0
        for name, folder in paths.items()
    }


def snapshot(names: list[str]) -> dict[str, list[tuple[str, int]]]:
    """This checkout's files under each name, with their modification times (ns)."""
    return {
        name: sorted(
            (str(p.relative_to(ROOT)), p.lstat().st_mtime_ns)
            for p in [ROOT / name, *(ROOT / name).rglob("*")]
            if p.exists() or p.is_symlink()
        )
        for name in names
    }


class Term:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.clone = root / "clone"
        self.exchange = root / "exchange"
        self.exchange.mkdir()
        self.exchange.chmod(0o777)
        listed = subprocess.run(
            ["git", "ls-files", "-co", "--exclude-standard", "-z"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\0")
        for name in filter(None, listed):
            source = ROOT / name
            if source.is_file() and not source.is_symlink():
                (self.clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, self.clone / name)
        self.homes = {}
        for student in STUDENTS:
            home = root / "students" / student
            home.mkdir(parents=True)
            (home / "nbgrader_config.py").write_text(
                "\n".join(
                    [
                        "c = get_config()",
                        f"c.Exchange.root = {str(self.exchange)!r}",
                        f"c.Exchange.cache = {str(home / '.cache')!r}",
                        f"c.CourseDirectory.student_id = {student!r}",
                    ]
                )
                + "\n"
            )
            self.homes[student] = home
        self.services: list[tuple[subprocess.Popen, Path, str]] = []
        self.outputs: list[str] = []  # the instructor blocks' stdout
        self.hand_graded: float | None = None  # bob's score after the hand grade in formgrader
        self.fetches = 0

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        return dict(
            os.environ, PATH=str(BIN) + os.pathsep + os.environ.get("PATH", ""), HOME=str(home), **extra
        )

    def substitute(self, body: str) -> str:
        return body.replace(EXCHANGE, str(self.exchange)).replace("--port 8890", "--port 0")

    def instructor(self, body: str) -> None:
        self.stop_services()
        extra = (
            {"PYTHONPATH": f"{self.clone}{os.pathsep}{self.clone / 'learner'}"}
            if "grader release" in body
            else {}
        )
        home = self.root / "instructor"
        home.mkdir(exist_ok=True)
        run = subprocess.run(["bash", "-e", "-c", self.substitute(body)], cwd=self.clone, capture_output=True,
                             text=True, env=self.env(home, **extra), timeout=900)  # fmt: skip
        self.outputs.append(run.stdout)
        assert run.returncode == 0, (
            f"{body}\n--- stdout\n{run.stdout[-3000:]}\n--- stderr\n{run.stderr[-3000:]}"
        )

    def student(self, body: str) -> None:
        if "nbgrader fetch_feedback" in body:
            self.wait_for_watcher()
        for student, home in self.homes.items():
            if "nbgrader submit" in body and student == "ann":
                nbformat.write(solved_notebook(A), home / A / f"{A}.ipynb")
            run = subprocess.run(["bash", "-e", "-c", self.substitute(body)], cwd=home, capture_output=True,
                                 text=True, env=self.env(home), timeout=300)  # fmt: skip
            assert run.returncode == 0, f"{student}: {body}\n{run.stderr[-3000:]}"
        if "nbgrader fetch_feedback" in body:
            self.fetches += 1
            for student, home in self.homes.items():
                pages = sorted((home / A / "feedback").rglob("*.html"))
                assert pages, f"{student} fetched no feedback"
                text = pages[-1].read_text()
                other = next(s for s in STUDENTS if s != student)
                assert f"<code>{student}</code>" in text and f"<code>{other}</code>" not in text

    def service(self, body: str) -> None:
        log = self.root / f"service{len(self.services)}.log"
        with open(log, "w") as handle:
            process = subprocess.Popen(["bash", "-c", self.substitute(body)], cwd=self.clone, stdout=handle,
                                       stderr=subprocess.STDOUT, env=self.env(self.root / "instructor"),
                                       start_new_session=True)  # fmt: skip
        self.services.append((process, log, body))
        if "--watch" in body:
            self.wait(lambda: "watching" in log.read_text(), process, log, "the watcher to start")
        elif "formgrader" in body:
            address = re.compile(r"http://127\.0\.0\.1:\d+/formgrader\?token=\w+")
            found = self.wait(lambda: address.search(log.read_text()), process, log, "formgrader's address")
            url = found.group(0)
            self.check_formgrader(url)
        else:
            pytest.fail(f"a service block the test does not know how to check: {body}")

    def check_formgrader(self, url: str) -> None:
        base, token = url.split("/formgrader?token=")

        def get(path: str):
            request = urllib.request.Request(base + path, headers={"Authorization": f"token {token}"})
            with urllib.request.urlopen(request, timeout=30) as response:
                return json.loads(response.read())

        assert A in {a["name"] for a in get("/formgrader/api/assignments")}  # Manage Assignments
        notebooks = get(f"/formgrader/api/submitted_notebooks/{A}/{A}")
        assert {s["student"] for s in notebooks} == set(STUDENTS)  # Manual Grading
        # a hand grade, as formgrader's page sends it: bob's first cell not at full marks gets them
        (bob,) = [s for s in notebooks if s["student"] == "bob"]
        grades = get(f"/formgrader/api/grades?submission_id={bob['id']}")
        for g in grades:  # nbgrader's Grade.score: the hand grade if any, else the autograde
            g["score"] = g["manual_score"] if g["manual_score"] is not None else (g["auto_score"] or 0)
        grade = next(g for g in grades if g["score"] < g["max_score"])
        request = urllib.request.Request(
            base + f"/formgrader/api/grade/{grade['id']}",
            method="PUT",
            data=json.dumps({"manual_score": grade["max_score"]}).encode(),
            headers={"Authorization": f"token {token}"},
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            assert json.loads(response.read())["manual_score"] == grade["max_score"]
        self.hand_graded = sum(g["score"] for g in grades) + grade["max_score"] - grade["score"]

    def wait_for_watcher(self) -> None:
        for process, log, body in self.services:
            if "--watch" in body:
                self.wait(
                    lambda log=log: all(f"{s}+{A}: graded" in log.read_text() for s in STUDENTS),
                    process,
                    log,
                    "the watcher to grade both students",
                )

    def rush(self, watch_body: str) -> dict[str, float]:
        """The page's watcher again: one notebook alone, then RUSH at once (see the module's
        docstring); each arrival's latency as the watcher logged it, from the folder's complete
        time to its feedback."""
        self.service(watch_body)
        process, log, _ = self.services[-1]
        inbound = self.exchange / "attention" / "inbound"

        def hand_in(student: str, notebook, claimed: datetime | None = None) -> Path:
            stamp = f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S.%f} UTC"
            folder = (
                self.root
                / "staged"
                / f"{student}+{A}+{stamp}+{base64.urlsafe_b64encode(os.urandom(6)).decode()}"
            )
            folder.mkdir(parents=True)
            nbformat.write(notebook, folder / f"{A}.ipynb")
            (folder / "timestamp.txt").write_text(f"{claimed:%Y-%m-%d %H:%M:%S.%f} UTC" if claimed else stamp)
            (folder / "submission_secret.txt").write_text(os.urandom(64).hex())
            return folder

        def latencies() -> dict[str, float]:
            return {m.group(1): float(m.group(3)) for m in LATENCY.finditer(log.read_text())}

        solo = hand_in("solo", solved_notebook(A))
        os.rename(solo, inbound / solo.name)
        self.wait(lambda: "solo" in latencies(), process, log, "the idle watcher's one grading")
        stuck = solved_notebook(A)
        answer = next(c for c in stuck.cells if c.metadata.get("nbgrader", {}).get("solution"))
        answer.source = "while True:\n    pass"  # the first answer never ends
        (self.clone / "grading" / "extensions.csv").write_text(
            f"student_id,assignment,due,extra_hours\nr02,{A},,48\n", encoding="utf-8"
        )
        staged = [
            hand_in("r01", stuck),
            hand_in("r03", solved_notebook(A), datetime.now(UTC) - timedelta(days=45)),
        ]
        staged += [hand_in(f"r{n:02d}", solved_notebook(A)) for n in range(2, RUSH + 1) if n != 3]
        for folder in staged:  # all at once: a rename each
            os.rename(folder, inbound / folder.name)
        rush = [f"r{n:02d}" for n in range(1, RUSH + 1)]
        self.wait(lambda: set(rush) <= set(latencies()), process, log, "the rush's gradings", 600)
        seen = latencies()
        print(f"\none notebook on the idle watcher: feedback {seen['solo']:.2f} s after it arrived")
        print(f"{RUSH} at once: " + ", ".join(f"{s} {seen[s]:.2f} s" for s in rush))
        others = [seen[s] for s in rush if s != "r01"]
        assert max(others) < seen["r01"], seen  # the stuck one delays nobody
        assert max(seen[s] for s in rush) <= 2 * max(TIMEOUT, seen["solo"]), seen
        forged = json.loads((self.clone / "grading" / "r03" / A / "results.json").read_text())
        flag = [f for f in forged["flags"] if "before the server received it" in f]
        assert flag and "45 d" in flag[0], forged["flags"]
        assert forged["timestamp"] == forged["arrived_at"] != forged["claimed_at"], forged
        with open(self.clone / "grading" / "grades.csv", newline="", encoding="utf-8") as handle:
            rows = {(r["student_id"], r["assignment"]): r for r in csv.DictReader(handle)}
        assert "server received it" in rows[("r03", A)]["flags"], rows[("r03", A)]
        from nbgrader.api import Gradebook

        with Gradebook(f"sqlite:///{self.clone / 'grading' / 'gradebook.db'}") as gradebook:
            assert gradebook.find_submission(A, "r02").extension == timedelta(hours=48)
            assert all(n.flagged for n in gradebook.find_submission(A, "r03").notebooks)
        self.stop_services()
        return seen

    @staticmethod
    def wait(condition, process: subprocess.Popen, log: Path, what: str, seconds: float = 240.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            if process.poll() is not None:
                pytest.fail(f"exited ({process.returncode}) before {what}:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")

    def stop_services(self) -> None:
        while self.services:
            process, log, body = self.services.pop()
            os.killpg(process.pid, signal.SIGINT)
            code = process.wait(timeout=60)
            assert code == 0, f"{body}\nstopped with exit status {code}:\n{log.read_text()[-3000:]}"


def jupyterhub_service(body: str) -> None:
    """The page's jupyterhub_config.py: the service runs the grader's own watch command."""
    from traitlets.config import Config

    from grader.cli import build_parser
    from grader.course_cli import exchange_course

    c = Config()
    exec(compile(body, "jupyterhub_config.py", "exec"), {"c": c})
    (service,) = c.JupyterHub.services
    assert {"name", "command", "user"} <= set(service)
    command = service["command"]
    assert command[1:3] == ["-m", "grader"]
    args = build_parser().parse_args(command[3:])
    assert args.command == "autograde" and args.watch and args.out and args.exchange
    assert exchange_course(args.watch, args.exchange)[0] == "attention"


def test_every_path_the_docs_write_is_ignored():
    """course/, grading/, similarity/, the roster and the exported grades: all ignored by git."""
    text = (ROOT / "INSTRUCTORS.md").read_text(encoding="utf-8")
    paths = written_paths(text)
    for readme_path, folder in written_paths(
        (ROOT / "README.md").read_text(encoding="utf-8"), fenced_only=False
    ).items():
        if readme_path.islower():  # a placeholder such as OUT or FILE names nothing
            paths[readme_path] = paths.get(readme_path, False) or folder
    assert {"course", "grading", "similarity", "roster.csv", "canvas_grades.csv"} <= set(paths), paths
    assert {name for name, ignored in ignored_by_git(paths).items() if not ignored} == set(), paths


def test_every_command_of_instructors_md_runs(tmp_path):
    page = (ROOT / "INSTRUCTORS.md").read_text(encoding="utf-8")
    present = snapshot(sorted(written_paths(page)))  # a class of this working clone, if any
    term = Term(tmp_path)
    before = {p.name for p in term.clone.iterdir()}
    seen: set[str] = set()
    counts = {"bash": 0, "bash student": 0, "bash service": 0, "python": 0}
    watch_body = ""
    try:
        for info, body in blocks(page):
            if info not in counts:
                continue
            counts[info] += 1
            if info == "python":
                jupyterhub_service(body)
                continue
            body = without_skipped(body, seen)
            if not body.strip():
                continue
            watch_body = body if "--watch" in body else watch_body
            {"bash": term.instructor, "bash student": term.student, "bash service": term.service}[info](body)
        term.stop_services()
    finally:
        for process, _log, _body in term.services:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    assert seen == set(NOT_RUN), f"no longer on the page, drop from NOT_RUN: {set(NOT_RUN) - seen}"
    assert counts["bash service"] == 2 and counts["python"] == 1 and term.fetches == 2, counts
    grading = term.clone / "grading"
    assert (grading / "grades.csv").is_file() and (term.clone / "canvas_grades.csv").is_file()
    assert (term.clone / "similarity" / "similarity.html").is_file()
    with open(term.clone / "canvas_grades.csv", newline="", encoding="utf-8") as handle:
        (bob,) = [r for r in csv.DictReader(handle) if r["SIS Login ID"] == "bob"]
    assert term.hand_graded is not None and float(bob[A]) == pytest.approx(term.hand_graded)  # the hand grade
    assert any(f"warning: bob/{A}" in out for out in term.outputs)  # results.json still says otherwise
    assert snapshot(sorted(present)) == present  # the page ran in the copy, and left this clone's class be
    created = {p.name: p.is_dir() for p in term.clone.iterdir() if p.name not in before}
    assert {"course", "grading", "similarity"} <= set(created), created
    exposed = {name for name, ignored in ignored_by_git(created).items() if not ignored}
    assert exposed == set(), f"the term wrote paths .gitignore does not ignore: {sorted(exposed)}"
    try:
        term.rush(watch_body)
    finally:
        for process, _log, _body in term.services:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
