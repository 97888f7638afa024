"""The learner package on its own: built as a wheel, installed into a fresh virtual environment
with the lowest NumPy it allows and no `grader`, it runs every exercise notebook's visible
tests: all pass with the solutions filled in, and each fails cleanly (a "not implemented"
message, nothing on stderr) as released.

Only one CPython (3.11) can be installed here, and the only CPU torch on disk is 2.13.0, so
the environment differs from the course's in NumPy (the floor, 1.26.4) and in what is
missing (the grader, nbgrader, Jupyter Book), not in Python or torch. The wheel brings nbclient
and ipykernel, which its ``attention-check`` command runs notebooks with: that command passes
a notebook filled with the solutions and names the classic bug of one with the scaling
removed, and it trains chapter 8's translator within the notebook's 60 s budget to the
notebook's own bar (90% of the held-out tokens right).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

import attention_learner
from grader.paths import CHAPTERS, SOLUTIONS
from tests.learner_wheel import build_learner_wheel
from tests.notebook_runner import solved_notebook, with_cell

pytestmark = pytest.mark.slow

ASSIGNMENTS = sorted(attention_learner.ALLOWED_IMPORTS)

# Runs one notebook's code cells in order, without IPython or nbformat, and prints one JSON
# object: test grade_id -> {"error": ..., "stderr": ...}. Hidden tests are cut off (a learner's
# copy has none) and the install cell's %pip line becomes an error if it is ever reached.
RUNNER = r"""
import contextlib, io, json, re, sys

import numpy as np
import torch


def run(path):
    nb = json.load(open(path, encoding="utf-8"))
    namespace = {"__name__": "__main__"}
    results = {}
    dtype, numpy_errors = torch.get_default_dtype(), np.geterr()
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        source = source.split("### BEGIN HIDDEN TESTS", 1)[0]
        source = re.sub(r"^(\s*)%pip .*$", r"\1raise RuntimeError('pip install')", source, flags=re.M)
        meta = cell["metadata"].get("nbgrader") or {}
        stderr = io.StringIO()
        error = ""
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            try:
                exec(compile(source, "<cell>", "exec"), namespace)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}"
        if meta.get("grade") and not meta.get("solution"):
            results[meta["grade_id"]] = {"error": error, "stderr": stderr.getvalue()}
        elif error and not meta.get("solution"):
            results["<" + (meta.get("grade_id") or "unnamed cell") + ">"] = {"error": error, "stderr": ""}
    torch.set_default_dtype(dtype)  # what a setup cell changed, for the next notebook
    np.seterr(**numpy_errors)
    return results


print(json.dumps({path: run(path) for path in sys.argv[1:]}))
"""


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory) -> Path:
    """A new venv holding only the learner wheel, numpy==1.26.4 and torch==2.13.0."""
    tmp = tmp_path_factory.mktemp("fresh")
    wheel = build_learner_wheel(tmp)
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True)
    python = tmp / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--no-compile",
         "numpy==1.26.4", "torch==2.13.0", str(wheel)],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    (tmp / "runner.py").write_text(RUNNER)
    return python


@pytest.fixture(scope="module")
def outcomes(fresh_python) -> dict[str, dict[str, dict[str, str]]]:
    """Every notebook, source (solutions) and released (stubs), run in one fresh process."""
    notebooks = [str(d / a / f"{a}.ipynb") for a in ASSIGNMENTS for d in (SOLUTIONS, CHAPTERS)]
    done = subprocess.run(
        [str(fresh_python), str(fresh_python.parent.parent.parent / "runner.py"), *notebooks],
        capture_output=True, text=True, timeout=600, cwd=fresh_python.parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_fresh_venv_has_the_floor_numpy_and_no_grader(fresh_python):
    probe = "import numpy, importlib.util; print(numpy.__version__, importlib.util.find_spec('grader'))"
    out = subprocess.run(
        [str(fresh_python), "-c", probe], capture_output=True, text=True, check=True, cwd=fresh_python.parent
    )
    assert out.stdout.split() == ["1.26.4", "None"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_visible_tests_pass_with_the_solutions(outcomes, assignment):
    results = outcomes[str(SOLUTIONS / assignment / f"{assignment}.ipynb")]
    assert results and all(r == {"error": "", "stderr": ""} for r in results.values()), results


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_released_notebook_fails_cleanly(outcomes, assignment):
    results = outcomes[str(CHAPTERS / assignment / f"{assignment}.ipynb")]
    assert results and not [k for k in results if k.startswith("<")], results  # setup cells ran
    for grade_id, result in results.items():
        assert result["stderr"] == "", f"{grade_id} wrote to stderr: {result['stderr']}"
        error = result["error"]  # a check's message, or the stub's own exception
        assert error.startswith(("AssertionError: ", "NotImplementedError")), (grade_id, error)
        assert "not implemented" in error or error.startswith("NotImplementedError"), (grade_id, error)


def _attention_check(fresh_python: Path, notebook: Path, *, script: bool) -> subprocess.CompletedProcess:
    command = (
        [str(fresh_python.parent / "attention-check")]
        if script
        else [str(fresh_python), "-m", "attention_learner", "check"]
    )
    return subprocess.run(
        [*command, notebook.name], capture_output=True, text=True, timeout=300, cwd=notebook.parent
    )


def test_attention_check_passes_the_solutions_and_names_a_classic_bug(fresh_python, tmp_path):
    """The learner's check with nothing but the learner wheel: chapter 3 with the solutions
    filled in passes every visible test; with the scaling removed, each NumPy and torch test
    fails and says that the scores were not divided by sqrt(d_k)."""
    assignment = "03_scaled_dot_product"
    solved = solved_notebook(assignment)
    good = tmp_path / "good" / f"{assignment}.ipynb"
    good.parent.mkdir()
    nbformat.write(solved, good)
    unscaled = tmp_path / "unscaled" / f"{assignment}.ipynb"
    unscaled.parent.mkdir()
    sources = {
        c.metadata["nbgrader"]["grade_id"]: c.source
        for c in solved.cells
        if (c.metadata.get("nbgrader") or {}).get("solution")
    }
    broken = solved
    for name in ("scaled_dot_product_attention", "scaled_dot_product_attention_torch"):
        assert "/ math.sqrt(d_k)" in sources[name]
        broken = with_cell(broken, name, sources[name].replace("/ math.sqrt(d_k)", ""))
    nbformat.write(broken, unscaled)

    passed = _attention_check(fresh_python, good, script=True)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    lines = passed.stdout.splitlines()
    assert sum(line.strip().startswith("PASS") for line in lines) == 5, passed.stdout
    assert "5 of 5 visible tests pass: 10 of 10 points" in passed.stdout
    assert passed.stderr == "", passed.stderr  # no kernel or library noise

    failed = _attention_check(fresh_python, unscaled, script=False)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    verdicts = {
        line.split()[1]: line.split()[0]
        for line in failed.stdout.splitlines()
        if line.strip().startswith(("PASS", "FAIL"))
    }
    for test in ("test_scaled_dot_product_attention", "test_scaled_dot_product_attention_torch"):
        assert verdicts[test] == "FAIL", failed.stdout
    assert verdicts["test_softmax_jacobian"] == "PASS"
    assert failed.stdout.count("This looks like the scores were not divided by sqrt(d_k).") >= 3


def test_passing_test_cells_say_so_in_one_line(fresh_python, tmp_path):
    """A test cell that passes prints "passed: N checks" (run in a real kernel by nbclient)."""
    assignment = "02_queries_keys_values"
    path = tmp_path / f"{assignment}.ipynb"
    nbformat.write(solved_notebook(assignment), path)
    probe = (
        "import sys; from pathlib import Path; "
        "from attention_learner.notebook_check import executed_notebook; "
        "nb = executed_notebook(Path(sys.argv[1])); "
        "print('|'.join(''.join(o.get('text', '') for o in c.outputs).strip() for c in nb.cells "
        "if (c.metadata.get('nbgrader') or {}).get('grade') and not c.metadata['nbgrader'].get('solution')))"
    )
    run = subprocess.run(
        [str(fresh_python), "-c", probe, str(path)], capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert run.returncode == 0, run.stderr
    printed = run.stdout.strip().split("|")
    assert printed and all(re.fullmatch(r"passed: \d+ checks?", p) for p in printed), printed


# What `attention-check NOTEBOOK` runs (its console script calls notebook_check.main), with the
# notebook it executed kept: the check prints only the test cells, and the training cells'
# own lines (budget, steps and seconds, held-out accuracy) are read from the executed copy.
CHECK_AND_KEEP = r"""
import sys

import nbformat

from attention_learner import notebook_check

executed = []
run = notebook_check.executed_notebook


def keep(path, timeout):
    executed.append(run(path, timeout))
    return executed[-1]


notebook_check.executed_notebook = keep
status = notebook_check.main(sys.argv[1:2])
nbformat.write(executed[0], sys.argv[2])
sys.exit(status)
"""

TRAINING_BUDGET_SECONDS = 60  # TRAIN_SECONDS of the chapter-8 notebook's training cell


def test_attention_check_trains_the_chapter_8_translator_within_its_budget(fresh_python, tmp_path):
    """Chapter 8's notebook, solved, in a real Jupyter kernel of the fresh venv: every visible
    test passes, `training_budget` lets the training cells train (nothing but the learner wheel
    and torch), training stops within its 60 s budget, and the notebook's own check passes:
    at least 90% of the held-out tokens right."""
    assignment = "08_build_train_decode"
    notebook = tmp_path / f"{assignment}.ipynb"
    nbformat.write(solved_notebook(assignment), notebook)
    training_cells = [c.source for c in nbformat.read(notebook, as_version=4).cells
                      if c.cell_type == "code" and "training_budget(" in c.source]  # fmt: skip
    assert training_cells and f"TRAIN_SECONDS = {TRAINING_BUDGET_SECONDS}" in training_cells[0]
    (tmp_path / "check_and_keep.py").write_text(CHECK_AND_KEEP)
    executed = tmp_path / "executed.ipynb"
    environment = {k: v for k, v in os.environ.items() if k != "ATTENTION_TRAINING_SECONDS"}
    command = [str(fresh_python), "check_and_keep.py", notebook.name, executed.name]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=environment)
    assert done.returncode == 0, done.stdout + done.stderr
    visible = re.search(r"(\d+) of (\d+) visible tests pass", done.stdout)
    assert visible and visible.group(1) == visible.group(2), done.stdout

    outputs = [output for cell in nbformat.read(executed, as_version=4).cells if cell.cell_type == "code"
               for output in cell.outputs]  # fmt: skip
    printed = "".join(output.get("text", "") for output in outputs if output.output_type == "stream")
    errors = [output.get("ename") for output in outputs if output.output_type == "error"]
    assert not errors, (errors, printed)
    assert f"training budget here: {TRAINING_BUDGET_SECONDS:g} s\n" in printed, printed
    trained = re.search(r"^(\d+) steps in ([\d.]+) s$", printed, re.M)
    passed = re.search(r"^passed: ([\d.]+)% of the held-out tokens right$", printed, re.M)
    assert trained and passed, printed
    steps, seconds, accuracy = int(trained.group(1)), float(trained.group(2)), float(passed.group(1))
    print(
        f"\nchapter 8 in the fresh venv: {steps} steps in {seconds:.1f} s, "
        f"{accuracy:.1f}% of the held-out tokens right"
    )
    assert steps > 0
    # the loop reads the clock before each step: it may end one step (well under a second)
    # past the budget, never later
    assert seconds <= TRAINING_BUDGET_SECONDS + 1.0, printed
    assert accuracy >= 90.0, printed
