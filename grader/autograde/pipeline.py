"""The autograde run: discover, sanitize, execute in the sandbox, judge, score, report.

The parent process never runs the learner's code and never takes a verdict from it. It
prepares one job per submitted notebook in a folder no other job can see, hands it to the
executor (which confines the child), reads the child's report through the validating
reader, re-judges every check from raw arrays, and decides each test cell's points itself
(``scoring``): a test earns its points only if its cell ran without error and every check it
must make passed here. Results are written per submission, atomically, as soon as it is
done, so an interrupted run loses nothing already graded, and a re-run skips every
submission whose files, source and grader code have not changed (and retries timeouts and
crashes). The pieces: ``sources`` (the source assignments and their solution run),
``submissions`` (discovery and fingerprints), ``sanitize``, ``scheduling`` (jobs in flight),
``scoring`` (the rules), ``results`` (the typed records), ``gradebook`` and ``reports``.
"""

from __future__ import annotations

import json
import secrets
import shutil
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nbformat import NotebookNode
from nbgrader.api import Gradebook

from attention_learner.cell_rules import Status, TestStatus, is_test_cell
from grader.autograde import phases, reports
from grader.autograde.executor import Executor
from grader.autograde.feedback import write_course_feedback
from grader.autograde.folder_walk import TRUSTED, WalkedFile, code_fingerprint, copy_walked_files, walk_folder
from grader.autograde.fork_protocol import ChildJob, Isolation, Limits, write_job_cells
from grader.autograde.gradebook import SourceCells, one_transaction
from grader.autograde.gradebook_entries import late_penalties, zero_in_gradebook
from grader.autograde.inert_notebook import make_inert
from grader.autograde.judge_pool import JudgePool, Reference, import_exercises, salted_cases
from grader.autograde.judging import CaseAnswers, ExpectedCheck
from grader.autograde.nbgrader_adapters import (
    SharedSaveAutoGrades,
    nbgrader_resources,
)
from grader.autograde.notebook_file import InvalidNotebook, read_notebook
from grader.autograde.results import SubmissionResult, Summary, TestResult, timeout_attempts
from grader.autograde.sanitize import sanitize
from grader.autograde.scheduling import NotebookJob
from grader.autograde.scoring import delegation_of, memory_budgets, run_outcome, score_notebook, zero_tests
from grader.autograde.sources import SourceAssignment, SourceError, code_cells, load_sources
from grader.autograde.submissions import Submission
from grader.deadlines import TIMESTAMP_FILE, LatePolicy, extension_key, iso_utc, judge_time, read_timestamp

__all__ = ["GradeOptions", "Run", "SourceError", "SubmissionResult", "TestResult"]


@dataclass(frozen=True)
class GradeOptions:
    db_url: str | None = None  # default: OUT/gradebook.db
    workers: int = 2
    timeout: float = Limits.timeout  # one default, the sandbox's
    progress: bool = True
    due: dict[str, datetime] = field(default_factory=dict)  # assignment -> naive UTC; others: the gradebook's
    late_policy: LatePolicy = LatePolicy()  # noqa: RUF009 (frozen, so one shared default is safe)
    retry_timeouts: bool = False  # grade a timeout again even after its one retry
    group_readable: bool = False


class Run:
    """One autograde run: its source, its outputs, its server, and a counter for job ids."""

    def __init__(
        self,
        source: Path,
        out: Path,
        work: Path,
        server: Executor,
        gradebook: Gradebook,
        db_url: str,
        limits: Limits,
        policy: LatePolicy | None = None,
    ) -> None:
        self.out, self.work, self.server = out, work, server
        self.gradebook, self.db_url, self.limits = gradebook, db_url, limits
        self.policy = policy or LatePolicy()
        self.due: dict[str, datetime | None] = {}  # per assignment, once the gradebook has it
        # (student, assignment) -> when the watcher saw it arrive (naive UTC): the server's clock
        self.arrived: dict[tuple[str, str], datetime] = {}
        # (student, assignment) -> the watcher's notes on that arrival (say, no timestamp.txt),
        # written with the first results.json, never patched in after it
        self.arrival_notes: dict[tuple[str, str], list[str]] = {}
        self.source_cells = SourceCells(gradebook)  # read once per run, see gradebook.py
        self.isolation = str(server.config.isolation)
        self._ids = iter(range(1, 1 << 62))
        self.code = code_fingerprint()
        self.sources: dict[str, SourceAssignment] = load_sources(source)
        # trusted processes beside the workers compute each job's references (judge_pool.py);
        # forked now, before the parent reads a submission or computes anything
        self.judges = JudgePool()
        import_exercises()  # after the fork: a thread, while the parent waits for its server
        self.answers = CaseAnswers(self.judges)  # the reference's answers per case, for this run
        self.references: dict[str, Future[list[Reference]]] = {}  # job id -> its references, being computed

    def new_job(
        self,
        cells: dict[int, NotebookNode],
        files: list[WalkedFile],
        expected: dict[str, list[ExpectedCheck]] | None = None,
    ) -> ChildJob:
        """A job folder only the parent and that one child will ever see; ``expected`` (the
        source's checks per test cell) gives the cells their memory budgets."""
        job_id = f"j{next(self._ids)}"
        folder = self.work / "jobs" / job_id
        course = any((expected or {}).values())  # its checks go through attention_learner
        known = self.judges.memory_budgets() if course else None  # the pool's: none imported here
        write_job_cells(
            folder,
            [(i, c.source, is_test_cell(c)) for i, c in cells.items()],
            memory_budgets(cells, expected or {}, known),
            warnings_on_stdout=course,
        )
        _copy_beside_files(folder / "home", files)
        # a fresh secret per job: the child's checks draw their inputs from it, the parent too
        job = ChildJob(job_id, str(folder), self.limits, salt=secrets.randbits(62) + 1)
        checks = [check for cell in (expected or {}).values() for check in cell]
        if checks:  # computed by the judge pool while the job waits and runs
            self.references[job_id] = self.judges.references(salted_cases(job.salt, checks))
            phases.count("judge_pool.jobs")
        return job

    def context(self, assignment: str, student: str = "") -> str:
        """What a submission's fingerprint covers beside its files: the source assignment,
        the grader's code, the due date, the student's extension, the arrival the watcher saw,
        and the late policy."""
        arrived = self.arrived.get((student, assignment))
        deadline = f"due={self.due.get(assignment)};{extension_key(self.out, student, assignment)};"
        deadline += f"arrived={arrived};{self.policy}"
        return f"{self.sources[assignment].fingerprint}{self.code}{deadline}"

    @staticmethod
    def beside_files(*folders: Submission | Path | None) -> list[WalkedFile]:
        """The files a job gets beside its notebook (see ``_beside_files``)."""
        return _beside_files(*folders)


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
    copy_walked_files(files, home)


def _new_result(run: Run, sub: Submission, fingerprint: str) -> SubmissionResult:
    """The result record a submission starts with: its notes and the run's isolation."""
    src = run.sources[sub.assignment]
    result = SubmissionResult(sub.student, sub.assignment, fingerprint, run.isolation,
                              notes=list(sub.notes) + src.warnings)  # fmt: skip
    result.notes += run.arrival_notes.get((sub.student, sub.assignment), [])
    handed_in = read_timestamp(sub.folder / TIMESTAMP_FILE)
    judged = judge_time(handed_in, run.arrived.get((sub.student, sub.assignment)))
    result.timestamp = iso_utc(judged.at)
    result.arrived_at = result.timestamp if (sub.student, sub.assignment) in run.arrived else None
    result.claimed_at = iso_utc(judged.claimed)
    if judged.flag:
        result.flags.append(judged.flag)
    if handed_in.problem:
        result.flags.append(f"{handed_in.problem}: graded as if handed in on time")
    if run.isolation == Isolation.WEAK:
        result.flags.append("graded with weak isolation (the instructor accepted it): the "
                            "submission's code was not confined; see SECURITY.md")  # fmt: skip
    return result


def _prepare_safely(
    run: Run, sub: Submission, fingerprint: str
) -> tuple[SubmissionResult, list[NotebookJob]]:
    """A submission's result record and its jobs; one odd submission must not stop the class."""
    result = _new_result(run, sub, fingerprint)
    try:
        with phases.phase("parent.prepare"):
            return result, _prepare(run, sub, run.sources[sub.assignment], result)
    except Exception as exc:
        result.status = Status.INVALID
        result.message = f"could not be prepared: {type(exc).__name__}: {exc}"
        return result, []


def _prepare(run: Run, sub: Submission, src: SourceAssignment, result: SubmissionResult) -> list[NotebookJob]:
    if sub.problem:
        result.status, result.message = Status.INVALID, sub.problem
        return []
    jobs, problems = [], []
    files = _beside_files(sub, src.folder)
    for name, path in sub.notebooks.items():
        try:
            nb = read_notebook(path)
            sanitized = sanitize(
                nb, src.notebooks[name], run.source_cells, run.db_url, sub.assignment, name, sub.student
            )
        except InvalidNotebook as exc:
            problems.append(str(exc))
            continue
        except Exception as exc:  # nbgrader refused the notebook (metadata it cannot read)
            problems.append(f"{path.name} could not be read by nbgrader: {type(exc).__name__}: {exc}")
            continue
        result.notes += [f"{name}.ipynb: {note}" for note in sanitized.notes]
        job = run.new_job(code_cells(sanitized.nb), files, src.expected.get(name, {}))
        jobs.append(NotebookJob(sub, name, sanitized, job))
    if problems and not jobs:
        result.status, result.message = Status.INVALID, "; ".join(problems)
    elif problems:
        result.notes += problems
    return jobs


def _finish_safely(
    run: Run, sub: Submission, result: SubmissionResult, jobs: list[NotebookJob], summary: Summary
) -> None:
    try:
        with one_transaction(run.gradebook):  # the submission's rows, committed once
            _finish(run, sub, result, jobs)
    except Exception as exc:  # a grader bug on one submission: say so, go on with the rest
        run.gradebook.db.rollback()
        result.status, result.tests = Status.CRASHED, []
        result.message = f"the grader failed on this submission: {type(exc).__name__}: {exc}"
    finally:
        for job in jobs:
            run.references.pop(job.job.id, None)
            shutil.rmtree(job.job.folder, ignore_errors=True)
    if result.status is Status.TIMEOUT:
        previous = run.out / sub.student / sub.assignment / "results.json"
        result.attempts = timeout_attempts(previous, result.fingerprint) + 1
    summary.count(result)
    with phases.phase("write.feedback"):
        write_course_feedback(run.out, result, sub)  # nbgrader's layout, for its tools
    with phases.phase("write.results"):
        reports.write_results(run.out, result)  # last: it marks the submission as done


def _finish(run: Run, sub: Submission, result: SubmissionResult, jobs: list[NotebookJob]) -> None:
    """Turn finished jobs into outputs, grades, the gradebook entry and the reports."""
    src = run.sources[sub.assignment]
    start = phases.start()
    run.gradebook.update_or_create_student(sub.student)
    run.gradebook.update_or_create_submission(
        sub.assignment,
        sub.student,
        timestamp=(
            None
            if result.timestamp is None
            else datetime.fromisoformat(result.timestamp).replace(tzinfo=None)
        ),
    )
    phases.stop("write.gradebook", start)
    messages = []
    for job in jobs:
        assert job.finished is not None, "scheduling hands a submission over once its jobs have ended"
        start = phases.start()
        status, message, report = run_outcome(job.finished)
        phases.stop("parent.child_report", start)
        if status is not Status.GRADED:
            result.status = status if result.status is Status.GRADED else result.status
            messages.append(f"{job.notebook}.ipynb: {message}")
        delegation = delegation_of(job.sanitized.nb, src.notebooks[job.notebook], report)
        result.flags += delegation.flags()
        expected = src.expected.get(job.notebook, {})
        if job.job.id in run.references:
            with phases.phase("parent.wait_for_judge_pool"):
                run.answers.fill(run.references.pop(job.job.id).result())
        computed = run.answers.computed  # by the parent itself: none, when the pool answered
        with phases.phase("parent.judging"):
            result.tests += score_notebook(
                job.notebook,
                job.sanitized.nb,
                report,
                expected,
                timed_out=job.finished.timed_out,
                salt=job.job.salt,
                delegation=delegation,
                answers=run.answers,
            )
        phases.count("parent.references_computed", run.answers.computed - computed)
        with phases.phase("write.gradebook"):
            _save(run, job, sub)
    graded = {job.notebook for job in jobs}
    for name in src.notebooks:  # missing or unreadable notebooks score 0, as nbgrader does
        if name not in graded:
            why = (
                "the notebook is missing"
                if name not in sub.notebooks
                else (result.message or "the notebook could not be read")
            )
            result.tests += zero_tests(src.notebooks[name], name, why)
            zero_in_gradebook(run.gradebook, name, sub)
    with phases.phase("write.gradebook"):
        late_penalties(run, sub, jobs, result)
    if messages:
        result.message = "; ".join(messages)
    elif result.status is Status.GRADED:
        failed = sum(t.status not in (TestStatus.PASSED, TestStatus.NEEDS_MANUAL_GRADE) for t in result.tests)
        result.message = (
            f"{failed} of {len(result.tests)} tests did not pass" if failed else "all tests passed"
        )


def _resources(run: Run, sub: Submission, notebook: str) -> dict[str, Any]:
    return nbgrader_resources(run.db_url, sub.assignment, notebook, sub.student)


def _save(run: Run, job: NotebookJob, sub: Submission) -> None:
    """nbgrader's SaveAutoGrades into the gradebook, and the notebook in the autograded layout."""
    SharedSaveAutoGrades(run.gradebook).preprocess(job.sanitized.nb, _resources(run, sub, job.notebook))
    make_inert(job.sanitized.nb)  # shown as data by formgrader and nbgrader's feedback, never run
    target = run.out / "autograded" / sub.student / sub.assignment / f"{job.notebook}.ipynb"
    # json, not nbformat.writes: the notebook was checked on the way in, and re-validating
    # every autograded notebook against the schema was a tenth of the parent's time
    reports.write_atomically(target, json.dumps(job.sanitized.nb, indent=1, ensure_ascii=False) + "\n")
