"""The checks that test cells call, and the failure messages both sides of grading share.

``check(name, learner_fn, seed=..., **params)`` builds one case of the exercise ``name``,
calls the learner's function (or class) on it and judges the raw outputs. On a mismatch it
raises ``AssertionError`` whose message gives the shape expected and got, the largest error
and where it is, and the classic bug the output matches, if any.

Where the verdict comes from:

- under the grader (recording on, see :mod:`attention_learner.recording`) it does not judge:
  it records the learner's raw arrays and the grader's parent process judges them with the
  same message composition (:func:`explain`), from expected values it computes itself;
- in a learner's kernel it judges the visible cases against the expected values shipped with
  this package (:mod:`attention_learner.expected`);
- a case that is not shipped (a hidden case, or one the learner made up) is judged by the
  instructor's ``grader`` package when it is installed (it registers itself under the entry
  point group ``attention_learner.judges``); otherwise the check says plainly that it cannot
  judge that case here.

Nothing here writes to stderr (nbgrader scores a test cell 0 if anything does): warnings the
learner's code raises are caught and reported inside the message, and the functions return
None (a number as a cell's last expression would be read as partial credit).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from functools import cache
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import numpy as np

from attention_learner import expected as shipped_data
from attention_learner.cases import get_case
from attention_learner.op_trace import call_traced, delegation_message
from attention_learner.recording import CLOSE_CHECK, CheckRecord, drawn_seed, is_recording, record
from attention_learner.spec import Arrays, Case, Inputs, to_numpy
from attention_learner.tolerance import all_close, allowed, matches

Judge = Callable[[str, dict[str, Any], Inputs, Arrays], str]


class NoExpectedValues(LookupError):
    """A check of a case whose expected values are neither shipped nor computable here."""


def check(exercise: str, learner: Any, *, seed: int = 0, **params: Any) -> None:
    """Run one case of ``exercise`` on the learner's ``learner`` and fail with an explanation."""
    case = get_case(exercise)
    run_check(case, learner, seed, params, lambda inputs, got: judge_here(case, seed, params, inputs, got))


def run_check(
    case: Case, learner: Any, seed: int, params: dict[str, Any], judge: Callable[[Inputs, Arrays], str]
) -> None:
    """The one body of every ``check``: build the case's inputs (from the job's salt under the
    grader), call the learner's code, then record the raw outputs for the grader's parent
    (under the grader) or decide here with ``judge`` (inputs, outputs) -> "" or the message."""
    inputs = case.make_inputs(np.random.default_rng(drawn_seed(case.name, seed, params)), **params)
    got, error, warned, reached = run_learner(case, learner, inputs)
    recorded = record(CheckRecord(case.name, seed, dict(params), got, error, tuple(reached)))
    if error:
        raise AssertionError(error + warned)
    if recorded:
        return  # the grader's parent process judges these arrays
    assert got is not None
    message = judge(inputs, got)
    if message:
        raise AssertionError(message + warned)
    _tally.passed += 1


def run_learner(case: Case, learner: Any, inputs: Inputs) -> tuple[Arrays | None, str, str, list[str]]:
    """Call the learner's code on a copy of ``inputs``, traced (:mod:`attention_learner.op_trace`).

    Returns (outputs or None, error message or "", a note on the first warning or "", what the
    call reached that its exercise forbids: then the outputs are None and the error says why).
    Warnings are caught so that they never reach stderr.
    """
    name = case.function
    copies = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    reached: list[str] = []
    with warnings.catch_warnings(record=True) as caught, np.errstate(all="ignore"):
        warnings.simplefilter("always")
        try:
            raw, reached = call_traced(case.function, lambda: case.call(learner, copies))
            outputs = {k: to_numpy(v) for k, v in raw.items()}
        except NotImplementedError:
            outputs, error = None, f"{name} is not implemented yet (it raises NotImplementedError)."
        except Exception as exc:  # the learner's code may raise anything
            outputs = None
            error = f"{name} raised {type(exc).__name__}: {exc}\n"
            upstream = raising_function(exc)
            if upstream and upstream.split(".")[0] != name:
                error += (
                    f"The error was raised inside your {upstream}, which {name} calls: if "
                    f"{upstream}'s own tests fail, fix it first.\n"
                )
            error += input_summary(inputs)
        else:
            error = delegation_message(case.function, reached) if reached else ""
            outputs = None if reached else outputs
    warned = ""
    if caught:
        warned = f"\n(Your code also warned: {caught[0].category.__name__}: {caught[0].message})"
    return outputs, error, warned, reached


def judge_here(case: Case, seed: int, params: dict[str, Any], inputs: Inputs, got: Arrays) -> str:
    """The verdict in this process: shipped data first, then the instructor's grader."""
    shipped = shipped_data.lookup(case.name, seed, params)
    if shipped is not None:
        return explain(case, params, inputs, got, shipped.expected, shipped.bugs)
    judge = instructor_judge()
    if judge is not None:
        return judge(case.name, dict(params), inputs, got)
    call = ", ".join([repr(case.name), f"seed={seed}"] + [f"{k}={v!r}" for k, v in params.items()])
    raise NoExpectedValues(
        f"check({call}) is not one of the visible test cases, so attention_learner has no "
        "expected values for it: only the grader can judge it. The visible checks of the "
        "notebook work as they are."
    )


def instructor_judge() -> Judge | None:
    """The judge the instructor's ``grader`` package registers (entry point group
    ``attention_learner.judges``), when it is installed here."""
    return _judge_from_entry_points()


@cache
def _judge_from_entry_points() -> Judge | None:
    for entry in entry_points(group="attention_learner.judges"):
        try:
            judge: Judge = entry.load()  # the group's contract: a Judge
            return judge
        except Exception:  # registered but not importable here (e.g. in a grading sandbox)
            continue
    return None


# ---------------------------------------------------------------- messages


_LIBRARY = (str(Path(__file__).resolve().parent), "site-packages", "dist-packages", sys.prefix)


def raising_function(exc: BaseException) -> str:
    """The innermost learner-written function on ``exc``'s traceback ("" if none): a frame
    whose code is not in this package, the Python library or an installed package."""
    found = ""
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if not code.co_filename.startswith(_LIBRARY) and "site-packages" not in code.co_filename:
            name = getattr(code, "co_qualname", code.co_name)
            if not name.startswith("<"):  # not a module body, lambda or comprehension
                found = name
        tb = tb.tb_next
    if not found and exc.__cause__ is not None:  # an adapter re-raised it with a note
        return raising_function(exc.__cause__)
    return found


def input_summary(inputs: Inputs) -> str:
    """The case's inputs in one line: each array's shape (and dtype if not float64), each
    number or flag; for a message, so that a failure can be reproduced by hand."""
    parts = []
    for key, value in inputs.items():
        if isinstance(value, np.ndarray):
            kind = "" if value.dtype == np.float64 else f" {value.dtype}"
            parts.append(f"{key} {tuple(value.shape)}{kind}")
        elif value is None or isinstance(value, bool | int | float | str):
            parts.append(f"{key}={value!r}")
        elif isinstance(value, dict):
            parts.append(f"{key}: {len(value)} arrays")
    return "The case's inputs: " + ", ".join(parts) + "."


def explain(
    case: Case,
    params: dict[str, Any],
    inputs: Inputs,
    got: Arrays,
    expected: Arrays,
    bugs: list[tuple[str, Arrays]],
) -> str:
    """Compare a learner's raw outputs ``got`` with ``expected``; "" when they pass.

    Otherwise the explanation: what is wrong with each output, the classic bug among ``bugs``
    (description, that bug's outputs on these inputs) that ``got`` reproduces, and the case's
    hints. Both the learner's kernel and the grader's parent compose messages here.
    """
    raw = got
    if case.derive is not None:
        try:
            got = case.derive(inputs, got)
        except Exception as exc:  # e.g. outputs of the wrong shape
            return f"{case.function} is wrong on {case.case_description(params)}: {exc}\n" + input_summary(
                inputs
            )
    atol, rtol = case.tolerance(params)
    entry_atol = case.entry_atol(params, inputs, expected)
    problems = [
        p
        for key in expected
        if (p := compare(key, expected[key], got.get(key), entry_atol[key], rtol, case.labels))
    ]
    if not problems:
        return ""
    lines = [f"{case.function} is wrong on {case.case_description(params)}:"]
    lines += [f"- {p}" for p in problems]
    # a classic bug is named only where it shows: its outputs must differ from the expected ones
    showing = [
        (description, produced)
        for description, produced in bugs
        if any(k not in expected or compare(k, expected[k], v, atol, rtol) for k, v in produced.items())
    ]
    bug = matching_bug(raw, showing, atol, rtol)
    if bug:
        lines.append(f"This looks like {bug}.")
    if case.hints is not None:
        lines += case.hints(inputs, expected, got)
    lines.append(input_summary(inputs))
    return "\n".join(lines)


def compare(
    key: str,
    expected: np.ndarray,
    got: np.ndarray | None,
    atol: float | np.ndarray = 1e-6,
    rtol: float = 1e-5,
    labels: dict[str, str] | None = None,
) -> str:
    """One output against its expected value; "" when close, else what is wrong, in words.

    An entry is close where |got - expected| <= atol + rtol |expected|; ``atol`` may be an
    array (one absolute tolerance per entry, :meth:`Case.entry_atol`). The entry a failure
    names is the one furthest beyond its tolerance, which need not be the largest error."""
    what = (labels or {}).get(key, key)
    if got is None:
        return f"no {what} was returned"
    if got.shape != expected.shape:
        hint = ""
        if expected.ndim >= 2 and got.shape == expected.shape[:-2] + expected.shape[-2:][::-1]:
            hint = " (the last two axes look swapped: a missing or extra transpose)"
        return f"{what} has shape {got.shape}, expected {expected.shape}{hint}"
    if expected.dtype.kind == "b" or got.dtype.kind == "b":
        if expected.dtype.kind != got.dtype.kind:
            return f"{what} should be a bool array, got dtype {got.dtype}"
        wrong = np.argwhere(expected != got)
        if len(wrong):
            at = tuple(int(i) for i in wrong[0])
            return (
                f"{what} differs at {len(wrong)} of {expected.size} entries, first at index {at} "
                f"(expected {bool(expected[at])}, got {bool(got[at])})"
            )
        return ""
    bad = ~np.isfinite(got) & np.isfinite(expected)
    if bad.any():
        at = tuple(int(i) for i in np.argwhere(bad)[0])
        return f"{what} has {int(bad.sum())} NaN or infinite entries, first at index {at}"
    if all_close(got, expected, atol, rtol):
        return ""
    with np.errstate(invalid="ignore"):  # inf - inf where both are infinite
        error = np.abs(got - expected)
    error = np.where(np.isnan(error), 0.0, error)
    limit = np.broadcast_to(allowed(expected, atol, rtol), error.shape)
    worst = np.unravel_index(int(np.argmax(error / np.where(limit > 0, limit, np.inf))), error.shape)
    if error[worst] <= limit[worst]:  # only a NaN or an infinity out of place (limit is finite)
        worst = np.unravel_index(int(np.argmax(error)), error.shape)
    at_text = tuple(int(i) for i in worst)
    return (
        f"{what} differs from the expected value: the largest error beyond its tolerance is "
        f"{float(error[worst]):.3g} at index {at_text} (expected {float(expected[worst]):.6g}, got "
        f"{float(got[worst]):.6g}, allowed {float(limit[worst]):.2g})"
    )


def matching_bug(got: Arrays, bugs: list[tuple[str, Arrays]], atol: float, rtol: float) -> str:
    """The first classic bug (description, its outputs) whose outputs ``got`` reproduces, or ""."""
    for description, produced in bugs:
        if produced and all(matches(got.get(k), v, atol, rtol) for k, v in produced.items()):
            return description
    return ""


def check_close(got: Any, expected: Any, what: str, atol: float = 1e-6, rtol: float = 1e-5) -> None:
    """A small visible assertion with a readable message, for hand-worked examples; ``atol`` and
    ``rtol`` are the tolerance of :mod:`attention_learner.tolerance` (a case's, where the example
    is one).

    Under the grader it judges nothing: it records both arrays, and the parent compares the
    learner's ``got`` with the ``expected`` of the same call in the source's own run.
    """
    got_a, expected_a = to_numpy(got), to_numpy(expected)
    params = {"what": str(what), "atol": float(atol), "rtol": float(rtol)}
    if record(CheckRecord(CLOSE_CHECK, 0, params, {"got": got_a, "expected": expected_a})):
        return
    message = close_message(got_a, expected_a, what, atol, rtol)
    if message:
        raise AssertionError(message)
    _tally.passed += 1


def close_message(
    got: np.ndarray, expected: np.ndarray, what: str, atol: float = 1e-6, rtol: float = 1e-5
) -> str:
    """ "" when ``got`` matches ``expected`` (shape, then values within ``atol`` and ``rtol``:
    :func:`attention_learner.tolerance.close_entries`), else what is wrong; :func:`check_close`
    and the grader's parent both decide with it, at the tolerance the check was called with."""
    if got.shape != expected.shape:
        return f"{what}: expected shape {expected.shape}, got {got.shape}"
    if not all_close(got, expected, atol, rtol):
        return (
            f"{what}: expected\n{np.array2string(expected, precision=4)}\n"
            f"got\n{np.array2string(got, precision=4)}"
        )
    return ""


# ---------------------------------------------------------------- "passed: 2 checks"


class _Tally:
    """How many checks passed in the cell that is running (judged here, not recorded)."""

    passed = 0


_tally = _Tally()


def _start_cell(*_: Any) -> None:
    _tally.passed = 0


def _end_cell(result: Any) -> None:
    """After a cell whose checks all passed here, one short line, so a silent pass is seen
    (not under the grader, whose parent alone decides)."""
    if getattr(result, "success", False) and _tally.passed and not is_recording():
        print(f"passed: {_tally.passed} check{'s' if _tally.passed != 1 else ''}")
    _tally.passed = 0


def announce_passes_in(shell: Any) -> None:
    """Make IPython ``shell`` print "passed: N checks" after each cell whose checks passed,
    and show the learner's warnings on stdout (:func:`show_warnings_on_stdout`)."""
    if shell is None or getattr(shell, "_attention_announces", False):
        return
    shell.events.register("pre_run_cell", _start_cell)
    shell.events.register("post_run_cell", _end_cell)
    shell._attention_announces = True
    show_warnings_on_stdout()


WARNED = "Your code warned (a warning costs no points in this course): "


def show_warnings_on_stdout() -> None:
    """Show every warning as one line on stdout instead of stderr.

    nbgrader scores a test cell 0 when anything reaches stderr, so a harmless warning from
    the learner's code (torch's UserWarning on ``torch.tensor(a_tensor)``) would cost a
    correct test its points. In this course's notebooks a warning is shown, in the cell and
    in the feedback, and costs nothing: the kernel of a notebook that imports this package
    (Jupyter, nbgrader validate, plain nbgrader autograde) and the grader's child for this
    course's notebooks both show warnings this way. Any other write to stderr still counts.
    """

    def show(
        message: Any,
        category: type[Warning],
        filename: str,
        lineno: int,
        file: Any = None,
        line: str | None = None,
    ) -> None:
        sys.stdout.write(f"{WARNED}{category.__name__}: {message}\n")

    warnings.showwarning = show


def _current_shell() -> Any:
    ipython = sys.modules.get("IPython")  # only where a notebook kernel already imported it
    return ipython.get_ipython() if ipython is not None else None


announce_passes_in(_current_shell())
