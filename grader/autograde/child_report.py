"""The one channel from a grading child to the parent: its report, and the parent's reader.

The child writes one JSON line per finished cell to a file descriptor the fork server opened
for it (the file lies in a folder the child cannot see). A line holds the cell's index, its
outputs, and the raw arrays each ``check`` call received from the learner's code:

    {"index": 7, "outputs": [...], "records": [{"exercise": ..., "seed": ..., "params": {...},
     "error": "", "arrays": {"output": {"dtype": "<f8", "shape": [3, 2], "data": base64}},
     "reached": ["aten::_softmax"]}]}

Everything in a report was written by the learner's process, so the parent trusts none of
it: :func:`read_report` caps its size, keeps only well-formed lines, and rebuilds each array
only when its declared dtype is one of two plain kinds and its declared shape matches the
bytes that are really there (no allocation larger than what was read; no pickle).
"""

from __future__ import annotations

import base64
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MAX_REPORT_BYTES = 32 * 2**20  # per notebook; a larger report fails that submission only
MAX_RECORD_ELEMENTS = 1_000_000  # per record; cases are a few hundred numbers at most
MAX_OUTPUTS_PER_CELL = 200
MAX_REACHED, MAX_REACHED_CHARS = 16, 200  # per record: what its call reached that it may not
# what the checks' to_numpy produces: the NumPy exercises' dtype rule is read from these
ARRAY_DTYPES = {"<f8": np.float64, "<f4": np.float32, "<f2": np.float16, "<i8": np.int64, "|b1": np.bool_}


class ReportTooLarge(ValueError):
    """The child wrote more than the parent will read."""


@dataclass(frozen=True)
class Record:
    """One ``check`` call as the child reported it; arrays None when unreadable or absent."""

    exercise: str
    seed: int
    params: dict[str, Any]
    error: str
    arrays: dict[str, np.ndarray] | None
    reached: tuple[str, ...] = ()  # forbidden operators and objects the call reached (op_trace)


@dataclass
class CellReport:
    index: int
    outputs: list[dict[str, Any]] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)


# ------------------------------------------------------------------ the child's side


def encode_arrays(arrays: dict[str, np.ndarray]) -> dict[str, dict[str, Any]]:
    """Arrays as JSON: float64/32/16, int64 or bool as they are (anything else as float64),
    little-endian, raw bytes in base64."""
    encoded = {}
    for key, value in arrays.items():
        array = np.asarray(value)
        wire = array.dtype.newbyteorder("<").str if array.dtype.kind in "fib" else "<f8"
        array = array.astype(wire if wire in ARRAY_DTYPES else "<f8", copy=False)
        array = np.ascontiguousarray(array).reshape(array.shape)  # a 0-d array stays 0-d
        encoded[str(key)] = {
            "dtype": array.dtype.str,
            "shape": list(array.shape),
            "data": base64.b64encode(array.tobytes()).decode("ascii"),
        }
    return encoded


def write_line(fd: int, line: dict[str, Any]) -> None:
    """Append one line to the report, retrying short writes."""
    data = (json.dumps(line) + "\n").encode()
    while data:
        written = os.write(fd, data)
        data = data[written:]


# ------------------------------------------------------------------ the parent's side


def decode_array(entry: Any) -> np.ndarray | None:
    """One array from the report, or None if anything about it is off."""
    if not isinstance(entry, dict):
        return None
    dtype, shape, data = entry.get("dtype"), entry.get("shape"), entry.get("data")
    if dtype not in ARRAY_DTYPES or not isinstance(shape, list) or not isinstance(data, str):
        return None
    if len(shape) > 8 or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        return None
    count = math.prod(shape)
    itemsize = np.dtype(ARRAY_DTYPES[dtype]).itemsize
    if count > MAX_RECORD_ELEMENTS or len(data) != 4 * math.ceil(count * itemsize / 3):
        return None  # the declared shape does not match the bytes that are there
    try:
        raw = base64.b64decode(data, validate=True)
    except ValueError:
        return None
    if len(raw) != count * itemsize:
        return None
    return np.frombuffer(raw, dtype=ARRAY_DTYPES[dtype]).reshape(shape).copy()


def _record(entry: Any) -> Record | None:
    if not isinstance(entry, dict):
        return None
    exercise, seed, params = entry.get("exercise"), entry.get("seed"), entry.get("params")
    if not isinstance(exercise, str) or not isinstance(seed, int) or not isinstance(params, dict):
        return None
    error = entry.get("error")
    arrays = None
    raw_arrays = entry.get("arrays")
    if isinstance(raw_arrays, dict) and len(raw_arrays) <= 16:
        decoded = {k: decode_array(v) for k, v in raw_arrays.items() if isinstance(k, str)}
        kept = {k: v for k, v in decoded.items() if v is not None}
        if decoded and len(kept) == len(decoded):
            arrays = kept
    raw_reached = entry.get("reached")
    reached: tuple[str, ...] = ()
    if isinstance(raw_reached, list):
        reached = tuple(r[:MAX_REACHED_CHARS] for r in raw_reached[:MAX_REACHED] if isinstance(r, str))
    return Record(exercise, seed, params, error if isinstance(error, str) else "", arrays, reached)


def _output(entry: Any) -> dict[str, Any] | None:
    """A Jupyter output the parent may put into the autograded notebook (shape-checked)."""
    if not isinstance(entry, dict):
        return None
    kind = entry.get("output_type")
    if kind == "stream" and entry.get("name") in ("stdout", "stderr") and isinstance(entry.get("text"), str):
        return {"output_type": "stream", "name": entry["name"], "text": entry["text"]}
    if kind == "error" and isinstance(entry.get("ename"), str) and isinstance(entry.get("evalue"), str):
        traceback = entry.get("traceback")
        if not (isinstance(traceback, list) and all(isinstance(t, str) for t in traceback)):
            traceback = []
        return {
            "output_type": "error",
            "ename": entry["ename"],
            "evalue": entry["evalue"],
            "traceback": traceback,
        }
    if kind in ("execute_result", "display_data") and isinstance(entry.get("data"), dict):
        data = {
            k: v for k, v in entry["data"].items() if isinstance(k, str) and isinstance(v, str | list | dict)
        }
        out = {"output_type": kind, "data": data, "metadata": {}}
        if kind == "execute_result":
            out["execution_count"] = None
        return out
    return None


def read_report(path: str | os.PathLike[str]) -> dict[int, CellReport]:
    """The report's cells by index (the first line of an index wins; forged lines are dropped).

    Raises ReportTooLarge when the file is over MAX_REPORT_BYTES.
    """
    cells: dict[int, CellReport] = {}
    try:
        size = os.stat(path).st_size
    except OSError:
        return cells
    if size > MAX_REPORT_BYTES:
        raise ReportTooLarge(
            f"the notebook's report is {size / 2**20:.0f} MB, over the "
            f"{MAX_REPORT_BYTES // 2**20} MB the grader reads"
        )
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if not isinstance(line, dict):
                continue
            index = line.get("index")
            if not isinstance(index, int) or isinstance(index, bool) or index in cells:
                continue
            raw_outputs, raw_records = line.get("outputs"), line.get("records")
            outputs = raw_outputs if isinstance(raw_outputs, list) else []
            records = raw_records if isinstance(raw_records, list) else []
            cells[index] = CellReport(
                index,
                [o for o in map(_output, outputs[:MAX_OUTPUTS_PER_CELL]) if o is not None],
                [r for r in map(_record, records) if r is not None],
            )
    return cells
