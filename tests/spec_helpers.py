"""Helpers for testing exercise specs against the checks their notebooks make."""

from __future__ import annotations

from typing import Any

import nbformat
import numpy as np

from attention_learner.cell_rules import check_calls, is_test_cell
from attention_learner.spec import to_numpy
from grader.checks import judge
from grader.paths import ROOT


def notebook_checks(assignment: str) -> list[tuple[str, int, dict[str, Any]]]:
    """Every ``check("name", fn, seed=..., **params)`` call in the source notebook's test cells."""
    nb = nbformat.read(ROOT / "solutions" / assignment / f"{assignment}.ipynb", as_version=4)
    return [call for cell in nb.cells if is_test_cell(cell) for call in check_calls(cell.source)]


def assert_bugs_caught(assignment: str, exercises: list) -> None:
    """Each classic bug of each spec fails, and is named, in at least one of the notebook's cases."""
    cases = notebook_checks(assignment)
    for spec in exercises:
        mine = [(seed, params) for name, seed, params in cases if name == spec.name]
        assert mine, f"the notebook never checks {spec.name}"
        for description, bug in spec.bugs.items():
            named = False
            for seed, params in mine:
                inputs = spec.make_inputs(np.random.default_rng(seed), **params)
                try:
                    with np.errstate(all="ignore"):
                        got = {k: to_numpy(v) for k, v in bug(inputs).items()}
                except Exception:
                    continue
                if got and description in judge(spec, params, inputs, got):
                    named = True
                    break
            assert named, f"{spec.name}: no hidden case names the bug {description!r}"
