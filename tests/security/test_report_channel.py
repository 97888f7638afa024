"""The parent's reader of a child's report trusts nothing in it (grader/autograde/child_report.py)."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest

from grader.autograde import child_report
from grader.autograde.child_report import ReportTooLarge, decode_array, encode_arrays, read_report

pytestmark = [pytest.mark.security, pytest.mark.grading]


@pytest.mark.parametrize(
    "value",
    [
        np.float64(3.5),
        np.arange(6.0).reshape(2, 3),
        np.array([True, False]),
        np.zeros((0, 4)),
        np.arange(4, dtype=np.int32),
    ],
)
def test_arrays_round_trip_with_their_shape(value):
    decoded = decode_array(encode_arrays({"x": value})["x"])
    assert decoded.shape == np.shape(value)
    assert decoded.dtype == (np.bool_ if np.asarray(value).dtype.kind == "b" else np.float64)
    np.testing.assert_array_equal(decoded, value)


def _entry(dtype="<f8", shape=(2,), data=bytes(16)):
    return {"dtype": dtype, "shape": list(shape), "data": base64.b64encode(data).decode()}


@pytest.mark.parametrize(
    "entry",
    [
        _entry(shape=(100_000, 100_000), data=bytes(16)),  # a huge declared shape over 16 bytes
        _entry(shape=(3,)),  # declared 24 bytes, 16 there
        _entry(dtype="|O"),  # objects (pickle) are never rebuilt
        _entry(dtype="<c16"),  # only float64/32/16, int64 and bool are expected
        _entry(dtype=">f8"),  # big-endian: the child always writes little-endian
        _entry(shape=(-2,)),
        _entry(shape=(True,)),
        {"dtype": "<f8", "shape": [2], "data": "!!not base64!!"},
        {"dtype": "<f8", "shape": "2", "data": ""},
        [1, 2, 3],
        None,
    ],
)
def test_forged_arrays_are_refused_before_any_allocation(entry):
    assert decode_array(entry) is None


def test_a_report_is_read_defensively(tmp_path):
    report = tmp_path / "report"
    good = {
        "index": 3,
        "outputs": [{"output_type": "stream", "name": "stdout", "text": "hi"}, {"output_type": "weird"}],
        "records": [
            {
                "exercise": "softmax",
                "seed": 1,
                "params": {},
                "error": "",
                "arrays": encode_arrays({"output": np.ones(2)}),
            },
            {"exercise": 5, "seed": "x"},
        ],
    }
    forged_again = {"index": 3, "outputs": [], "records": []}  # a second line for the same cell
    lines = [
        "not json",
        json.dumps([1]),
        json.dumps({"index": "7"}),
        json.dumps(good),
        json.dumps(forged_again),
        "[" * 100_000,
    ]
    report.write_text("\n".join(lines) + "\n")
    cells = read_report(report)
    assert list(cells) == [3]
    assert cells[3].outputs == [{"output_type": "stream", "name": "stdout", "text": "hi"}]
    assert len(cells[3].records) == 1 and cells[3].records[0].arrays["output"].shape == (2,)


def test_an_oversized_report_fails_that_submission_only(tmp_path, monkeypatch):
    monkeypatch.setattr(child_report, "MAX_REPORT_BYTES", 1000)
    report = tmp_path / "report"
    report.write_bytes(b"x" * 2000)
    with pytest.raises(ReportTooLarge):
        read_report(report)
    assert read_report(tmp_path / "missing") == {}
