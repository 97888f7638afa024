"""Delegation judged by what is called, not by how it is spelled (issue 29, item 6).

Round 2's rule was a list of dotted names read in the solution cells. A student who had read
it kept the points of an exercise whose answer was someone else's implementation, by nine
cheap routes: an added cell that is not a solution cell; ``torch._C._nn.scaled_dot_product_
attention`` and ``torch.ops.aten._scaled_dot_product_attention_math``; the given block handed
in through a parameter; ``torch.log_softmax(...).exp()``; ``backward()`` for the Jacobian; the
learner package's chapter 6 hint model; ``operator.attrgetter`` and ``pickle.loads``. Each is
handed in here as an otherwise correct notebook, graded end to end as the grader runs as
root and as uid 65534, and must:

- score 0 on the exercise it delegates, with a ``delegation:`` flag (every route: the child's
  trace of what each check's call ran, by dispatcher operator and by Python object, decides;
  ``F.softmin(-z)`` stands for a spelling no list holds);
- in addition carry a ``review:`` flag where the code binds a name at run time
  (``attrgetter``, ``pickle``), since such code could also tamper with the trace;
- cost nothing else: every other exercise of the notebook keeps its points. Honest
  classmates of the three chapters keep every point and get no flag.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from grader.paths import SOLUTIONS
from tests.notebook_runner import grade_id, solved_notebook, with_cell
from tests.security.grade_as import grade_class_as

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

CH02, CH03, CH06 = "02_queries_keys_values", "03_scaled_dot_product", "06_tiny_translator"
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]

# chapter 3's output by torch's attention, its weights by the learner's own softmax (both right)
_WEIGHTS = """\
    scores = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])  # (..., n_q, n_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # (..., n_q, n_k)
"""


def _sdpa_through(expression: str, header: str = "") -> str:
    return (
        header
        + "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
        + _WEIGHTS
        + f"    out = {expression}(Q, K, V, attn_mask=mask)\n"
        "    out = out[0] if isinstance(out, tuple) else out\n"
        "    return out.nan_to_num(0.0), weights\n"
    )


SOFTMAX_BY_TORCH = """\
import torch
def softmax(z, axis=-1):
    return torch.softmax(torch.as_tensor(np.asarray(z, dtype=np.float64)), dim=axis).numpy()
"""

ATTEND_WITH_A_BLOCK = """\
def attend(q, K, V, block=None):
    import torch
    t = torch.as_tensor
    d = q.shape[-1]
    out, weights = block(t(q)[None] * d ** 0.5, t(K), t(V))  # unscaled: undo the 1/sqrt(d)
    return out[0].numpy(), weights[0].numpy()
"""
BLOCK_BOUND_IN_AN_ADDED_CELL = """\
import functools
from attention_learner.blocks import given_attention
attend = functools.partial(attend, block=given_attention)
"""

JACOBIAN_BY_BACKWARD = """\
import torch
def softmax_jacobian(p):
    p = np.asarray(p, dtype=np.float64)
    z = torch.tensor(np.log(np.maximum(p, 1e-300)), requires_grad=True)
    y = torch.softmax(z, dim=0)  # = p
    rows = []
    for i in range(p.shape[0]):
        z.grad = None
        y[i].backward(retain_graph=True)
        rows.append(z.grad.clone())
    return torch.stack(rows).numpy()
"""

HINT_MODEL = """\
from attention_learner.cases.ch06 import _positions_model
def positional_encoding(n, d_model):
    return _positions_model(d_model, np.arange(n, dtype=np.float64))
"""


def attackers() -> dict[str, tuple[str, dict[str, str], dict[str, str]]]:
    """student -> (assignment, {solution grade id: its cell}, {solution grade id: a cell added after it})."""
    return {
        "added_cell_ch02": (CH02, {}, {"softmax": SOFTMAX_BY_TORCH}),
        "log_softmax_ch02": (
            CH02,
            {
                "softmax": (
                    "import torch\ndef softmax(z, axis=-1):\n"
                    "    z = torch.as_tensor(np.asarray(z, dtype=np.float64))\n"
                    "    return torch.log_softmax(z, axis).exp().numpy()\n"
                )
            },
            {},
        ),
        "softmin_ch02": (
            CH02,
            {
                "softmax": (
                    "import torch\nimport torch.nn.functional as F\ndef softmax(z, axis=-1):\n"
                    "    z = torch.as_tensor(np.asarray(z, dtype=np.float64))\n"
                    "    return F.softmin(-z, dim=axis).numpy()\n"
                )
            },
            {},
        ),
        "block_parameter_ch02": (
            CH02,
            {"attend": ATTEND_WITH_A_BLOCK},
            {"attend": BLOCK_BOUND_IN_AN_ADDED_CELL},
        ),
        "torch_c_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": _sdpa_through(
                    "torch._C._nn.scaled_dot_product_attention"
                )
            },
            {},
        ),
        "torch_ops_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": _sdpa_through(
                    "torch.ops.aten._scaled_dot_product_attention_math"
                )
            },
            {},
        ),
        "backward_ch03": (CH03, {"softmax_jacobian": JACOBIAN_BY_BACKWARD}, {}),
        "attrgetter_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": _sdpa_through(
                    "_sdpa",
                    "import operator\n"
                    "_sdpa = operator.attrgetter('nn.functional.scaled_dot_product_attention')(torch)\n",
                )
            },
            {},
        ),
        "pickle_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": _sdpa_through(
                    "_sdpa",
                    "import pickle\n"
                    "_sdpa = pickle.loads(b'ctorch.nn.functional\\nscaled_dot_product_attention\\n.')\n",
                )
            },
            {},
        ),
        "hint_model_ch06": (CH06, {"positional_encoding": HINT_MODEL}, {}),
    }


#: student -> (exercise that must score 0, the construct a review flag must name, or None)
VERDICTS = {
    "added_cell_ch02": ("softmax", None),
    "log_softmax_ch02": ("softmax", None),
    "softmin_ch02": ("softmax", None),
    "block_parameter_ch02": ("attend", None),
    "torch_c_ch03": ("scaled_dot_product_attention_torch", None),
    "torch_ops_ch03": ("scaled_dot_product_attention_torch", None),
    "backward_ch03": ("softmax_jacobian", None),
    "attrgetter_ch03": ("scaled_dot_product_attention_torch", "operator.attrgetter"),
    "pickle_ch03": ("scaled_dot_product_attention_torch", "pickle.loads"),
    "hint_model_ch06": ("positional_encoding", None),
}
HONEST = {"honest_02": CH02, "honest_03": CH03, "honest_06": CH06}


def with_added_cell(nb: nbformat.NotebookNode, after: str, code: str) -> nbformat.NotebookNode:
    """A copy of ``nb`` with a new code cell, no nbgrader metadata, right after cell ``after``."""
    nb = nbformat.from_dict(nb)
    index = next(i for i, c in enumerate(nb.cells) if grade_id(c) == after)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(code))
    return nb


@pytest.fixture(scope="module", params=IDENTITIES)
def graded(request):
    root = Path(tempfile.mkdtemp(prefix="attention-delegation-"))
    os.chmod(root, 0o755)
    source, submitted, out = root / "source", root / "submitted", root / "out"
    for student, assignment in HONEST.items():
        shutil.copytree(SOLUTIONS / assignment, source / assignment)
        folder = submitted / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(solved_notebook(assignment), folder / f"{assignment}.ipynb")
    for student, (assignment, cells, added) in attackers().items():
        nb = solved_notebook(assignment)
        for cell_id, code in cells.items():
            nb = with_cell(nb, cell_id, code)
        for after, code in added.items():
            nb = with_added_cell(nb, after, code)
        folder = submitted / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    try:
        run = grade_class_as(request.param, root, timeout=90, run_timeout=1200)
        yield {"run": run, "out": out}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def result(graded, student: str) -> dict:
    assignment = HONEST.get(student) or attackers()[student][0]
    return json.loads((graded["out"] / student / assignment / "results.json").read_text())


def test_the_run_finishes_and_honest_classmates_keep_every_point(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    for student in HONEST:
        res = result(graded, student)
        assert res["score"] == res["max_score"] > 0, [t for t in res["tests"] if t["status"] != "passed"]
        assert res["flags"] == [], res["flags"]


@pytest.mark.parametrize("student", sorted(VERDICTS))
def test_each_route_earns_nothing_on_its_exercise_and_is_flagged(graded, student):
    exercise, review = VERDICTS[student]
    res = result(graded, student)
    tests = [t for t in res["tests"] if t["exercise"] == exercise]
    assert tests and all(t["points"] == 0 for t in tests), tests
    others = [t for t in res["tests"] if t["exercise"] != exercise]
    assert others and all(t["status"] == "passed" for t in others), "only the delegated exercise loses points"
    if student != "hint_model_ch06":  # the package no longer holds that model: the import fails
        assert all("your own implementation" in t["message"] for t in tests), tests
        assert any(f.startswith(f"delegation: {exercise} ") for f in res["flags"]), res["flags"]
        with (graded["out"] / "grades.csv").open(newline="") as f:
            row = next(r for r in csv.DictReader(f) if r["student_id"] == student)
        assert f"delegation: {exercise} " in row["flags"]
    if review is not None:
        assert any(f.startswith("review: ") and review in f for f in res["flags"]), res["flags"]


def test_a_spelling_no_list_holds_is_caught_by_the_trace(graded):
    """softmin(-z) is softmax(z): no name of the static list, the operator aten::_softmax."""
    res = result(graded, "softmin_ch02")
    assert any(f.startswith("delegation: softmax reached aten::_softmax") for f in res["flags"]), res["flags"]
    assert not any(f.startswith("delegation: softmax uses") for f in res["flags"])
