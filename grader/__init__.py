"""attention-course: the reference package, the exercises' judging and the grader."""

import sys

__version__ = "0.1.0"


def decline_iri_checker() -> None:
    """Keep jsonschema from loading its optional IRI checker; the command line calls this.

    jsonschema (under nbformat) imports ``rfc3987_syntax`` when it is installed, and that
    module builds a Lark grammar at import: 1.8 s on every command and grading server here.
    Notebook schemas use no IRI formats. Must run before anything imports jsonschema; a
    process that needs the checker imported it first and keeps it.
    """
    sys.modules.setdefault("rfc3987_syntax", None)
