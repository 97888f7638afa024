"""One home for opening without following a symlink, and one for walking a folder.

``grader/autograde/safe_open.py`` is the only module that spells ``O_NOFOLLOW``: everyone
else opens through ``open_folder``/``open_regular``/``read_small``. ``grader/autograde/
folder_walk.py`` is the only module that walks a folder (``os.walk``, ``os.fwalk``,
``os.scandir``, ``os.listdir``); ``python -m grader check`` copies the files beside a notebook
with it, at autograde's own limits. The few one-level listings and the two walks that are
not of a submission are named below with their reason; any other is a second definition.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from grader.autograde.folder_walk import SUBMISSION_LIMITS
from grader.selfcheck import FolderRefused, copy_beside

ROOT = Path(__file__).resolve().parents[1]
TREES = ("grader", "learner", "benchmarks", "book_figures", "_ext")
SAFE_OPEN = Path("grader/autograde/safe_open.py")
FOLDER_WALK = Path("grader/autograde/folder_walk.py")
WALKERS = {"walk", "fwalk", "scandir", "listdir"}
#: (file, function) -> why it may list a folder itself
LISTINGS = {
    ("grader/inbound.py", "scan"): "INBOUND's top level through its descriptor; each arrival is then walked",
    ("grader/inbound.py", "notebook_names"): "the top level of one arrival, through its descriptor",
    ("grader/autograde/submissions.py", "_folders"): "SUBMITTED's student level; each is then walked",
    ("grader/autograde/permissions.py", "restrict_tree"): "OUT, the grader's own outputs, for their modes",
    ("grader/autograde/fork_child.py", "_job_main"): "lchown of the job's own copy, in the child",
}


def _uses(path: Path) -> list[tuple[str, int, str]]:
    """(what, line, enclosing function) for each ``O_NOFOLLOW`` and each ``os.<walker>`` call."""
    found = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef) else function
            if isinstance(child, ast.Attribute) and child.attr == "O_NOFOLLOW":
                found.append(("O_NOFOLLOW", child.lineno, name))
            elif (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in WALKERS
                and isinstance(child.func.value, ast.Name)
                and child.func.value.id == "os"
            ):
                found.append((f"os.{child.func.attr}", child.lineno, name))
            visit(child, name)

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def _sources():
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            if ".venv" not in path.parts and "_build" not in path.parts:
                yield path.relative_to(ROOT)


def test_only_safe_open_spells_o_nofollow():
    others = [
        f"{p}:{line}"
        for p in _sources()
        if p != SAFE_OPEN
        for what, line, _ in _uses(ROOT / p)
        if what == "O_NOFOLLOW"
    ]
    assert others == [], "a second open-without-following idiom:\n" + "\n".join(others)
    assert any(what == "O_NOFOLLOW" for what, _, _ in _uses(ROOT / SAFE_OPEN))


def test_only_folder_walk_walks_a_folder():
    others = [
        f"{p}:{line}: {what} in {function or 'the module'}"
        for p in _sources()
        if p != FOLDER_WALK
        for what, line, function in _uses(ROOT / p)
        if what != "O_NOFOLLOW" and (p.as_posix(), function) not in LISTINGS
    ]
    assert others == [], "a second folder walker:\n" + "\n".join(others)
    assert any(what.startswith("os.") for what, _, _ in _uses(ROOT / FOLDER_WALK))
    # every listing allowed is still there (a stale entry would hide nothing, but mislead)
    seen = {(p.as_posix(), f) for p in _sources() for what, _, f in _uses(ROOT / p) if what != "O_NOFOLLOW"}
    assert set(LISTINGS) <= seen


def test_the_scan_finds_the_old_copies(tmp_path):
    old = tmp_path / "old.py"
    old.write_text(
        "import os\n"
        "def copy_beside(src):\n"
        "    names = os.listdir(src)\n"
        "    fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)\n"
        "    for base, dirs, files in os.walk(src):\n"
        "        pass\n"
    )
    assert [what for what, _, _ in _uses(old)] == ["os.listdir", "O_NOFOLLOW", "os.walk"]
    assert {function for _, _, function in _uses(old)} == {"copy_beside"}


def test_check_copies_what_autograde_would(tmp_path):
    """The self-check's copy is the walker's: symlinks left out, folders kept, and a folder
    over a submission's limits refused rather than copied in part."""
    source, home = tmp_path / "src", tmp_path / "home"
    (source / "sub").mkdir(parents=True)
    home.mkdir()
    (source / "data.txt").write_text("41")
    (source / "sub" / "more.txt").write_text("1")
    (source / "link.txt").symlink_to("/etc/hostname")
    walk = copy_beside(source, home)
    assert sorted(p.relative_to(home).as_posix() for p in home.rglob("*") if p.is_file()) == [
        "data.txt",
        "sub/more.txt",
    ]
    assert (home / "sub" / "more.txt").read_text() == "1" and [str(s) for s in walk.symlinks] == ["link.txt"]
    assert SUBMISSION_LIMITS.entries is not None
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for k in range(SUBMISSION_LIMITS.entries + 1):
        (crowded / f"f{k}").touch()
    (tmp_path / "home2").mkdir()
    with pytest.raises(FolderRefused, match="more than"):
        copy_beside(crowded, tmp_path / "home2")
