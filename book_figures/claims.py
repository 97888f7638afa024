"""The book's comparative words, chosen from its numbers or guarded by an assertion that fails the build.

A page that says "the raw gradient is 8 times larger" or "the time per token stays roughly
flat" makes a measurement claim, and the numbers behind it change with every build. So the
words are never typed next to glued digits. A page either

- lets the numbers choose the words: ``compare`` (a ratio: "3.2 times larger", "12% smaller",
  "about as large (within 4%)"), ``speed`` (two times: "3.2 times faster"), ``trend`` (a
  sequence: "grows by a factor of 3.2", "stays within 12%", "falls by 40%"); ``say`` glues
  the chosen words under a key for a ``{glue:text}`` role and records how they were chosen;
- or writes the sentence itself and guards it with ``assert_claim``, whose condition is a
  small expression over named numbers ("min(raw) > max(scaled)"). When the measurement
  contradicts it, the page's code cell raises ``ClaimContradicted``, and the book's build
  (``execute.raise_on_error``) fails.

Both kinds of claim are recorded in the executed page: ``say`` and ``assert_claim`` glue a
JSON record under ``claim-<name>`` (stored, never displayed; myst-nb writes every glued value
of a page to ``_build/jupyter_execute/<page>.glue.json``). ``check_record`` re-checks one
record from its own numbers (used by ``tests/test_book_claims.py`` on the built book, which
also looks for each claim's words in the page's HTML). ``docs/claims.md`` names each guarded
claim by its name (``claim-<name>``), and ``tests/test_claims_audit.py`` checks that the
name occurs in the page's source.

Ratios are stated with a direction and a precision that suits their size: never "0 times" or
"1 times". With ``r = value / reference`` and ``f = max(r, 1/r)``:

- ``f - 1 <= within``: the two are the same ("about as large (within 4%)");
- ``f < 1.5``: a percentage, ``r - 1`` above or ``1 - r`` below ("12% larger", "20% smaller");
- ``f < 10``: one decimal ("3.2 times larger"); ``f >= 10``: two significant figures, with
  thousands separators ("1,600 times smaller").
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from book_figures.describe import glue

RECORD_PREFIX = "claim-"


class ClaimContradicted(AssertionError):
    """A page's sentence that its own measurement contradicts (fails the book's build)."""


def factor_text(factor: float) -> str:
    """A factor f >= 1.5 as a reader reads it: "3.2", "14", "1,600" (two significant figures)."""
    if not math.isfinite(factor) or factor < 1.5:
        raise ValueError(f"a factor is stated from 1.5 up, not {factor!r}")
    if factor < 9.95:
        return f"{factor:.1f}"
    digits = math.floor(math.log10(factor)) + 1  # the number of digits before the point
    return f"{round(factor, 2 - digits):,.0f}"


@dataclass(frozen=True)
class Comparison:
    """``value`` against ``reference``, as words: ``words`` ("3.2 times larger") or ``than``."""

    value: float
    reference: float
    larger: str = "larger"
    smaller: str = "smaller"
    same: str = "about as large"
    within: float = 0.1

    def __post_init__(self) -> None:
        if not (self.value > 0 and self.reference > 0 and math.isfinite(self.value * self.reference)):
            numbers = f"{self.value!r}, {self.reference!r}"
            raise ValueError(f"a ratio needs two positive finite numbers, not {numbers}")

    @property
    def ratio(self) -> float:
        return self.value / self.reference

    @property
    def direction(self) -> int:
        """+1 when ``value`` is the larger (beyond ``within``), -1 when smaller, 0 when the same."""
        factor = max(self.ratio, 1 / self.ratio)
        if factor - 1 <= self.within:
            return 0
        return 1 if self.ratio > 1 else -1

    @property
    def words(self) -> str:
        r = self.ratio
        if self.direction == 0:
            return f"{self.same} (within {_percent(abs(r - 1))})"
        word = self.larger if self.direction > 0 else self.smaller
        factor = max(r, 1 / r)
        if factor < 1.5:
            return f"{_percent(r - 1 if r > 1 else 1 - r)} {word}"
        return f"{factor_text(factor)} times {word}"

    @property
    def than(self) -> str:
        """The words followed by their connector: "3.2 times larger than", "about as large as"."""
        if self.direction == 0:
            return f"{self.same} as (within {_percent(abs(self.ratio - 1))})"
        return f"{self.words} than"

    def __str__(self) -> str:
        return self.words


def _percent(fraction: float) -> str:
    """0.123 -> "12%", 0.004 -> "0.4%", 0.0004 -> "less than 0.1%"."""
    if fraction >= 0.0995:
        return f"{fraction:.0%}"
    if fraction >= 0.001:
        return f"{fraction:.1%}"
    return "less than 0.1%"


def compare(
    value: float,
    reference: float,
    *,
    larger: str = "larger",
    smaller: str = "smaller",
    same: str = "about as large",
    within: float = 0.1,
) -> Comparison:
    """``value`` against ``reference`` (both > 0), worded as the module docstring says."""
    return Comparison(float(value), float(reference), larger, smaller, same, within)


def speed(time: float, reference_time: float, *, within: float = 0.1) -> Comparison:
    """A duration against another, as speed: less time is "faster" ("3.2 times faster")."""
    return Comparison(float(reference_time), float(time), "faster", "slower", "about as fast", within)


@dataclass(frozen=True)
class Trend:
    """How a sequence of positive numbers moves from its first to its last: ``words``.

    - flat: every value within ``flat_within`` of every other (max / min - 1 <= flat_within):
      "stays within 12%";
    - grows (falls): the last value is more than ``flat_within`` above (below) the first and
      no step goes back by more than ``flat_within``: "grows by a factor of 3.2",
      "falls by 40%";
    - otherwise it does not move steadily: "varies by up to a factor of 2.1".
    """

    values: tuple[float, ...]
    flat_within: float = 0.2

    def __post_init__(self) -> None:
        if len(self.values) < 2 or not all(v > 0 and math.isfinite(v) for v in self.values):
            raise ValueError(f"a trend needs two or more positive finite numbers, not {self.values!r}")

    @property
    def spread(self) -> float:
        """max / min of the values."""
        return max(self.values) / min(self.values)

    @property
    def kind(self) -> str:
        """ "flat", "grows", "falls" or "varies"."""
        v, tol = self.values, self.flat_within
        if self.spread - 1 <= tol:
            return "flat"
        steps = [b / a for a, b in zip(v[:-1], v[1:], strict=True)]
        if v[-1] / v[0] > 1 + tol and all(s >= 1 / (1 + tol) for s in steps):
            return "grows"
        if v[0] / v[-1] > 1 + tol and all(s <= 1 + tol for s in steps):
            return "falls"
        return "varies"

    @property
    def words(self) -> str:
        kind = self.kind
        if kind == "flat":
            return f"stays within {_percent(self.spread - 1)}"
        if kind == "varies":
            spread = self.spread
            amount = f"a factor of {factor_text(spread)}" if spread >= 1.5 else _percent(spread - 1)
            return f"varies by up to {amount}"
        factor = max(self.values[-1] / self.values[0], self.values[0] / self.values[-1])
        if factor >= 1.5:
            return f"{kind} by a factor of {factor_text(factor)}"
        change = factor - 1 if kind == "grows" else 1 - 1 / factor
        return f"{kind} by {_percent(change)}"

    def __str__(self) -> str:
        return self.words


def trend(values: Sequence[float], *, flat_within: float = 0.2) -> Trend:
    """The trend of ``values`` (see ``Trend``)."""
    return Trend(tuple(float(v) for v in values), flat_within)


# --- recording claims in the executed page -------------------------------------------------

SAFE_NAMES: dict[str, Any] = {
    "abs": abs,
    "all": all,
    "any": any,
    "len": len,
    "list": list,
    "max": max,
    "min": min,
    "range": range,
    "round": round,
    "set": set,
    "sorted": sorted,
    "sum": sum,
    "zip": zip,
    "True": True,
    "False": False,
}


def _plain(value: Any) -> Any:
    """NumPy / torch numbers and arrays as Python numbers and lists (JSON, and plain comparisons)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def evaluate(condition: str, numbers: Mapping[str, Any]) -> bool:
    """``condition``, a Python expression over ``numbers`` and a few builtins (min, max, all...)."""
    namespace = {"__builtins__": {}, **SAFE_NAMES, **{k: _plain(v) for k, v in numbers.items()}}
    return bool(eval(condition, namespace))  # noqa: S307 - the page's own expression, no builtins


def _record(name: str, record: dict[str, Any]) -> None:
    glue(RECORD_PREFIX + name, json.dumps(record, sort_keys=True), display=False)


def say(name: str, words: Comparison | Trend, *, connector: bool = False) -> str:
    """Glue the chosen words under ``name`` (for ``{glue:text}`name```) and record their choice.

    ``connector`` glues ``Comparison.than`` ("3.2 times larger than") instead of its words.
    Returns the glued text.
    """
    if isinstance(words, Comparison):
        text = words.than if connector else words.words
        record = {
            "kind": "compare",
            "value": words.value,
            "reference": words.reference,
            "options": {
                "larger": words.larger,
                "smaller": words.smaller,
                "same": words.same,
                "within": words.within,
            },
            "connector": connector,
            "text": text,
        }
    elif isinstance(words, Trend):
        text = words.words
        record = {
            "kind": "trend",
            "values": list(words.values),
            "flat_within": words.flat_within,
            "text": text,
        }
    else:
        raise TypeError(f"say() takes a Comparison or a Trend, not {type(words).__name__}")
    glue(name, text, display=False)
    _record(name, record)
    return text


def assert_claim(name: str, condition: str, text: str, **numbers: Any) -> None:
    """Fail the build unless ``condition`` holds for ``numbers``; record the guarded sentence.

    ``text`` is the sentence (or the part of it) that the page's prose states, word for word
    as the reader sees it, so that a test can find it in the page's HTML; ``condition`` the
    measurement that backs it, e.g. ``assert_claim("grad-larger", "min(raw) > max(scaled)",
    "larger with raw scores at every seed", raw=raw_norms, scaled=scaled_norms)``.
    """
    holds = evaluate(condition, numbers)
    if not holds:
        shown = ", ".join(f"{k} = {_plain(v)!r}" for k, v in numbers.items())
        raise ClaimContradicted(
            f"claim {name!r}: the page says {text!r}, but {condition!r} is false ({shown})"
        )
    _record(name, {"kind": "assert", "condition": condition, "numbers": _plain(dict(numbers)), "text": text})


def check_record(record: Mapping[str, Any]) -> list[str]:
    """What is wrong with one recorded claim, re-checked from its own numbers ([] if nothing)."""
    kind = record.get("kind")
    if kind == "assert":
        if not evaluate(record["condition"], record["numbers"]):
            return [f"{record['condition']!r} is false for {record['numbers']!r}"]
        return []
    if kind == "compare":
        words = compare(record["value"], record["reference"], **record["options"])
        expected = words.than if record.get("connector") else words.words
    elif kind == "trend":
        expected = trend(record["values"], flat_within=record["flat_within"]).words
    else:
        return [f"unknown kind of claim {kind!r}"]
    if expected == record["text"]:
        return []
    return [f"the numbers say {expected!r}, the page {record['text']!r}"]
