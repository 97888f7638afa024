"""First contact: what a newcomer's first `make book` and `make test` do on any machine.

- Tests skipped for a missing Debian package end the run with one line per group saying what
  to install (``tests/system_packages.py``, printed by ``tests/conftest.py``), with or
  without pytest-xdist, and the real skip sites still give the reasons those lines count.
- The Makefile refuses a Python other than 3.11 in one line before creating anything, makes
  a stale or broken ``.venv`` anew, and ``make clean`` removes ``.venv``. These run make on a
  copy of the Makefile in a temporary folder, with fake Pythons: the real ``.venv`` is never
  touched.
- The book build's kernel configuration drops ipykernel's "running over TCP" notice and no
  other kernel log line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.system_packages import BROWSER_MISSING, GROUPS, POSTGRES_MISSING

BROWSER_LINE = GROUPS[0].advice
POSTGRES_LINE = GROUPS[1].advice


def run_pytest(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """pytest in a subprocess (no cache folder written, no random order), output captured."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    environment.pop("PYTEST_ADDOPTS", None)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", *args]
    return subprocess.run(
        command, cwd=cwd, env=environment, capture_output=True, text=True, timeout=300, check=False
    )


# ---------------------------------------------------------------- the skip summary


SKIPPING_TESTS = f"""
import pytest

@pytest.mark.parametrize("n", range(3))
def test_browser(n):
    pytest.skip("{BROWSER_MISSING} (apt-get install chromium chromium-driver)")

@pytest.mark.parametrize("n", range(2))
def test_postgres(n):
    pytest.skip("{POSTGRES_MISSING} and nothing is configured")

def test_other_skip():
    pytest.skip("no solutions in this checkout")

def test_passes():
    pass
"""

# The same hook as tests/conftest.py's, for a folder outside tests/.
HOOK = """
from tests.system_packages import summary_lines

def pytest_terminal_summary(terminalreporter):
    for line in summary_lines(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line)
"""


@pytest.mark.parametrize("xdist", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_each_group_of_skips_ends_the_run_with_one_counted_line(tmp_path, xdist):
    (tmp_path / "test_skips.py").write_text(SKIPPING_TESTS, encoding="utf-8")
    (tmp_path / "conftest.py").write_text(HOOK, encoding="utf-8")
    result = run_pytest([*xdist, "test_skips.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert f"SKIPPED 3 browser tests: {BROWSER_LINE}" in lines, result.stdout
    assert f"SKIPPED 2 PostgreSQL tests: {POSTGRES_LINE}" in lines, result.stdout
    assert sum(line.startswith("SKIPPED ") and " tests: " in line for line in lines) == 2


def test_no_line_when_nothing_was_skipped_for_a_system_package(tmp_path):
    (tmp_path / "test_fine.py").write_text("def test_fine():\n    pass\n", encoding="utf-8")
    (tmp_path / "conftest.py").write_text(HOOK, encoding="utf-8")
    result = run_pytest(["test_fine.py"], cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " tests: " not in result.stdout


def test_the_real_browser_and_postgres_skips_are_counted(tmp_path):
    """The suite's own skip sites and conftest's hook, run as `make test` runs them (-n 2).

    Chromium is taken off PATH and PostgreSQL hidden, so every test skips before the book
    build or a server start.
    """
    # find_bin_dir also looks in /usr/lib/postgresql, which no environment variable hides:
    # a plugin replaces it before tests/test_postgres.py imports it.
    (tmp_path / "hide_postgres.py").write_text(
        "import tests.pg_server\ntests.pg_server.find_bin_dir = lambda: None\n", encoding="utf-8"
    )
    env = {"PATH": str(Path(sys.executable).parent), "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}
    result = run_pytest(
        [
            "-p",
            "hide_postgres",
            "-n",
            "2",
            "--dist",
            "loadgroup",
            "tests/test_browser.py",
            "tests/test_postgres.py",
        ],
        cwd=ROOT,
        ATTENTION_TEST_PG_URL="",
        ATTENTION_BOOK_HTML="",
        **env,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    # the two lines come last, just above pytest's final counts
    *_, browser, postgres, counts = result.stdout.strip().splitlines()
    assert re.fullmatch(rf"SKIPPED \d+ browser tests: {re.escape(BROWSER_LINE)}", browser), browser
    assert re.fullmatch(rf"SKIPPED \d+ PostgreSQL tests: {re.escape(POSTGRES_LINE)}", postgres), postgres
    assert " skipped in " in counts and "passed" not in counts, counts


# ---------------------------------------------------------------- the Makefile


def fake_python(folder: Path, name: str, version: str | None) -> Path:
    """A script that answers the Makefile's version question with ``version`` (None: crashes)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / name
    body = f'echo "{version}"' if version else "exit 1"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(0o755)
    return script


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A folder with a copy of the Makefile and the files its rules depend on."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "learner").mkdir()
    (tmp_path / "pyproject.toml").write_text("", encoding="utf-8")
    (tmp_path / "learner" / "pyproject.toml").write_text("", encoding="utf-8")
    return tmp_path


def make(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["make", "--no-print-directory", *args],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def installed_venv(folder: Path, version: str | None) -> None:
    """A .venv whose bin/python reports ``version``, with its stamp newer than pyproject.toml."""
    fake_python(folder / ".venv" / "bin", "python", version)
    stamp = folder / ".venv" / ".installed-stamp"
    stamp.touch()
    later = (folder / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))


needs_make = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


@needs_make
def test_make_clean_removes_the_venv():
    result = make(ROOT, "-n", "clean")  # -n: prints the command, removes nothing
    assert result.returncode == 0, result.stderr
    removed = result.stdout.split()
    for path in ("_build", ".pytest_cache", ".hypothesis", ".venv"):
        assert path in removed, result.stdout


@needs_make
def test_a_wrong_python_is_refused_in_one_line_before_anything_is_made(checkout):
    python312 = fake_python(checkout / "bin", "python3.12", "3.12")
    result = make(checkout, "book", f"PYTHON={python312}")
    assert result.returncode != 0
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "The course needs Python 3.11" in line and "is 3.12" in line, line
    assert "make book PYTHON=python3.11" in line, line
    assert not (checkout / ".venv").exists()


@needs_make
def test_a_missing_python_is_refused_too(checkout):
    result = make(checkout, "book", f"PYTHON={checkout / 'no-such-python'}")
    assert result.returncode != 0
    assert "not a working Python" in result.stderr
    assert not (checkout / ".venv").exists()


@needs_make
@pytest.mark.parametrize("venv_python", ["3.12", None], ids=["other-python", "broken-python"])
def test_a_venv_of_another_or_a_broken_python_is_made_anew(checkout, venv_python):
    installed_venv(checkout, venv_python)
    python311 = fake_python(checkout / "bin", "python3.11", "3.11")
    result = make(checkout, "-n", "book", f"PYTHON={python311}")
    assert result.returncode == 0, result.stderr
    assert 'if [ "yes" = yes ]; then' in result.stdout  # the rm -rf .venv branch is taken
    assert f"{python311} -m venv .venv" in result.stdout


@needs_make
def test_a_venv_whose_install_never_finished_is_made_anew(checkout):
    installed_venv(checkout, "3.11")
    (checkout / ".venv" / ".installed-stamp").unlink()
    result = make(checkout, "-n", "book", f"PYTHON={fake_python(checkout / 'bin', 'python3', '3.11')}")
    assert result.returncode == 0, result.stderr
    assert 'if [ "yes" = yes ]; then' in result.stdout


@needs_make
def test_a_finished_venv_is_reused_whatever_python3_is(checkout):
    installed_venv(checkout, "3.11")
    # python3 on PATH is 3.12, not named on the command line: the good .venv is used as it is
    bin_dir = fake_python(checkout / "bin", "python3", "3.12").parent
    result = subprocess.run(
        ["make", "-n", "book"],
        cwd=checkout,
        capture_output=True,
        text=True,
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"},
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "-m venv" not in result.stdout and "pip install" not in result.stdout
    assert "jupyter-book build --all -W --keep-going ." in result.stdout


# ---------------------------------------------------------------- the book build's kernels


KERNEL_CELL = "import logging; logging.getLogger('IPKernelApp').warning('a real kernel warning')"


def test_the_book_kernels_drop_the_tcp_notice_and_nothing_else(tmp_path):
    """What `make book` sets up: IPYTHONDIR with _ext/ipython_kernel_config.py in its profile."""
    profile = tmp_path / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    shutil.copy(ROOT / "_ext" / "ipython_kernel_config.py", profile)
    script = textwrap.dedent(f"""
        import nbclient, nbformat
        notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell({KERNEL_CELL!r})])
        nbclient.NotebookClient(notebook, timeout=120).execute()
    """)
    env = {**os.environ, "IPYTHONDIR": str(tmp_path / "ipython")}
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "without encryption" not in result.stderr
    assert "a real kernel warning" in result.stderr
