"""The rules that decide points, one by one and without a sandbox (milliseconds each):
delegation read from cell sources, seeds drawn from a job's salt, the NumPy conventions
decided from arrays, check_close judged in the parent, memory budgets per test cell."""

from __future__ import annotations

import copy
import subprocess
import sys

import nbformat
import numpy as np
import pytest

from attention_learner import recording
from attention_learner.cell_rules import is_test_cell
from attention_learner.conventions import AFTER, convention_facts
from attention_learner.forbidden import FORBIDDEN
from grader.autograde.child_report import Record, decode_array, encode_arrays
from grader.autograde.delegation import analyse
from grader.autograde.judging import ExpectedCheck, judge_close, rejudge
from grader.autograde.scoring import delegation_of, memory_budgets
from grader.exercises import all_exercises
from tests.notebook_runner import assignments, source_notebook

SETUP_CH04 = (
    "from torch import nn\n"
    "from attention_learner.blocks import given_attention as scaled_dot_product_attention_torch\n"
)
SDPA = "torch.nn.functional.scaled_dot_product_attention"


# ---------------------------------------------------------------- delegation


@pytest.mark.parametrize(
    "code,reached",
    [
        (
            "import torch.nn.functional as F\ndef f(Q, K, V):\n"
            "    return F.scaled_dot_product_attention(Q, K, V)\n",
            SDPA,
        ),
        ("from torch.nn.functional import scaled_dot_product_attention as s\n", SDPA),
        ("import torch\nsdpa = torch.nn.functional.scaled_dot_product_attention\n", SDPA),
        ("import torch\nf = getattr(torch.nn.functional, 'scaled_dot_product_attention')\n", SDPA),
        (
            "from attention_learner import blocks\ng = blocks.given_attention\n",
            "attention_learner.blocks.given_attention",
        ),
    ],
)
def test_a_solution_that_reaches_its_exercises_implementation_delegates(code, reached):
    found = analyse({"scaled_dot_product_attention_torch": code})
    assert found.delegated == {"scaled_dot_product_attention_torch": [reached]}
    assert "your own implementation" in found.message("scaled_dot_product_attention_torch")


def test_a_subclass_of_a_given_block_delegates_through_the_setup_cells_alias():
    setup = "from attention_learner.blocks import GivenMultiHeadAttention as MHA\n"
    found = analyse({"MultiHeadAttention": "class MultiHeadAttention(MHA):\n    pass\n"}, [setup])
    assert found.delegated == {"MultiHeadAttention": ["attention_learner.blocks.GivenMultiHeadAttention"]}


def test_a_helper_in_another_solution_cell_is_followed():
    cells = {
        "split_heads": "import torch.nn.functional as F\ndef helper(q, k, v):\n"
        "    return F.scaled_dot_product_attention(q, k, v)\n",
        "scaled_dot_product_attention_torch": "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
        "    return helper(Q, K, V)\n",
    }
    assert "scaled_dot_product_attention_torch" in analyse(cells).delegated


def test_a_block_given_for_a_later_chapter_stays_usable_there():
    mha = (
        "class MultiHeadAttention(nn.Module):\n    def forward(self, q, k, v, mask=None):\n"
        "        return scaled_dot_product_attention_torch(q, k, v, mask)\n"
    )
    assert analyse({"MultiHeadAttention": mha}, [SETUP_CH04]).delegated == {}


def test_local_names_do_not_link_cells():
    cells = {
        "softmax": "def softmax(z, axis=-1):\n    e = 1\n    return e\n",
        "attend": "import torch\ndef attend(q, K, V):\n    e = torch.softmax(q, 0)\n    return e\n",
    }
    assert analyse(cells).delegated == {}  # `e` is local to each function; attend may use torch.softmax


def test_computed_names_are_flagged_for_review_not_scored():
    found = analyse({"softmax": "import torch\nf = getattr(torch, 'soft' + 'max')\n"})
    assert found.delegated == {}
    assert found.review and "getattr with a computed name" in found.review[0]
    assert found.flags() == [f"review: {found.review[0]}"]


def test_the_course_solutions_delegate_nothing():
    """The grader's own ``delegation_of``, given each solution notebook as the submission."""
    checked = 0
    for assignment in assignments():
        nb = source_notebook(assignment)
        found = delegation_of(nb, nb)
        assert found.delegated == {} and found.review == [], (assignment, found)
        checked += 1
    assert checked >= 9  # one per chapter's assignment: the loop ran


def test_delegation_of_reads_a_solution_cell_of_a_real_notebook():
    """The same call catches a solution notebook whose softmax cell hands the work to torch."""
    nb = source_notebook(
        next(
            a
            for a in assignments()
            if any(
                (c.metadata.get("nbgrader") or {}).get("grade_id") == "softmax"
                for c in source_notebook(a).cells
            )
        )
    )
    submitted = copy.deepcopy(nb)
    cell = next(c for c in submitted.cells if (c.metadata.get("nbgrader") or {}).get("grade_id") == "softmax")
    cell.source = "import torch\ndef softmax(z, axis=-1):\n    return torch.softmax(z, axis)\n"
    assert "softmax" in delegation_of(submitted, nb).delegated


def test_every_forbidden_list_names_a_graded_exercise():
    functions = {name.split("__", 1)[0] for name in all_exercises()}
    assert set(FORBIDDEN) <= functions


# ---------------------------------------------------------------- fresh inputs per job


def test_grading_seeds_are_fresh_per_salt_and_the_same_on_both_sides():
    a = recording.grading_seed(12345, "softmax", 1, {"n": 4, "batch": (2,)})
    assert a == recording.grading_seed(12345, "softmax", 1, {"batch": [2], "n": np.int64(4)})
    assert a != recording.grading_seed(12346, "softmax", 1, {"n": 4, "batch": (2,)})
    assert a != recording.grading_seed(12345, "softmax", 2, {"n": 4, "batch": (2,)})
    assert recording.grading_seed(0, "softmax", 7, {}) == 7  # no salt: the notebook's seed
    assert 0 <= a < 2**63


def test_a_check_draws_from_the_salt_only_while_recording(monkeypatch):
    assert recording.drawn_seed("softmax", 3, {}) == 3
    monkeypatch.setattr(recording, "_recorder", recording.Recorder(salt=99))
    assert recording.drawn_seed("softmax", 3, {}) == recording.grading_seed(99, "softmax", 3, {})


# ---------------------------------------------------------------- the NumPy conventions


def test_conventions_are_read_from_the_arrays_and_the_judges_own_inputs():
    Q = np.arange(6.0).reshape(2, 3)
    facts = convention_facts({"Q": Q}, {"output": Q.astype(np.float32), AFTER + "Q": Q.copy()})
    assert facts["output"].dtype == np.float64  # compared as float64 ...
    assert not facts["float64"] and facts["unchanged"]  # ... but it arrived as float32
    changed = Q.copy()
    changed[0, 0] = 9.0
    facts = convention_facts({"Q": Q}, {"output": Q.copy(), AFTER + "Q": changed})
    assert facts["float64"] and not facts["unchanged"]
    assert not convention_facts({"Q": Q}, {"output": Q.copy()})["unchanged"]  # not sent back


def test_an_input_one_ulp_off_the_judges_copy_is_unchanged_an_update_is_not():
    """The judge draws its copy of the inputs in its own process, where a ``tanh`` may round the
    last bit the other way: chapter 1's T = 1 states came back one unit in the last place off on
    10 of 12 draws, and a correct ``jacobian_norms`` lost its 3 points as "modified in place"."""
    rng = np.random.default_rng(0)
    H = np.tanh(rng.standard_normal((1, 3)))  # (T, d_h), one row of states
    drawn_elsewhere = np.nextafter(H, np.inf)  # the same draw, each entry one ulp up
    assert convention_facts({"H": H}, {"norms": np.ones(1), AFTER + "H": drawn_elsewhere})["unchanged"]
    nan_kept = np.array([np.nan, 1.0])
    assert convention_facts({"z": nan_kept}, {"p": nan_kept, AFTER + "z": nan_kept.copy()})["unchanged"]
    for updated in (H - H.max(), np.exp(H), H * (1 + 1e-9)):  # z -= z.max(), exp(z, out=z), a rescale
        assert not convention_facts({"H": H}, {"norms": np.ones(1), AFTER + "H": updated})["unchanged"]
    mask = np.array([[True, False]])
    assert not convention_facts({"m": mask}, {"o": np.ones(1), AFTER + "m": ~mask})["unchanged"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, np.int64, np.bool_])
def test_the_report_keeps_the_dtype_the_learner_returned(dtype):
    array = np.arange(6).reshape(2, 3).astype(dtype)
    back = decode_array(encode_arrays({"x": array})["x"])
    assert back.dtype == dtype and np.array_equal(back, array)


# ---------------------------------------------------------------- check_close


def test_check_close_is_judged_here_and_cannot_earn_a_cell():
    want = ExpectedCheck(recording.CLOSE_CHECK, 0, {"what": "the hand-worked case", "atol": 1e-6})
    assert not want.earns
    assert judge_close(want, {"got": np.ones(3), "expected": np.ones(3)}) == ""
    assert "the hand-worked case" in judge_close(want, {"got": np.zeros(3), "expected": np.ones(3)})
    forged = Record(
        recording.CLOSE_CHECK, 0, {"what": "x", "atol": 1e9}, "", {"got": np.zeros(3), "expected": np.ones(3)}
    )
    assert rejudge([want], [forged]) is not None  # the source's atol, not the child's


# ---------------------------------------------------------------- memory budgets


def test_the_memory_case_gives_its_test_cell_a_budget():
    nb = source_notebook("07_attention_at_scale")
    cells = {i: c for i, c in enumerate(nb.cells) if c.cell_type == "code"}
    grade_ids = {c.metadata.get("nbgrader", {}).get("grade_id"): i for i, c in cells.items()}
    expected = {
        "test_online_softmax_attention__memory": [
            ExpectedCheck("online_softmax_attention", 13, {}),
            ExpectedCheck("online_softmax_attention__memory", 14, {}),
        ],
        "test_KVCache": [ExpectedCheck("KVCache", 1, {})],
    }
    budgets = memory_budgets(cells, expected)
    assert budgets == {
        grade_ids["test_online_softmax_attention__memory"]: all_exercises()[
            "online_softmax_attention__memory"
        ].memory_budget
    }


def test_a_lowered_memory_limit_holds_for_the_rest_of_the_process():
    """The limiter lowers the soft AND the hard limit (an unprivileged process, as every
    grading child is, can never raise a hard limit again): 512 MiB fit before, not after."""
    script = (
        "import numpy as np, resource\n"
        "from grader.autograde.execution import _memory_limiter\n"
        "limit = _memory_limiter()\n"
        "ok = np.ones(2**26)  # 512 MiB before the limit\n"
        "del ok\n"
        "limit(64 * 2**20)\n"
        "soft, hard = resource.getrlimit(resource.RLIMIT_AS)\n"
        "print('hard' if soft == hard != resource.RLIM_INFINITY else 'soft only')\n"
        "try:\n"
        "    np.ones(2**26)\n"
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('MemoryError')\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.stdout.split() == ["hard", "MemoryError"], run.stdout + run.stderr


def test_every_course_notebook_test_cell_makes_a_check_that_earns():
    """Each test cell of this course can earn its points only through a check(...) judged
    against the reference, so every one of them must make one."""
    for assignment in assignments():
        nb: nbformat.NotebookNode = source_notebook(assignment)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader") or {}
            if is_test_cell(cell):
                calls = [line for line in cell.source.splitlines() if line.lstrip().startswith("check(")]
                assert calls, f"{assignment} {meta['grade_id']} makes no check(...)"
