"""A grading session: one gradebook, one executor, and each source assignment prepared once.

``autograde`` grades one batch (a SUBMITTED folder) in a session; ``grader.watch`` keeps a
session open and grades each arrival as a batch of its own. Preparing an assignment
(nbgrader's generate_assignment into the gradebook, the due date, OUT/source/, the
solution run that tells the parent what each test checks) happens the first time a batch
holds a submission of it. Every batch ends by writing grades.csv, whatever happened, and
its summary counts the rows of that file.
"""

from __future__ import annotations

import os
import shutil
import warnings
from contextlib import ExitStack
from pathlib import Path

from attention_learner.cell_rules import Status
from grader.autograde import course_dir, permissions, phases, reports, solution_cache
from grader.autograde.executor import Executor
from grader.autograde.fork_protocol import Limits
from grader.autograde.gradebook import open_gradebook
from grader.autograde.interrupts import Interrupts
from grader.autograde.pipeline import GradeOptions, Run, _finish_safely, _prepare_safely
from grader.autograde.results import SubmissionResult, Summary, unchanged
from grader.autograde.scheduling import JobStream, grade_all
from grader.autograde.sources import solution_run
from grader.autograde.submissions import Submission, find_submissions
from grader.nbgrader_course import generate_assignment, temporary_course


class GradingSession:
    """``with GradingSession(...) as session: session.grade(submitted)``; closing it closes
    the executor and removes the private work folder."""

    def __init__(self, out: Path, source: Path, options: GradeOptions, server: Executor, work: Path,
                 course_id: str | None = None, exchange: Path | None = None) -> None:  # fmt: skip
        self.out, self.source, self.options, self.server, self.work = out, source, options, server, work
        self.prepared: set[str] = set()
        self._ready = False
        self._stream: JobStream | None = None  # the watcher's submissions in flight (``add``)
        self._summary = Summary()
        self._stack = ExitStack()
        self._stack.callback(shutil.rmtree, work, ignore_errors=True)
        self._stack.callback(server.close)
        try:
            permissions.configure(options.group_readable)
            # OUT private (or the group's) whatever the umask: what this process writes while
            # the session is open, and what an earlier run left (see permissions.py)
            self._stack.callback(os.umask, os.umask(permissions.output_umask()))
            permissions.make_folders(out)
            permissions.restrict_tree(out)
            self.db_url = options.db_url or f"sqlite:///{(out / 'gradebook.db').resolve()}"
            self.interrupts = self._stack.enter_context(Interrupts())
            self._stack.enter_context(warnings.catch_warnings())
            # nbgrader's gradebook API trips SQLAlchemy 2's autoflush warnings ("... not in
            # session, add operation ... will not proceed"): harmless, and noise on stderr
            warnings.filterwarnings("ignore", message=".*not in session.*")
            gradebook = self._stack.enter_context(open_gradebook(self.db_url))
            self.run = Run(source, out, work, server, gradebook, self.db_url,
                           Limits(timeout=options.timeout), options.late_policy)  # fmt: skip
            self._stack.callback(self.run.judges.close)
            course_dir.write_config(out, self.db_url, course_id, exchange)
        except BaseException:
            self._stack.close()
            raise

    def __enter__(self) -> GradingSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        try:
            self._stack.close()
        finally:
            if self.db_url.startswith("sqlite:///"):
                for suffix in ("", "-wal", "-shm"):
                    permissions.set_file_mode(Path(self.db_url[len("sqlite:///") :] + suffix))
            permissions.restrict_tree(self.out)

    def prepare(self, assignments: list[str]) -> None:
        """Make each assignment gradable, once: nbgrader's records, due date, OUT/source/,
        and its solution run."""
        new = [a for a in assignments if a not in self.prepared]
        if not new:
            return
        run = self.run
        phases.mark("startup.imports_and_session")
        start = phases.start()
        with temporary_course(self.source, self.db_url) as api:
            for name in new:
                generate_assignment(api, name)  # records notebooks and grade cells
        for name in new:
            if name in self.options.due:  # --due NAME=DATE; every other date stays as it is
                run.gradebook.update_or_create_assignment(name, duedate=self.options.due[name])
            run.due[name] = run.gradebook.find_assignment(name).duedate
        course_dir.copy_sources(self.out, {name: run.sources[name].folder for name in new})
        phases.stop("startup.generate_assignment", start)
        if not self._ready:
            with phases.phase("startup.wait_for_fork_server"):
                self.server.wait_ready()
            self._ready = True
        for name in new:
            src = run.sources[name]
            with phases.phase("startup.solution_run"):
                if not solution_cache.load(self.out, src, run.code):  # an earlier run's, same source
                    before = len(src.warnings)
                    solution_run(run, src)
                    solution_cache.store(self.out, src, run.code, src.warnings[before:])
            self.prepared.add(name)

    def grade(
        self,
        submitted: Path,
        *,
        every_result: bool = False,
        problems: dict[tuple[str, str], str] | None = None,
    ) -> Summary:
        """Grade what changed under ``submitted``; write grades.csv.

        grades.csv has a row for each submission found there, or with ``every_result``
        (a watch, whose batches hold one arrival each) for every results.json in OUT.
        ``problems`` makes a submission invalid with that message (the watcher's copy of
        it could not be made).
        """
        run, summary = self.run, Summary()
        submissions: list[Submission] | None = None
        try:
            submissions = self._found(submitted, problems)
            todo = self._changed(submissions, summary)
            self.interrupts.check()
            grade_all(self.server, todo, self.options.workers, self.options.progress,
                      lambda sub, fingerprint: _prepare_safely(run, sub, fingerprint),
                      lambda sub, result, jobs: _finish_safely(run, sub, result, jobs, summary),
                      self.interrupts)  # fmt: skip
        finally:
            if submissions is not None:
                results = (
                    reports.read_results(self.out) if every_result else _results_for(self.out, submissions)
                )
                self._write_grades(results, submissions, summary)
        return summary

    def _found(self, submitted: Path, problems: dict[tuple[str, str], str] | None) -> list[Submission]:
        """The submissions under ``submitted``, each assignment among them prepared."""
        run = self.run
        notebooks = {n: sorted(s.notebooks) for n, s in run.sources.items()}
        submissions = find_submissions(submitted, notebooks)
        for sub in submissions:
            reserved = course_dir.reserved_name(sub.student)
            why = reserved or (problems or {}).get((sub.student, sub.assignment))
            if why and not sub.unsafe_id:
                sub.problem, sub.unsafe_id = why, bool(reserved)
        self.prepare(sorted({s.assignment for s in submissions if s.assignment in run.sources}))
        return submissions

    def _changed(self, submissions: list[Submission], summary: Summary) -> list[tuple[Submission, str]]:
        """The submissions to grade, with their fingerprints (an unchanged one is skipped)."""
        todo = []
        for sub in submissions:
            if sub.unsafe_id:  # no folder of OUT may carry this name: a row in grades.csv only
                continue
            fingerprint = sub.fingerprint(self.run.context(sub.assignment, sub.student))
            previous = self.out / sub.student / sub.assignment / "results.json"
            if unchanged(previous, fingerprint, self.options.retry_timeouts):
                summary.skipped += 1
            else:
                todo.append((sub, fingerprint))
        return todo

    def _write_grades(self, results: list[SubmissionResult], submissions: list[Submission],
                      summary: Summary | None) -> None:  # fmt: skip
        unsafe = [_invalid_id_row(s) for s in submissions if s.unsafe_id]
        with phases.phase("write.grades_csv"):
            reports.write_grades_csv(self.out, results, unsafe)
        if summary is not None:
            summary.tally([*results, *unsafe])  # the file's rows, kept ones included

    def add(
        self, submitted: Path, problems: dict[tuple[str, str], str] | None = None
    ) -> dict[str, list[Submission]]:
        """Queue the submissions under ``submitted`` (a watcher's copy of one arrival) to be
        graded beside whatever runs already (``collect`` hands them back as they end).

        The answer sorts them: ``queued`` (jobs waiting for or on a worker), ``done``
        (finished at once: nothing to run, such as an invalid one), ``unchanged`` (its
        results.json has the same fingerprint). grades.csv is rewritten when one is done.
        """
        run = self.run
        if self._stream is None:
            self._stream = JobStream(self.server, self.options.workers,
                                     lambda sub, fingerprint: _prepare_safely(run, sub, fingerprint),
                                     lambda sub, result, jobs: _finish_safely(run, sub, result, jobs,
                                                                              self._summary))  # fmt: skip
        submissions = self._found(submitted, problems)
        todo = self._changed(submissions, Summary())
        sorted_out: dict[str, list[Submission]] = {"queued": [], "done": [], "unchanged": []}
        for sub in submissions:
            if sub.unsafe_id or all(sub is not t for t, _ in todo):
                sorted_out["done" if sub.unsafe_id else "unchanged"].append(sub)
        for sub, fingerprint in todo:
            sorted_out["done" if self._stream.add(sub, fingerprint) else "queued"].append(sub)
        if sorted_out["done"]:
            self._write_grades(reports.read_results(self.out), sorted_out["done"], None)
        return sorted_out

    def collect(self, timeout: float) -> list[Submission]:
        """Wait at most ``timeout`` seconds for queued submissions to end; those that did
        (results.json and feedback written, grades.csv rewritten)."""
        if self._stream is None or self._stream.idle:
            return []
        ended = self._stream.pump(timeout)
        if ended:
            self._write_grades(reports.read_results(self.out), [], None)
        return ended

    @property
    def busy(self) -> bool:
        """Jobs are queued or running (``add``ed, not yet ``collect``ed)."""
        return self._stream is not None and not self._stream.idle


def _invalid_id_row(sub: Submission) -> SubmissionResult:
    """grades.csv's row for a submission no folder of OUT may carry the name of (no results.json)."""
    return SubmissionResult(sub.student, sub.assignment, "", "", Status.INVALID, sub.problem)


def _results_for(out: Path, submissions: list[Submission]) -> list[SubmissionResult]:
    keys = {(s.student, s.assignment) for s in submissions if not s.unsafe_id}
    return [r for r in reports.read_results(out) if (r.student_id, r.assignment) in keys]


def autograde(
    submitted: Path, out: Path, source: Path, *, options: GradeOptions, server: Executor, work: Path
) -> Summary:
    """Grade every submission under ``submitted`` against ``source``; see ARCHITECTURE.md.

    ``server`` is the Executor (a ForkServer, a DaskExecutor) the caller started early (its
    imports overlap with ours) and ``work`` the private folder it hides from every child;
    both are closed/removed here. One batch of a :class:`GradingSession`.
    """
    with GradingSession(out, source, options, server, work) as session:
        return session.grade(submitted)
