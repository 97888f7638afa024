"""Where the course lives and which learner release its notebooks need: written once
(``_config.yml``'s repository URL, ``learner/pyproject.toml``'s version) and derived
everywhere else by ``python -m grader release`` (:mod:`grader.course_location`)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import sys
import types

import nbformat
import pytest
import yaml

import attention_learner
from grader import course_location as where
from grader.paths import CHAPTERS, ROOT, SOLUTIONS
from grader.release import assignments

UPSTREAM = "https://github.com/attention-course/attention-course"


def install_cell(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    cells = [c for c in nb.cells if where.INSTALL_TAG in c.metadata.get("tags", [])]
    assert len(cells) == 1, "one install cell per notebook"
    return cells[0]


@pytest.mark.parametrize("assignment", assignments())
def test_every_notebook_opens_with_this_releases_install_cell(assignment):
    for folder in (SOLUTIONS, CHAPTERS):
        nb = nbformat.read(folder / assignment / f"{assignment}.ipynb", as_version=4)
        cell = install_cell(nb)
        assert cell is next(c for c in nb.cells if c.cell_type == "code"), "it is the first code cell"
        assert "nbgrader" not in cell.metadata, "the install cell is not an nbgrader cell"
        assert cell.source == where.install_cell_source(), "run `python -m grader release`"
        assert f"@v{where.learner_version()}#subdirectory=learner" in cell.source  # pinned
        for other in nb.cells:
            assert where.with_requirement(other.source) == other.source, "run `python -m grader release`"


def test_every_document_names_this_release():
    requirement = where.install_requirement()
    for path in where.documents():
        text = path.read_text(encoding="utf-8")
        assert where.with_requirement(text) == text, f"{path.name}: run `python -m grader release`"
    assert requirement in (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    for name in ("README.md", "intro.md", "learner/README.md"):
        assert f'pip install "{requirement}"' in (ROOT / name).read_text(), name


def test_the_version_lives_in_learner_pyproject_only():
    assert attention_learner.__version__ == where.learner_version()
    init = (ROOT / "learner" / "attention_learner" / "__init__.py").read_text()
    assert not re.search(r"__version__\s*=\s*['\"]\d", init), "no second copy of the version"


def _run_install_cell(source: str, installed_version: str | None) -> str:
    """What the install cell prints when the installed package is of ``installed_version``."""
    fake = types.ModuleType("attention_learner")
    if installed_version is not None:
        fake.__version__ = installed_version
    never = r"\1raise AssertionError('the package is installed')"
    code = re.sub(r"^(\s*)%pip .*$", never, source, flags=re.M)
    out = io.StringIO()
    saved = sys.modules.get("attention_learner")
    sys.modules["attention_learner"] = fake
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(code, "<install cell>", "exec"), {})
    finally:
        sys.modules["attention_learner"] = saved
    return out.getvalue()


def test_the_install_cell_says_in_one_line_when_the_release_differs():
    source = where.install_cell_source()
    assert _run_install_cell(source, where.learner_version()) == ""
    for other in ("0.0.9", None):
        printed = _run_install_cell(source, other).splitlines()
        assert len(printed) == 1, printed
        assert f"release {where.learner_version()}" in printed[0]
        assert where.install_requirement() in printed[0]
        assert (other or "(unknown)") in printed[0]


def test_a_fork_changes_one_line_and_releases(tmp_path):
    """A copy of every file that names the course's address, with another URL in
    ``_config.yml``: deriving rewrites all of them, and a second pass writes nothing."""
    fork = "https://github.com/someone-else/attention-fork"
    for path in [*where.documents(), ROOT / "_config.yml", ROOT / "learner" / "pyproject.toml"]:
        copy = tmp_path / path.relative_to(ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, copy)
    notebooks = []
    for name in assignments():
        copy = tmp_path / "solutions" / name / f"{name}.ipynb"
        copy.parent.mkdir(parents=True)
        shutil.copyfile(SOLUTIONS / name / f"{name}.ipynb", copy)
        notebooks.append(copy)
    config = tmp_path / "_config.yml"
    config.write_text(config.read_text().replace(f"url: {UPSTREAM}", f"url: {fork}"))
    assert yaml.safe_load(config.read_text())["repository"]["url"] == fork

    written = where.derive_install_references(notebooks, root=tmp_path)
    assert set(written) >= {tmp_path / "binder" / "requirements.txt", tmp_path / "README.md", *notebooks}
    for path in [*notebooks, *(tmp_path / p.relative_to(ROOT) for p in where.documents())]:
        text = path.read_text(encoding="utf-8")
        assert f"git+{UPSTREAM}" not in text, f"{path.name} still installs from upstream"
    for path in notebooks:
        assert f"git+{fork}@v" in install_cell(nbformat.read(path, as_version=4)).source
    assert where.derive_install_references(notebooks, root=tmp_path) == []


def test_release_workflow_builds_and_attaches_the_wheel_on_every_tag():
    workflow = yaml.safe_load((ROOT / ".github" / "workflows" / "learner-release.yml").read_text())
    triggers = workflow[True] if True in workflow else workflow["on"]  # YAML 1.1 reads `on` as True
    assert triggers == {"push": {"tags": ["v*"]}}
    build = workflow["jobs"]["build"]
    script = "\n".join(step.get("run", "") for step in build["steps"])
    assert "python -m build --outdir dist learner" in script
    assert "v${version}" in script and "exit 1" in script  # the tag must be the version
    assert "gh release upload" in script
    pypi = workflow["jobs"]["pypi"]
    assert pypi["permissions"] == {"id-token": "write"}
    assert pypi["if"] == "vars.PUBLISH_TO_PYPI == 'true'"
    assert any(str(step.get("uses", "")).startswith("pypa/gh-action-pypi-publish") for step in pypi["steps"])


def test_release_reads_the_repository_url_from_the_book_config():
    assert where.repository_url() == yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    assert where.install_requirement() == (
        f"attention-learner @ git+{where.repository_url()}@v{where.learner_version()}#subdirectory=learner"
    )


def test_documents_cover_every_file_that_names_the_package():
    """Any tracked text file with a pip line of the learner package is one that release derives."""
    derived = set(where.documents())
    for path in ROOT.rglob("*"):
        if any(
            part in {".git", ".venv", "_build", "node_modules"} or part.endswith(".egg-info")
            for part in path.relative_to(ROOT).parts
        ):
            continue
        if path.suffix not in {".md", ".txt"} or not path.is_file():
            continue
        if "attention-learner @ git+" in path.read_text(encoding="utf-8", errors="replace"):
            assert path in derived, f"{path.relative_to(ROOT)} names the package; release skips it"
