"""The autograde run: discover, sanitize, execute in the sandbox, judge, score, report.

The parent process never runs the learner's code. It prepares one job per submitted
notebook, hands it to the fork server, and, as jobs finish, turns their outputs into grades
with nbgrader's rules, re-judging every check itself. Results are written per submission,
atomically, as soon as it is done, so an interrupted run loses nothing already graded, and a
re-run skips every submission whose files (and source) have not changed.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode
from nbgrader import utils
from nbgrader.api import Gradebook

from grader.autograde import reports
from grader.autograde.gradebook import SharedSaveAutoGrades, open_gradebook
from grader.autograde.judging import ExpectedCheck, describe_error, expected_checks, rejudge
from grader.autograde.sandbox import ChildJob, Finished, ForkServer, Limits
from grader.autograde.sanitize import Sanitized, sanitize
from grader.autograde.submissions import (
    InvalidNotebook,
    Submission,
    find_submissions,
    folder_fingerprint,
    read_notebook,
)
from grader.exercises import all_exercises
from grader.nbgrader_course import generate_assignment, temporary_course


@dataclass
class SourceAssignment:
    name: str
    folder: Path
    notebooks: dict[str, NotebookNode]  # name -> the source notebook (solutions, hidden tests)
    expected: dict[str, dict[str, list[ExpectedCheck]]] = field(default_factory=dict)
    fingerprint: str = ""
    warnings: list[str] = field(default_factory=list)


class SourceError(RuntimeError):
    """The source cannot be graded against (it does not run); nothing was graded."""


@dataclass
class NotebookJob:
    submission: Submission
    notebook: str
    sanitized: Sanitized
    code_cells: dict[int, NotebookNode]
    tmp: Path  # holds workdir/, results.jsonl, records/, child.log
    finished: Finished | None = None


@dataclass
class Summary:
    graded: int = 0
    skipped: int = 0
    failed_tests: int = 0
    timeouts: int = 0
    crashes: int = 0
    invalid: int = 0
    flagged: int = 0

    def line(self) -> str:
        return (
            f"{self.graded} graded, {self.skipped} unchanged (kept), {self.failed_tests} failed "
            f"tests, {self.timeouts} timeouts, {self.crashes} crashes, {self.invalid} invalid, "
            f"{self.flagged} flagged"
        )


def exercise_of(grade_id: str) -> str:
    """test_<name> or test_<name>__<aspect> -> <name>; other ids are their own exercise."""
    name = grade_id[len("test_"):] if grade_id.startswith("test_") else grade_id
    return name.split("__", 1)[0]


def autograde(
    submitted: Path,
    out: Path,
    source: Path,
    db_url: str | None = None,
    workers: int = 2,
    timeout: float = 60.0,
    progress: bool = True,
    server: ForkServer | None = None,
) -> Summary:
    """Grade every submission under ``submitted`` against ``source``; see DESIGN.md.

    ``server`` may be a ForkServer the caller started early, so that its imports overlap
    with the caller's own; it is closed at the end either way.
    """
    # nbgrader's gradebook API trips SQLAlchemy 2's autoflush warnings; they are noise here
    warnings.filterwarnings("ignore", module="nbgrader")
    warnings.filterwarnings("ignore", message=".*not in session.*")
    out.mkdir(parents=True, exist_ok=True)
    db_url = db_url or f"sqlite:///{(out / 'gradebook.db').resolve()}"
    limits = Limits(timeout=timeout)
    names = sorted(p.name for p in source.iterdir() if p.is_dir() and any(p.glob("*.ipynb")))
    sources = {n: _load_source(source / n) for n in names}
    submissions = find_submissions(submitted, {n: sorted(s.notebooks) for n, s in sources.items()})
    summary = Summary()
    wanted = {s.assignment for s in submissions}
    server = server or ForkServer()  # loads torch on the other core while we prepare
    work = Path(tempfile.mkdtemp(prefix="attention-grading-"))
    try:
        with temporary_course(source, db_url) as api:
            for name in sorted(wanted):
                generate_assignment(api, name)  # records notebooks and grade cells
        all_exercises()  # the parent judges checks: load every chapter's specs now
        with server, open_gradebook(db_url) as gradebook:
            for name in sorted(wanted):
                _solution_run(server, sources[name], work, limits)
            todo = []
            for sub in submissions:
                sub_fp = sub.fingerprint(sources[sub.assignment].fingerprint)
                previous = out / sub.student / sub.assignment / "results.json"
                if _unchanged(previous, sub_fp):
                    summary.skipped += 1
                    continue
                todo.append((sub, sub_fp))
            _grade_all(server, gradebook, todo, sources, out, db_url, work, limits, workers,
                       summary, progress)
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
        reports.write_grades_csv(out, _results_for(out, submissions))
    return summary


def _results_for(out: Path, submissions: Iterable[Submission]) -> list[dict[str, Any]]:
    keys = {(s.student, s.assignment) for s in submissions}
    return [r for r in reports.read_results(out) if (r["student_id"], r["assignment"]) in keys]


def _unchanged(previous: Path, fingerprint: str) -> bool:
    try:
        return json.loads(previous.read_text(encoding="utf-8")).get("fingerprint") == fingerprint
    except (OSError, ValueError):
        return False


def _load_source(folder: Path) -> SourceAssignment:
    notebooks = {p.stem: read_notebook(p) for p in sorted(folder.glob("*.ipynb"))}
    return SourceAssignment(folder.name, folder, notebooks, fingerprint=folder_fingerprint(folder))


def _code_cells(nb: NotebookNode) -> dict[int, NotebookNode]:
    return {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}


def _prepare_workdir(tmp: Path, source_folder: Path, submission_folder: Path | None) -> Path:
    """A fresh directory with the files beside the notebooks (the source's win, as in nbgrader)."""
    workdir = tmp / "workdir"
    for folder in (submission_folder, source_folder):
        if folder is None:
            continue
        for path in folder.rglob("*"):
            relative = path.relative_to(folder)
            if path.is_file() and path.suffix != ".ipynb" and not path.is_symlink():
                (workdir / relative).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, workdir / relative)
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def _child_job(
    key: str, cells: dict[int, NotebookNode], tmp: Path, workdir: Path, limits: Limits
) -> ChildJob:
    (tmp / "records").mkdir(parents=True, exist_ok=True)
    return ChildJob(
        key=key,
        cells=[(i, c.source) for i, c in cells.items()],
        workdir=str(workdir),
        results_file=str(tmp / "results.jsonl"),
        record_dir=str(tmp / "records"),
        log_file=str(tmp / "child.log"),
        limits=limits,
    )


def _read_lines(tmp: Path) -> dict[int, dict]:
    """The child's result lines by cell index (the last line wins); broken lines are ignored."""
    lines: dict[int, dict] = {}
    path = tmp / "results.jsonl"
    if not path.exists():
        return lines
    with open(path, encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            try:
                line = json.loads(raw)
                lines[int(line["index"])] = line
            except (ValueError, KeyError, TypeError):
                continue
    return lines


def _solution_run(server: ForkServer, src: SourceAssignment, work: Path, limits: Limits) -> None:
    """Run each source notebook once to learn which checks each test cell makes."""
    for name, nb in src.notebooks.items():
        tmp = work / "solution" / src.name / name
        workdir = _prepare_workdir(tmp, src.folder, None)
        cells = _code_cells(nb)
        server.submit(_child_job(f"solution:{src.name}/{name}", cells, tmp, workdir, limits))
        finished = []
        while not finished:
            finished = server.wait()
        lines = _read_lines(tmp)
        grade_id_of = {i: c.metadata.nbgrader["grade_id"] for i, c in cells.items()
                       if utils.is_grade(c) and not utils.is_solution(c)}
        failing = sorted(grade_id_of[i] for i, line in lines.items() if i in grade_id_of
                         and any(o["output_type"] == "error" for o in line["outputs"]))
        if finished[0].timed_out or len(lines) < len(cells):
            raise SourceError(f"the source notebook {src.name}/{name}.ipynb did not run to the end "
                              "in the grader; fix the source first")
        if failing:  # nbgrader grades such a source anyway; so do we, on its rule alone
            src.warnings.append(f"{name}.ipynb: the source's own tests fail ({', '.join(failing)})"
                                "; those tests are graded by nbgrader's rule only")
        src.expected[name] = expected_checks(
            [line for i, line in lines.items() if grade_id_of.get(i) not in failing],
            grade_id_of,
        )


def _grade_all(server, gradebook, todo, sources, out, db_url, work, limits, workers, summary,
               progress) -> None:
    """Keep ``workers`` children busy; prepare the next submissions while they run."""
    from tqdm import tqdm

    bar = tqdm(total=len(todo), unit="sub", disable=not progress, file=sys.stderr,
               dynamic_ncols=True)
    upcoming = iter(enumerate(todo))
    pending: dict[str, list[NotebookJob]] = {}  # submission key -> its notebook jobs
    results: dict[str, dict[str, Any]] = {}
    queue: list[NotebookJob] = []
    running = 0

    def prepare_next() -> bool:
        """Prepare one more submission; False when there is none left."""
        step = next(upcoming, None)
        if step is None:
            return False
        n, (sub, fingerprint) = step
        result = results[sub.key] = _new_result(sub, fingerprint, sources[sub.assignment])
        try:
            jobs = _prepare(sub, sources[sub.assignment], gradebook, db_url, work / f"s{n}", result)
        except Exception as exc:  # one odd submission must not stop the class
            result["status"] = "invalid"
            result["message"] = f"could not be prepared: {type(exc).__name__}: {exc}"
            jobs = []
        if jobs:
            pending[sub.key] = jobs
            queue.extend(jobs)
        else:
            _finish_safely(sub, result, [], gradebook, db_url, out, summary, sources)
            bar.update(1)
        return True

    try:
        more = True
        while True:
            while more and len(queue) < workers:
                more = prepare_next()
            while queue and running < workers:
                job = queue.pop(0)
                server.submit(_child_job(f"{job.submission.key}::{job.notebook}", job.code_cells,
                                         job.tmp, job.tmp / "workdir", limits))
                running += 1
            if more and len(queue) < workers:
                more = prepare_next()  # ahead of time, while the children run
            if not running:
                if more or queue:
                    continue
                break
            for finished in server.wait():
                running -= 1
                sub_key, notebook = finished.job.key.split("::", 1)
                jobs = pending[sub_key]
                next(j for j in jobs if j.notebook == notebook).finished = finished
                if all(j.finished is not None for j in jobs):
                    del pending[sub_key]
                    _finish_safely(jobs[0].submission, results.pop(sub_key), jobs, gradebook,
                                   db_url, out, summary, sources)
                    bar.update(1)
    finally:
        bar.close()


def _finish_safely(sub, result, jobs, gradebook, db_url, out, summary, sources) -> None:
    try:
        _finish(sub, result, jobs, gradebook, db_url, out, summary, sources[sub.assignment])
    except Exception as exc:  # a grader bug on one submission: say so, go on with the rest
        gradebook.db.rollback()
        result.update(status="crashed", tests=[], score=0.0,
                      message=f"the grader failed on this submission: {type(exc).__name__}: {exc}")
        reports.write_results(out, result)
        summary.crashes += 1
    finally:
        if jobs:
            shutil.rmtree(jobs[0].tmp.parent, ignore_errors=True)


def _new_result(sub: Submission, fingerprint: str, src: SourceAssignment) -> dict[str, Any]:
    return {
        "student_id": sub.student, "assignment": sub.assignment, "score": 0.0,
        "max_score": 0.0, "status": "graded", "message": "", "flags": [],
        "notes": list(sub.notes) + src.warnings, "tests": [], "fingerprint": fingerprint,
    }


def _prepare(sub: Submission, src: SourceAssignment, gradebook: Gradebook, db_url: str,
             tmp_root: Path, result: dict[str, Any]) -> list[NotebookJob]:
    if sub.problem:
        result["status"], result["message"] = "invalid", sub.problem
        return []
    jobs = []
    problems = []
    for name, path in sub.notebooks.items():
        try:
            nb = read_notebook(path)
            sanitized = sanitize(nb, src.notebooks[name], gradebook, db_url, sub.assignment, name,
                                 sub.student)
        except InvalidNotebook as exc:
            problems.append(str(exc))
            continue
        except Exception as exc:  # nbgrader refused the notebook (metadata it cannot read)
            problems.append(f"{path.name} could not be read by nbgrader: {type(exc).__name__}: {exc}")
            continue
        result["notes"] += [f"{name}.ipynb: {note}" for note in sanitized.notes]
        result["flags"] += [f"{name}.ipynb: {flag}" for flag in sanitized.flags]
        tmp = tmp_root / name
        _prepare_workdir(tmp, src.folder, sub.folder)
        jobs.append(NotebookJob(sub, name, sanitized, _code_cells(sanitized.nb), tmp))
    if problems and not jobs:
        result["status"], result["message"] = "invalid", "; ".join(problems)
    elif problems:
        result["notes"] += problems
    return jobs


def _finish(sub: Submission, result: dict[str, Any], jobs: list[NotebookJob], gradebook: Gradebook,
            db_url: str, out: Path, summary: Summary, src: SourceAssignment) -> None:
    """Turn finished jobs into outputs, grades, the gradebook entry and the reports."""
    gradebook.update_or_create_student(sub.student)
    gradebook.update_or_create_submission(sub.assignment, sub.student)
    messages = []
    for job in jobs:
        finished = job.finished
        status, message = _run_status(finished, job.tmp)
        if status != "graded":
            result["status"] = status if result["status"] == "graded" else result["status"]
            messages.append(f"{job.notebook}.ipynb: {message}")
        tests = _score_notebook(job, finished, src.expected.get(job.notebook, {}))
        result["tests"] += tests
        _save(job, sub, gradebook, db_url, out)
    # notebooks that were missing or unreadable score 0, here and in the gradebook (as nbgrader
    # does for a missing notebook), so that the row shows 0 of the real maximum
    graded = {job.notebook for job in jobs}
    for name in src.notebooks:
        if name not in graded:
            why = "the notebook is missing" if name not in sub.notebooks else (
                result["message"] or "the notebook could not be read")
            result["tests"] += _zero_tests(src.notebooks[name], name, why)
            _zero_in_gradebook(gradebook, name, sub)
    result["score"] = round(sum(t["points"] for t in result["tests"]), 6)
    result["max_score"] = round(sum(t["max_points"] for t in result["tests"]), 6)
    if messages:
        result["message"] = "; ".join(messages)
    elif result["status"] == "graded":
        failed = sum(t["status"] not in ("passed", "needs_manual_grade") for t in result["tests"])
        total = len(result["tests"])
        result["message"] = f"{failed} of {total} tests did not pass" if failed else "all tests passed"
    _count(summary, result)
    reports.write_results(out, result)


def _count(summary: Summary, result: dict[str, Any]) -> None:
    status = result["status"]
    if status == "graded":
        summary.graded += 1
    elif status == "timeout":
        summary.timeouts += 1
    elif status == "crashed":
        summary.crashes += 1
    elif status == "invalid":
        summary.invalid += 1
    summary.failed_tests += sum(t["status"] in ("failed", "error", "timeout", "not_run")
                                for t in result["tests"])
    summary.flagged += bool(result["flags"])


def _run_status(finished: Finished, tmp: Path) -> tuple[str, str]:
    if finished.timed_out:
        return "timeout", (f"stopped after {finished.seconds:.0f} s (the time limit for a "
                           "submission); tests that finished before keep their points")
    if finished.exitcode == 0:
        return "graded", ""
    log = ""
    try:
        log = (tmp / "child.log").read_text(errors="replace")[-400:].strip()
    except OSError:
        pass
    if finished.exitcode is not None and finished.exitcode < 0:
        import signal

        name = signal.Signals(-finished.exitcode).name
        why = f"the process was killed by {name}"
        if name == "SIGSEGV":
            why += " (a segmentation fault)"
        elif name == "SIGXCPU":
            why += " (it used up its CPU time)"
    else:
        why = f"the process exited with status {finished.exitcode} (os._exit or sys.exit?)"
    return "crashed", why + (f"; last output: {log}" if log else "")


def _score_notebook(job: NotebookJob, finished: Finished,
                    expected: dict[str, list[ExpectedCheck]]) -> list[dict[str, Any]]:
    """Fill the sanitized notebook with the child's outputs, re-judge, and score each test."""
    lines = _read_lines(job.tmp)
    record_dir = job.tmp / "records"
    flagged = job.sanitized.flagged_exercises
    tests = []
    for index, cell in enumerate(job.sanitized.nb.cells):
        if cell.cell_type != "code":
            if utils.is_grade(cell):  # a written answer, graded by hand as in nbgrader
                grade_id = cell.metadata.nbgrader["grade_id"]
                tests.append({"notebook": job.notebook, "grade_id": grade_id,
                              "exercise": exercise_of(grade_id), "points": 0.0,
                              "max_points": float(cell.metadata.nbgrader.get("points", 0)),
                              "status": "needs_manual_grade", "message": "graded by hand"})
            continue
        line = lines.get(index)
        cell.outputs = [nbformat.from_dict(o) for o in line["outputs"]] if line else []
        if not utils.is_grade(cell):
            continue
        grade_id = cell.metadata.nbgrader["grade_id"]
        exercise = exercise_of(grade_id)
        status, message = "passed", ""
        if line is None:
            status = "timeout" if finished.timed_out else "not_run"
            message = ("the submission ran out of time before this test" if finished.timed_out
                       else "this test never ran (the process stopped before it)")
            _fail(cell, message)
        elif exercise in flagged:
            status, message = "failed", "no points: the solution uses the reference package"
            _fail(cell, message)
        else:
            error = next((o for o in cell.outputs if o.output_type == "error"), None)
            stderr = next((o for o in cell.outputs
                           if o.output_type == "stream" and o.name == "stderr"), None)
            verdict = rejudge(expected.get(grade_id, []), line.get("records", []), record_dir)
            if verdict and not verdict.missing:  # judged here, where no learner code runs
                status, message = "failed", verdict.message
                _fail(cell, message)
            elif error is not None:  # the cell stopped (before its checks, or after them)
                status = "failed" if error.ename == "AssertionError" else "error"
                message = describe_error(error.ename, error.evalue)
            elif verdict:  # no error, yet a check never reported: tampering or a lost record
                status, message = "failed", verdict.message
                _fail(cell, message)
            elif stderr is not None:
                status = "failed"
                message = "the test wrote to stderr (nbgrader scores that 0): " + stderr.text[:500]
        points, max_points = utils.determine_grade(cell)
        if utils.is_solution(cell) and points is None:
            status, points = "needs_manual_grade", 0.0
            message = "graded by hand"
        if status == "passed" and points < max_points:
            message = f"partial credit: {points:g} of {max_points:g}"
        tests.append({"notebook": job.notebook, "grade_id": grade_id, "exercise": exercise,
                      "points": float(points or 0.0), "max_points": float(max_points),
                      "status": status, "message": message})
    return tests


def _fail(cell: NotebookNode, message: str) -> None:
    """Give a test cell the error output that nbgrader's scoring reads as a failure."""
    cell.outputs.append(nbformat.from_dict(
        {"output_type": "error", "ename": "GradingFailure", "evalue": message, "traceback": [message]}
    ))


def _zero_tests(nb: NotebookNode, name: str, message: str) -> list[dict[str, Any]]:
    return [
        {"notebook": name, "grade_id": c.metadata.nbgrader["grade_id"],
         "exercise": exercise_of(c.metadata.nbgrader["grade_id"]), "points": 0.0,
         "max_points": float(c.metadata.nbgrader.get("points", 0)), "status": "not_run",
         "message": message}
        for c in nb.cells if utils.is_grade(c)
    ]


def _zero_in_gradebook(gradebook: Gradebook, notebook: str, sub: Submission) -> None:
    """What nbgrader's autograde does for a notebook that was not handed in: 0, reviewed."""
    submitted = gradebook.find_submission_notebook(notebook, sub.assignment, sub.student)
    for grade in submitted.grades:
        grade.auto_score = 0
        grade.needs_manual_grade = False
    gradebook.db.commit()


def _save(job: NotebookJob, sub: Submission, gradebook: Gradebook, db_url: str, out: Path) -> None:
    """nbgrader's SaveAutoGrades into the gradebook, and the notebook in the autograded layout."""
    resources = {"nbgrader": {"db_url": db_url, "assignment": sub.assignment,
                              "notebook": job.notebook, "student": sub.student}}
    SharedSaveAutoGrades(gradebook).preprocess(job.sanitized.nb, resources)
    target = out / "autograded" / sub.student / sub.assignment / f"{job.notebook}.ipynb"
    # json, not nbformat.writes: the notebook was checked on the way in, and re-validating
    # every autograded notebook against the schema was a tenth of the parent's time
    reports.write_atomically(target, json.dumps(job.sanitized.nb, indent=1, ensure_ascii=False) + "\n")
