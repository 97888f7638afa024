"""The layout of the exercise specs: chapter modules depend on shared modules, never on each
other, and both registries (learner cases, grader exercises) are loaded by one function."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

from grader.paths import ROOT

CHAPTER = re.compile(r"^(attention_learner\.cases|grader\.exercises)\.(ch\d\d)$")
PACKAGES = {
    "attention_learner.cases": ROOT / "learner" / "attention_learner" / "cases",
    "grader.exercises": ROOT / "grader" / "exercises",
}


def chapter_modules() -> list[tuple[str, Path]]:
    """(dotted name, path) of every chapter module of both packages."""
    return [
        (f"{package}.{path.stem}", path)
        for package, folder in PACKAGES.items()
        for path in sorted(folder.glob("ch[0-9][0-9].py"))
    ]


def imported_modules(tree: ast.Module, package: str) -> set[str]:
    """Every module an import statement of ``tree`` names, as a dotted absolute name; for
    ``from X import y`` both X and X.y (y may be a submodule)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against the chapter module's package
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1])
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def peer_imports(name: str, source: str) -> list[str]:
    """The chapter modules that module ``name`` imports, other than itself and (for a grader
    chapter) its own learner counterpart."""
    package, _, chapter = name.rpartition(".")
    allowed = {name, f"attention_learner.cases.{chapter}"} if package == "grader.exercises" else {name}
    return sorted(
        module
        for module in imported_modules(ast.parse(source), package)
        if CHAPTER.match(module) and module not in allowed
    )


def test_both_packages_have_chapter_modules():
    names = [name for name, _ in chapter_modules()]
    assert any(n.startswith("attention_learner.cases.ch") for n in names)
    assert any(n.startswith("grader.exercises.ch") for n in names)


@pytest.mark.parametrize("name,path", chapter_modules(), ids=lambda v: v if isinstance(v, str) else "")
def test_chapter_modules_do_not_import_each_other(name, path):
    peers = peer_imports(name, path.read_text())
    assert not peers, (
        f"{name} imports the chapter module(s) {peers}: move what more than one chapter uses "
        "into a shared module (attention_learner.conventions, attention_learner.torch_cases, "
        "attention_learner.attention_hints, grader.exercises.spec)"
    )


@pytest.mark.parametrize(
    "source,found",
    [
        ("from attention_learner.cases.ch01 import numpy_case", ["attention_learner.cases.ch01"]),
        ("import attention_learner.cases.ch04 as ch04", ["attention_learner.cases.ch04"]),
        ("from attention_learner.cases import ch03", ["attention_learner.cases.ch03"]),
        ("from .ch01 import numpy_case", ["attention_learner.cases.ch01"]),
        ("from . import ch04", ["attention_learner.cases.ch04"]),
        ("from attention_learner.cases.ch02 import make_query_inputs", []),  # itself
        ("from attention_learner.conventions import numpy_case", []),
    ],
)
def test_peer_imports_are_found_in_every_spelling(source, found):
    assert peer_imports("attention_learner.cases.ch02", source) == found


def test_a_grader_chapter_may_import_its_own_learner_counterpart_only():
    source = "from attention_learner.cases.ch06 import toy_model\n"
    assert peer_imports("grader.exercises.ch06", source) == []
    assert peer_imports("grader.exercises.ch07", source) == ["attention_learner.cases.ch06"]
    assert peer_imports("grader.exercises.ch03", "from grader.exercises.ch01 import x") == [
        "grader.exercises.ch01"
    ]


def test_descriptions_never_repeat_a_builder_default():
    """A describe function gets complete params (defaults filled in): ``params.get(key, 7)``
    repeats a default by hand, and goes stale when the builder's default changes."""
    stale = []
    for name, path in chapter_modules():
        if not name.startswith("attention_learner."):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("describe"):
                stale += [
                    f"{name}.{node.name} line {call.lineno}"
                    for call in ast.walk(node)
                    if isinstance(call, ast.Call)
                    and isinstance(call.func, ast.Attribute)
                    and call.func.attr == "get"
                    and len(call.args) == 2
                ]
    assert not stale, f"descriptions with a hand-written default: {stale}"


# ---------------------------------------------------------------- one registry loop


def test_both_registries_share_one_chapter_list_and_one_loader():
    import attention_learner.cases as cases
    import grader.exercises as exercises
    from attention_learner import registry

    assert cases.CHAPTER_MODULES is registry.CHAPTER_MODULES
    assert exercises.CHAPTER_MODULES is registry.CHAPTER_MODULES
    assert set(cases.all_cases()) == set(exercises.all_exercises())
    for name, spec in exercises.all_exercises().items():
        assert spec.case is cases.get_case(name)


@pytest.fixture()
def toy_package(tmp_path, monkeypatch):
    """A package ``toy_registry`` with chapters ch01 (two items) and ch03 (one), no ch02."""
    package = tmp_path / "toy_registry"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "ch01.py").write_text(
        "from types import SimpleNamespace as N\nITEMS = [N(name='a'), N(name='b')]\n"
    )
    (package / "ch03.py").write_text("from types import SimpleNamespace as N\nITEMS = [N(name='c')]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield package
    for module in [m for m in sys.modules if m.split(".")[0] == "toy_registry"]:
        del sys.modules[module]


def test_missing_chapter_modules_are_skipped(toy_package):
    from attention_learner.registry import load_chapters

    found = load_chapters("toy_registry", "ITEMS", chapters=("ch01", "ch02", "ch03"))
    assert list(found) == ["a", "b", "c"]


def test_an_import_error_inside_a_chapter_module_is_raised(toy_package):
    from attention_learner.registry import load_chapters

    (toy_package / "ch02.py").write_text("import a_module_that_does_not_exist\n")
    with pytest.raises(ModuleNotFoundError, match="a_module_that_does_not_exist"):
        load_chapters("toy_registry", "ITEMS", chapters=("ch01", "ch02", "ch03"))


def test_unknown_names_list_the_known_ones():
    from attention_learner.cases import get_case
    from grader.exercises import get_exercise

    for lookup in (get_case, get_exercise):
        with pytest.raises(KeyError, match="unknown exercise 'no_such_thing'; known: .*softmax"):
            lookup("no_such_thing")


def test_the_old_input_shim_is_gone():
    assert not (ROOT / "grader" / "exercises" / "cases.py").exists()
