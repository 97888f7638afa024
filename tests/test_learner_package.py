"""The learner package (learner/, import name attention_learner): what it ships, what it holds
back, and how its checks judge in a learner's kernel, without the grader."""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import attention_learner
from attention_learner import checks as learner_checks
from attention_learner import expected as shipped_data
from attention_learner import recording
from attention_learner.blocks import GivenMultiHeadAttention, given_attention
from attention_learner.cases import all_cases
from grader.exercises import all_exercises
from grader.paths import ROOT
from grader.reference import MultiHeadAttention
from grader.reference.scaled_dot_product import scaled_dot_product_attention_torch
from grader.release import assignments, expected_data
from tests.learner_wheel import build_learner_wheel
from tests.notebook_runner import grade_id, is_test_cell, source_notebook

LEARNER = ROOT / "learner"

# Every exercise name of the course's contract, including chapters whose exercises may not be
# registered yet: the learner package must define none of these.
CONTRACT = {
    "rnn_step", "rnn_forward", "jacobian_norms", "dot_scores", "softmax", "attend", "project_qkv",
    "dot_product_attention", "scaled_dot_product_attention", "scaled_dot_product_attention_torch",
    "softmax_jacobian", "split_heads", "merge_heads", "MultiHeadAttention", "causal_mask",
    "padding_mask", "EncoderLayer", "DecoderLayer", "positional_encoding", "greedy_decode",
    "online_softmax_attention", "KVCache",
}  # fmt: skip


def contract_names() -> set[str]:
    return CONTRACT | {name.split("__", 1)[0] for name in all_exercises()}


# ---------------------------------------------------------------- the wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The learner package built as a wheel, as pip would install it."""
    return build_learner_wheel(tmp_path_factory.mktemp("wheel"))


def test_wheel_holds_no_reference(wheel):
    contract = contract_names()
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        sources = {n: z.read(n).decode() for n in names if n.endswith(".py")}
    assert not [n for n in names if n.startswith("grader")], "the wheel contains grader modules"
    assert any(n.startswith("attention_learner/data/") and n.endswith(".npz") for n in names)
    for name, text in sources.items():
        assert "grader.reference" not in text, f"{name} mentions grader.reference"
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                assert node.name not in contract, f"{name} defines {node.name}, a contract name"
            if isinstance(node, ast.Import):
                bad = [a.name for a in node.names if a.name.split(".")[0] == "grader"]
                assert not bad, f"{name} imports {bad}"
            if isinstance(node, ast.ImportFrom):
                assert (node.module or "").split(".")[0] != "grader", f"{name} imports {node.module}"


def test_wheel_metadata(wheel):
    with zipfile.ZipFile(wheel) as z:
        files = {
            n: z.read(n).decode()
            for n in z.namelist()
            if n.endswith((".dist-info/METADATA", "entry_points.txt"))
        }
    meta = next(text for name, text in files.items() if name.endswith("METADATA"))
    assert "Name: attention-learner" in meta and "Requires-Python: >=3.10" in meta
    requires = sorted(
        line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist")
    )
    assert requires == ["ipykernel>=6", "nbclient>=0.7", "numpy>=1.26", "torch>=2.1"]
    scripts = next(text for name, text in files.items() if name.endswith("entry_points.txt"))
    assert "attention-check = attention_learner.notebook_check:main" in scripts


# ---------------------------------------------------------------- shipped expected values


@pytest.mark.parametrize("assignment", assignments())
def test_expected_values_are_up_to_date(assignment):
    """The shipped values equal this machine's, up to the rounding that differs between CPUs
    (the rule ``release`` keeps a file by, :meth:`Case.same_values`)."""
    cases = all_cases()
    for exercise, computed in expected_data(assignment).items():
        shipped = shipped_data.load_exercise(exercise)
        assert set(shipped) == set(computed), (
            f"{exercise}: shipped cases differ from the notebook's visible checks: "
            "run `python -m grader release`"
        )
        for key, want in computed.items():
            have = shipped[key]
            assert [d for d, _ in have.bugs] == [d for d, _ in want.bugs], f"{exercise} {key}: bugs"
            for got, ref in shipped_pairs(have, want):
                assert got.keys() == ref.keys()
                for k in ref:
                    assert cases[exercise].same_values(got[k], ref[k]), (
                        f"{exercise} {key} {k} is out of date: run `python -m grader release`"
                    )


def shipped_pairs(have: shipped_data.Shipped, want: shipped_data.Shipped):
    """(shipped outputs, recomputed outputs) of the expected values and of every classic bug."""
    yield have.expected, want.expected
    yield from ((h, w) for (_, h), (_, w) in zip(have.bugs, want.bugs, strict=True))


def test_same_values_follows_the_grading_tolerance():
    case = all_cases()["scaled_dot_product_attention_torch"]
    w = np.array([0.2919491521154735, 1e-300, 0.0])
    atol, rtol = case.reproducible_tolerance
    assert (atol, rtol) == (case.atol / 4, case.rtol / 4)
    assert case.same_values(w, w + 0.99 * (atol + rtol * np.abs(w)))  # the CPU noise seen: 2.7e-7
    assert not case.same_values(w, w + 1.01 * (atol + rtol * np.abs(w)))
    assert not case.same_values(w, w.astype(np.float32).astype(np.float64) + 1e-3)
    assert not case.same_values(w, w.astype(np.float32))  # a dtype change is a change
    nan = np.array([np.nan, 1.0])
    assert case.same_values(nan, nan.copy()) and not case.same_values(nan, np.array([1.0, 1.0]))
    mask = np.array([True, False])
    assert case.same_values(mask, mask.copy()) and not case.same_values(mask, ~mask)


@pytest.mark.parametrize("assignment", assignments())
def test_a_correct_result_from_another_cpu_passes_against_the_shipped_values(assignment):
    """A learner's machine may round differently from the one that shipped the data: move this
    machine's correct values by the most that :meth:`Case.same_values` lets two machines
    differ, either way, and the learner's check still passes against the shipped values."""
    cases = all_cases()
    for exercise, computed in expected_data(assignment).items():
        case = cases[exercise]
        atol, rtol = case.reproducible_tolerance
        shipped = shipped_data.load_exercise(exercise)
        for key, want in computed.items():
            grading = case.tolerance(json.loads(key)["params"])
            for k, v in want.expected.items():
                for sign in (1.0, -1.0):
                    moved = v if v.dtype.kind != "f" else v + sign * (atol + rtol * np.abs(v))
                    problem = learner_checks.compare(k, shipped[key].expected[k], moved, *grading)
                    assert problem == "", f"{exercise} {key} {k}: {problem}"


def test_release_writes_nothing_under_other_numeric_configurations(tmp_path):
    """``release`` on an unchanged checkout, under four numeric set-ups that change last bits
    (thread counts, MKL's conditional numerical reproducibility, ATen's plain CPU kernels),
    rewrites no data file."""
    data = tmp_path / "data"
    shutil.copytree(shipped_data.DATA, data)
    before = {p.name: p.read_bytes() for p in data.glob("*.npz")}
    script = (
        "import sys; from pathlib import Path; from grader.release import assignments, write_expected_data; "
        "print(len(write_expected_data(assignments(), folder=Path(sys.argv[1]))))"
    )
    configurations = [
        {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"},
        {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "2"},
        {"MKL_CBWR": "COMPATIBLE"},
        {"ATEN_CPU_CAPABILITY": "default"},
    ]
    for extra in configurations:
        env = {**os.environ, **extra}
        run = subprocess.run(
            [sys.executable, "-c", script, str(data)],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == "0", f"release under {extra} rewrote {run.stdout.strip()} files"
    assert {p.name: p.read_bytes() for p in data.glob("*.npz")} == before


def test_every_shipped_file_belongs_to_a_case():
    cases = all_cases()
    for path in shipped_data.DATA.glob("*.npz"):
        assert path.stem in cases, f"{path.name} ships values for no known case"


def test_case_keys_are_canonical():
    assert shipped_data.case_key(3, {"batch": (2,), "n": 4}) == shipped_data.case_key(
        3, {"n": np.int64(4), "batch": [2]}
    )


# ---------------------------------------------------------------- judging without the grader


@pytest.fixture
def no_instructor(monkeypatch):
    """A learner's kernel: no grader to fall back on."""
    monkeypatch.setattr(learner_checks, "instructor_judge", lambda: None)


def _unscaled_attention(Q, K, V, mask=None):
    scores = Q @ np.swapaxes(K, -1, -2)  # (..., n_q, n_k), the classic bug: no 1/sqrt(d_k)
    weights = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights /= weights.sum(axis=-1, keepdims=True)
    return weights @ V, weights


def test_shipped_values_name_the_classic_bug(no_instructor):
    with pytest.raises(AssertionError) as failure:
        learner_checks.check("scaled_dot_product_attention", _unscaled_attention, seed=1)
    message = str(failure.value)
    assert "scaled_dot_product_attention is wrong on batch (), n_q=3, n_k=5, d_k=7, d_v=2" in message
    assert "largest error" in message and "not divided by sqrt(d_k)" in message


def _encoding_of_base_10(n, d_model):
    angles = np.arange(n)[:, None] / 10.0 ** (np.arange(0, d_model, 2) / d_model)  # the bug: base 10
    pe = np.zeros((n, d_model))
    pe[:, 0::2], pe[:, 1::2] = np.sin(angles), np.cos(angles[:, : d_model // 2])
    return pe


class _CacheNeverStored:
    """append returns the cached chunk with the new one but never stores it."""

    def __init__(self):
        self.k = self.v = None

    def __len__(self):
        return 0 if self.k is None else self.k.shape[-2]

    def append(self, k_new, v_new):
        if self.k is None:
            self.k, self.v = k_new, v_new
            return self.k, self.v
        return torch.cat([self.k, k_new], dim=-2), torch.cat([self.v, v_new], dim=-2)


@pytest.mark.parametrize(
    "exercise,learner,named",
    [
        ("positional_encoding", _encoding_of_base_10, "a base of 10 instead of 10000"),
        ("KVCache", _CacheNeverStored, "the cache was not updated"),
    ],
)
def test_bugs_the_hints_used_to_model_are_named_from_the_shipped_outputs(
    no_instructor, exercise, learner, named
):
    """The package holds no model of these bugs any more (a model was one argument from the
    answer); the grader's classic bugs' outputs on the visible case are shipped, so a local
    check still names them."""
    assert any(
        named in d for shipped in shipped_data.load_exercise(exercise).values() for d, _ in shipped.bugs
    )
    with pytest.raises(AssertionError) as failure:
        learner_checks.check(exercise, learner, seed=1)
    bug_line = next(line for line in str(failure.value).splitlines() if line.startswith("This looks like"))
    assert named in bug_line, str(failure.value)


def test_a_case_that_is_not_shipped_says_so(no_instructor):
    with pytest.raises(learner_checks.NoExpectedValues, match="not one of the visible test cases"):
        learner_checks.check("scaled_dot_product_attention", _unscaled_attention, seed=999, n_q=2)


def test_unshipped_cases_are_judged_by_the_grader_when_it_is_there():
    assert learner_checks.instructor_judge() is not None
    with pytest.raises(AssertionError, match="not divided by sqrt"):
        learner_checks.check("scaled_dot_product_attention", _unscaled_attention, seed=999, n_q=2)


def test_recording_mode_records_and_does_not_judge():
    recorder = recording.start_recording()
    try:
        learner_checks.check("scaled_dot_product_attention", _unscaled_attention, seed=4, n_k=6)
    finally:
        recording.stop_recording()
    (record,) = recorder.records[-1]
    assert (record.exercise, record.seed, record.params, record.error) == (
        "scaled_dot_product_attention",
        4,
        {"n_k": 6},
        "",
    )
    assert record.outputs["weights"].shape == (3, 6)


def test_descriptions_follow_the_builders_defaults():
    case = all_cases()["MultiHeadAttention"]
    assert case.case_description({"n_k": 2}).startswith("batch 2, n_q=5, n_k=2, num_heads=3")


def test_gradients_are_raw_arrays_and_judged_by_the_parent():
    case = all_cases()["scaled_dot_product_attention_torch__gradients"]
    inputs = case.make_inputs(np.random.default_rng(0), batch=(2,), mask="random")
    detached = lambda Q, K, V, mask=None: (  # noqa: E731
        scaled_dot_product_attention_torch(Q, K.detach(), V, mask)
    )
    got = {k: np.asarray(v) for k, v in case.call(detached, inputs).items()}
    assert sorted(got) == ["dK", "dQ", "dV"] and not got["dK"].any()
    message = all_exercises()[case.name].judge({}, inputs, got)
    assert "the gradient with respect to K differs" in message


# ---------------------------------------------------------------- the given building blocks


def test_given_attention_equals_the_reference():
    rng = torch.Generator().manual_seed(0)
    Q, K, V = (
        torch.randn(2, 3, n, d, generator=rng, dtype=torch.float64) for n, d in ((4, 5), (6, 5), (6, 2))
    )  # (B, h, n_q, d_k), (B, h, n_k, d_k), (B, h, n_k, d_v)
    mask = torch.rand(2, 3, 4, 6, generator=rng) > 0.4
    mask[0, 1, 2] = False  # a query that sees nothing
    for m in (None, mask, mask[:, :1, :1]):
        reference = scaled_dot_product_attention_torch(Q, K, V, m)
        for ours, theirs in zip(given_attention(Q, K, V, m), reference, strict=True):
            torch.testing.assert_close(ours, theirs)


@pytest.mark.parametrize("shapes", [((2, 3, 4), (2, 5, 4), (2, 3, 4)), ((2, 3, 4), (2, 5, 3), (2, 5, 4))])
def test_given_attention_refuses_keys_and_values_that_do_not_fit(shapes):
    """torch's CPU kernel takes K and V of different lengths without a word, and its backward
    then crashes or hangs the process ("keys from the query" with n_q != n_k): refused first."""
    Q, K, V = (torch.randn(*shape, dtype=torch.float64, requires_grad=True) for shape in shapes)
    with pytest.raises(ValueError, match="must have the same length"):
        given_attention(Q, K, V)


def test_given_multi_head_attention_equals_the_reference():
    torch.manual_seed(0)
    ours = GivenMultiHeadAttention(12, 3).double()
    theirs = MultiHeadAttention(12, 3).double()
    theirs.load_state_dict(ours.state_dict())
    query = torch.randn(2, 4, 12, dtype=torch.float64, requires_grad=True)
    key, value = torch.randn(2, 6, 12, dtype=torch.float64), torch.randn(2, 6, 12, dtype=torch.float64)
    per_head = torch.rand(2, 3, 4, 6) > 0.4
    per_head[1, 2, 0] = False  # blind in one head only
    padding = torch.tensor([[True] * 6, [True] * 3 + [False] * 3])[:, None, None, :]  # (B, 1, 1, n_k)
    for mask in (None, per_head, padding, torch.zeros(2, 1, 1, 6, dtype=torch.bool)):
        for a, b in zip(ours(query, key, value, mask), theirs(query, key, value, mask), strict=True):
            torch.testing.assert_close(a, b)
    out, _ = ours(query, key, value, per_head)
    out.sum().backward()
    assert torch.isfinite(query.grad).all()


# ---------------------------------------------------------------- notebooks


FIRST_FIVE = [a for a in assignments() if a in attention_learner.ALLOWED_IMPORTS]


def _imports(source: str) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            found.add(node.module or "")
    return found


@pytest.mark.parametrize("assignment", FIRST_FIVE)
def test_notebooks_import_only_what_their_assignment_allows(assignment):
    allowed = set(attention_learner.ALLOWED_IMPORTS[assignment])
    for cell in source_notebook(assignment).cells:
        meta = cell.metadata.get("nbgrader") or {}
        if cell.cell_type != "code" or meta.get("solution"):
            continue
        source = cell.source if is_test_cell(cell) or grade_id(cell) else _without_magics(cell.source)
        extra = _imports(source) - allowed
        assert not extra, f"{assignment} {grade_id(cell) or 'install cell'} imports {sorted(extra)}"


def _without_magics(source: str) -> str:
    return re.sub(r"^(\s*)%.*$", r"\1pass", source, flags=re.M)


def test_allowed_imports_are_plain_data():
    assert json.loads(json.dumps(attention_learner.ALLOWED_IMPORTS)) == {
        k: list(v) for k, v in attention_learner.ALLOWED_IMPORTS.items()
    }
