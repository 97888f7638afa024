"""``grader.reference`` holds correct implementations only: no bug branches in a reference.

Classic bugs are modelled in ``grader/exercises/chNN_bugs.py`` (and the exercises' bug tables),
which the grader's named bugs and the chapters' tables share. A reference module that grows a
switch into a mistake again (a parameter or name such as ``mistake``, ``bug``, ``wrong``, a table
such as ``MISTAKES``) is a second home for bug naming; this test names it by file and line.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np

from grader.exercises.ch07_bugs import MISTAKES, online_softmax_with_mistake
from grader.reference.at_scale import online_softmax_attention

REFERENCE = Path(__file__).resolve().parents[1] / "grader" / "reference"
BUG_WORD = re.compile(r"mistake|bug|wrong|faulty|broken", re.IGNORECASE)


def bug_branches(source: str) -> list[str]:
    """Where ``source`` names a bug: function names, parameters, assigned names, by line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(node.name)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            arguments = node.args
            names += [a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)]
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.append(node.id)
        found += [f"{node.lineno}: {name}" for name in names if BUG_WORD.search(name)]
    return found


def test_no_reference_module_names_a_bug():
    modules = sorted(REFERENCE.rglob("*.py"))
    assert len(modules) > 5
    found = [
        f"{path.name}:{where}" for path in modules for where in bug_branches(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "a bug branch in grader.reference:\n" + "\n".join(found)


def test_the_scan_finds_a_switch_into_a_mistake():
    assert bug_branches("MISTAKES = ('a',)\n") == ["1: MISTAKES"]
    assert bug_branches("def f(x, mistake=None):\n    return x\n") == ["1: mistake"]
    assert bug_branches("def attention_with_bug(x):\n    return x\n") == ["1: attention_with_bug"]
    assert bug_branches("def attend(q, k, *, scale=1.0):\n    out = q\n    return out\n") == []


def test_every_mistake_of_chapter_7_differs_from_the_reference():
    rng = np.random.default_rng(3)
    Q, K, V = rng.normal(size=(4, 5)) * 1000, rng.normal(size=(11, 5)), rng.normal(size=(11, 3))
    right = online_softmax_attention(Q, K, V, 3)
    assert len(MISTAKES) == 9
    with np.errstate(all="ignore"):
        for mistake in MISTAKES:
            assert not np.allclose(online_softmax_with_mistake(Q, K, V, 3, mistake), right), mistake
