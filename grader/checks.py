"""The comparisons that test cells call, with failures explained in words.

``check(name, learner_fn, seed=..., **params)`` builds a case for the exercise ``name``,
calls the learner's function (or class) on it, and compares the result with the reference.
On a mismatch it raises ``AssertionError`` whose message gives the shape expected and got,
the largest error and where it is, and the classic bug the output matches, if any.

Under ``python -m grader autograde`` a check also records the learner's raw arrays
(``grader.recording``) and leaves the verdict to the grading process, which rebuilds the
inputs and the expected outputs itself; a check whose learner code raised still fails here.

Nothing here writes to stderr (nbgrader scores a test cell 0 if anything does): warnings the
learner's code raises are caught and reported inside the message, and the functions return
None (a number as a cell's last expression would be read as partial credit).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from grader.exercises import get_exercise
from grader.exercises.spec import Arrays, Exercise, to_numpy
from grader.recording import CheckRecord, record


def check(exercise: str, learner: Any, *, seed: int = 0, **params: Any) -> None:
    """Run one case of ``exercise`` on the learner's ``learner`` and fail with an explanation."""
    spec = get_exercise(exercise)
    inputs = spec.make_inputs(np.random.default_rng(seed), **params)
    got, error, warned = run_learner(spec, learner, inputs)
    recorded = record(CheckRecord(exercise, seed, dict(params), got, error))
    if recorded and not error:
        return  # under the grader the parent process judges these arrays; no need twice
    message = error or judge(spec, params, inputs, got)
    if message:
        raise AssertionError(message + warned)


def run_learner(
    spec: Exercise, learner: Any, inputs: dict[str, Any]
) -> tuple[Arrays | None, str, str]:
    """Call the learner's code on a copy of ``inputs``.

    Returns (outputs or None, error message or "", a note on the first warning or "").
    Warnings are caught so that they never reach stderr.
    """
    name = spec.name.split("__", 1)[0]  # "X__torch" is an aspect of the learner's X
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        try:
            outputs = spec.call(learner, copies)
            outputs = {k: to_numpy(v) for k, v in outputs.items()}
        except NotImplementedError:
            outputs, error = None, f"{name} is not implemented yet (it raises NotImplementedError)."
        except Exception as exc:  # the learner's code may raise anything
            outputs, error = None, f"{name} raised {type(exc).__name__}: {exc}"
        else:
            error = ""
    warned = ""
    if caught:
        warned = f"\n(Your code also warned: {caught[0].category.__name__}: {caught[0].message})"
    return outputs, error, warned


def judge(spec: Exercise, params: dict[str, Any], inputs: dict[str, Any], got: Arrays) -> str:
    """Compare ``got`` with the reference; return "" if it passes, else the explanation."""
    expected = {k: to_numpy(v) for k, v in spec.reference(inputs).items()}
    problems = [
        p for key in expected if (p := compare(key, expected[key], got.get(key), spec))
    ]
    if not problems:
        return ""
    lines = [f"{spec.name.split('__', 1)[0]} is wrong on {spec.case_description(params)}:"]
    lines += [f"- {p}" for p in problems]
    bug = matching_bug(spec, inputs, got)
    if bug:
        lines.append(f"This looks like {bug}.")
    if spec.hints is not None:
        lines += spec.hints(inputs, expected, got)
    return "\n".join(lines)


def compare(key: str, expected: np.ndarray, got: np.ndarray | None, spec: Exercise) -> str:
    """One output against its expected value; "" when close, else what is wrong."""
    if got is None:
        return f"no {key} was returned"
    if got.shape != expected.shape:
        hint = ""
        if got.shape == expected.shape[:-2] + expected.shape[-2:][::-1] and expected.ndim >= 2:
            hint = " (the last two axes look swapped: a missing or extra transpose)"
        return f"{key} has shape {got.shape}, expected {expected.shape}{hint}"
    if expected.dtype.kind == "b" or got.dtype.kind == "b":
        if expected.dtype.kind != got.dtype.kind:
            return f"{key} should be a bool array, got dtype {got.dtype}"
        wrong = np.argwhere(expected != got)
        if len(wrong):
            at = tuple(int(i) for i in wrong[0])
            return (
                f"{key} differs at {len(wrong)} of {expected.size} entries, first at index {at} "
                f"(expected {expected[at]}, got {got[at]})"
            )
        return ""
    bad_nan = ~np.isfinite(got) & np.isfinite(expected)
    if bad_nan.any():
        at = tuple(int(i) for i in np.argwhere(bad_nan)[0])
        return f"{key} has {int(bad_nan.sum())} NaN or infinite entries, first at index {at}"
    if np.allclose(got, expected, atol=spec.atol, rtol=spec.rtol, equal_nan=True):
        return ""
    error = np.abs(got - expected)
    error = np.where(np.isnan(error), 0.0, error)
    at = np.unravel_index(int(np.argmax(error)), error.shape)
    at_text = tuple(int(i) for i in at)
    return (
        f"{key} differs from the expected value: largest error {error[at]:.3g} at index "
        f"{at_text} (expected {expected[at]:.6g}, got {got[at]:.6g})"
    )


def matching_bug(spec: Exercise, inputs: dict[str, Any], got: Arrays) -> str:
    """The first classic bug whose outputs ``got`` reproduces, or ""."""
    for description, bug in spec.bugs.items():
        with np.errstate(all="ignore"):
            try:
                produced = {k: to_numpy(v) for k, v in bug(inputs).items()}
            except Exception:  # a bug that does not apply to this case
                continue
        if produced and all(
            k in got
            and got[k].shape == v.shape
            and np.allclose(got[k], v, atol=spec.atol, rtol=spec.rtol, equal_nan=True)
            for k, v in produced.items()
        ):
            return description
    return ""


def check_close(got: Any, expected: Any, what: str, atol: float = 1e-6) -> None:
    """A small visible assertion with a readable message, for hand-worked examples."""
    got_a, expected_a = to_numpy(got), to_numpy(expected)
    if got_a.shape != expected_a.shape:
        raise AssertionError(f"{what}: expected shape {expected_a.shape}, got {got_a.shape}")
    if not np.allclose(got_a, expected_a, atol=atol, rtol=1e-5):
        raise AssertionError(
            f"{what}: expected\n{np.array2string(expected_a, precision=4)}\n"
            f"got\n{np.array2string(got_a, precision=4)}"
        )
