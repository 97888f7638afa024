"""``UsageError``: a command's input the grader refuses (printed as ``error: ...``, exit status 2).

Its own module so that the course commands (``course_cli``) raise it without importing the
command line that imports them (``cli``): no import cycle between the two.
"""

from __future__ import annotations

__all__ = ["UsageError"]


class UsageError(Exception):
    """A problem with the command's input: printed as ``error: ...``, exit status 2."""
