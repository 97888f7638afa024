"""book_figures.claims: words chosen from numbers, never "0 times" or "1 times"; guarded claims fail."""

from __future__ import annotations

import json

import numpy as np
import pytest

from book_figures import claims
from book_figures.claims import ClaimContradicted, assert_claim, check_record, compare, speed, trend


@pytest.mark.parametrize(
    ("value", "reference", "words"),
    [
        (8.0, 1.0, "8.0 times larger"),
        (1.0, 8.0, "8.0 times smaller"),
        (0.35, 4.1, "12 times smaller"),
        (1612.0, 1.0, "1,600 times larger"),
        (1.0, 50367.0, "50,000 times smaller"),
        (9.96, 1.0, "10 times larger"),
        (1.2, 1.0, "20% larger"),
        (0.8, 1.0, "20% smaller"),
        (1.04, 1.0, "about as large (within 4.0%)"),
        (1.0, 1.0, "about as large (within less than 0.1%)"),
    ],
)
def test_compare_states_a_direction_and_a_sensible_precision(value, reference, words):
    assert compare(value, reference).words == words


def test_no_ratio_is_ever_zero_or_one_times():
    for ratio in np.geomspace(1e-6, 1e6, 2001):
        text = compare(ratio, 1.0).words
        never = ("0 times", "1 times", "0.0 times", "1.0 times", "1.4 times")
        assert not text.startswith(never), (ratio, text)
        assert ("larger" in text) == (ratio > 1.1), (ratio, text)
        assert ("smaller" in text) == (ratio < 1 / 1.1), (ratio, text)


def test_than_adds_the_connector_and_options_rename_the_words():
    assert compare(3.0, 1.0).than == "3.0 times larger than"
    assert compare(1.0, 1.02, same="about as wide").than == "about as wide as (within 2.0%)"
    assert compare(5.0, 1.0, larger="more", smaller="less").words == "5.0 times more"


def test_speed_calls_less_time_faster():
    assert speed(1.0, 4.0).words == "4.0 times faster"
    assert speed(4.0, 1.0).words == "4.0 times slower"
    assert speed(1.0, 1.05).words == "about as fast (within 5.0%)"


@pytest.mark.parametrize(
    ("values", "kind", "words"),
    [
        ([1.0, 1.1, 1.05, 1.15], "flat", "stays within 15%"),
        ([1.0, 2.0, 3.2], "grows", "grows by a factor of 3.2"),
        ([1.0, 1.2, 1.4], "grows", "grows by 40%"),
        ([5.0, 2.0, 1.0], "falls", "falls by a factor of 5.0"),
        ([1.28, 1.30, 0.81, 0.54, 0.81], "varies", "varies by up to a factor of 2.4"),
        ([1.0, 5.0, 1.0], "varies", "varies by up to a factor of 5.0"),
    ],
)
def test_trend_names_flat_growth_fall_and_unsteady(values, kind, words):
    assert trend(values).kind == kind
    assert trend(values).words == words


def test_bad_numbers_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="positive finite"):
        compare(0.0, 1.0)
    with pytest.raises(ValueError, match="positive finite"):
        compare(float("nan"), 1.0)
    with pytest.raises(ValueError, match="two or more"):
        trend([1.0])


def test_assert_claim_raises_when_the_measurement_contradicts_the_sentence():
    condition, text = "min(raw) > max(scaled)", "larger at every seed"
    assert_claim("fine", condition, text, raw=[3.0, 4.0], scaled=np.array([1.0, 2.0]))
    with pytest.raises(ClaimContradicted, match="larger at every seed.*min\\(raw\\) > max\\(scaled\\)"):
        assert_claim("wrong", condition, text, raw=[3.0, 1.5], scaled=[1.0, 2.0])


def test_conditions_see_only_their_numbers_and_a_few_builtins():
    with pytest.raises(NameError):
        assert_claim("x", "__import__('os')", "no", a=1)


def recorded(monkeypatch) -> dict[str, dict]:
    """What say() and assert_claim() glue, captured."""
    glued: dict[str, object] = {}
    monkeypatch.setattr(claims, "glue", lambda name, value, display=False: glued.__setitem__(name, value))
    return glued


def test_say_glues_the_words_and_a_record_that_check_record_accepts(monkeypatch):
    glued = recorded(monkeypatch)
    assert claims.say("ratio", compare(0.4, 3.2), connector=True) == "8.0 times smaller than"
    claims.say("curve", trend([1.0, 1.1]))
    assert_claim("seeds", "all(a > b for a, b in zip(x, y))", "at every seed", x=[2, 3], y=[1, 2])
    assert glued["ratio"] == "8.0 times smaller than" and glued["curve"] == "stays within 10%"
    records = {name: json.loads(value) for name, value in glued.items() if name.startswith("claim-")}
    assert set(records) == {"claim-ratio", "claim-curve", "claim-seeds"}
    assert all(check_record(record) == [] for record in records.values())


def test_check_record_sees_words_the_numbers_do_not_support(monkeypatch):
    glued = recorded(monkeypatch)
    claims.say("ratio", compare(8.0, 1.0))
    record = json.loads(glued["claim-ratio"])
    record["value"] = 0.125  # the same words over numbers that now point the other way
    assert check_record(record) == ["the numbers say '8.0 times smaller', the page '8.0 times larger'"]
    bad = {"kind": "assert", "condition": "a > b", "numbers": {"a": 1, "b": 2}, "text": "a is larger"}
    assert check_record(bad) and check_record({"kind": "guess"}) == ["unknown kind of claim 'guess'"]
