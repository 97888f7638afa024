"""Plain ``nbgrader autograde`` vs ``python -m grader autograde`` on the same submissions.

Builds N distinct submissions of the real chapter 3 notebook (correct, stubbed, no sqrt(d_k)
scaling, a warning printed from the learner's own code, softmax over the wrong axis, half
done) in nbgrader's course layout in a temporary folder, then, in one run:

1. ``nbgrader generate_assignment`` (not timed) and ``nbgrader autograde --force`` (timed);
2. ``python -m grader autograde SUBMITTED --out OUT --source SOURCE --workers 2 --quiet``,
   timed as a whole command, start-up included;
3. compares the scores: nbgrader's gradebook (per submission, and auto_score per grade
   cell) against our grades.csv, and fails if any differs.

``--scale 200`` adds a run of ours alone on 200 submissions, to show how the cost grows.
``--mixed 60`` adds a mixed class (chapters 3, 6 and 8, correct and stubbed, one third
each) graded by both, side by side. ``--quick`` is a small run (4 submissions) for the
test suite. Each run of ours prints its phase breakdown (``GRADER_PHASES``, see
``grader/autograde/phases.py``): start-up, the jobs, the parent's judging and the writing,
in seconds and as a share of the wall time.

    .venv/bin/python benchmarks/grading.py [--n 20] [--scale 200] [--mixed 60] [--quick] [--keep]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

# the sibling module, found through sys.path (this script's folder) at run time; mypy knows
# it as benchmarks.grading_course
from grading_course import (  # type: ignore[import-not-found]
    ASSIGNMENT,
    MIXED,
    VENV_BIN,
    autograde_command,
    env,
    make_course,
    make_mixed_course,
)


def mixed_run(tmp: Path, n: int, workers: int) -> list[str]:
    """Both graders on the mixed class, side by side; the disagreements."""
    root = tmp / "mixed"
    students = make_mixed_course(root, n)
    t_nbgrader = 0.0
    for name in MIXED:
        nbgrader(root, "generate_assignment", name, "--force")
        t_nbgrader += nbgrader(root, "autograde", name, "--force")
    t_ours = ours(root, tmp / "mixed-out", workers)
    theirs = {k: v for name in MIXED for k, v in nbgrader_scores(root, name).items()}
    print(
        f"mixed class (chapters 3, 6, 8; {n} submissions): nbgrader {t_nbgrader:.1f} s, ours "
        f"{t_ours:.1f} s: {t_nbgrader / t_ours:.1f}x",
        flush=True,
    )
    return compare(students, theirs, our_scores(tmp / "mixed-out"))


# ---------------------------------------------------------------------------- the runs


def run(cmd: list[str], cwd: Path) -> float:
    """Run ``cmd``; return its wall-clock seconds; fail with its output if it fails."""
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env(), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(
            f"command failed ({proc.returncode}): {' '.join(cmd)}\n"
            f"--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"
        )
    return seconds


def nbgrader(root: Path, *args: str) -> float:
    return run([str(VENV_BIN / "nbgrader"), *args, f"--CourseDirectory.root={root}"], cwd=root)


def ours(root: Path, out: Path, workers: int) -> float:
    """Time our CLI on ``root``; its phases are written beside ``out`` and printed."""
    phases = out.parent / f"{out.name}.phases.json"
    os.environ["GRADER_PHASES"] = str(phases)
    try:
        seconds = run(autograde_command(root, out, workers), cwd=root)
    finally:
        del os.environ["GRADER_PHASES"]
    print_phases(json.loads(phases.read_text()), seconds)
    return seconds


PHASE_GROUPS = {  # heading -> the phases (grader/autograde/phases.py) it sums
    "start-up (imports, session, generate_assignment, fork server, solution run)": "startup.",
    "parent: prepare (read, sanitize, job folders)": "parent.prepare",
    "parent: read the child's report": "parent.child_report",
    "parent: judging (verdicts, messages; references from the judge pool)": "parent.judging",
    "parent: waiting for the judge pool": "parent.wait_for_judge_pool",
    "writing (gradebook, results, feedback, grades.csv)": "write.",
    "parent: waiting for its workers": "parent.wait_for_jobs",
}
JOB_PHASES = ("job.cgroup", "job.fork_and_confine", "job.execution_and_report", "job.total")


def print_phases(phases: dict[str, dict[str, float]], wall: float) -> None:
    """The parent's timeline as shares of the command's wall time, then the jobs' phases
    (summed over jobs that ran side by side, so they can exceed the wall)."""
    print(f"  phases (wall {wall:.1f} s; the process's own clock {phases['wall']['seconds']:.1f} s)")
    accounted = 0.0
    for heading, prefix in PHASE_GROUPS.items():
        seconds = sum(v["seconds"] for k, v in phases.items() if k.startswith(prefix))
        accounted += seconds
        print(f"    {heading:<76} {seconds:7.2f} s {100 * seconds / wall:5.1f} %")
        if prefix.endswith("."):  # a group: its phases one by one
            for name in sorted(k for k in phases if k.startswith(prefix)):
                part = phases[name]["seconds"]
                print(f"      {name:<74} {part:7.2f} s {100 * part / wall:5.1f} %")
    rest = wall - accounted
    print(
        f"    {'the rest (interpreter start and exit, the job loop itself)':<76} {rest:7.2f} s "
        f"{100 * rest / wall:5.1f} %"
    )
    jobs = phases.get("job.total", {"count": 0})["count"] or 1
    print(
        "    per job, mean: "
        + ", ".join(
            f"{name[4:]} {1000 * phases.get(name, {'seconds': 0.0})['seconds'] / jobs:.0f} ms"
            for name in JOB_PHASES
        )
        + f" ({jobs} jobs, the solution run included)"
    )


def nbgrader_scores(root: Path, assignment: str = ASSIGNMENT) -> dict[str, dict[str, float]]:
    """student -> {"score": total, <grade_id>: auto_score} from nbgrader's gradebook."""
    from nbgrader.api import Gradebook

    scores: dict[str, dict[str, float]] = {}
    with Gradebook(f"sqlite:///{root / 'gradebook.db'}") as gb:
        for student in gb.students:
            try:
                sub = gb.find_submission(assignment, student.id)
            except Exception:  # noqa: BLE001 - a student nbgrader did not grade
                continue
            row = {"score": float(sub.score)}
            for notebook in sub.notebooks:
                for grade in notebook.grades:
                    row[grade.name] = float(grade.auto_score or 0.0)
            scores[student.id] = row
    return scores


def our_scores(out: Path) -> dict[str, dict[str, float]]:
    scores: dict[str, dict[str, float]] = {}
    with open(out / "grades.csv", newline="", encoding="utf-8") as handle:
        for row in csv.DictReader(handle):
            # the row's own columns; the rest are the test cells (grades.csv's contract)
            fixed = {
                "student_id",
                "assignment",
                "score",
                "max_score",
                "status",
                "timestamp",
                "late_by_seconds",
                "penalty",
                "raw_score",
                "flags",
            }
            values = {k: float(v) for k, v in row.items() if k not in fixed and v != ""}
            values["score"] = float(row["score"])
            values["status"] = row["status"]  # type: ignore[assignment]
            scores[row["student_id"]] = values
    return scores


def compare(students: list[tuple[str, str]], theirs: dict, mine: dict) -> list[str]:
    """Every disagreement, in words; an empty list when the two graders agree everywhere."""
    problems = []
    for student, variant in students:
        a, b = theirs.get(student), mine.get(student)
        if a is None or b is None:
            problems.append(f"{student} ({variant}): missing from {'nbgrader' if a is None else 'ours'}")
            continue
        if b.get("status") != "graded":
            problems.append(f"{student} ({variant}): our status is {b.get('status')}")
        for key in sorted(set(a) | (set(b) - {"status"})):
            if abs(a.get(key, float("nan")) - b.get(key, float("nan"))) > 1e-6 or (
                key not in a or key not in b
            ):
                problems.append(f"{student} ({variant}) {key}: nbgrader {a.get(key)} vs ours {b.get(key)}")
    return problems


def test_cells(scores: dict[str, dict[str, float]]) -> list[str]:
    """The grade ids of the test cells that a gradebook's scores name (all but "score")."""
    return sorted({k for row in scores.values() for k in row} - {"score"})


def print_report(
    students: list[tuple[str, str]],
    theirs: dict,
    mine: dict,
    workers: int,
    same_run: tuple[int, float, float],
    scale_run: tuple[int, float | None],
) -> None:
    """The scores per variant, the timing table and the speed-ups.

    ``same_run`` is (N, nbgrader's seconds, ours) on the same N submissions; ``scale_run``
    (M, ours on M submissions, or None when not run).
    """
    n, t_nbgrader, t_ours = same_run
    scale, t_scale = scale_run
    tests = test_cells(theirs)
    print()
    print("Scores per variant (nbgrader = ours unless marked)")
    seen = set()
    for student, variant in students:
        if variant in seen or student not in theirs or student not in mine:
            continue
        seen.add(variant)
        a, b = theirs[student], mine[student]
        same = all(abs(a.get(k, -1) - b.get(k, -2)) < 1e-6 for k in ["score", *tests])
        print(
            f"  {variant:<11} {a['score']:>5g} / {b['score']:<5g}"
            f"{'' if same else '   DIFFERENT'}  " + " ".join(f"{a.get(t, 0):g}" for t in tests)
        )
    print(f"  (per test: {', '.join(tests)})")
    print()
    rows = [
        ("nbgrader autograde (sequential)", n, t_nbgrader),
        (f"python -m grader autograde (--workers {workers})", n, t_ours),
    ]
    if t_scale is not None:
        rows.append((f"python -m grader autograde (--workers {workers})", scale, t_scale))
    width = max(len(r[0]) for r in rows)
    print(f"{'grader':<{width}}  {'N':>5}  {'total s':>8}  {'s / submission':>14}")
    print(f"{'-' * width}  {'-' * 5}  {'-' * 8}  {'-' * 14}")
    for name, count, seconds in rows:
        print(f"{name:<{width}}  {count:>5}  {seconds:>8.1f}  {seconds / count:>14.3f}")
    print()
    print(
        f"speed-up on the same {n} submissions: {t_nbgrader / t_ours:.1f}x "
        f"(nbgrader {t_nbgrader / n:.2f} s vs ours {t_ours / n:.3f} s per submission, "
        f"ours including its start-up)"
    )
    if t_scale is not None:
        # nbgrader grades one submission after another, so its cost per submission does not
        # fall with N; it was not run at this size (it would take many minutes)
        print(
            f"at {scale} submissions: ours {t_scale / scale:.3f} s per submission, "
            f"{t_nbgrader / n / (t_scale / scale):.1f}x below nbgrader's "
            f"{t_nbgrader / n:.2f} s measured above"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20, help="submissions (default 20)")
    parser.add_argument(
        "--scale", type=int, default=0, help="also time ours alone on this many submissions (e.g. 200)"
    )
    parser.add_argument("--workers", type=int, default=2, help="our --workers (default 2)")
    parser.add_argument(
        "--mixed",
        type=int,
        default=0,
        help="also grade a mixed class of chapters 3, 6 and 8 of this size with both",
    )
    parser.add_argument("--quick", action="store_true", help="4 submissions, no scale run")
    parser.add_argument("--keep", action="store_true", help="keep the temporary courses")
    args = parser.parse_args(argv)
    n = 4 if args.quick else args.n
    scale = 0 if args.quick else args.scale

    tmp = Path(tempfile.mkdtemp(prefix="attention-bench-"))
    try:
        root = tmp / "course"
        students = make_course(root, n)
        print(
            f"{n} submissions of {ASSIGNMENT}: "
            + ", ".join(f"{v} x{c}" for v, c in Counter(v for _, v in students).items()),
            flush=True,
        )

        nbgrader(root, "generate_assignment", ASSIGNMENT, "--force")
        t_nbgrader = nbgrader(root, "autograde", ASSIGNMENT, "--force")
        print(f"nbgrader autograde: {t_nbgrader:.1f} s", flush=True)
        t_ours = ours(root, tmp / "out", args.workers)
        print(f"python -m grader autograde: {t_ours:.1f} s", flush=True)

        theirs, mine = nbgrader_scores(root), our_scores(tmp / "out")
        problems = compare(students, theirs, mine)

        t_scale = None
        if scale:
            big = tmp / "scale"
            make_course(big, scale)
            t_scale = ours(big, tmp / "scale-out", args.workers)
            print(f"python -m grader autograde on {scale}: {t_scale:.1f} s", flush=True)

        if args.mixed and not args.quick:
            problems += mixed_run(tmp, args.mixed, args.workers)

        print_report(students, theirs, mine, args.workers, (n, t_nbgrader, t_ours), (scale, t_scale))
        agreed = n - len({p.split(" ", 1)[0] for p in problems})
        print(
            f"scores agree on {agreed} of {n} submissions "
            f"({len(test_cells(theirs))} test cells each, compared one by one)"
        )
        if problems:
            print("DISAGREEMENTS:\n  " + "\n  ".join(problems))
            return 1
        return 0
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
