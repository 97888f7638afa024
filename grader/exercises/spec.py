"""What an exercise is, for the grader: a learner-side case plus the answer and the classic bugs.

The case (:class:`attention_learner.spec.Case`) knows how to build inputs, call the learner
and describe a failure; it lives in the learner package. The :class:`Exercise` adds what only
the instructor's side may hold: the reference outputs and the outputs of each classic bug,
and judges a learner's raw arrays with the learner package's own message composition.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attention_learner.cases import get_case
from attention_learner.checks import explain
from attention_learner.conventions import reports_conventions
from attention_learner.expected import Shipped
from attention_learner.spec import Arrays, Case, Inputs, to_numpy, unpack

__all__ = [
    "Arrays",
    "Exercise",
    "Inputs",
    "attention_outputs",
    "exercise",
    "numpy_exercise",
    "to_numpy",
    "unpack",
]


@dataclass(frozen=True)
class Exercise:
    """One graded function or class of the contract (or one aspect of it).

    case:      the learner-side case (name, make_inputs, call, describe, hints, tolerances).
    reference: inputs -> the expected outputs (the keys of what ``case.derive`` or
               ``case.call`` gives).
    bugs:      classic bug, in words -> inputs -> the outputs that bug produces ({} where the
               bug does not apply); a failing output that matches one is named in the message.
    memory_budget: bytes that a test cell making this check may allocate when graded (the
               job's address-space limit is lowered to that for the cell); None = no rule.
    """

    case: Case
    reference: Callable[[Inputs], dict[str, Any]]
    bugs: Mapping[str, Callable[[Inputs], dict[str, Any]]] = field(default_factory=dict)
    memory_budget: int | None = None

    @property
    def name(self) -> str:
        return self.case.name

    @property
    def make_inputs(self) -> Callable[..., Inputs]:
        return self.case.make_inputs

    @property
    def call(self) -> Callable[[Any, Inputs], dict[str, Any]]:
        return self.case.call

    @property
    def atol(self) -> float:
        return self.case.atol

    @property
    def rtol(self) -> float:
        return self.case.rtol

    def case_description(self, params: dict[str, Any]) -> str:
        return self.case.case_description(params)

    def expected(self, inputs: Inputs) -> Arrays:
        """The reference outputs on ``inputs``, as arrays."""
        with np.errstate(all="ignore"):
            return {k: to_numpy(v) for k, v in self.reference(inputs).items()}

    def bug_outputs(self, inputs: Inputs) -> list[tuple[str, Arrays]]:
        """(description, outputs) of every classic bug that applies to ``inputs``, in order."""
        produced = []
        for description, bug in self.bugs.items():
            with np.errstate(all="ignore"):
                try:
                    outputs = {k: to_numpy(v) for k, v in bug(inputs).items()}
                except Exception:  # a bug that does not apply to this case
                    continue
            if outputs:
                produced.append((description, outputs))
        return produced

    def answers(self, inputs: Inputs) -> Shipped:
        """What a verdict on ``inputs`` compares with: the reference's and every classic bug's
        outputs (the record ``release`` ships for a visible case)."""
        return Shipped(self.expected(inputs), self.bug_outputs(inputs))

    def judge(self, params: dict[str, Any], inputs: Inputs, got: Arrays,
              answers: Shipped | None = None) -> str:  # fmt: skip
        """The verdict on a learner's raw outputs ``got``: "" when they pass, else the message.

        ``answers`` are ``self.answers(inputs)`` when the caller already has them.
        """
        answers = answers or self.answers(inputs)
        return explain(self.case, params, inputs, got, answers.expected, answers.bugs)


def numpy_exercise(spec: Exercise) -> Exercise:
    """``spec`` whose reference also states the NumPy conventions its case reports: every
    output float64, every input array left unmodified (``attention_learner.conventions``)."""
    reference = spec.reference

    def with_conventions(inputs: Inputs) -> dict[str, Any]:
        return {**reference(inputs), "float64": np.array(True), "unchanged": np.array(True)}

    return dataclasses.replace(spec, reference=with_conventions)


def exercise(
    name: str,
    reference: Callable[[Inputs], dict[str, Any]],
    bugs: Mapping[str, Callable[[Inputs], dict[str, Any]]] | None = None,
) -> Exercise:
    """The learner package's case ``name`` with its reference and classic bugs.

    Where the case reports the NumPy conventions (a case made by
    ``attention_learner.conventions.numpy_case``), the reference states them too: which
    exercises are NumPy ones is decided once, by the learner's case.
    """
    spec = Exercise(get_case(name), reference, dict(bugs or {}))
    return numpy_exercise(spec) if reports_conventions(spec.case) else spec


def attention_outputs(inputs: Inputs, weights: np.ndarray) -> Arrays:
    """What attention returns for ``weights`` (..., n_q, n_k) over the values ``inputs["V"]``
    (..., n_k, d_v): the output weights @ V and the weights; for classic bugs that get the
    weights wrong."""
    return {"output": weights @ inputs["V"], "weights": weights}
