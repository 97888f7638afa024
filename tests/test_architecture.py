"""ARCHITECTURE.md is a true map: its module map names every module of the three packages
(``grader``, ``attention_learner``, ``book_figures``) and nothing that does not exist."""

from __future__ import annotations

import re

from grader.paths import ROOT

PACKAGES = ("grader", "learner/attention_learner", "book_figures")


def modules_in_the_tree() -> set[str]:
    return {
        path.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    }


def modules_in_the_map(text: str | None = None) -> set[str]:
    """The modules named by the map's entries (``- `path.py`: ...``) in ``text``, by default
    ARCHITECTURE.md's own."""
    if text is None:
        text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("## Module map", 1)[1]
    return set(re.findall(r"^- `([\w/]+\.py)`:", section, flags=re.M))


def test_the_module_map_names_every_module_and_only_those():
    tree, mapped = modules_in_the_tree(), modules_in_the_map()
    assert not tree - mapped, f"modules missing from ARCHITECTURE.md's module map: {sorted(tree - mapped)}"
    assert not mapped - tree, f"ARCHITECTURE.md maps modules that do not exist: {sorted(mapped - tree)}"


def test_the_map_reads_a_planted_module():
    """The parser the test above uses sees an entry in the map's format (and only in the map's
    section), so the comparison above can fail."""
    planted = "grader/" + "planted.py"  # built, so that no checker takes it for a pointer
    before = "grader/" + "before_the_map.py"
    sample = f"- `{before}`: not in the map.\n## Module map\n\n- `{planted}`: a module.\nprose `x.py`: no.\n"
    assert modules_in_the_map(sample) == {planted}
    assert planted not in modules_in_the_map()


#: the longest a source module may be (issue 33: split a longer one by job, as chapters 7 to 9's
#: cases were); the folders whose modules the project writes
MAX_LINES = 500
SOURCE_FOLDERS = ("grader", "learner/attention_learner", "book_figures", "benchmarks", "_ext")


def test_no_source_module_is_longer_than_the_limit():
    long = sorted(
        f"{path.relative_to(ROOT).as_posix()}: {lines} lines"
        for folder in SOURCE_FOLDERS
        for path in (ROOT / folder).rglob("*.py")
        if "__pycache__" not in path.parts
        and (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    )
    assert long == [], f"modules over {MAX_LINES} lines (split each by job):\n" + "\n".join(long)
