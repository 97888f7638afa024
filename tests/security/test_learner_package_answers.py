"""The learner package holds no model that is an exercise's answer (issue 29, item 6).

Every learner has the package, so whatever it holds can be called from a solution cell. A
student found that the chapter 6 hints' own model of the positional encoding, called with
the right positions (``_positions_model(d_model, np.arange(n))``), *is* the encoding, and
kept the points. This test plays that student against every exercise, on fresh inputs (a
seed no notebook uses):

- **as the exercise**: every function and class defined in any module of
  ``attention_learner`` is handed to the exercise's own call adapter in place of the
  learner's code (``positional_encoding = something_from_the_package``), and judged by the
  grader's reference;
- **with its arguments bound from the case**: every callable whose parameters can all be
  filled from the case's inputs (by name, ``inputs`` for the whole case, the builder's
  defaults) and from the *right parameters* of a parameterised model (the positions
  0 .. n - 1, the frequencies 10000^(-2i / d_model), a cache that keeps every chunk, ...)
  is called, and every array it returns (or that a model it returns produces, such as a
  hint's list of (note, model) pairs) is compared with each of the exercise's reference
  outputs;
- the models that did hold answers before (listed with their right arguments) are called
  where they still exist.

Allowed, and only these: the blocks of ``attention_learner.blocks`` that later chapters are
given (:data:`GIVEN`), which earn nothing in the exercise they answer (the delegation rule).
What this cannot find, SECURITY.md states: an input builder makes a case's inputs, and for
chapter 3's causal cases that input is a causal mask, so ``inputs.attention_mask(rng,
"causal", (), n, n)`` is chapter 5's one-line ``causal_mask`` (its arguments are no case's,
so the binding here does not reach it).
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import io
import pkgutil
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import numpy as np
import pytest
import torch

import attention_learner
from attention_learner.spec import to_numpy
from grader.exercises import all_exercises

pytestmark = [pytest.mark.security, pytest.mark.filterwarnings("ignore")]

#: modules whose functions act on the process (start recording, run a notebook, install hooks)
#: rather than compute: never called here
SIDE_EFFECTS = (
    "attention_learner.__main__",
    "attention_learner.notebook_check",
    "attention_learner.op_trace",
    "attention_learner.recording",
    "attention_learner.startup",
)

#: exercise -> the given blocks that answer it on purpose (later chapters build on them)
GIVEN = {
    "scaled_dot_product_attention_torch": {"attention_learner.blocks.given_attention"},
    "MultiHeadAttention": {"attention_learner.blocks.GivenMultiHeadAttention"},
    "EncoderLayer": {"attention_learner.blocks.GivenEncoderLayer"},
    "DecoderLayer": {"attention_learner.blocks.GivenDecoderLayer"},
    "positional_encoding": {"attention_learner.blocks.given_positional_encoding"},
}

#: outputs that count calls or state conventions, not an exercise's numbers
BOOKKEEPING = {
    "float64",
    "unchanged",
    "encode_calls",
    "encode_at_most_once",
    "smallest_decode_batch",
    "lengths",
    "length_before",
    "rows_taken_one_at_a_time",
    "biases",
    "cross_keys",
    "cross_values",
    "query_rows",
}

#: the cases each exercise is tried on: a seed no notebook uses, and sizes of both parities
PARAMS: dict[str, list[dict[str, Any]]] = {
    "positional_encoding": [{"n": 9, "d_model": 7}, {"n": 6, "d_model": 10}],
    "online_softmax_attention": [{"n_k": 8, "block_size": 3}],
    "KVCache": [{"chunks": (2, 1, 3)}],
    "CachedSelfAttention": [{"chunks": (3, 2, 1)}],
}
FRESH_SEED = 29_0006


def _pairs(d_model: int) -> np.ndarray:
    return np.arange((d_model + 1) // 2, dtype=np.float64)


def right_parameters(inputs: dict[str, Any]) -> dict[str, Any]:
    """The parameters under which a parameterised model of a bug becomes the answer: the
    positions 0 .. n - 1, the frequencies w_i = 10000^(-2i / d_model) and their angles p w_i,
    the encoding's own width; every chunk kept by a cache, in order."""
    values: dict[str, Any] = {}
    if "n" in inputs and "d_model" in inputs:
        n, d = inputs["n"], inputs["d_model"]
        values["positions"] = np.arange(n, dtype=np.float64)
        values["frequencies"] = 10000.0 ** (-2 * _pairs(d) / d)
        values["angles"] = values["positions"][:, None] * values["frequencies"][None, :]
        values["width"] = d
    if "chunks" in inputs:
        values["order"] = lambda s: list(range(s + 1))
        values["kept"] = list(range(len(inputs["chunks"])))
    return values


@cache
def package_modules() -> list[Any]:
    """Every module of the learner package but those of :data:`SIDE_EFFECTS`."""
    return [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(attention_learner.__path__, "attention_learner.")
        if info.name not in SIDE_EFFECTS
    ]


def package_callables() -> list[tuple[str, Callable[..., Any]]]:
    """(qualified name, object) of every function and class defined in a module of the
    learner package, private ones included."""
    found, seen = [], set()
    for module in package_modules():
        for name, value in list(vars(module).items()):
            if (
                (inspect.isfunction(value) or inspect.isclass(value))
                and value.__module__ == module.__name__
                and id(value) not in seen
            ):
                seen.add(id(value))
                found.append((f"{module.__name__}.{name}", value))
    return found


def bound_arguments(
    fn: Callable[..., Any], inputs: dict[str, Any], extra: dict[str, Any], expected: dict[str, np.ndarray]
) -> dict[str, Any] | None:
    """Arguments for every parameter of ``fn`` from the case (None when one cannot be filled,
    or when none comes from the case: such a callable computes nothing from it)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    arguments, from_case = {}, False
    for p in parameters:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.name in inputs or p.name in ("inputs", "i"):
            arguments[p.name], from_case = inputs.get(p.name, inputs), True
        elif p.name in extra:
            arguments[p.name], from_case = extra[p.name], True
        elif p.name == "rng":
            arguments[p.name] = np.random.default_rng(FRESH_SEED)
        elif p.name == "expected":  # a student has no answer to pass: zeros of its shapes
            arguments[p.name] = {k: np.zeros_like(v) for k, v in expected.items()}
        elif p.default is not p.empty:
            continue
        else:
            return None
    return arguments if from_case else None


Case = tuple[dict[str, Any], dict[str, Any], dict[str, np.ndarray]]  # inputs, right parameters, expected


def arrays_of(value: Any, case: Case | None = None, depth: int = 0) -> Iterator[np.ndarray]:
    """Every array in what a callable returned: tensors and arrays, the values of dicts, the
    items of tuples and lists, and what each model it returns gives: a callable of no
    argument (a hint's (note, model) pairs), or one whose arguments bind from ``case``
    ((inputs, right parameters, expected), :func:`bound_arguments`: a factory of bugs)."""
    if depth > 3:
        return
    if isinstance(value, torch.Tensor):
        yield value.detach().cpu().numpy()
    elif isinstance(value, np.ndarray):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from arrays_of(v, case, depth + 1)
    elif isinstance(value, tuple | list):
        for v in value:
            yield from arrays_of(v, case, depth + 1)
    elif callable(value) and not inspect.isclass(value):
        try:
            needed = [
                p
                for p in inspect.signature(value).parameters.values()
                if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
            ]
            arguments = {} if not needed else None
            if needed and case is not None:
                arguments = bound_arguments(value, copies(case[0]), *case[1:])
            if arguments is None:
                return
            produced = value(**arguments)
        except Exception:
            return
        yield from arrays_of(produced, case, depth + 1)


def answer_arrays(inputs: dict[str, Any], expected: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The reference outputs that the exercise computes: not bookkeeping, and not an input
    handed back (a cache's final keys are the case's keys)."""
    given = [np.asarray(v) for v in inputs.values() if isinstance(v, np.ndarray)]
    return {
        k: v
        for k, v in expected.items()
        if k not in BOOKKEEPING
        and v.size > 1
        and not any(g.shape == v.shape and np.array_equal(g, v) for g in given)
    }


def reproduces(array: np.ndarray, target: np.ndarray) -> bool:
    if array.shape != target.shape or array.dtype.kind not in "biuf":
        return False
    with np.errstate(all="ignore"):
        return bool(
            np.allclose(
                array.astype(np.float64), target.astype(np.float64), atol=1e-8, rtol=1e-6, equal_nan=True
            )
        )


def quietly(call: Callable[[], Any]) -> Any:
    """``call()`` with stdout and stderr kept, torch's default dtype restored, and anything it
    raises turned into None."""
    dtype = torch.get_default_dtype()
    try:
        with (
            contextlib.redirect_stdout(io.StringIO()),
            contextlib.redirect_stderr(io.StringIO()),
            np.errstate(all="ignore"),
        ):
            return call()
    except BaseException as exc:  # noqa: BLE001 -- anything a wrongly called helper raises
        if isinstance(exc, KeyboardInterrupt):
            raise
        return None
    finally:
        torch.set_default_dtype(dtype)


def cases() -> list[tuple[str, dict[str, Any]]]:
    return [
        (name, params)
        for name in sorted(all_exercises())
        if "__" not in name
        for params in PARAMS.get(name, [{}])
    ]


def fresh(name: str, params: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    spec = all_exercises()[name]
    inputs = spec.make_inputs(np.random.default_rng(FRESH_SEED), **params)
    return inputs, spec.expected(inputs)


def copies(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in inputs.items()}


@pytest.mark.parametrize("name,params", cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_callable_of_the_package_passes_as_the_exercise(name, params):
    """``exercise = <anything the package defines>`` fails the exercise's case, but for the
    given blocks of later chapters."""
    spec = all_exercises()[name]
    inputs, _ = fresh(name, params)
    passing = []
    for qualified, candidate in package_callables():
        got = quietly(lambda c=candidate: spec.call(c, copies(inputs)))
        if got is None:
            continue
        verdict = quietly(lambda g=got: spec.judge(params, inputs, {k: to_numpy(v) for k, v in g.items()}))
        if verdict == "":
            passing.append(qualified)
    extra = sorted(set(passing) - GIVEN.get(name, set()))
    assert not extra, f"{name}: the learner package's {extra} pass(es) as the exercise itself"
    # the given blocks do pass: what this test calls and judges is what a student would hand in
    assert set(passing) == GIVEN.get(name, set()), f"{name}: a given block failed its own exercise"


def computing_the_answer(name: str, params: dict[str, Any]) -> list[str]:
    """The callables of the package that, bound from a fresh case of ``name`` and from a
    model's right parameters, return one of its reference outputs (or return a model that
    does): "qualified(arguments) -> output"."""
    inputs, expected = fresh(name, params)
    targets = answer_arrays(inputs, expected)
    extra = {**right_parameters(inputs), "params": all_exercises()[name].case.full_params(params)}
    found = []
    for qualified, candidate in package_callables():
        if qualified in GIVEN.get(name, set()):
            continue
        arguments = bound_arguments(candidate, copies(inputs), extra, expected)
        if arguments is None:
            continue
        result = quietly(lambda c=candidate, a=arguments: list(arrays_of(c(**a), (inputs, extra, expected))))
        for array in result or []:
            matched = [key for key, target in targets.items() if reproduces(array, target)]
            if matched:
                found.append(f"{qualified}({', '.join(arguments)}) -> {matched[0]}")
                break
    return found


@pytest.mark.parametrize("name,params", cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_callable_of_the_package_computes_the_answer_from_the_case(name, params):
    """No callable of the package, with its arguments bound from the case's inputs and from
    the right parameters of a model, returns an array that is one of the exercise's reference
    outputs (nor does a model it returns)."""
    found = computing_the_answer(name, params)
    assert not found, f"{name}: the learner package computes the answer: {found}"


def test_the_search_finds_an_answer_planted_in_the_package(monkeypatch):
    """The three shapes an answer took in the hints, planted in ``cases.ch06`` (built on the
    grader's reference): a model whose right parameters are the answer, a hint's list of
    (note, model) pairs, a factory of models. The search above finds each."""
    from attention_learner.cases import ch06
    from grader.reference.translator import positional_encoding

    def planted_model(d_model, positions):
        return positional_encoding(len(positions), d_model)

    def planted_notes(inputs, expected):
        return [("a note", lambda: positional_encoding(inputs["n"], inputs["d_model"]))]

    def planted_factory(width):
        return lambda inputs: {"pe": positional_encoding(inputs["n"], width)}

    for planted in (planted_model, planted_notes, planted_factory):
        planted.__module__ = ch06.__name__
        monkeypatch.setattr(ch06, planted.__name__, planted, raising=False)
    found = " ".join(computing_the_answer("positional_encoding", {"n": 9, "d_model": 7}))
    for planted in (
        "planted_model(d_model, positions)",
        "planted_notes(inputs, expected)",
        "planted_factory(width)",
    ):
        assert f"attention_learner.cases.ch06.{planted} -> pe" in found, found


#: (module, attribute, exercise, inputs -> arguments): models that held an answer at ea87504
#: (the hints' models of chapters 5 to 7), with the arguments that made them one
KNOWN = [
    (
        "attention_learner.cases.ch06",
        "_positions_model",
        "positional_encoding",
        lambda i: (i["d_model"], np.arange(i["n"], dtype=np.float64)),
    ),
    (
        "attention_learner.cases.ch06",
        "_frequencies_model",
        "positional_encoding",
        lambda i: (i["n"], i["d_model"], 10000.0 ** (-2 * _pairs(i["d_model"]) / i["d_model"])),
    ),
    (
        "attention_learner.cases.ch06",
        "_width_model",
        "positional_encoding",
        lambda i: (i["n"], i["d_model"], i["d_model"]),
    ),
    ("attention_learner.cases.ch05", "_mask_of", "padding_mask", lambda i: (i["lengths"], i["max_len"])),
    ("attention_learner.cases.ch07", "_cached_model", "CachedSelfAttention", lambda i: (i,)),
    (
        "attention_learner.cases.ch07",
        "_cache_model",
        "KVCache",
        lambda i: (i, lambda s: list(range(s + 1)), list(range(len(i["chunks"])))),
    ),
]


@pytest.mark.parametrize("module,attribute,name,arguments", KNOWN, ids=[k[1] for k in KNOWN])
def test_the_models_that_were_answers_are_not_in_the_package(module, attribute, name, arguments):
    model = getattr(importlib.import_module(module), attribute, None)
    if model is None:
        return  # gone from the package, as it should be
    for params in PARAMS.get(name, [{}]):
        inputs, expected = fresh(name, params)
        result = quietly(lambda i=inputs: list(arrays_of(model(*arguments(copies(i))))))
        targets = answer_arrays(inputs, expected)
        hits = [k for a in result or [] for k, t in targets.items() if reproduces(a, t)]
        assert not hits, f"{module}.{attribute} computes {name}'s {hits[0]} with {params}"
