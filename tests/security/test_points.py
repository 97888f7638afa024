"""Attacks on how points are decided, by a student who has read the grader's source.

Each attacker hands in an otherwise correct notebook in which one exercise tries to earn
points that its own implementation does not earn: by delegating the exercise to a given
block or to torch's own implementation, by forging a fact that used to be decided in the
child (a dtype, "inputs unchanged", a memory figure), by returning the shipped expected
values of the visible cases, or by a layer whose properties hold only because it does
nothing. One class of such submissions, over four chapters, is graded per identity (the
grader as root and as uid 65534); honest classmates must keep every point.
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
from tests.notebook_runner import solved_notebook, source_notebook, with_cell
from tests.security.grade_as import grade_class_as

pytestmark = [
    pytest.mark.security,
    pytest.mark.grading,
    pytest.mark.slow,
    pytest.mark.xdist_group("security"),
]

CH03, CH04, CH05, CH07 = (
    "03_scaled_dot_product",
    "04_multi_head",
    "05_transformer_attention",
    "07_attention_at_scale",
)
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]


def solution(assignment: str, grade_id: str) -> str:
    cell = next(
        c
        for c in source_notebook(assignment).cells
        if (c.metadata.get("nbgrader") or {}).get("grade_id") == grade_id
    )
    return "\n".join(line for line in cell.source.splitlines() if "### " not in line) + "\n"


LOOKUP_TABLE = """\
import numpy as np
from attention_learner import expected
from attention_learner.cases import get_case

def scaled_dot_product_attention(Q, K, V, mask=None):
    # no attention at all: find the shipped visible case these inputs come from
    case = get_case("scaled_dot_product_attention")
    for key, shipped in expected.load_exercise("scaled_dot_product_attention").items():
        spec = __import__("json").loads(key)
        inputs = case.make_inputs(np.random.default_rng(spec["seed"]), **spec["params"])
        if inputs["Q"].shape == Q.shape and np.array_equal(inputs["Q"], Q):
            return shipped.expected["output"], shipped.expected["weights"]
    raise ValueError("not a shipped case")
"""

FLOAT32_FORGED = """\
import attention_learner.conventions as conventions
conventions.is_float64 = lambda value: True  # the child used to decide this fact

def scaled_dot_product_attention(Q, K, V, mask=None):
    out, weights = _right(Q, K, V, mask)
    return out.astype(np.float32), weights.astype(np.float32)
"""

IN_PLACE_FORGED = """\
import numpy as np
_real_equal = np.array_equal
np.array_equal = lambda a, b, equal_nan=False: True  # the child used to decide "unchanged"

def scaled_dot_product_attention(Q, K, V, mask=None):
    out, weights = _right(Q, K, V, mask)
    Q *= 0.0  # ruins the caller's queries
    return out, weights
"""

ZERO_ENCODER = """\
class EncoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)

    def forward(self, x, pad_mask=None):
        return torch.zeros_like(x)  # nothing moves, so no padded token moves anything
"""

ZERO_DECODER = """\
class DecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(d_model) for _ in range(3))
        self.num_heads = num_heads

    def forward(self, y, memory, tgt_pad_mask=None, memory_pad_mask=None):
        B, n_tgt, _ = y.shape
        weights = torch.zeros(B, self.num_heads, n_tgt, memory.shape[1])
        return torch.zeros_like(y), weights  # no future position can move a zero
"""

FULL_MATRIX_HIDDEN_FROM_TRACEMALLOC = """\
import tracemalloc
tracemalloc.get_traced_memory = lambda: (0, 0)  # the memory test used to trust this figure

def online_softmax_attention(Q, K, V, block_size, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])  # the whole (n_q, n_k) matrix
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    top = scores.max(axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(scores - top)
    total = e.sum(axis=-1, keepdims=True)
    return np.divide(e, total, out=np.zeros_like(e), where=total > 0) @ V
"""


def attackers() -> dict[str, tuple[str, dict[str, str]]]:
    """student -> (assignment, {solution grade id: the attacking cell})."""
    right_sdpa = solution(CH03, "scaled_dot_product_attention").replace(
        "def scaled_dot_product_attention(", "def _right("
    )
    return {
        "given_block_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": (
                    "from attention_learner.blocks import given_attention"
                    " as scaled_dot_product_attention_torch\n"
                )
            },
        ),
        "torch_sdpa_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": (
                    "import torch.nn.functional as F\n"
                    "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
                    "    weights = torch.softmax(Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]), dim=-1)\n"
                    "    if mask is not None:\n"
                    "        weights = torch.softmax((Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1]))"
                    ".masked_fill(~mask, float('-inf')), dim=-1).nan_to_num(0.0)\n"
                    "    out = F.scaled_dot_product_attention(Q, K, V, attn_mask=mask)\n"
                    "    return out.nan_to_num(0.0), weights\n"
                )
            },
        ),
        "computed_getattr_ch03": (
            CH03,
            {
                "scaled_dot_product_attention_torch": (
                    solution(CH03, "scaled_dot_product_attention_torch") + "import torch.nn.functional as F\n"
                    "_hidden = getattr(F, 'scaled_dot_' + 'product_attention')\n"
                )
            },
        ),
        "lookup_table_ch03": (CH03, {"scaled_dot_product_attention": LOOKUP_TABLE}),
        "float32_forged_ch03": (CH03, {"scaled_dot_product_attention": right_sdpa + FLOAT32_FORGED}),
        "in_place_forged_ch03": (CH03, {"scaled_dot_product_attention": right_sdpa + IN_PLACE_FORGED}),
        "subclass_given_ch04": (
            CH04,
            {
                "MultiHeadAttention": (
                    "from attention_learner.blocks import GivenMultiHeadAttention\n"
                    "class MultiHeadAttention(GivenMultiHeadAttention):\n    pass\n"
                )
            },
        ),
        "torch_mha_ch04": (
            CH04,
            {
                "MultiHeadAttention": (
                    "class MultiHeadAttention(nn.Module):\n"
                    "    def __init__(self, d_model, num_heads, bias=True):\n"
                    "        super().__init__()\n"
                    "        self.inner = nn.MultiheadAttention("
                    "d_model, num_heads, bias=bias, batch_first=True)\n"
                    "    def forward(self, query, key, value, mask=None):\n"
                    "        return self.inner(query, key, value)\n"
                )
            },
        ),
        "zero_layers_ch05": (CH05, {"EncoderLayer": ZERO_ENCODER, "DecoderLayer": ZERO_DECODER}),
        "torch_online_ch07": (
            CH07,
            {
                "online_softmax_attention": (
                    "import torch.nn.functional as F\n"
                    "def online_softmax_attention(Q, K, V, block_size, mask=None):\n"
                    "    shape = Q.shape[:-1] + K.shape[-2:-1]\n"
                    "    m = None if mask is None else torch.as_tensor(np.broadcast_to(mask, shape))\n"
                    "    q, k, v = (torch.as_tensor(a) for a in (Q, K, V))\n"
                    "    out = F.scaled_dot_product_attention(q, k, v, attn_mask=m)\n"
                    "    return out.nan_to_num(0.0).numpy()\n"
                )
            },
        ),
        "full_matrix_ch07": (CH07, {"online_softmax_attention": FULL_MATRIX_HIDDEN_FROM_TRACEMALLOC}),
    }


@pytest.fixture(scope="module", params=IDENTITIES)
def graded(request):
    root = Path(tempfile.mkdtemp(prefix="attention-points-"))
    os.chmod(root, 0o755)
    source, submitted, out = root / "source", root / "submitted", root / "out"
    for assignment in (CH03, CH04, CH05, CH07):
        shutil.copytree(SOLUTIONS / assignment, source / assignment)
        folder = submitted / f"honest_{assignment[:2]}" / assignment
        folder.mkdir(parents=True)
        nbformat.write(solved_notebook(assignment), folder / f"{assignment}.ipynb")
    for student, (assignment, cells) in attackers().items():
        nb = solved_notebook(assignment)
        for grade_id, code in cells.items():
            nb = with_cell(nb, grade_id, code)
        folder = submitted / student / assignment
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{assignment}.ipynb")
    try:
        run = grade_class_as(request.param, root, timeout=60, run_timeout=900)
        yield {"run": run, "out": out}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def result(graded, student: str) -> dict:
    assignment = (
        attackers()[student][0]
        if student in attackers()
        else {"honest_03": CH03, "honest_04": CH04, "honest_05": CH05, "honest_07": CH07}[student]
    )
    return json.loads((graded["out"] / student / assignment / "results.json").read_text())


def graded_tests(res: dict, exercise: str) -> list[dict]:
    return [t for t in res["tests"] if t["exercise"] == exercise]


def test_the_run_finishes_and_honest_notebooks_keep_every_point(graded):
    assert graded["run"].returncode == 0, graded["run"].stderr[-3000:]
    for student in ("honest_03", "honest_04", "honest_05", "honest_07"):
        res = result(graded, student)
        assert res["score"] == res["max_score"] > 0, [t for t in res["tests"] if t["status"] != "passed"]
        assert res["flags"] == []


@pytest.mark.parametrize(
    "student,exercise,via",
    [
        (
            "given_block_ch03",
            "scaled_dot_product_attention_torch",
            "attention_learner.blocks.given_attention",
        ),
        (
            "torch_sdpa_ch03",
            "scaled_dot_product_attention_torch",
            "torch.nn.functional.scaled_dot_product_attention",
        ),
        ("subclass_given_ch04", "MultiHeadAttention", "attention_learner.blocks.GivenMultiHeadAttention"),
        ("torch_mha_ch04", "MultiHeadAttention", "torch.nn.MultiheadAttention"),
        ("torch_online_ch07", "online_softmax_attention", "torch.nn.functional.scaled_dot_product_attention"),
    ],
)
def test_delegation_earns_nothing_and_is_flagged(graded, student, exercise, via):
    res = result(graded, student)
    tests = graded_tests(res, exercise)
    assert tests and all(t["points"] == 0 for t in tests), tests
    assert all("your own implementation" in t["message"] and via in t["message"] for t in tests)
    assert f"delegation: {exercise} uses {via}" in res["flags"]
    with (graded["out"] / "grades.csv").open(newline="") as f:
        row = next(r for r in csv.DictReader(f) if r["student_id"] == student)
    assert f"delegation: {exercise} uses {via}" in row["flags"]
    others = [t for t in res["tests"] if t["exercise"] != exercise]
    assert all(t["status"] == "passed" for t in others), "only the delegated exercise loses points"


def test_a_name_computed_at_run_time_is_flagged_for_review(graded):
    res = result(graded, "computed_getattr_ch03")
    assert res["score"] == res["max_score"]  # its own numbers earn its points ...
    assert any(f.startswith("review: scaled_dot_product_attention_torch uses getattr") for f in res["flags"])


def test_the_shipped_expected_values_are_no_answer(graded):
    res = result(graded, "lookup_table_ch03")
    tests = graded_tests(res, "scaled_dot_product_attention")
    assert tests and all(t["points"] == 0 for t in tests), tests


@pytest.mark.parametrize(
    "student,words",
    [
        ("float32_forged_ch03", "whether every output is float64"),
        ("in_place_forged_ch03", "whether the input arrays were left unmodified"),
    ],
)
def test_conventions_are_decided_by_the_parent(graded, student, words):
    tests = graded_tests(result(graded, student), "scaled_dot_product_attention")
    assert tests and all(t["points"] == 0 and words in t["message"] for t in tests), tests


def test_a_layer_that_does_nothing_earns_no_property_points(graded):
    res = result(graded, "zero_layers_ch05")
    for test in res["tests"]:
        if test["exercise"] in ("EncoderLayer", "DecoderLayer"):
            assert test["points"] == 0, test
    aspects = ("__padding", "__causality", "__memory_padding")
    properties = [t for t in res["tests"] if t["grade_id"].endswith(aspects)]
    assert properties and all("output differs" in t["message"] for t in properties), properties


def test_a_memory_rule_is_enforced_by_the_kernel(graded):
    res = result(graded, "full_matrix_ch07")
    memory = next(t for t in res["tests"] if t["grade_id"] == "test_online_softmax_attention__memory")
    assert memory["points"] == 0 and "MemoryError" in memory["message"], memory
    others = [t for t in graded_tests(res, "online_softmax_attention") if t is not memory]
    assert all(t["status"] == "passed" for t in others), others  # its numbers are right elsewhere
