"""The parent is never the bottleneck: judging's computations happen in the judge pool, and a
finished job's place goes to the next job before the parent judges it (issue 32).

No timing here: the proxies are counts. The parent's ``CaseAnswers`` counts each reference it
computes itself; with the judge pool's answers filled in, judging a whole submission (a pass,
a classic bug named from the pool's bug outputs, a wrong output) computes none. And the
scheduler, given a finished job and a queued one, starts the queued one before it finishes
(judges) the submission.
"""

from __future__ import annotations

import numpy as np
import pytest

from attention_learner.conventions import AFTER, reports_conventions
from attention_learner.recording import grading_seed
from attention_learner.spec import to_numpy
from grader.autograde.child_report import Record
from grader.autograde.judge_pool import JudgePool, salted_cases
from grader.autograde.judging import CaseAnswers, ExpectedCheck, rejudge
from grader.autograde.scheduling import NotebookJob, _InFlight
from grader.exercises import get_exercise

CHECKS = [
    ExpectedCheck("scaled_dot_product_attention", 3, {"n_k": 5}),
    ExpectedCheck("scaled_dot_product_attention", 4, {"n_k": 6, "mask": "causal"}),
]
SALT = 123456789


def _outputs(want: ExpectedCheck, salt: int, bug: int | None) -> Record:
    """What a child sends for ``want`` under ``salt``: the reference's arrays, or a classic bug's."""
    spec = get_exercise(want.exercise)
    seed = grading_seed(salt, want.exercise, want.seed, want.params)
    inputs = spec.make_inputs(np.random.default_rng(seed), **want.params)
    outputs = spec.expected(inputs) if bug is None else spec.bug_outputs(inputs)[bug][1]
    if reports_conventions(spec.case):  # each input array as the call left it
        outputs = {**outputs, **{AFTER + k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}}
    return Record(
        exercise=want.exercise,
        seed=want.seed,
        params=want.params,
        error="",
        arrays={k: to_numpy(v) for k, v in outputs.items()},
    )


@pytest.fixture(scope="module")
def pool():
    judges = JudgePool()
    yield judges
    judges.close()


def test_the_parent_computes_no_reference_when_the_pool_answered(pool: JudgePool) -> None:
    answers = CaseAnswers(pool)
    answers.fill(pool.references(salted_cases(SALT, CHECKS)).result(timeout=120))
    assert rejudge(CHECKS, [_outputs(c, SALT, None) for c in CHECKS], SALT, answers) is None
    failure = rejudge(CHECKS, [_outputs(c, SALT, 0) for c in CHECKS], SALT, answers)
    assert failure is not None and "sqrt(d_k)" in failure.message  # named from the pool's bug outputs
    assert answers.computed == 0


def test_without_the_pool_answers_the_parent_would_compute_them() -> None:
    """The count is a real proxy: the same judging with no pool's answers counts each case."""
    answers = CaseAnswers()
    assert rejudge(CHECKS, [_outputs(c, SALT, None) for c in CHECKS], SALT, answers) is None
    assert answers.computed == len(CHECKS)


def test_the_pool_answers_for_the_salt_only() -> None:
    """Another job's salt draws other cases: its references are not this job's."""
    ours, theirs = salted_cases(SALT, CHECKS), salted_cases(SALT + 1, CHECKS)
    assert [c[1] for c in ours] != [c[1] for c in theirs]


class _Server:
    """Two workers' worth of jobs; ``wait`` ends the oldest."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.running: list[str] = []

    def submit(self, job) -> None:
        self.started.append(job.id)
        self.running.append(job.id)

    def wait(self):
        from grader.autograde.executor import Finished

        job = self.running.pop(0)
        return [Finished(_Job(job), 0, False, 0.1)]


class _Job:
    def __init__(self, id: str) -> None:
        self.id = id


def test_a_finished_jobs_place_goes_to_the_next_job_before_judging() -> None:
    server = _Server()
    seen_at_finish: list[list[str]] = []
    todo = [(f"sub{k}", "fingerprint") for k in range(3)]

    def prepare(sub, fingerprint):
        return object(), [NotebookJob(sub, "nb", None, _Job(f"job-{sub}"))]

    def finish(sub, result, jobs):
        seen_at_finish.append(list(server.running))

    flight = _InFlight(server, todo, prepare, finish, lambda n: None)
    for _ in range(3):
        flight.prepare_next()
    flight.start(2)
    assert server.running == ["job-sub0", "job-sub1"]
    flight.collect(2)
    # sub0 was judged while sub1 and sub2 ran: its place was given away first
    assert seen_at_finish == [["job-sub1", "job-sub2"]]
