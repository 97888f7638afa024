"""The autograde run: discover, sanitize, execute in the sandbox, judge, score, report.

The parent process never runs the learner's code and never takes a verdict from it. It
prepares one job per submitted notebook in a folder no other job can see, hands it to the
fork server (which confines the child), reads the child's report through the validating
reader, re-judges every check from raw arrays, and decides each test cell's points itself:
a test earns its points only if its cell ran without error and every check it must make
passed here. Results are written per submission, atomically, as soon as it is done, so an
interrupted run loses nothing already graded, and a re-run skips every submission whose
files, source and grader code have not changed (and retries timeouts and crashes).
"""

from __future__ import annotations

import json
import secrets
import shutil
import signal
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook

from attention_learner.cell_rules import (
    Status,
    TestStatus,
    cell_outcome,
    exercise_of,
    first_error,
    is_test_cell,
    nbgrader_meta,
)
from grader.autograde import reports
from grader.autograde.child_report import CellReport, ReportTooLarge, read_report
from grader.autograde.delegation import Delegation, analyse
from grader.autograde.gradebook import SharedSaveAutoGrades, SourceCells, open_gradebook
from grader.autograde.interrupts import Interrupts
from grader.autograde.judging import ExpectedCheck, expected_checks, rejudge
from grader.autograde.sandbox import ChildJob, Executor, Finished, Isolation, Limits, write_job_cells
from grader.autograde.sanitize import Sanitized, sanitize
from grader.autograde.submissions import (
    TRUSTED,
    InvalidNotebook,
    Submission,
    WalkedFile,
    code_fingerprint,
    copy_walked_file,
    find_submissions,
    folder_fingerprint,
    read_notebook,
    walk_folder,
)
from grader.nbgrader_course import generate_assignment, temporary_course


@dataclass(frozen=True)
class GradeOptions:
    db_url: str | None = None  # default: OUT/gradebook.db
    workers: int = 2
    timeout: float = 60.0
    progress: bool = True


@dataclass
class TestResult:
    notebook: str
    grade_id: str
    points: float
    max_points: float
    status: TestStatus
    message: str = ""

    @property
    def exercise(self) -> str:
        return exercise_of(self.grade_id)

    def to_json(self) -> dict[str, Any]:
        return {"notebook": self.notebook, "grade_id": self.grade_id, "exercise": self.exercise,
                "points": self.points, "max_points": self.max_points, "status": str(self.status),
                "message": self.message}


@dataclass
class SubmissionResult:
    student_id: str
    assignment: str
    fingerprint: str
    isolation: str
    status: Status = Status.GRADED
    message: str = ""
    flags: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: list[TestResult] = field(default_factory=list)

    @property
    def score(self) -> float:
        return round(sum(t.points for t in self.tests), 6)

    @property
    def max_score(self) -> float:
        return round(sum(t.max_points for t in self.tests), 6)

    def to_json(self) -> dict[str, Any]:
        return {"student_id": self.student_id, "assignment": self.assignment, "score": self.score,
                "max_score": self.max_score, "status": str(self.status), "message": self.message,
                "flags": self.flags, "notes": self.notes, "isolation": self.isolation,
                "tests": [t.to_json() for t in self.tests], "fingerprint": self.fingerprint}


@dataclass
class SourceAssignment:
    name: str
    folder: Path
    notebooks: dict[str, NotebookNode]  # name -> the source notebook (solutions, hidden tests)
    fingerprint: str
    expected: dict[str, dict[str, list[ExpectedCheck]]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


class SourceError(RuntimeError):
    """The source cannot be graded against (it does not run); nothing was graded."""


@dataclass
class NotebookJob:
    submission: Submission
    notebook: str
    sanitized: Sanitized
    job: ChildJob
    finished: Finished | None = None


@dataclass
class Summary:
    graded: int = 0
    skipped: int = 0
    failed_tests: int = 0
    timeouts: int = 0
    crashes: int = 0
    invalid: int = 0

    def line(self) -> str:
        return (
            f"{self.graded} graded, {self.skipped} unchanged (kept), {self.failed_tests} failed "
            f"tests, {self.timeouts} timeouts, {self.crashes} crashes, {self.invalid} invalid"
        )

    def count(self, result: SubmissionResult) -> None:
        attribute = {Status.GRADED: "graded", Status.TIMEOUT: "timeouts", Status.CRASHED: "crashes",
                     Status.INVALID: "invalid"}[result.status]
        setattr(self, attribute, getattr(self, attribute) + 1)
        self.failed_tests += sum(t.status in (TestStatus.FAILED, TestStatus.ERROR, TestStatus.TIMEOUT,
                                              TestStatus.NOT_RUN) for t in result.tests)


class Run:
    """One autograde run: its source, its outputs, its server, and a counter for job ids."""

    def __init__(self, source: Path, out: Path, work: Path, server: Executor,
                 gradebook: Gradebook, db_url: str, limits: Limits) -> None:
        self.out, self.work, self.server = out, work, server
        self.gradebook, self.db_url, self.limits = gradebook, db_url, limits
        self.source_cells = SourceCells(gradebook)  # read once per run, see gradebook.py
        self.isolation = str(server.config.isolation)
        self._ids = iter(range(1, 1 << 62))
        self.code = code_fingerprint()
        self.sources = {
            p.name: SourceAssignment(
                p.name, p, {nb.stem: read_notebook(nb) for nb in sorted(p.glob("*.ipynb"))},
                folder_fingerprint(p))
            for p in sorted(source.iterdir()) if p.is_dir() and not p.is_symlink() and any(p.glob("*.ipynb"))
        }

    def new_job(self, cells: dict[int, NotebookNode], files: list[tuple[Path, Path]],
                expected: dict[str, list[ExpectedCheck]] | None = None) -> ChildJob:
        """A job folder only the parent and that one child will ever see; ``expected`` (the
        source's checks per test cell) gives the cells their memory budgets."""
        job_id = f"j{next(self._ids)}"
        folder = self.work / "jobs" / job_id
        course = any((expected or {}).values())  # its checks go through attention_learner
        write_job_cells(folder, [(i, c.source, is_test_cell(c)) for i, c in cells.items()],
                        memory_budgets(cells, expected or {}), warnings_on_stdout=course)
        _copy_beside_files(folder / "home", files)
        # a fresh secret per job: the child's checks draw their inputs from it, the parent too
        return ChildJob(job_id, str(folder), self.limits, salt=secrets.randbits(62) + 1)


def autograde(submitted: Path, out: Path, source: Path, *, options: GradeOptions,
              server: Executor, work: Path) -> Summary:
    """Grade every submission under ``submitted`` against ``source``; see ARCHITECTURE.md.

    ``server`` is the Executor (a ForkServer, a DaskExecutor) the caller started early (its
    imports overlap with ours) and ``work`` the private folder it hides from every child;
    both are closed/removed here.
    """
    out.mkdir(parents=True, exist_ok=True)
    db_url = options.db_url or f"sqlite:///{(out / 'gradebook.db').resolve()}"
    summary = Summary()
    try:
        with Interrupts() as interrupts, warnings.catch_warnings(), open_gradebook(db_url) as gradebook:
            # nbgrader's gradebook API trips SQLAlchemy 2's autoflush warnings ("... not in
            # session, add operation ... will not proceed"): harmless, and noise on stderr
            warnings.filterwarnings("ignore", message=".*not in session.*")
            run = Run(source, out, work, server, gradebook, db_url, Limits(timeout=options.timeout))
            notebooks = {n: sorted(s.notebooks) for n, s in run.sources.items()}
            submissions = find_submissions(submitted, notebooks)
            wanted = sorted({s.assignment for s in submissions if s.assignment in run.sources})
            with temporary_course(source, db_url) as api:
                for name in wanted:
                    generate_assignment(api, name)  # records notebooks and grade cells
            server.wait_ready()
            for name in wanted:
                _solution_run(run, run.sources[name])
            todo = []
            for sub in submissions:
                if sub.unsafe_id:  # no folder of OUT may carry this name: a row in grades.csv only
                    summary.invalid += 1
                    continue
                fingerprint = sub.fingerprint(run.sources[sub.assignment].fingerprint + run.code)
                if _unchanged(out / sub.student / sub.assignment / "results.json", fingerprint):
                    summary.skipped += 1
                else:
                    todo.append((sub, fingerprint))
            interrupts.check()
            _grade_all(run, todo, options, summary, interrupts)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
        if "submissions" in locals():
            reports.write_grades_csv(out, _results_for(out, submissions),
                                     [_invalid_id_row(s) for s in submissions if s.unsafe_id])
    return summary


def _invalid_id_row(sub: Submission) -> dict[str, Any]:
    return {"student_id": sub.student, "assignment": sub.assignment, "score": 0.0, "max_score": 0.0,
            "status": str(Status.INVALID), "message": sub.problem, "tests": []}


def _results_for(out: Path, submissions: list[Submission]) -> list[dict[str, Any]]:
    keys = {(s.student, s.assignment) for s in submissions if not s.unsafe_id}
    return [r for r in reports.read_results(out) if (r.get("student_id"), r.get("assignment")) in keys]


def _unchanged(previous: Path, fingerprint: str) -> bool:
    """Kept only when graded (or invalid) from the very same files, source and grader code."""
    try:
        data = json.loads(previous.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return data.get("fingerprint") == fingerprint and data.get("status") in (Status.GRADED, Status.INVALID)


def _code_cells(nb: NotebookNode) -> dict[int, NotebookNode]:
    return {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def _beside_files(*folders: Submission | Path | None) -> list[WalkedFile]:
    """The files beside the notebooks (no ``.ipynb``); later folders win (the source's).

    A submission's are the very files its discovery walked and its fingerprint hashed
    (``Submission.walk``); a folder (the source: trusted) is walked now by the same walker.
    Symlinks are never followed: a submission cannot point the grader at another file.
    """
    chosen: dict[Path, WalkedFile] = {}
    for folder in folders:
        if folder is None:
            continue
        walk = folder.walk if isinstance(folder, Submission) else walk_folder(folder, TRUSTED, read=False)
        for file in walk.files if walk is not None else []:
            if file.relative.suffix != ".ipynb":
                chosen[file.relative] = file
    return [chosen[relative] for relative in sorted(chosen)]


def _copy_beside_files(home: Path, files: list[WalkedFile]) -> None:
    """Copy each file into the job's home: the bytes the walk hashed, or the job fails."""
    for file in files:
        target = home / file.relative
        target.parent.mkdir(parents=True, exist_ok=True)
        copy_walked_file(file, target)


def _solution_run(run: Run, src: SourceAssignment) -> None:
    """Run each source notebook once, confined like any submission, to learn each test's checks."""
    for name, nb in src.notebooks.items():
        cells = _code_cells(nb)
        finished = run.server.run(run.new_job(cells, _beside_files(src.folder)))
        report = read_report(Path(finished.job.folder) / "report")
        grade_id_of = {i: c.metadata.nbgrader["grade_id"] for i, c in cells.items() if is_test_cell(c)}
        if finished.timed_out or len(report) < len(cells):
            log = (Path(finished.job.folder) / "log").read_text(errors="replace")[-1500:]
            raise SourceError(f"the source notebook {src.name}/{name}.ipynb did not run to the end "
                              f"in the grader; fix the source first{': ' + log if log else ''}")
        failing = sorted(grade_id_of[i] for i, cell in report.items()
                         if i in grade_id_of and first_error(cell.outputs))
        if failing:  # nbgrader grades such a source anyway; so do we, on its rule alone
            src.warnings.append(f"{name}.ipynb: the source's own tests fail ({', '.join(failing)})"
                                "; those tests are graded by nbgrader's rule only")
        src.expected[name] = expected_checks(
            {i: c for i, c in report.items() if grade_id_of.get(i) not in failing}, grade_id_of)
        shutil.rmtree(finished.job.folder, ignore_errors=True)


def _grade_all(run: Run, todo: list[tuple[Submission, str]], options: GradeOptions,
               summary: Summary, interrupts: Interrupts) -> None:  # fmt: skip
    """Keep ``workers`` children busy; prepare the next submissions while they run.

    Between steps, ``interrupts.check()`` raises a Ctrl-C that a library call swallowed.
    """
    from tqdm import tqdm

    bar = tqdm(total=len(todo), unit="sub", disable=not options.progress, file=sys.stderr,
               dynamic_ncols=True)  # fmt: skip
    flight = _InFlight(run, todo, summary, bar.update)
    try:
        more = True
        while True:
            interrupts.check()
            while more and len(flight.queue) < options.workers:
                more = flight.prepare_next()
            flight.start(options.workers)
            if more and len(flight.queue) < options.workers:
                more = flight.prepare_next()  # ahead of time, while the children run
            if not flight.running:
                if more or flight.queue:
                    continue
                break
            flight.collect()
    finally:
        bar.close()


class _InFlight:
    """The run's submissions between preparation and their results: jobs queued for the
    server, jobs running, and the submission each job belongs to."""

    def __init__(self, run: Run, todo: list[tuple[Submission, str]], summary: Summary,
                 done: Callable[[int], object]) -> None:  # fmt: skip
        self.run, self.summary, self.done = run, summary, done
        self.upcoming = iter(todo)
        self.pending: dict[str, tuple[SubmissionResult, list[NotebookJob]]] = {}  # by job id
        self.queue: list[NotebookJob] = []
        self.running = 0

    def prepare_next(self) -> bool:
        """Prepare the next submission's jobs (or finish it at once); False when none is left."""
        step = next(self.upcoming, None)
        if step is None:
            return False
        sub, fingerprint = step
        result = _new_result(self.run, sub, fingerprint)
        try:
            jobs = _prepare(self.run, sub, self.run.sources[sub.assignment], result)
        except Exception as exc:  # one odd submission must not stop the class
            result.status, jobs = Status.INVALID, []
            result.message = f"could not be prepared: {type(exc).__name__}: {exc}"
        for job in jobs:
            self.pending[job.job.id] = (result, jobs)
        self.queue.extend(jobs)
        if not jobs:
            _finish_safely(self.run, sub, result, [], self.summary)
            self.done(1)
        return True

    def start(self, workers: int) -> None:
        """Hand queued jobs to the server until ``workers`` of them run."""
        while self.queue and self.running < workers:
            self.run.server.submit(self.queue.pop(0).job)
            self.running += 1

    def collect(self) -> None:
        """Wait for finished jobs; finish each submission whose jobs have all come back."""
        for finished in self.run.server.wait():
            self.running -= 1
            result, jobs = self.pending.pop(finished.job.id)
            next(j for j in jobs if j.job.id == finished.job.id).finished = finished
            if all(j.finished is not None for j in jobs):
                _finish_safely(self.run, jobs[0].submission, result, jobs, self.summary)
                self.done(1)


def _new_result(run: Run, sub: Submission, fingerprint: str) -> SubmissionResult:
    """The result record a submission starts with: its notes and the run's isolation."""
    src = run.sources[sub.assignment]
    result = SubmissionResult(sub.student, sub.assignment, fingerprint, run.isolation,
                              notes=list(sub.notes) + src.warnings)  # fmt: skip
    if run.isolation == Isolation.WEAK:
        result.flags.append("graded with weak isolation (the instructor accepted it): the "
                            "submission's code was not confined; see SECURITY.md")  # fmt: skip
    return result


def _prepare(run: Run, sub: Submission, src: SourceAssignment,
             result: SubmissionResult) -> list[NotebookJob]:
    if sub.problem:
        result.status, result.message = Status.INVALID, sub.problem
        return []
    jobs, problems = [], []
    files = _beside_files(sub, src.folder)
    for name, path in sub.notebooks.items():
        try:
            nb = read_notebook(path)
            sanitized = sanitize(nb, src.notebooks[name], run.source_cells, run.db_url, sub.assignment,
                                 name, sub.student)
        except InvalidNotebook as exc:
            problems.append(str(exc))
            continue
        except Exception as exc:  # nbgrader refused the notebook (metadata it cannot read)
            problems.append(f"{path.name} could not be read by nbgrader: {type(exc).__name__}: {exc}")
            continue
        result.notes += [f"{name}.ipynb: {note}" for note in sanitized.notes]
        job = run.new_job(_code_cells(sanitized.nb), files, src.expected.get(name, {}))
        jobs.append(NotebookJob(sub, name, sanitized, job))
    if problems and not jobs:
        result.status, result.message = Status.INVALID, "; ".join(problems)
    elif problems:
        result.notes += problems
    return jobs


def _finish_safely(run: Run, sub: Submission, result: SubmissionResult, jobs: list[NotebookJob],
                   summary: Summary) -> None:
    try:
        _finish(run, sub, result, jobs)
    except Exception as exc:  # a grader bug on one submission: say so, go on with the rest
        run.gradebook.db.rollback()
        result.status, result.tests = Status.CRASHED, []
        result.message = f"the grader failed on this submission: {type(exc).__name__}: {exc}"
    finally:
        for job in jobs:
            shutil.rmtree(job.job.folder, ignore_errors=True)
    summary.count(result)
    reports.write_results(run.out, result.to_json())


def _finish(run: Run, sub: Submission, result: SubmissionResult, jobs: list[NotebookJob]) -> None:
    """Turn finished jobs into outputs, grades, the gradebook entry and the reports."""
    src = run.sources[sub.assignment]
    run.gradebook.update_or_create_student(sub.student)
    run.gradebook.update_or_create_submission(sub.assignment, sub.student)
    messages = []
    for job in jobs:
        status, message, report = _run_outcome(job.finished)
        if status is not Status.GRADED:
            result.status = status if result.status is Status.GRADED else result.status
            messages.append(f"{job.notebook}.ipynb: {message}")
        delegation = delegation_of(job.sanitized.nb, src.notebooks[job.notebook])
        result.flags += delegation.flags()
        result.tests += score_notebook(job, report, src.expected.get(job.notebook, {}), delegation)
        _save(run, job, sub)
    graded = {job.notebook for job in jobs}
    for name in src.notebooks:  # missing or unreadable notebooks score 0, as nbgrader does
        if name not in graded:
            why = "the notebook is missing" if name not in sub.notebooks else (
                result.message or "the notebook could not be read")
            result.tests += _zero_tests(src.notebooks[name], name, why)
            _zero_in_gradebook(run.gradebook, name, sub)
    if messages:
        result.message = "; ".join(messages)
    elif result.status is Status.GRADED:
        failed = sum(t.status not in (TestStatus.PASSED, TestStatus.NEEDS_MANUAL_GRADE) for t in result.tests)
        result.message = (f"{failed} of {len(result.tests)} tests did not pass" if failed
                          else "all tests passed")


def _run_outcome(finished: Finished) -> tuple[Status, str, dict[int, CellReport]]:
    """How the child ended, from the server's waitpid (never from the child), and its report."""
    folder = Path(finished.job.folder)
    try:
        report = read_report(folder / "report")
    except ReportTooLarge as exc:
        return Status.CRASHED, str(exc), {}
    if finished.timed_out:
        return Status.TIMEOUT, (f"stopped after {finished.seconds:.0f} s (the time limit for a "
                                "submission); tests that finished before keep their points"), report
    if finished.exitcode == 0:
        return Status.GRADED, "", report
    try:
        log = (folder / "log").read_text(errors="replace")[-400:].strip()
    except OSError:
        log = ""
    if finished.exitcode is not None and finished.exitcode < 0:
        name = signal.Signals(-finished.exitcode).name
        why = f"the process was killed by {name}"
        why += {"SIGSEGV": " (a segmentation fault)", "SIGXCPU": " (it used up its CPU time)"}.get(name, "")
    elif finished.exitcode in (71, 72):
        why = "the grading sandbox could not start this notebook"
    else:
        why = f"the process exited with status {finished.exitcode} (os._exit or sys.exit?)"
    return Status.CRASHED, why + (f"; last output: {log}" if log else ""), report


def memory_budgets(cells: dict[int, NotebookNode],
                   expected: dict[str, list[ExpectedCheck]]) -> dict[int, int]:
    """Cell index -> the bytes it may allocate: the smallest ``memory_budget`` among the
    exercises its checks judge (a test cell of the memory case), for the test cells with one."""
    from grader.exercises import all_exercises

    exercises = all_exercises()
    budgets = {}
    for index, cell in cells.items():
        if not is_test_cell(cell):
            continue
        checks = expected.get(cell.metadata.nbgrader["grade_id"], [])
        found = [exercises[c.exercise].memory_budget for c in checks
                 if c.exercise in exercises and exercises[c.exercise].memory_budget]
        if found:
            budgets[index] = min(found)
    return budgets


def delegation_of(submitted: NotebookNode, source: NotebookNode) -> Delegation:
    """What the submission's solution cells hand to an implementation of their own exercise
    (``delegation.py``), read against the source's locked cells."""
    solutions = {c.metadata.nbgrader["grade_id"]: c.source for c in submitted.cells
                 if c.cell_type == "code" and nbgrader_meta(c).get("solution")}
    given = [c.source for c in source.cells if c.cell_type == "code" and not nbgrader_meta(c).get("solution")]
    return analyse(solutions, given)


def score_notebook(job: NotebookJob, report: dict[int, CellReport],
                   expected: dict[str, list[ExpectedCheck]],
                   delegation: Delegation | None = None) -> list[TestResult]:
    """Put the child's outputs into the notebook and decide every test cell's points here.

    A test cell earns its points only if it ran, raised nothing, wrote nothing to stderr,
    and every check the solution run made in it arrived and passed in this process; in a
    notebook of this course (one whose solution run made re-judged checks) a test cell that
    makes none earns nothing, and the tests of an exercise whose solution delegates it
    (``delegation``) earn nothing either. The
    outputs a test cell keeps are its streams and its error: no value or display the
    learner's code produced there can reach nbgrader's scoring (a number would be read as
    partial credit), and a failed test gets an error output so that nbgrader's
    determine_grade, and hence the gradebook, agree with the decision taken here.
    """
    timed_out = job.finished.timed_out
    course = any(expected.values())  # its checks go through attention_learner's channel
    tests = []
    for index, cell in enumerate(job.sanitized.nb.cells):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code":
            if utils.is_grade(cell):  # a written answer, graded by hand as in nbgrader
                tests.append(TestResult(job.notebook, meta["grade_id"], 0.0, float(meta.get("points", 0)),
                                        TestStatus.NEEDS_MANUAL_GRADE, "graded by hand"))
            continue
        line = report.get(index)
        outputs = line.outputs if line else []
        if not is_test_cell(cell):
            cell.outputs = [nbformat.from_dict(o) for o in outputs]
            if utils.is_grade(cell):  # a graded solution cell: manual, as in nbgrader
                tests.append(TestResult(job.notebook, meta["grade_id"], 0.0, float(meta.get("points", 0)),
                                        TestStatus.NEEDS_MANUAL_GRADE, "graded by hand"))
            continue
        kept = [o for o in outputs if o["output_type"] in ("stream", "error")]
        cell.outputs = [nbformat.from_dict(o) for o in kept]
        status, message = _test_verdict(line, kept, expected.get(meta["grade_id"], []), timed_out,
                                        job.job.salt)
        checks = expected.get(meta["grade_id"])
        if status is TestStatus.PASSED and course and checks is not None and not any(c.earns for c in checks):
            status, message = TestStatus.FAILED, ("this test cell makes no check(...) that the "
                                                  "grader judges against its reference, so it earns nothing")
        if delegation is not None and exercise_of(meta["grade_id"]) in delegation.delegated:
            status, message = TestStatus.FAILED, delegation.message(exercise_of(meta["grade_id"]))
        max_points = float(meta.get("points", 0))
        if status is not TestStatus.PASSED and first_error(kept) is None:
            cell.outputs.append(nbformat.from_dict({"output_type": "error", "ename": "GradingFailure",
                                                    "evalue": message, "traceback": [message]}))
        tests.append(TestResult(job.notebook, meta["grade_id"],
                                max_points if status is TestStatus.PASSED else 0.0, max_points,
                                status, message))
    return tests


def _test_verdict(line: CellReport | None, outputs: list[dict], expected: list[ExpectedCheck],
                  timed_out: bool, salt: int = 0) -> tuple[TestStatus, str]:
    if line is None:
        if timed_out:
            return TestStatus.TIMEOUT, "the submission ran out of time before this test"
        return TestStatus.NOT_RUN, "this test never ran (the process stopped before it)"
    failure = rejudge(expected, line.records, salt)
    if failure is not None and not failure.missing:
        return TestStatus.FAILED, failure.message  # judged here, where no learner code runs
    if failure is not None and first_error(outputs) is None:
        # no error, yet a check never reported: tampering or a lost record
        return TestStatus.FAILED, failure.message
    return cell_outcome(outputs)


def _zero_tests(nb: NotebookNode, name: str, message: str) -> list[TestResult]:
    return [TestResult(name, c.metadata.nbgrader["grade_id"], 0.0,
                       float(c.metadata.nbgrader.get("points", 0)), TestStatus.NOT_RUN, message)
            for c in nb.cells if utils.is_grade(c)]


def _zero_in_gradebook(gradebook: Gradebook, notebook: str, sub: Submission) -> None:
    """What nbgrader's autograde does for a notebook that was not handed in: 0, reviewed."""
    submitted = gradebook.find_submission_notebook(notebook, sub.assignment, sub.student)
    for grade in submitted.grades:
        grade.auto_score = 0
        grade.needs_manual_grade = False
    gradebook.db.commit()


def _save(run: Run, job: NotebookJob, sub: Submission) -> None:
    """nbgrader's SaveAutoGrades into the gradebook, and the notebook in the autograded layout."""
    resources = {"nbgrader": {"db_url": run.db_url, "assignment": sub.assignment,
                              "notebook": job.notebook, "student": sub.student}}
    SharedSaveAutoGrades(run.gradebook).preprocess(job.sanitized.nb, resources)
    target = run.out / "autograded" / sub.student / sub.assignment / f"{job.notebook}.ipynb"
    # json, not nbformat.writes: the notebook was checked on the way in, and re-validating
    # every autograded notebook against the schema was a tenth of the parent's time
    reports.write_atomically(target, json.dumps(job.sanitized.nb, indent=1, ensure_ascii=False) + "\n")


def new_work_folder() -> Path:
    """The run's private folder (mode 0700): job folders, hidden from every child."""
    return Path(tempfile.mkdtemp(prefix="attention-grading-"))

