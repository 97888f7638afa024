"""Shared fixtures: the built book, built once per test session.

Building the book is the slowest step of the suite (about a minute and a half), so
``tests/test_book.py`` (what the HTML contains) and ``tests/test_browser.py`` (what a reader
sees in Chromium) share one build. Both mark their tests ``xdist_group("book")``, so that
under ``pytest -n 2 --dist loadgroup`` they run in the same worker and the session fixture
builds the book once there.

The build runs ``jupyter-book build --all -W --keep-going`` with ``--path-output`` in a
temporary folder, so it starts from nothing, as CI's does, and leaves the developer's own
``_build`` alone. Setting ``ATTENTION_BOOK_HTML`` to an existing ``_build/html`` folder skips
the build (for iterating on the tests themselves); the zero-warning check then does not run.

Every results.json that the run's gradings write under its temporary folders must read back
as written (``SubmissionResult.from_json`` then ``to_json``, byte for byte): checked once the
session ends (``_every_results_json_reads_back``, ``tests/results_roundtrip.py``).

A run that skipped tests for a missing Debian package (Chromium, PostgreSQL) ends with one line
per group saying what to install (``pytest_terminal_summary`` below, ``tests/system_packages.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.results_roundtrip import round_trip_problems
from tests.system_packages import summary_lines

ROOT = Path(__file__).resolve().parents[1]

# ipykernel logs this to the terminal whenever a kernel starts over TCP (it always does under
# nbclient); it is the kernel's own log line, not a Sphinx warning, and -W does not see it.
KERNEL_TRANSPORT_NOTICE = "[IPKernelApp] WARNING | Kernel is running over TCP without encryption"


def jupyter_book_command() -> list[str]:
    beside_python = Path(sys.executable).with_name("jupyter-book")
    if beside_python.exists():
        return [str(beside_python)]
    found = shutil.which("jupyter-book")
    if found is None:
        pytest.skip("jupyter-book is not installed (pip install -e '.[book]')")
    return [found]


def toc_files() -> list[str]:
    """Every page listed in _toc.yml, root first, as a path without suffix."""
    import yaml  # installed with jupyter-book

    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                files.append(str(node["file"]))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk({k: v for k, v in toc.items() if k != "root"})
    return [re.sub(r"\.(md|ipynb)$", "", f) for f in files]


@pytest.fixture(scope="session")
def built_book(tmp_path_factory) -> Path:
    """Build the whole book once, from scratch; return the folder holding ``index.html``."""
    prebuilt = os.environ.get("ATTENTION_BOOK_HTML")
    if prebuilt:
        html_dir = Path(prebuilt).resolve()
        assert (html_dir / "index.html").exists(), f"ATTENTION_BOOK_HTML: no index.html in {html_dir}"
        return html_dir
    out = tmp_path_factory.mktemp("book")
    command = jupyter_book_command() + [
        "build",
        "--all",
        "-W",
        "--keep-going",
        "--path-output",
        str(out),
        str(ROOT),
    ]
    started = time.perf_counter()
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False)
    elapsed = time.perf_counter() - started
    log = result.stdout + result.stderr
    (out / "build.log").write_text(log, encoding="utf-8")
    assert result.returncode == 0, f"jupyter-book build failed after {elapsed:.0f} s:\n{log[-6000:]}"
    warnings = [
        line for line in log.splitlines() if "WARNING" in line and KERNEL_TRANSPORT_NOTICE not in line
    ]
    assert not warnings, "the book built with warnings:\n" + "\n".join(warnings)
    html_dir = out / "_build" / "html"
    assert (html_dir / "index.html").exists(), f"no index.html in {html_dir}"
    print(f"book built in {elapsed:.1f} s")
    return html_dir


# ---------------------------------------------------------------- results.json reads back


@pytest.fixture(scope="session", autouse=True)
def _every_results_json_reads_back(tmp_path_factory):
    """After the last test: every results.json the run's gradings wrote under its temporary
    folders (in this process or a ``python -m grader`` child) reads back as written. A failure
    is an error at the teardown of the session's last test."""
    yield
    _, problems = round_trip_problems(tmp_path_factory.getbasetemp())
    assert not problems, "results.json that do not read back as written:\n" + "\n".join(problems[:20])


# ---------------------------------------------------------------- Hypothesis profiles


def _load_hypothesis_profile() -> None:
    """One Hypothesis profile for every property test, instead of settings repeated per test.

    ``course`` (the default): no deadline (a 2-core machine shared with other work makes
    timings meaningless), 50 examples a test, and a reproduction blob printed with a failure.
    ``thorough``: ten times the examples, for a run before a release or after a change to a
    reference. Pick one with ``HYPOTHESIS_PROFILE=thorough pytest ...``. Tests whose examples
    are expensive ask for fewer with ``tests.strategies.examples(n)``, which scales with it.
    """
    from hypothesis import settings

    settings.register_profile("course", deadline=None, max_examples=50, print_blob=True)
    settings.register_profile("thorough", parent=settings.get_profile("course"), max_examples=500)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "course"))


_load_hypothesis_profile()


# ---------------------------------------------------------------- skipped for a missing system package


# A wrapper around pytest's own summary (tryfirst: the outermost), so that these lines come
# after its "short test summary info" list, just above the final counts, where they are seen.
@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter):
    """End the run with one line per group skipped for a Debian package that is not installed.

    The groups and their install commands are in ``tests/system_packages.py``. This runs on the
    controller, whose stats hold every worker's reports, so ``-n 2`` counts them all.
    """
    result = yield
    lines = summary_lines(terminalreporter.stats.get("skipped", []))
    if lines:
        terminalreporter.write_sep("=", "missing system packages", yellow=True)
        for line in lines:
            terminalreporter.write_line(line, yellow=True, bold=True)
    return result
