"""Every file and module that the project's code, tests and documents name exists.

A maintainer follows these pointers ("see ARCHITECTURE.md", ``grader.autograde.sanitize``,
``benchmarks/grading.py``); one that leads nowhere costs them the time to find out. Read are
the Python files of the packages, tests and benchmarks (docstrings and comments included),
the project's Markdown documents and the CLI's ``--help`` texts.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path

import pytest

from grader.paths import ROOT

PACKAGES = ("grader", "attention_learner", "book_figures", "tests", "benchmarks")
DOCUMENTS = (
    "README.md",
    "ARCHITECTURE.md",
    "SECURITY.md",
    "INSTRUCTORS.md",
    "CONTRIBUTING.md",
    "learner/README.md",
)

# a path into the repository (it starts with one of its top-level folders) or one of its
# documents (an upper-case name such as SECURITY.md); names of files that code creates at run
# time (page.md, runner.py, nbgrader's own test notebooks) are neither
FILE_NAME = re.compile(r"(?<![\w/.<{-])((?:[\w.-]+/)*[\w-]+\.(?:md|py|toml|yml|cfg|ipynb|j2))\b")
DOCUMENT = re.compile(r"[A-Z][A-Z_]*\.md")
# chNN, test_chNN_reference.py: a pattern for every chapter's module
CHAPTER_PATTERN = "NN"
# a dotted name inside one of the project's packages, e.g. grader.autograde.fork_client.ForkServer
# (not a template such as an f-string's "grader.exercises.ch{number}")
DOTTED = re.compile(r"(?<![\w.])((?:grader|attention_learner|book_figures)(?:\.[A-Za-z_]\w*)++)(?![{\w])")


@cache
def tracked_files() -> tuple[str, ...]:
    done = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return tuple(done.stdout.split())


def sources() -> list[Path]:
    """The files whose pointers are checked (tracked or about to be, so new files count)."""
    found = [ROOT / d for d in DOCUMENTS if (ROOT / d).exists()]
    for package in PACKAGES:
        base = ROOT / "learner" / package if package == "attention_learner" else ROOT / package
        found += sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)
    return found


@cache
def top_level() -> frozenset[str]:
    return frozenset(t.split("/", 1)[0] for t in tracked_files())


@cache
def entry_point_groups() -> frozenset[str]:
    """Entry-point group names (dotted like modules, but not modules)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return frozenset(config["project"].get("entry-points", {}))


def is_pointer(name: str, near: Path) -> bool:
    """Whether ``name`` points into the repository (see FILE_NAME)."""
    first = name.split("/", 1)[0]
    if "/" not in name:
        return bool(DOCUMENT.fullmatch(name))
    return first in top_level() or (near.parent / first).is_dir()


def file_exists(name: str, near: Path) -> bool:
    """``name`` exists from the repository root or from ``near``'s folder; a chapter pattern
    (``chNN``) must match at least one chapter's file."""
    for base in (ROOT, near.parent):
        pattern = name.replace(CHAPTER_PATTERN, "[0-9][0-9]")
        if any(base.glob(pattern)) if pattern != name else (base / name).exists():
            return True
    return False


def resolves(dotted: str) -> bool:
    """The longest importable module prefix of ``dotted``, then attributes for the rest."""
    if dotted in entry_point_groups():
        return True
    if CHAPTER_PATTERN in dotted:
        return all(resolves(dotted.replace(CHAPTER_PATTERN, n)) for n in ("01", "03"))
    parts = dotted.split(".")
    if parts[-1] == "__main__":  # importing a program's __main__ runs it: find it instead
        return importlib.util.find_spec(dotted) is not None
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(obj, attribute):
                return attribute == parts[-1] and is_prefix_of_submodule(obj, attribute)
            obj = getattr(obj, attribute)
        return True
    return False


def is_prefix_of_submodule(package: object, stem: str) -> bool:
    """``n.startswith("grader.exercises.ch")`` names the chapter modules by their common stem."""
    return any(m.name.startswith(stem) for m in pkgutil.iter_modules(getattr(package, "__path__", [])))


def pointers(text: str, near: Path) -> tuple[set[str], set[str]]:
    """The repository files and the package names that ``text`` (found in ``near``) names."""
    files = {m for m in FILE_NAME.findall(text) if is_pointer(m, near)}
    modules = {m.rstrip(".") for m in DOTTED.findall(text)}
    return files, modules


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_and_modules_exist(path):
    files, modules = pointers(path.read_text(encoding="utf-8"), path)
    missing = sorted(f for f in files if not file_exists(f, path))
    assert not missing, f"{path.relative_to(ROOT)} names files that do not exist: {missing}"
    unresolved = sorted(m for m in modules if not resolves(m))
    assert not unresolved, (
        f"{path.relative_to(ROOT)} names modules or objects that do not exist: {unresolved}"
    )


@pytest.mark.parametrize("command", [[], ["release"], ["check"], ["autograde"]])
def test_help_points_to_existing_files(command):
    done = subprocess.run([sys.executable, "-m", "grader", *command, "--help"],
                          capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stderr
    files, modules = pointers(done.stdout, ROOT / "README.md")
    assert files or command, "the top-level --help should point to the project's documents"
    assert not [f for f in files if not file_exists(f, ROOT / "README.md")], done.stdout
    assert all(resolves(m) for m in modules), done.stdout


def test_the_checker_finds_a_broken_pointer(tmp_path):
    """The scan itself: planted references to a missing file and a missing module fail.

    (The planted names are assembled here, so that this file itself names none of them.)
    """
    missing_document, missing_script = "DESIGN_NOT_HERE" + ".md", "benchmarks/" + "_gone.py"
    missing_module = "grader.autograde." + "no_such_module"
    page = tmp_path / "page.md"
    page.write_text(f"See {missing_document}, {missing_script} and ``{missing_module}``; "
                    "ARCHITECTURE.md and grader.cli.main exist, as does "
                    "tests/test_chNN_reference.py.")  # fmt: skip
    files, modules = pointers(page.read_text(), ROOT / "README.md")
    assert {f for f in files if not file_exists(f, page)} == {missing_document, missing_script}
    assert {m for m in modules if not resolves(m)} == {missing_module}
    assert not file_exists("tests/" + "chNN.py", page)
