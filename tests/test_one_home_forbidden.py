"""One table says what each exercise's solution may not reach: ``attention_learner.forbidden``.

The run-time trace (``attention_learner.op_trace``, in the learner's process) and the static
reading of the submitted sources (``grader/autograde/delegation.py``, in the grader) both read
it, so a forbidden implementation cannot be added to one reading and forgotten by the other.
These tests fail when a second table appears (a module other than ``forbidden.py`` spelling a
forbidden object or operator as a string), and when the static reading would miss an object
that the trace forbids.
"""

from __future__ import annotations

import ast
from pathlib import Path

from attention_learner import forbidden
from grader.autograde.delegation import FORBIDDEN_NAMES, analyse

ROOT = Path(__file__).resolve().parents[1]
HOME = ROOT / "learner" / "attention_learner" / "forbidden.py"
PACKAGES = (ROOT / "grader", ROOT / "learner" / "attention_learner")


def _table_strings() -> set[str]:
    """Every object and operator the table forbids (names such as ".backward" are too short
    to be a table's mark: a message may quote them)."""
    found: set[str] = set()
    for groups in forbidden.FORBIDDEN.values():
        for group in groups:
            found |= set(group.objects) | set(group.ops)
    return found


def test_no_module_but_the_table_spells_a_forbidden_implementation():
    table = _table_strings()
    second = []
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if path == HOME:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Constant) and node.value in table:
                    second.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert not second, "a second table of forbidden implementations:\n" + "\n".join(second)


def test_the_static_reading_charges_every_object_the_trace_forbids():
    for exercise in forbidden.FORBIDDEN:
        names = FORBIDDEN_NAMES[exercise]
        for path in forbidden.objects_of(exercise):
            module = path.rpartition(".")[0]
            source = f"import {module}\ndef {exercise}(*args):\n    return {path}(*args)\n"
            found = analyse({exercise: source}).named.get(exercise, [])
            assert found, f"{exercise}: the trace forbids {path}, the static reading misses it ({names})"


def test_every_exercise_is_traced_at_the_dispatcher_unless_listed():
    for exercise in forbidden.FORBIDDEN:
        has_ops = any(group.ops for group in forbidden.FORBIDDEN[exercise])
        assert bool(forbidden.ops_of(exercise)) == (has_ops and exercise not in forbidden.OBJECTS_ONLY)
