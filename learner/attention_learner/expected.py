"""The expected values of the visible test cases, shipped as data (``data/<exercise>.npz``).

``python -m grader release`` runs the instructor's reference (and every classic bug of the
exercise) on the inputs of each visible ``check(...)`` call of the notebooks and writes the
results here, so that a learner's kernel can judge those cases without any reference code.

One file per exercise (or aspect), NumPy's ``.npz`` (read with ``allow_pickle=False``):

- ``index``: a 0-d string array, JSON: a list of ``{"key": <canonical case key>, "bugs":
  [<classic bug in words>, ...]}``; entry ``i`` describes case ``c<i>``;
- ``c<i>/expected/<output>``: the expected value of one output of case ``i``;
- ``c<i>/bug<j>/<output>``: what the ``j``-th classic bug of the index returns there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from attention_learner.cases import get_case
from attention_learner.spec import Arrays, Case

DATA = Path(__file__).resolve().parent / "data"


def canonical(value: Any) -> Any:
    """Tuples become lists and NumPy scalars Python numbers, so equal params give equal keys."""
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [canonical(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


def case_key(seed: int, params: dict[str, Any]) -> str:
    """The key of one case of an exercise: its seed and explicit params, as canonical JSON."""
    return json.dumps({"seed": int(seed), "params": canonical(params)}, sort_keys=True)


@dataclass(frozen=True)
class Shipped:
    """What the data holds for one case: the expected outputs and each classic bug's outputs."""

    expected: Arrays
    bugs: list[tuple[str, Arrays]]


def data_file(exercise: str, folder: Path = DATA) -> Path:
    return folder / f"{exercise}.npz"


@cache
def load_exercise(exercise: str, folder: Path = DATA) -> dict[str, Shipped]:
    """Every shipped case of ``exercise``: case key -> :class:`Shipped` ({} if none)."""
    path = data_file(exercise, folder)
    if not path.is_file():
        return {}
    with np.load(path, allow_pickle=False) as data:
        arrays = {name: np.asarray(data[name]) for name in data.files}
    index = json.loads(str(arrays.pop("index")))
    shipped = {}
    for i, entry in enumerate(index):
        prefix = f"c{i}/"

        def group(tag: str, prefix: str = prefix) -> Arrays:
            start = f"{prefix}{tag}/"
            return {k[len(start) :]: v for k, v in arrays.items() if k.startswith(start)}

        bugs = [(description, group(f"bug{j}")) for j, description in enumerate(entry["bugs"])]
        shipped[entry["key"]] = Shipped(group("expected"), bugs)
    return shipped


def lookup(exercise: str, seed: int, params: dict[str, Any]) -> Shipped | None:
    """The shipped expected values of one case, or None when it is not a shipped case."""
    return load_exercise(exercise).get(case_key(seed, params))


def write_exercise(exercise: str, cases: dict[str, Shipped], folder: Path = DATA) -> bool:
    """Write the data of ``exercise`` (case key -> Shipped); False when the file already holds
    it, up to the rounding that differs between machines (:meth:`Case.same_values`), so
    that a release on another CPU leaves an unchanged checkout unchanged."""
    index = [
        {"key": key, "bugs": [description for description, _ in shipped.bugs]}
        for key, shipped in cases.items()
    ]
    arrays: dict[str, np.ndarray] = {"index": np.array(json.dumps(index, sort_keys=True))}
    for i, shipped in enumerate(cases.values()):
        arrays.update({f"c{i}/expected/{k}": v for k, v in shipped.expected.items()})
        for j, (_, outputs) in enumerate(shipped.bugs):
            arrays.update({f"c{i}/bug{j}/{k}": v for k, v in outputs.items()})
    path = data_file(exercise, folder)
    if path.is_file() and same_data(path, arrays, get_case(exercise)):
        return False
    folder.mkdir(parents=True, exist_ok=True)
    # allow_pickle=True is the default, named so that mypy does not match **arrays against it
    np.savez_compressed(path, allow_pickle=True, **arrays)
    load_exercise.cache_clear()
    return True


def same_data(path: Path, arrays: dict[str, np.ndarray], case: Case) -> bool:
    """True when the file at ``path`` holds ``arrays``: the same names, and values that
    ``case`` counts as the same on two machines."""
    with np.load(path, allow_pickle=False) as data:
        if sorted(data.files) != sorted(arrays):
            return False
        return all(case.same_values(np.asarray(data[k]), v) for k, v in arrays.items())
