"""Reading a submitted notebook without trusting it: one regular file, bounded, checked.

:func:`read_notebook` opens only a regular file (``safe_open.open_regular``: no symlink, no
FIFO), refuses one over :data:`~grader.autograde.folder_walk.MAX_NOTEBOOK_BYTES` before and
while reading it, and one of more than :data:`MAX_CELLS` cells (the largest source notebook
has 43; 300,000 empty cells would cost nbgrader's preprocessors many seconds, holding up
every submission behind it): before parsing when the bytes ``"cell_type"`` occur more often
than that (milliseconds), else right after parsing (a key spelt with escapes; the parse is
bounded by the size limit), and checks the JSON's structure;
anything it cannot use is an :class:`InvalidNotebook` whose message says why (it becomes
the submission's ``invalid`` row or a note).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import nbformat
from nbformat import NotebookNode

from grader.autograde.folder_walk import MAX_NOTEBOOK_BYTES, file_size, reason
from grader.autograde.safe_open import open_regular

MAX_CELLS = 2_000


def notebook_node(data: dict[str, Any]) -> NotebookNode:
    """``nbformat.from_dict``, typed: ``data`` (a notebook, a cell, an output, metadata) with
    attribute access, its dicts nested as NotebookNodes."""
    # nbformat's functions carry no annotations: the one untyped call, here
    node: NotebookNode = nbformat.from_dict(data)  # type: ignore[no-untyped-call]
    return node


class InvalidNotebook(ValueError):
    """The file is not a notebook nbgrader could grade; the message says why."""


def read_notebook(path: Path) -> NotebookNode:
    try:
        fd = open_regular(path)  # no symlink, no FIFO: it was a regular file when walked
    except OSError as exc:
        raise InvalidNotebook(f"{path.name} could not be read ({reason(exc)})") from None
    with os.fdopen(fd, "rb") as handle:
        size = file_size(os.fstat(fd))
        if size == 0:
            raise InvalidNotebook(f"{path.name} is empty (0 bytes)")
        if size > MAX_NOTEBOOK_BYTES:
            raise InvalidNotebook(f"{path.name} is {size / 2**20:.0f} MB, over the 50 MB limit")
        raw = handle.read(MAX_NOTEBOOK_BYTES + 1)
    if len(raw) > MAX_NOTEBOOK_BYTES:
        raise InvalidNotebook(f"{path.name} grew over the 50 MB limit while it was read")
    if raw.count(b'"cell_type"') > MAX_CELLS:  # every cell names its type: refused unparsed, in ms
        raise InvalidNotebook(
            f"{path.name} has more than {MAX_CELLS:,} cells, over the limit of "
            f"{MAX_CELLS:,} cells for one notebook"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidNotebook(f"{path.name} is not UTF-8 text (is it really a notebook?)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InvalidNotebook(f"{path.name} is not valid notebook JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cells", data.get("worksheets")), list):
        raise InvalidNotebook(f"{path.name} is not valid notebook JSON: it has no list of cells")
    cells = len(data["cells"] if "cells" in data else data["worksheets"])
    if cells > MAX_CELLS:
        raise InvalidNotebook(
            f"{path.name} has {cells:,} cells, over the limit of {MAX_CELLS:,} cells for one notebook"
        )
    if data.get("nbformat") != 4:  # old formats: let nbformat convert (and validate) them
        try:
            # nbformat's functions carry no annotations
            converted: NotebookNode = nbformat.reads(text, as_version=4)  # type: ignore[no-untyped-call]
            return converted
        except Exception as exc:  # nbformat raises several kinds for what it cannot convert
            raise InvalidNotebook(f"{path.name} is not a notebook nbformat can read: {exc}") from None
    # Version 4: a structural check instead of the full JSON-schema validation, which cost
    # 30 ms a notebook; what nbgrader cannot process is reported per submission later.
    for n, cell in enumerate(data["cells"]):
        if not isinstance(cell, dict) or cell.get("cell_type") not in ("code", "markdown", "raw"):
            raise InvalidNotebook(f"{path.name}: cell {n} is not a code, markdown or raw cell")
        if not isinstance(cell.get("source", ""), str | list):
            raise InvalidNotebook(f"{path.name}: cell {n} has no text")
        cell.setdefault("metadata", {})
        cell.setdefault("source", "")
        if isinstance(cell["source"], list):
            cell["source"] = "".join(str(part) for part in cell["source"])
        if cell["cell_type"] == "code":
            cell.setdefault("outputs", [])
            cell.setdefault("execution_count", None)
    data.setdefault("metadata", {})
    data.setdefault("nbformat_minor", 4)
    return notebook_node(data)
