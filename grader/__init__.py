"""attention-course: the reference package, the check helpers and the grader."""

import sys

# jsonschema (under nbformat) imports the optional IRI checker rfc3987_syntax when it is
# installed, and that module builds a Lark grammar at import: 1.8 s on every command and
# grading child here. Notebook schemas use no IRI formats, so we decline it before anything
# imports jsonschema; a process that needs it imported it first and keeps it.
sys.modules.setdefault("rfc3987_syntax", None)

__version__ = "0.1.0"
