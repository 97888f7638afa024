"""Small books built with the book's own extensions, as the book is built (``-W --keep-going``),
for tests of what a build does with a page: its figures, its glued values, its execution."""

from __future__ import annotations

import subprocess
from pathlib import Path

from .conftest import ROOT, jupyter_book_command

#: the front matter of a MyST notebook page run by the course's Python 3 kernel
FRONT_MATTER = """---
jupytext:
  text_representation:
    format_name: myst
kernelspec:
  name: python3
  display_name: Python 3
---
"""


def write_book(folder: Path, pages: list[str], execute: str, extensions: tuple[str, ...]) -> Path:
    """``folder`` holding ``page1.md`` ... (each page's text after the front matter), a table
    of contents in that order, and a config that executes in mode ``execute`` and loads the
    ``_ext`` modules ``extensions``."""
    folder.mkdir()
    for n, text in enumerate(pages, start=1):
        (folder / f"page{n}.md").write_text(FRONT_MATTER + text, encoding="utf-8")
    chapters = "".join(f"  - file: page{n}\n" for n in range(2, len(pages) + 1))
    toc = "format: jb-book\nroot: page1\n" + (f"chapters:\n{chapters}" if chapters else "")
    (folder / "_toc.yml").write_text(toc, encoding="utf-8")
    loaded = "".join(f"    {name}: {ROOT / '_ext'}\n" for name in extensions)
    (folder / "_config.yml").write_text(
        f"title: {folder.name}\nexecute:\n  execute_notebooks: {execute}\n  raise_on_error: true\n"
        f"sphinx:\n  local_extensions:\n{loaded}",
        encoding="utf-8",
    )
    return folder


def build_book(folder: Path) -> tuple[int, str]:
    """Build ``folder`` as the course's book is built; (exit code, the build's log)."""
    command = jupyter_book_command() + ["build", "--all", "-W", "--keep-going", str(folder)]
    result = subprocess.run(command, cwd=folder, capture_output=True, text=True, timeout=600, check=False)
    return result.returncode, result.stdout + result.stderr
