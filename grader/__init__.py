"""attention-course: the reference package, the check helpers and the grader."""

__version__ = "0.1.0"
