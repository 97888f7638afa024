"""The gradebook entries a graded submission gets beside nbgrader's SaveAutoGrades
(``pipeline._save``): nbgrader's late penalties, the flag of a submission whose timestamp.txt
disagrees with the server's clock, and a 0 for a notebook never handed in."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from nbgrader.api import Gradebook

from grader.autograde.nbgrader_adapters import SharedAssignLatePenalties, nbgrader_resources
from grader.deadlines import apply_extension, skewed

if TYPE_CHECKING:
    from grader.autograde.pipeline import Run
    from grader.autograde.results import SubmissionResult
    from grader.autograde.scheduling import NotebookJob
    from grader.autograde.submissions import Submission

QUIET = logging.getLogger("attention-course: late penalties")  # nbgrader's plugin logs every late notebook
QUIET.addHandler(logging.NullHandler())
QUIET.propagate = False


def late_penalties(run: Run, sub: Submission, jobs: list[NotebookJob], result: SubmissionResult) -> None:
    """nbgrader's AssignLatePenalties on each notebook (after OUT/extensions.csv's row, if any, is
    written into the submission's extension); the result keeps what the gradebook says."""
    apply_extension(run.gradebook, sub.assignment, sub.student, run.out)
    for job in jobs:
        SharedAssignLatePenalties(run.gradebook, config=run.policy.nbgrader_config(), log=QUIET).preprocess(
            job.sanitized.nb, nbgrader_resources(run.db_url, sub.assignment, job.notebook, sub.student)
        )
    submission = run.gradebook.find_submission(sub.assignment, sub.student)
    flag_clock_skew(run.gradebook, sub, result)
    if submission.timestamp is not None and submission.duedate is not None:
        result.late_by_seconds = round(float(submission.total_seconds_late), 3)  # nbgrader: 0 when on time
    result.penalty = round(float(submission.late_submission_penalty or 0.0), 6)


def _naive(iso: str | None) -> datetime | None:
    return None if iso is None else datetime.fromisoformat(iso).replace(tzinfo=None)


def flag_clock_skew(gradebook: Gradebook, sub: Submission, result: SubmissionResult) -> None:
    """When timestamp.txt (the student's claim) and the arrival the watcher saw disagree, each of
    the submission's notebooks is flagged (``SubmittedNotebook.flagged``), the flag formgrader
    shows in its submission lists; the reason is in grades.csv's flags. The instructor unflags."""
    if not skewed(_naive(result.claimed_at), _naive(result.arrived_at)):
        return
    for notebook in gradebook.find_submission(sub.assignment, sub.student).notebooks:
        notebook.flagged = True
    gradebook.db.commit()


def zero_in_gradebook(gradebook: Gradebook, notebook: str, sub: Submission) -> None:
    """What nbgrader's autograde does for a notebook that was not handed in: 0, reviewed."""
    submitted = gradebook.find_submission_notebook(notebook, sub.assignment, sub.student)
    for grade in submitted.grades:
        grade.auto_score = 0
        grade.needs_manual_grade = False
    submitted.late_submission_penalty = None  # nothing to take from a 0 (an older one's went)
    gradebook.db.commit()
