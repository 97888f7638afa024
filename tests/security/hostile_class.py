"""A class of two on the tiny two-test assignment, one of them hostile to the instructor's tools.

``hostile`` hands in a correct notebook plus what would run in a browser that renders it:
markdown with ``<img onerror>``, ``<script>``, a ``javascript:`` link (also spelt with a
character reference), an ``<svg onload>``, an ``<iframe srcdoc>``, a raw cell of HTML, and a
code cell that displays HTML, JavaScript, SVG, Markdown and an image whose width attribute
carries an event handler. Every payload (:func:`payload`) sets ``document.title`` and a
global, and asks the Jupyter server for a file in OUT (contents API) and a terminal: the
tests find that none of that happened. ``honest`` is a plain correct notebook. Both folders
carry nbgrader's ``timestamp.txt`` and ``submission_secret.txt``, so OUT/feedback/ gets pages.

:func:`grade` runs ``python -m grader autograde`` on it as root or (through setpriv) as uid
65534, as ``tests/security/test_folders_round2.py`` does.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import nbformat

from tests.security.grade_as import autograde_command, run_as
from tests.security.test_folders_round2 import A, _notebook

IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]
MARKER = "PWNED"
FILE_MARKER = "pwned_by_student"
DOT = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="


def payload(tag: str) -> str:
    """JavaScript without double quotes or angle brackets (it sits in attributes and URLs)."""
    return (
        f"document.title='{MARKER}-{tag}';window.pwned='{tag}';"
        "var x=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1];"
        f"fetch('/api/contents/{FILE_MARKER}_{tag}.txt',{{method:'PUT',headers:{{'X-XSRFToken':x}},"
        "body:JSON.stringify({type:'file',format:'text',content:'x'})});"
        "fetch('/api/terminals',{method:'POST',headers:{'X-XSRFToken':x}});"
    )


def hostile_markdown() -> list[str]:
    return [
        f'An answer. <img src="x" onerror="{payload("img")}">',
        f"<script>{payload('script')}</script>",
        f"[click here](javascript:{payload('link')}) or [here](jav&#97;script:{payload('entity')})",
        f"[a plain link](javascript:document.title='{MARKER}-plain';window.pwned='plain')",
        f'<svg xmlns="http://www.w3.org/2000/svg" onload="{payload("svg")}"><circle r="5"/></svg>',
        f'<iframe srcdoc="<script>{payload("iframe")}</script>"></iframe>',
        f'<details open ontoggle="{payload("details")}"><summary>more</summary></details>',
    ]


def hostile_display_code() -> str:
    js = payload("display")
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" onload="{js}"><circle r="5"/></svg>'
    html = f'<script>{js}</script><img src=x onerror="{js}">'
    bold = {"text/html": f'<b onmouseover="{js}">bold</b>', "text/plain": "bold"}
    dot = {"image/png": DOT, "text/plain": "a dot"}
    size = {"image/png": {"width": f"1 onerror={js}"}}
    return "\n".join(
        [
            "from IPython.display import HTML, Javascript, SVG, Markdown, display",
            f"display(HTML({html!r}))",
            f"display(Javascript({js!r}))",
            f"display(SVG({svg!r}))",
            f"display(Markdown({html!r}))",
            f"display({bold!r}, raw=True)",
            f"display({dot!r}, raw=True, metadata={size!r})",
            "print('displayed')",
        ]
    )


def hostile_notebook() -> nbformat.NotebookNode:
    nb = _notebook()
    cells = [nbformat.v4.new_markdown_cell(text) for text in hostile_markdown()]
    raw = nbformat.v4.new_raw_cell(f"<script>{payload('raw')}</script>", metadata={"format": "text/html"})
    code = nbformat.v4.new_code_cell(hostile_display_code())
    nb.cells = cells[:3] + [nb.cells[0], nb.cells[1], code, raw] + cells[3:] + nb.cells[2:]
    nb.metadata["title"] = f"<script>{payload('title')}</script>"
    return nb


def build(root: Path) -> tuple[Path, Path]:
    """root/source/tiny and root/submitted/{honest,hostile}/tiny; returns (source, submitted)."""
    source, submitted = root / "source", root / "submitted"
    (source / A).mkdir(parents=True)
    nbformat.write(_notebook(), source / A / f"{A}.ipynb")
    for student, nb in (("honest", _notebook()), ("hostile", hostile_notebook())):
        folder = submitted / student / A
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{A}.ipynb")
        (folder / "timestamp.txt").write_text("2099-03-02 15:00:00.000000 UTC")
        (folder / "submission_secret.txt").write_text("ab" * 64)
    return source, submitted


def grade(
    root: Path, identity: str, *extra: str, umask: int = 0o022
) -> tuple[subprocess.CompletedProcess, Path]:
    """Grade root/submitted into root/out as ``identity`` under ``umask``; OUT is made
    beforehand (0755, as a user's mkdir under umask 022 makes it), so the run must tighten
    what it finds."""
    source, submitted, out = root / "source", root / "submitted", root / "out"
    command = autograde_command(submitted, out, *extra, source=source, timeout=90)
    if not out.exists():
        out.mkdir()
        os.chmod(out, 0o755)
    command, env = run_as(identity, ["sh", "-c", f'umask {umask:03o} && exec "$0" "$@"', *command], root)
    run = subprocess.run(command, capture_output=True, text=True, timeout=600, env=env, cwd=root)
    return run, out
