"""How fast ``python -m grader similarity`` compares a class, and whether it finds the copies.

Builds N submissions of chapter 3 (``03_scaled_dot_product``: three exercises) in a temporary
folder, from the released notebook in chapters/, with every solution cell written by code
here:

- ``scaled_dot_product_attention``: each student's own combination of common idioms, one per
  step (scores, mask, row maximum, exponentials, normalisation, output), a helper for the
  softmax half the time, and their own names, comments, blank lines and prints;
- ``scaled_dot_product_attention_torch``: likewise from torch idioms, or the course's
  solution renamed (a learner who copied it from the open repository), or the stub;
- ``softmax_jacobian``: one of several one-line answers, or the stub;
- copy rings: ``--rings`` groups of 2 to 4 students, each member's notebook a disguised copy
  of the first member's (names changed, reformatted, comments and prints added).

Then it times the whole command (start-up included) in a subprocess, as an instructor runs
it, and prints the submissions, the pairs scored, pairs per second, the wall time, and how
many planted pairs were found, and how many pairs of the students who handed in the course's
torch solution. Other pairs flagged are counted too: generated students who happened to draw
many of the same idioms (their code is that much alike).

    .venv/bin/python benchmarks/similarity.py [--n 1000] [--rings 25] [--seed 0] [--keep]
"""

from __future__ import annotations

import argparse
import ast
import copy
import csv
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
ASSIGNMENT = "03_scaled_dot_product"
RELEASED = ROOT / "chapters" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
SOURCE = ROOT / "solutions" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
SDPA, TORCH, JACOBIAN = (
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_torch",
    "softmax_jacobian",
)
MARKER = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[^\n]*\n?", re.M)

# --- the NumPy exercise: one idiom per step; S scores, M row maxima, E exponentials,
# Z row sums, W weights (the names are each student's own, see _rename)
NUMPY_SCORES = [
    ["S = Q @ np.swapaxes(K, -1, -2) / math.sqrt(Q.shape[-1])"],
    ["d = Q.shape[-1]", "S = np.matmul(Q, K.swapaxes(-2, -1)) / np.sqrt(d)"],
    ['S = np.einsum("...qd,...kd->...qk", Q, K) * (1.0 / np.sqrt(K.shape[-1]))'],
    ["scale = Q.shape[-1] ** 0.5", "S = (Q @ np.moveaxis(K, -1, -2)) / scale"],
    ["Kt = np.swapaxes(K, -1, -2)", "S = Q @ Kt", "S = S / math.sqrt(K.shape[-1])"],
]
NUMPY_MASKS = [
    ["if mask is not None:", "    S = np.where(mask, S, -np.inf)"],
    ["if mask is not None:", "    S = np.where(np.broadcast_to(mask, S.shape), S, -np.inf)"],
    [
        "allowed = np.ones(S.shape, bool) if mask is None else np.broadcast_to(mask, S.shape)",
        "S = np.where(allowed, S, -np.inf)",
    ],
    ["if mask is not None:", "    S = S + np.where(mask, 0.0, -np.inf)"],
    ["if mask is not None:", "    S = S.copy()", "    S[~np.broadcast_to(mask, S.shape)] = -np.inf"],
]
NUMPY_MAXIMA = [
    ["M = S.max(axis=-1, keepdims=True)", "M = np.where(np.isfinite(M), M, 0.0)"],
    ["M = np.max(S, axis=-1, keepdims=True)", "M[~np.isfinite(M)] = 0"],
    ["M = np.nan_to_num(np.amax(S, axis=-1, keepdims=True), neginf=0.0)"],
    ["M = np.where(np.isneginf(S).all(axis=-1, keepdims=True), 0.0, S.max(axis=-1, keepdims=True))"],
]
NUMPY_EXPS = [
    ["E = np.exp(S - M)"],
    ["E = np.exp(np.subtract(S, M))"],
    ["S = S - M", "E = np.exp(S)"],
]
NUMPY_NORMS = [
    ["Z = E.sum(axis=-1, keepdims=True)", "W = np.divide(E, Z, out=np.zeros_like(E), where=Z > 0)"],
    ["Z = np.sum(E, axis=-1, keepdims=True)", "W = E / np.where(Z == 0, 1.0, Z)"],
    ["Z = E.sum(-1, keepdims=True)", "Z[Z == 0] = 1.0", "W = E / Z"],
    ["W = E / np.maximum(E.sum(axis=-1, keepdims=True), np.finfo(float).tiny)"],
]
NUMPY_OUTPUTS = [
    ["return W @ V, W"],
    ["return np.matmul(W, V), W"],
    ['out = np.einsum("...qk,...kv->...qv", W, V)', "return out, W"],
    ["output = W @ V", "return output, W"],
]

TORCH_SCORES = [
    ["S = Q @ K.transpose(-2, -1) / math.sqrt(Q.shape[-1])"],
    ['S = torch.einsum("...qd,...kd->...qk", Q, K) / Q.shape[-1] ** 0.5'],
    ["S = torch.matmul(Q, K.transpose(-1, -2)) * (1.0 / math.sqrt(K.size(-1)))"],
]
TORCH_MASKED = [
    [
        "if mask is not None:",
        '    S = S.masked_fill(~mask, float("-inf"))',
        "W = torch.nan_to_num(torch.softmax(S, dim=-1), nan=0.0)",
    ],
    [
        "if mask is not None:",
        "    S = torch.where(mask, S, torch.full_like(S, -math.inf))",
        "W = torch.softmax(S, dim=-1)",
        "W = torch.where(torch.isnan(W), torch.zeros_like(W), W)",
    ],
    [
        "if mask is None:",
        "    mask = torch.ones_like(S, dtype=torch.bool)",
        "mask = mask.expand(S.shape)",
        "keep = mask.any(dim=-1, keepdim=True)",
        "S = S.masked_fill(~mask, -1e30)",
        "W = torch.softmax(S, dim=-1) * keep",
    ],
    [
        "E = torch.exp(S - S.amax(dim=-1, keepdim=True).detach())",
        "if mask is not None:",
        "    E = E * mask",
        "Z = E.sum(dim=-1, keepdim=True)",
        "W = E / torch.clamp(Z, min=1e-300)",
    ],
]
TORCH_OUTPUTS = [["return W @ V, W"], ["return torch.matmul(W, V), W"]]

JACOBIANS = [
    "return np.diag(p) - np.outer(p, p)",
    "return np.diag(p) - p[:, None] * p[None, :]",
    "return np.diagflat(p) - np.einsum('i,j->ij', p, p)",
    "p = np.asarray(p, dtype=float)\n    return np.diag(p) - p.reshape(-1, 1) @ p.reshape(1, -1)",
    "n = len(p)\n    J = np.zeros((n, n))\n    for i in range(n):\n        for j in range(n):\n"
    "            J[i, j] = p[i] * ((i == j) - p[j])\n    return J",
    "J = -np.outer(p, p)\n    J[np.diag_indices_from(J)] += p\n    return J",
]

# what else differs from one student to the next: how the last axis is named, keepdims or a
# new axis, and a first line or two of their own
NUMPY_AXES = ["-1", "S.ndim - 1", "len(S.shape) - 1"]
TORCH_AXES = ["-1", "S.dim() - 1", "len(S.shape) - 1"]
NUMPY_PREAMBLES = [
    [],
    ["Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)"],
    ['assert Q.shape[-1] == K.shape[-1], "queries and keys differ in size"'],
    ["n_q, n_k = Q.shape[-2], K.shape[-2]"],
    ["Q = np.asarray(Q, dtype=np.float64)"],
]
TORCH_PREAMBLES = [
    [],
    ["assert Q.shape[-1] == K.shape[-1]"],
    ["Q, K, V = Q.double(), K.double(), V.double()"],
    ["d_k = Q.size(-1)"],
]

NAMES = {
    "S": ["scores", "logits", "s", "att", "sim", "raw"],
    "M": ["m", "row_max", "peak", "top", "mx"],
    "E": ["e", "ex", "expd", "num", "exps"],
    "Z": ["z", "total", "den", "norm", "sums"],
    "W": ["weights", "w", "probs", "attn", "p", "alpha"],
    "d": ["d", "d_k", "dk", "dim"],
    "Kt": ["Kt", "K_T", "keys_t"],
    "scale": ["scale", "root_d", "denom"],
    "allowed": ["allowed", "ok", "visible"],
    "out": ["out", "result", "context"],
    "output": ["output", "ctx", "y"],
    "keep": ["keep", "has_key", "any_key"],
}
COMMENTS = [
    "# scores",
    "# numerically stable",
    "# TODO: check shapes",
    "# fully masked rows",
    "# softmax",
    "# my implementation",
    "# normalise",
]


def _rename(lines: list[str], rng: random.Random) -> list[str]:
    mapping = {k: rng.choice(v) for k, v in NAMES.items()}
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, mapping)) + r")\b")
    return [pattern.sub(lambda m: mapping[m.group()], line) for line in lines]


def _cosmetics(lines: list[str], rng: random.Random) -> list[str]:
    out = []
    for line in lines:
        indent = line[: len(line) - len(line.lstrip())]
        if rng.random() < 0.15:
            out.append(indent + rng.choice(COMMENTS))
        out.append(line)
        if rng.random() < 0.08 and not line.rstrip().endswith(":") and "return" not in line:
            out.append(indent + f"print({rng.choice(['Q.shape', 'mask is None', '1'])})")
        if rng.random() < 0.1:
            out.append("")
    return out


def _habits(lines: list[str], rng: random.Random, axes: list[str], keep: str, new_axis: str) -> list[str]:
    axis = rng.choice(axes)
    lines = [line.replace("axis=-1", f"axis={axis}").replace("dim=-1", f"dim={axis}") for line in lines]
    if rng.random() < 0.5:
        lines = [line.replace(keep, new_axis) for line in lines]
    return lines


def numpy_solution(rng: random.Random) -> str:
    steps = [rng.choice(NUMPY_PREAMBLES), rng.choice(NUMPY_SCORES), rng.choice(NUMPY_MASKS)]
    softmax = _habits(
        [*rng.choice(NUMPY_MAXIMA), *rng.choice(NUMPY_EXPS), *rng.choice(NUMPY_NORMS)],
        rng,
        NUMPY_AXES,
        ", keepdims=True)",
        ")[..., None]",
    )
    output = rng.choice(NUMPY_OUTPUTS)
    head = f"def {SDPA}(Q, K, V, mask=None):"
    if rng.random() < 0.5:
        helper = ["def _softmax(S):", *("    " + s for s in softmax), "    return W", ""]
        body = [*(s for step in steps for s in step), "W = _softmax(S)", *output]
        lines = (
            helper + [head] + ["    " + s for s in body]
            if rng.random() < 0.5
            else [head] + ["    " + s for s in body] + [""] + helper
        )
    else:
        body = [*(s for step in steps for s in step), *softmax, *output]
        lines = [head] + ["    " + s for s in body]
    return "\n".join(_cosmetics(_rename(lines, rng), rng)) + "\n"


COURSE_COPY = "# handed in the course's solution\n"  # marks the copies, to count them apart


def torch_solution(rng: random.Random, course: str) -> str | None:
    draw = rng.random()
    if draw < 0.3:
        return None  # the stub, untouched
    if draw < 0.5:
        return COURSE_COPY + disguise(course, rng)
    body = [
        *rng.choice(TORCH_PREAMBLES),
        *rng.choice(TORCH_SCORES),
        *_habits(rng.choice(TORCH_MASKED), rng, TORCH_AXES, ", keepdim=True)", ").unsqueeze(-1)"),
        *rng.choice(TORCH_OUTPUTS),
    ]
    lines = [f"def {TORCH}(Q, K, V, mask=None):"] + ["    " + s for s in body]
    return "\n".join(_cosmetics(_rename(lines, rng), rng)) + "\n"


def jacobian_solution(rng: random.Random) -> str | None:
    if rng.random() < 0.2:
        return None
    return f"def {JACOBIAN}(p):\n    {rng.choice(JACOBIANS)}\n"


class _Renamer(ast.NodeTransformer):
    """Every name the code binds, except the exercise's function, renamed."""

    def __init__(self, code: ast.Module, rng: random.Random, keep: set[str]) -> None:
        bound = {n.id for n in ast.walk(code) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.arg for n in ast.walk(code) if isinstance(n, ast.arg)}
        bound |= {n.name for n in ast.walk(code) if isinstance(n, ast.FunctionDef)}
        self.mapping = {name: f"{name.strip('_')}_{rng.randrange(100)}" for name in sorted(bound - keep)}

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.mapping.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.mapping.get(node.arg, node.arg)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.mapping.get(node.name, node.name)
        self.generic_visit(node)
        return node


def disguise(code: str, rng: random.Random) -> str:
    """``code`` renamed, reformatted (ast.unparse: comments gone, layout redone), with comments,
    blank lines and prints added."""
    tree = ast.parse(code)
    tree = _Renamer(tree, rng, {SDPA, TORCH, JACOBIAN}).visit(tree)
    return "\n".join(_cosmetics(ast.unparse(tree).splitlines(), rng)) + "\n"


def course_solution(grade_id: str) -> str:
    nb = nbformat.read(SOURCE, as_version=4)
    for cell in nb.cells:
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id") == grade_id:
            return MARKER.sub("", cell.source)
    raise KeyError(grade_id)


def build(submitted: Path, n: int, rings: int, rng: random.Random) -> tuple[set[tuple[str, str]], set[str]]:
    """Write the class; return the planted pairs (student ids, sorted) and the students who
    handed in the course's torch solution."""
    template = nbformat.read(RELEASED, as_version=4)
    course_torch = course_solution(TORCH)
    students = [f"s{i:04d}" for i in range(n)]
    codes = {
        s: {
            SDPA: numpy_solution(rng),
            TORCH: torch_solution(rng, course_torch),
            JACOBIAN: jacobian_solution(rng),
        }
        for s in students
    }
    planted: set[tuple[str, str]] = set()
    pool = students[:]
    rng.shuffle(pool)
    for _ in range(rings):
        ring = [pool.pop() for _ in range(rng.randint(2, 4))]
        for member in ring[1:]:
            codes[member] = {g: None if c is None else disguise(c, rng) for g, c in codes[ring[0]].items()}
        planted |= set(combinations(sorted(ring), 2))  # each pair sorted
    copied = {s for s in students if (codes[s][TORCH] or "").startswith(COURSE_COPY)}
    for student in students:
        nb = copy.deepcopy(template)
        for cell in nb.cells:
            grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if codes[student].get(grade_id) is not None:
                cell.source = codes[student][grade_id]
        folder = submitted / student / ASSIGNMENT
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{ASSIGNMENT}.ipynb")
    return planted, copied


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="submissions (default 1000)")
    parser.add_argument("--rings", type=int, default=25, help="copy rings of 2 to 4 (default 25)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="similarity-bench-"))
    try:
        started = time.monotonic()
        planted, copied = build(root / "submitted", args.n, args.rings, random.Random(args.seed))
        print(
            f"built {args.n} submissions ({len(planted)} planted pairs in {args.rings} rings) "
            f"in {time.monotonic() - started:.1f} s"
        )
        report = root / "report"
        command = [
            sys.executable,
            "-m",
            "grader",
            "similarity",
            str(root / "submitted"),
            "--out",
            str(report),
            "--source",
            str(ROOT / "solutions"),
        ]
        started = time.monotonic()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        wall = time.monotonic() - started
        if done.returncode != 0:
            print(done.stdout, done.stderr, sep="\n")
            return 1
        print(done.stdout.strip())
        count = re.search(r"(\d+) pairs scored", done.stdout)
        if count is None:
            raise RuntimeError(f"the similarity command did not say how many pairs it scored:\n{done.stdout}")
        scored = int(count.group(1))
        with open(report / "similarity.csv", newline="", encoding="utf-8") as handle:
            rows = list(csv.DictReader(handle))
        flagged = {(r["exercise"], *sorted((r["student_a"], r["student_b"]))) for r in rows}
        found = {p for p in planted if any((g, *p) in flagged for g in (SDPA, TORCH, JACOBIAN))}
        found_numpy = {p for p in planted if (SDPA, *p) in flagged}
        course_pairs = {f for f in flagged if f[0] == TORCH and set(f[1:]) <= copied}
        outside = {f for f in flagged if tuple(f[1:]) not in planted} - course_pairs
        per_exercise = {g: sum(1 for f in outside if f[0] == g) for g in (SDPA, TORCH, JACOBIAN)}
        print(
            f"submissions: {args.n}   pairs scored: {scored:,}   wall time: {wall:.1f} s "
            f"(whole command, start-up included)   pairs scored per second: {scored / wall:,.0f}"
        )
        print(
            f"all pairs of every exercise: {3 * args.n * (args.n - 1) // 2:,} "
            f"({3 * args.n * (args.n - 1) // 2 / wall:,.0f} per second)"
        )
        print(
            f"planted pairs found: {len(found)} of {len(planted)} (in the NumPy exercise: "
            f"{len(found_numpy)}); pairs of the {len(copied)} students who handed in the course's "
            f"torch solution found: {len(course_pairs)} of {len(copied) * (len(copied) - 1) // 2}"
        )
        print(
            f"other pairs flagged: {len(outside)} (generated students who drew many of the same "
            "idioms), by exercise: " + ", ".join(f"{g} {c}" for g, c in per_exercise.items())
        )
        if args.keep:
            print(f"kept {root}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
