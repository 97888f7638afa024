"""One home for the exit statuses of the grader's own processes: ``results.ChildExit``.

Every call that ends a process (``os._exit``, ``sys.exit``, ``exit``, ``SystemExit``) and every
``exited`` event or finished job the grader makes up itself (``exited_event``, the distributed
executor's ``_write``) takes its status from the enum, never from an integer written in place:
a literal there is a second definition of what the number means. The check reads the source
(AST), so it holds for code paths no test runs (a keeper whose server died, a signal death).
"""

from __future__ import annotations

import ast
import signal
from enum import IntEnum
from pathlib import Path

from grader.autograde.results import ChildExit

GRADER = Path(__file__).resolve().parents[1] / "grader"

# the callee's dotted name -> which positional argument is the status (None: the first one)
EXITS = {
    "os._exit": 0,
    "_exit": 0,
    "sys.exit": 0,
    "exit": 0,
    "SystemExit": 0,
    "exited_event": 1,
    "self._write": 4,
    "_write": 4,
}


def _dotted(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def _has_int_literal(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Constant) and type(n.value) is int for n in ast.walk(node))


def literal_exit_statuses(source: str, name: str) -> list[str]:
    """``name:line callee`` for every exiting call in ``source`` whose status holds an int literal."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        callee = _dotted(node.func)
        if callee not in EXITS or len(node.args) <= EXITS[callee]:
            continue
        if _has_int_literal(node.args[EXITS[callee]]):
            found.append(f"{name}:{node.lineno} {callee}")
    return found


def test_no_exit_status_of_the_grader_is_an_integer_literal():
    files = sorted(GRADER.rglob("*.py"))
    assert len(files) > 50  # the whole package was read
    found = [
        hit
        for path in files
        for hit in literal_exit_statuses(path.read_text(), str(path.relative_to(GRADER.parent)))
    ]
    assert not found, f"exit statuses written as literals (use results.ChildExit): {found}"


def test_the_check_sees_a_literal_status():
    source = (
        "import os, sys\nos._exit(75)\nsys.exit(128 + sig)\nraise SystemExit(2)\n"
        "exited_event(job.id, 72, False)\nos._exit(ChildExit.OK)\nraise SystemExit('message')\n"
    )
    assert literal_exit_statuses(source, "m") == [
        "m:2 os._exit",
        "m:3 sys.exit",
        "m:4 SystemExit",
        "m:5 exited_event",
    ]


def test_childexit_is_the_only_exit_enum_of_the_grader():
    enums = [
        f"{path.relative_to(GRADER.parent)}:{node.name}"
        for path in sorted(GRADER.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
        and any(_dotted(b) in ("IntEnum", "enum.IntEnum") for b in node.bases)
    ]
    assert enums == ["grader/autograde/results.py:ChildExit"]


def test_every_status_the_grader_gives_has_a_name():
    assert issubclass(ChildExit, IntEnum)
    assert {int(c) for c in ChildExit} == {0, 70, 71, 72, 75}
    assert ChildExit(75) is ChildExit.SERVER_GONE
    assert ChildExit.killed_by(signal.SIGKILL) == 128 + 9
    # the learner's own statuses are not the grader's: no explanation claims them
    assert ChildExit.explain(1) is None and ChildExit.explain(ChildExit.OK) is None
