"""The bug zoo: known-wrong implementations, written as a learner would write them.

Each module ``chNN.py`` holds ``ASSIGNMENT`` (the assignment id) and ``BUGS``, a list of
:class:`Bug`. ``tests/test_bugzoo.py`` puts each bug's code in place of the solution cell of
its exercise in the nbgrader source notebook, runs the notebook's cells (hidden tests
included) and requires that at least one test cell of that exercise fails, with ``expect``
in its message when given. ``names`` are the words that name the mistake to a learner, as
they would fix it ("" when ``expect`` is those words); tests/test_bug_notes.py counts, per
chapter, the caught entries whose message contains them. The hidden tests are written from
the specification, not from this list.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bug:
    exercise: str  # the grade_id of the solution cell the code replaces
    name: str  # a short name, used as the pytest id
    code: str  # the complete replacement cell, defining the same function or class
    expect: str = ""  # a phrase the failure message must contain ("" = any failure)
    names: str = ""  # the words that name the bug ("" = ``expect`` names it)

    @property
    def told(self) -> str:
        """The words a message must contain to name this bug."""
        return self.names or self.expect
