"""What a command of the course does first, so that it starts in a fraction of a second."""

import sys


def decline_iri_checker() -> None:
    """Keep jsonschema from loading its optional IRI checker.

    jsonschema (under nbformat) imports ``rfc3987_syntax`` when it is installed, and that
    module builds a Lark grammar at import: 1 to 1.8 s on every command and grading server
    here. Notebook schemas use no IRI formats. Must run before anything imports jsonschema; a
    process that needs the checker imported it first and keeps it.
    """
    # None in sys.modules makes the import raise ImportError, a documented use that typeshed's
    # dict[str, ModuleType] does not allow
    sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]
