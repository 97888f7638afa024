"""Chapter 9 graded end to end, as the grader runs as root and as uid 65534: a solved notebook
keeps all 18 points with no flag; the released (stub) notebook is graded 0 with every test
failing in words; a FlashAttention whose backward runs autograd through plain attention, and a
gqa_attention that calls F.scaled_dot_product_attention, score 0 on that exercise alone with a
delegation flag; a FlashAttention that builds the (n_q, n_k) matrix only for long inputs (so
that the visible checks pass) loses the memory test to the kernel's limit and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.paths import CHAPTERS, SOLUTIONS
from tests.bugzoo.ch09 import AUTOGRAD_BACKWARD, _variant
from tests.notebook_runner import solved_notebook, source_notebook, with_cell
from tests.security.grade_as import grade_class_as

pytestmark = [pytest.mark.ch09, pytest.mark.grading, pytest.mark.slow, pytest.mark.xdist_group("security")]

A = "09_modern_attention"
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]


def _solution(name: str) -> str:
    cells = source_notebook(A).cells
    return next(c.source for c in cells if c.metadata.get("nbgrader", {}).get("grade_id") == name)


SDPA_GQA = _variant(
    _solution("gqa_attention"),
    (
        "    return weights @ v, weights",
        "    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights",
    ),
)
# the whole matrix only where the visible checks do not look: the kernel's limit must catch it
LONG_INPUTS_FULL_MATRIX = _variant(
    _solution("FlashAttention"),
    (
        "        ctx.save_for_backward(Q, K, V, O, L)",
        "        if n_q * n_k > 10**6:\n"
        "            scores = Q @ K.transpose(-1, -2) * scale  # (n_q, n_k)\n"
        "            O = torch.softmax(scores, dim=-1) @ V\n"
        "        ctx.save_for_backward(Q, K, V, O, L)",
    ),
)

STUDENTS = {
    "solved": {},
    "autograd_backward": {"FlashAttention": AUTOGRAD_BACKWARD},
    "sdpa_gqa": {"gqa_attention": SDPA_GQA},
    "full_matrix": {"FlashAttention": LONG_INPUTS_FULL_MATRIX},
}


@pytest.fixture(scope="module", params=IDENTITIES)
def graded(request):
    root = Path(tempfile.mkdtemp(prefix="attention-ch09-"))
    os.chmod(root, 0o755)
    source, submitted, out = root / "source", root / "submitted", root / "out"
    shutil.copytree(SOLUTIONS / A, source / A)
    for student, cells in STUDENTS.items():
        nb = solved_notebook(A)
        for cell_id, code in cells.items():
            nb = with_cell(nb, cell_id, code)
        (submitted / student / A).mkdir(parents=True)
        nbformat.write(nb, submitted / student / A / f"{A}.ipynb")
    (submitted / "stub" / A).mkdir(parents=True)
    shutil.copyfile(CHAPTERS / A / f"{A}.ipynb", submitted / "stub" / A / f"{A}.ipynb")
    try:
        run = grade_class_as(request.param, root, timeout=120, run_timeout=1200)
        yield {"run": run, "out": out}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def result(graded, student: str) -> dict:
    return json.loads((graded["out"] / student / A / "results.json").read_text())


def test_a_solved_notebook_keeps_every_point(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    res = result(graded, "solved")
    assert res["status"] == "graded" and res["score"] == res["max_score"] == 18, [
        t for t in res["tests"] if t["status"] != "passed"
    ]
    assert res["flags"] == []


def test_the_released_stub_is_graded_zero_in_words(graded):
    res = result(graded, "stub")
    assert res["status"] == "graded" and res["score"] == 0 and res["max_score"] == 18
    assert all("not implemented yet" in t["message"] for t in res["tests"]), res["tests"]


@pytest.mark.parametrize(
    ("student", "exercise"), [("autograd_backward", "FlashAttention"), ("sdpa_gqa", "gqa_attention")]
)
def test_delegation_earns_nothing_on_its_exercise_alone(graded, student, exercise):
    res = result(graded, student)
    mine = [t for t in res["tests"] if t["exercise"] == exercise]
    assert mine and all(t["points"] == 0 for t in mine), mine
    assert all("your own implementation" in t["message"] for t in mine), mine
    assert any(f.startswith(f"delegation: {exercise} ") for f in res["flags"]), res["flags"]
    others = [t for t in res["tests"] if t["exercise"] != exercise]
    assert others and all(t["status"] == "passed" for t in others)


def test_the_whole_matrix_loses_the_memory_test_to_the_kernel_limit(graded):
    res = result(graded, "full_matrix")
    failed = [t for t in res["tests"] if t["status"] != "passed"]
    assert [t["grade_id"] for t in failed] == ["test_FlashAttention__memory"], failed
    assert res["score"] == 17 and res["status"] == "graded"
