"""The learner's ``attention-check`` gives the grader's verdict, cell by cell (issue 31, item 2).

For every chapter, one notebook whose answers are right in their numbers but break each
stated rule they can (delegation to what implements the exercise, a Python loop over the
queries, a counted call made again at every step): it is run by ``attention-check``'s own
code (a fresh kernel, :mod:`attention_learner.notebook_check`) and graded by the grader's
pipeline (``python -m grader autograde``, hidden tests included). Every test cell must get
the same verdict from both: a broken rule fails before hand-in, exactly where it costs the
points, and no honest exercise of the same notebook loses anything on either side.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import nbformat
import pytest

from attention_learner.notebook_check import executed_notebook, outcomes_of
from grader.paths import SOLUTIONS
from tests.notebook_runner import assignments, solved_notebook, with_cell
from tests.security.grade_as import autograde_command

pytestmark = [pytest.mark.slow, pytest.mark.grading]

_TO_TORCH = "    t = lambda a: torch.as_tensor(np.asarray(a, dtype=np.float64))\n"

#: assignment -> {exercise: a solution cell right in its numbers that breaks one stated rule}
RULE_BREAKERS: dict[str, dict[str, str]] = {
    "02_queries_keys_values": {
        "softmax": "import torch\ndef softmax(z, axis=-1):\n"
        + _TO_TORCH
        + "    return torch.softmax(t(z), dim=axis).numpy()\n",
        "attend": "import torch\nfrom attention_learner.blocks import given_attention\n"
        "def attend(q, K, V):\n"
        + _TO_TORCH
        + "    out, w = given_attention(t(q)[None] * q.shape[-1] ** 0.5, t(K), t(V))  # unscaled\n"
        "    return out[0].numpy(), w[0].numpy()\n",
        "dot_product_attention": (
            "def dot_product_attention(Q, K, V):\n"
            "    scores = np.stack([K @ q for q in Q])  # (n_q, n_k), one query at a time: the loop\n"
            "    e = np.exp(scores - scores.max(-1, keepdims=True))\n"
            "    w = e / e.sum(-1, keepdims=True)\n"
            "    return w @ V, w\n"
        ),
    },
    "03_scaled_dot_product": {
        "scaled_dot_product_attention": (
            "from attention_learner.blocks import given_attention\n"
            "def scaled_dot_product_attention(Q, K, V, mask=None):\n"
            + _TO_TORCH
            + "    m = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool))\n"
            "    out, w = given_attention(t(Q), t(K), t(V), m)\n"
            "    return out.numpy(), w.numpy()\n"
        ),
        "scaled_dot_product_attention_torch": (
            "from attention_learner.blocks import given_attention\n"
            "def scaled_dot_product_attention_torch(Q, K, V, mask=None):\n"
            "    return given_attention(Q, K, V, mask)\n"
        ),
        "softmax_jacobian": (
            "def softmax_jacobian(p):\n"
            "    z = torch.log(torch.as_tensor(np.asarray(p, dtype=np.float64)))\n"
            "    return torch.autograd.functional.jacobian(lambda x: torch.softmax(x, -1), z).numpy()\n"
        ),
    },
    "04_multi_head": {
        "MultiHeadAttention": (
            "from attention_learner.blocks import GivenMultiHeadAttention\n"
            "class MultiHeadAttention(GivenMultiHeadAttention):\n    pass\n"
        ),
    },
    "05_transformer_attention": {
        "causal_mask": (
            "def causal_mask(n):\n"
            "    float_mask = torch.nn.Transformer.generate_square_subsequent_mask(n)\n"
            "    return torch.isfinite(float_mask)\n"
        ),
        "EncoderLayer": (
            "from attention_learner.blocks import GivenEncoderLayer\n"
            "class EncoderLayer(GivenEncoderLayer):\n    pass\n"
        ),
        "DecoderLayer": (
            "from attention_learner.blocks import GivenDecoderLayer\n"
            "class DecoderLayer(GivenDecoderLayer):\n    pass\n"
        ),
    },
    "06_tiny_translator": {
        "positional_encoding": (
            "from attention_learner.blocks import given_positional_encoding\n"
            "def positional_encoding(n, d_model):\n"
            "    return given_positional_encoding(n, d_model)\n"
        ),
        "greedy_decode": (
            "@torch.no_grad()\n"
            "def greedy_decode(model, src, max_len, bos_id, eos_id):\n"
            "    B = src.shape[0]\n"
            "    tgt = torch.full((B, 1), bos_id, dtype=torch.long)  # (B, 1)\n"
            "    finished = torch.zeros(B, dtype=torch.bool)  # (B,)\n"
            "    for _ in range(max_len):\n"
            "        logits = model.decode(tgt, model.encode(src))  # encoded again at every step\n"
            "        nxt = logits[:, -1].argmax(-1)  # (B,)\n"
            "        nxt = torch.where(finished, torch.full_like(nxt, eos_id), nxt)\n"
            "        tgt = torch.cat([tgt, nxt[:, None]], dim=1)\n"
            "        finished = finished | (nxt == eos_id)\n"
            "        if finished.all():\n"
            "            break\n"
            "    return tgt[:, 1:]\n"
        ),
    },
    "07_attention_at_scale": {
        "online_softmax_attention": (
            "from attention_learner.blocks import given_attention\n"
            "def online_softmax_attention(Q, K, V, block_size, mask=None):\n"
            + _TO_TORCH
            + "    m = None if mask is None else torch.as_tensor(np.asarray(mask, dtype=bool))\n"
            "    return given_attention(t(Q), t(K), t(V), m)[0].numpy()\n"
        ),
    },
    "08_build_train_decode": {
        "translation_loss": (
            "def translation_loss(logits, targets, pad_id, label_smoothing=0.0):\n"
            "    return torch.nn.functional.cross_entropy(\n"
            "        logits.transpose(1, 2), targets, ignore_index=pad_id,\n"
            "        label_smoothing=label_smoothing)\n"
        ),
    },
    "09_modern_attention": {
        "gqa_attention": (
            "def gqa_attention(q, k, v, mask=None):\n"
            "    h, g = q.shape[1], k.shape[1]\n"
            "    keys = k.repeat_interleave(h // g, dim=1)  # (B, h, n_k, d)\n"
            "    scores = q @ keys.transpose(-2, -1) / q.shape[-1] ** 0.5  # (B, h, n_q, n_k)\n"
            "    if mask is not None:\n"
            "        scores = scores.masked_fill(~mask, float('-inf'))\n"
            "    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)\n"
            "    out = torch.nn.functional.scaled_dot_product_attention(\n"
            "        q, k, v, attn_mask=mask, enable_gqa=True)\n"
            "    return out, weights\n"
        ),
    },
}

#: the chapters held (chapter 1's exercises have no rule to break but the cases' own code,
#: which no answer there can use: its honest notebook is compared)
CHAPTERS = assignments()


def rule_breaking_notebook(assignment: str) -> nbformat.NotebookNode:
    nb = solved_notebook(assignment)
    for exercise, code in RULE_BREAKERS.get(assignment, {}).items():
        nb = with_cell(nb, exercise, code)
    return nb


@pytest.fixture(scope="module")
def verdicts():
    """assignment -> (attention-check's {grade id: passed}, the grader's {grade id: passed},
    the grader's messages)."""
    root = Path(tempfile.mkdtemp(prefix="attention-parity-"))
    source, submitted, out = root / "source", root / "submitted" / "learner", root / "out"
    local: dict[str, dict[str, bool]] = {}
    for assignment in CHAPTERS:
        shutil.copytree(SOLUTIONS / assignment, source / assignment)
        folder = submitted / assignment
        folder.mkdir(parents=True)
        path = folder / f"{assignment}.ipynb"
        nbformat.write(rule_breaking_notebook(assignment), path)
        checked = root / "local" / assignment / path.name
        checked.parent.mkdir(parents=True)
        shutil.copyfile(path, checked)
        local[assignment] = {o.grade_id: o.passed for o in outcomes_of(executed_notebook(checked, 300))}
    command = autograde_command(root / "submitted", out, source=source, timeout=300)
    run = subprocess.run(command, capture_output=True, text=True, timeout=3000, cwd=root)
    graded = {}
    try:
        assert run.returncode == 0, run.stderr[-3000:]
        for assignment in CHAPTERS:
            res = json.loads((out / "learner" / assignment / "results.json").read_text())
            graded[assignment] = (
                {t["grade_id"]: t["status"] == "passed" for t in res["tests"]},
                {t["grade_id"]: t["message"] for t in res["tests"]},
            )
        yield {a: (local[a], *graded[a]) for a in CHAPTERS}
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("assignment", CHAPTERS)
def test_attention_check_gives_the_graders_verdict_cell_by_cell(verdicts, assignment):
    local, graded, messages = verdicts[assignment]
    assert set(local) == set(graded), (sorted(local), sorted(graded))
    differ = {g: (local[g], graded[g], messages[g][:300]) for g in graded if local[g] != graded[g]}
    assert not differ, differ


@pytest.mark.parametrize("assignment", sorted(RULE_BREAKERS))
def test_every_broken_rule_fails_and_every_honest_exercise_passes(verdicts, assignment):
    _, graded, messages = verdicts[assignment]
    broken = RULE_BREAKERS[assignment]
    for grade_id, passed in graded.items():
        exercise = grade_id.removeprefix("test_").split("__")[0]
        assert passed == (exercise not in broken), (grade_id, messages[grade_id][:300])
