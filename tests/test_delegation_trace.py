"""The delegation rule's two readings, fast: the run-time trace of what a check's call reaches
(``attention_learner.op_trace``) and the static reading of every editable cell, with its
review flags for dynamic binding (``grader.autograde.delegation``, ``delegation_static``).

Every attack here is one of the routes that passed the name list of round 2 (issue 29): the
trace must name what was really called whatever the spelling, and an honest implementation
of the same exercise (torch.exp, matmul, masked_fill, torch.softmax where it is allowed)
must reach nothing.
"""

from __future__ import annotations

import base64
import json
import operator
import pickle
import sys

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from attention_learner import op_trace
from attention_learner.blocks import GivenMultiHeadAttention, given_attention
from attention_learner.checks import check
from grader.autograde.child_report import MAX_REACHED, CellReport, Record, _record
from grader.autograde.delegation import Delegation, analyse
from grader.autograde.scoring import delegation_of
from grader.paths import SOLUTIONS
from tests.notebook_runner import grade_id, solved_notebook, source_notebook

Q = torch.randn(2, 3, 4, dtype=torch.float64)  # (B, n, d)


def reached(exercise: str, call) -> list[str]:
    return op_trace.call_traced(exercise, call)[1]


# ---------------------------------------------------------------- the trace, by resolved object


def test_softmax_through_log_softmax_is_seen_at_the_dispatcher():
    x = torch.randn(3, 5, dtype=torch.float64)
    assert "aten::_log_softmax" in reached("softmax", lambda: torch.log_softmax(x, -1).exp())
    assert "aten::_softmax" in reached("softmax", lambda: F.softmin(-x, dim=-1))  # no softmax in its name


def test_an_honest_softmax_reaches_nothing():
    x = torch.randn(3, 5, dtype=torch.float64)

    def softmax(z):
        e = torch.exp(z - z.max(-1, keepdim=True).values)  # (3, 5)
        return e / e.sum(-1, keepdim=True)

    assert reached("softmax", lambda: softmax(x)) == []
    assert reached("softmax", lambda: np.exp(x.numpy()) / np.exp(x.numpy()).sum()) == []


@pytest.mark.parametrize(
    "route",
    [
        lambda: torch._C._nn.scaled_dot_product_attention(Q, Q, Q),
        lambda: torch.ops.aten._scaled_dot_product_attention_math(Q, Q, Q),
        lambda: F.scaled_dot_product_attention(Q, Q, Q),
        lambda: operator.attrgetter("nn.functional.scaled_dot_product_attention")(torch)(Q, Q, Q),
        lambda: pickle.loads(b"ctorch.nn.functional\nscaled_dot_product_attention\n.")(Q, Q, Q),
    ],
)
def test_torch_attention_is_seen_however_it_is_spelled(route):
    found = reached("scaled_dot_product_attention_torch", route)
    assert any(op.startswith("aten::_scaled_dot_product") for op in found), found


def test_torch_attention_stays_allowed_where_it_is_a_piece():
    scores = Q @ Q.transpose(-2, -1) / 2.0  # (B, n, n)
    weights = torch.softmax(scores.masked_fill(scores > 5, float("-inf")), dim=-1)
    assert reached("scaled_dot_product_attention_torch", lambda: weights @ Q) == []
    assert reached("CachedSelfAttention", lambda: F.scaled_dot_product_attention(Q, Q, Q)) == []


def test_backward_inside_the_jacobian_is_the_delegation():
    p = np.array([0.2, 0.3, 0.5])

    def jacobian_by_backward(p):
        z = torch.tensor(np.log(p), requires_grad=True)
        y = torch.softmax(z, -1)
        rows = []
        for i in range(len(p)):
            (row,) = torch.autograd.grad(y[i], z, retain_graph=True)
            rows.append(row)
        return torch.stack(rows)

    def jacobian_by_tensor_backward(p):
        z = torch.tensor(np.log(p), requires_grad=True)
        torch.softmax(z, -1)[0].backward()
        return z.grad

    engine = "autograd's engine (a backward pass)"
    assert engine in reached("softmax_jacobian", lambda: jacobian_by_backward(p))
    assert engine in reached("softmax_jacobian", lambda: jacobian_by_tensor_backward(p))
    assert "torch.func.jacrev" in reached("softmax_jacobian", lambda: torch.func.jacrev(torch.exp)(Q[0, 0]))
    assert reached("softmax_jacobian", lambda: np.diag(p) - np.outer(p, p)) == []
    # elsewhere a backward pass is no delegation: chapter 3's tests differentiate the output
    assert (
        reached(
            "scaled_dot_product_attention_torch", lambda: (Q.clone().requires_grad_() * 2).sum().backward()
        )
        == []
    )


def test_a_given_block_is_seen_when_it_arrives_as_a_parameter():
    def attend(Q, K, V, block=None):
        return block(Q, K, V)

    assert "attention_learner.blocks.given_attention" in reached(
        "attend", lambda: attend(Q, Q, Q, block=given_attention)
    )


def test_a_given_block_allowed_in_a_later_chapter_charges_nothing_there():
    mha = GivenMultiHeadAttention(4, 2).double()

    def encoder_layer(x):  # chapter 5 builds on the given multi-head attention
        return mha(x, x, x)[0] + x

    assert reached("EncoderLayer", lambda: encoder_layer(Q)) == []
    # ... but the block answers chapter 4's exercise
    assert "attention_learner.blocks.GivenMultiHeadAttention" in reached(
        "MultiHeadAttention", lambda: mha(Q, Q, Q)
    )


def test_torch_multi_head_attention_is_seen_through_a_module_the_learner_holds():
    inner = torch.nn.MultiheadAttention(4, 2, batch_first=True, dtype=torch.float64)
    assert "torch.nn.MultiheadAttention" in reached("MultiHeadAttention", lambda: inner(Q, Q, Q))


def test_a_function_of_the_learner_packages_cases_is_charged_to_every_exercise():
    from attention_learner.cases import ch06

    def positional_encoding(n, d_model):
        return ch06.call_pe(lambda n, d: np.zeros((n, d)), {"n": n, "d_model": d_model})["pe"]

    found = reached("positional_encoding", lambda: positional_encoding(4, 6))
    assert "attention_learner.cases.ch06.call_pe" in found


def test_switching_the_trace_off_is_itself_reported():
    def sneaky():
        sys.setprofile(None)
        return given_attention(Q, Q, Q)

    found = reached("attend", sneaky)
    assert any("switched the grader's trace off" in r for r in found), found


def test_the_trace_leaves_the_interpreter_as_it_found_it():
    before = sys.getprofile()
    with pytest.raises(ZeroDivisionError):
        op_trace.call_traced("softmax", lambda: 1 / 0)
    assert sys.getprofile() is before and not torch.autograd._profiler_enabled()


def test_the_local_check_gives_the_graders_verdict_and_sentence():
    def softmax(z, axis=-1):
        return torch.log_softmax(torch.from_numpy(z), axis).exp().numpy()

    with pytest.raises(AssertionError) as failure:
        check("softmax", softmax)
    found = Delegation(traced={"softmax": ["aten::_log_softmax", "aten::log_softmax"]})
    assert str(failure.value).startswith(found.message("softmax"))


# ---------------------------------------------------------------- the report channel


def test_the_child_reports_what_was_reached_and_the_parent_bounds_it():
    entry = {
        "exercise": "softmax",
        "seed": 0,
        "params": {},
        "error": "",
        "arrays": None,
        "reached": ["aten::_softmax", 7, "x" * 1000] + ["y"] * 40,
    }
    record = _record(json.loads(json.dumps(entry)))
    assert record.reached[0] == "aten::_softmax" and len(record.reached[1]) == 200
    assert len(record.reached) <= MAX_REACHED and all(isinstance(r, str) for r in record.reached)
    assert _record({**entry, "reached": "aten::_softmax"}).reached == ()


def test_only_a_test_cells_checks_charge_its_exercise():
    hit = Record("softmax", 0, {}, "", None, ("aten::_softmax",))
    cells = {3: CellReport(3, [], [hit]), 5: CellReport(5, [], [hit])}
    found = Delegation()
    found.add_trace(cells, {5: "test_softmax__torch"})
    assert found.delegated == {"softmax": ["aten::_softmax"]}
    assert found.flags() == ["delegation: softmax reached aten::_softmax when called"]


# ---------------------------------------------------------------- the static reading

SETUP = "import numpy as np\nimport torch\nimport torch.nn.functional as F\n"
HONEST_SOFTMAX = (
    "def softmax(z, axis=-1):\n    e = np.exp(z - z.max(axis, keepdims=True))\n"
    "    return e / e.sum(axis, keepdims=True)\n"
)


def test_an_added_cell_that_redefines_the_exercise_is_read():
    added = (
        "import torch\ndef softmax(z, axis=-1):\n    return torch.softmax(torch.as_tensor(z), axis).numpy()\n"
    )
    found = analyse({"softmax": HONEST_SOFTMAX}, [SETUP], editable={"added cell 9": added})
    assert "torch.softmax" in found.named["softmax"]
    scratch = "print(torch.softmax(torch.ones(3), 0), softmax(np.ones(3)))\n"  # a comparison, no answer
    assert analyse({"softmax": HONEST_SOFTMAX}, [SETUP], editable={"added cell 9": scratch}).named == {}


def test_an_added_helper_the_solution_uses_is_read():
    solution = "def softmax(z, axis=-1):\n    return _helper(z, axis)\n"
    helper = "def _helper(z, axis):\n    return F.log_softmax(torch.as_tensor(z), axis).exp().numpy()\n"
    found = analyse({"softmax": solution}, [SETUP], editable={"added cell 4": helper})
    assert "torch.nn.functional.log_softmax" in found.named["softmax"]


@pytest.mark.parametrize(
    "exercise,code,name",
    [
        (
            "scaled_dot_product_attention_torch",
            "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
            "    return torch._C._nn.scaled_dot_product_attention(Q, K, V), None\n",
            "torch._C._nn.scaled_dot_product_attention",
        ),
        (
            "scaled_dot_product_attention_torch",
            "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
            "    return torch.ops.aten._scaled_dot_product_attention_math(Q, K, V)\n",
            "torch.ops.aten._scaled_dot_product*",
        ),
        (
            "softmax",
            "def softmax(z, axis=-1):\n    return torch.log_softmax(torch.as_tensor(z), axis).exp()\n",
            "torch.log_softmax",
        ),
        (
            "softmax_jacobian",
            "def softmax_jacobian(p):\n    z = torch.tensor(p, requires_grad=True)\n"
            "    torch.softmax(z, 0)[0].backward()\n    return z.grad\n",
            "backward",
        ),
    ],
)
def test_the_names_of_round_3_are_known(exercise, code, name):
    assert name in analyse({exercise: code}, [SETUP]).named[exercise]


@pytest.mark.parametrize(
    "code,why",
    [
        ("import operator\nf = operator.attrgetter('nn.functional.softmax')(torch)\n", "operator.attrgetter"),
        ("import pickle\nf = pickle.loads(b'ctorch\\nsoftmax\\n.')\n", "pickle.loads"),
        ("from pickle import loads as l\nf = l(b'')\n", "pickle.loads"),
        ("import sys\nsys.setprofile(None)\n", "sys.setprofile"),
        ("import marshal\n", "marshal"),
        ("f = softmax.__globals__\n", "__globals__"),
        ("torch.softmax = lambda z, d: z\n", "monkeypatching"),
        ("from torch.utils._python_dispatch import TorchDispatchMode\n", "torch.utils._python_dispatch"),
        ("import attention_learner.op_trace as t\n", "attention_learner.op_trace"),
        ("x = getattr(F, 'soft' + 'max')\n", "getattr with a computed name"),
        ("import threading\n", "threading"),
    ],
)
def test_dynamic_binding_anywhere_editable_is_sent_to_review(code, why):
    found = analyse({"softmax": HONEST_SOFTMAX}, [SETUP], editable={"added cell 2": code})
    assert any(why in r and r.startswith("added cell 2 uses") for r in found.review), found.review
    assert found.named == {}  # flagged, not scored: the trace scores what it reaches


def test_honest_code_is_not_sent_to_review():
    code = (
        "import math\nfrom functools import partial\nx = getattr(F, 'relu')\n"
        "class M(torch.nn.Module):\n    def forward(self, x):\n        return x.softmax(-1)\n"
    )
    scratch = {"added cell 3": "print(np.ones(2))\n"}
    assert analyse({"dot_scores": code}, [SETUP], editable=scratch).review == []


def test_a_base64_payload_of_the_attack_is_still_flagged():
    payload = base64.b64encode(b"ctorch\nsoftmax\n.").decode()
    code = f"import base64, pickle\nf = pickle.loads(base64.b64decode('{payload}'))\n"
    assert any("pickle.loads" in r for r in analyse({}, [SETUP], editable={"added cell 1": code}).review)


# ---------------------------------------------------------------- which cells are editable


@pytest.mark.parametrize("assignment", sorted(p.name for p in SOLUTIONS.iterdir() if p.is_dir()))
def test_an_honest_notebook_of_every_chapter_is_charged_with_nothing(assignment):
    found = delegation_of(solved_notebook(assignment), source_notebook(assignment))
    assert found.named == {} and found.review == [], found


def test_an_added_cell_of_a_submission_is_read_and_a_restored_test_cell_is_not():
    nb = solved_notebook("02_queries_keys_values")
    index = next(i for i, c in enumerate(nb.cells) if grade_id(c) == "softmax")
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell("import torch\nsoftmax = torch.softmax\n"))
    found = delegation_of(nb, source_notebook("02_queries_keys_values"))
    assert set(found.named) == {"softmax"} and "torch.softmax" in found.named["softmax"]
    forged = nbformat.from_dict(solved_notebook("02_queries_keys_values"))
    setup = next(c for c in forged.cells if grade_id(c) == "setup")
    setup.source += "\nimport pickle\n"  # a locked cell that is not the source's: read as editable
    assert any("pickle" in r for r in delegation_of(forged, source_notebook("02_queries_keys_values")).review)
