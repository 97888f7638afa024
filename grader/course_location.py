"""Where the course lives and which release of the learner package its notebooks need.

Two facts, each written once:

- the repository's URL: ``repository.url`` in ``_config.yml`` (the book's launch and
  repository buttons read it there too);
- the learner package's version: ``version`` in ``learner/pyproject.toml``; a notebook's
  release is that version, and the tag ``v<version>`` marks it in the repository.

Everything that tells a learner how to install the package is derived from them by ``python
-m grader release`` (:func:`derive_install_references`): the install cell that opens every
exercise notebook, pinned to the notebook's release and saying in one line when the
installed package is of another release; every ``pip install`` line of the documents and
notebooks; and ``binder/requirements.txt``. A fork changes the URL in one line and releases.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import nbformat
import yaml

from grader.paths import ROOT

#: the tag an exercise notebook's install cell carries (the cell has no nbgrader metadata)
INSTALL_TAG = "learner-install"

# A pip requirement of the learner package as the documents write it: from the repository
# (any URL, any ref) or from PyPI at one version.
_FROM_GIT = re.compile(r"attention-learner @ git\+[^\s\"'`#]+#subdirectory=learner")
_FROM_PYPI = re.compile(r"attention-learner==[0-9][0-9A-Za-z.+-]*[0-9A-Za-z]")


def repository_url(root: Path = ROOT) -> str:
    """``repository.url`` of the book's ``_config.yml``, without a trailing slash."""
    config = yaml.safe_load((root / "_config.yml").read_text(encoding="utf-8"))
    url = (config.get("repository") or {}).get("url")
    if not url:
        raise SystemExit(f"{root / '_config.yml'} has no repository.url: the course's address")
    return str(url).rstrip("/")


def learner_version(root: Path = ROOT) -> str:
    """The learner package's version, from ``learner/pyproject.toml``."""
    with (root / "learner" / "pyproject.toml").open("rb") as f:
        return tomllib.load(f)["project"]["version"]


def install_requirement(root: Path = ROOT) -> str:
    """The pip requirement of the learner package of this release, from the repository's tag."""
    return f"attention-learner @ git+{repository_url(root)}@v{learner_version(root)}#subdirectory=learner"


def install_cell_source(root: Path = ROOT) -> str:
    """The first code cell of every exercise notebook."""
    requirement = install_requirement(root)
    return f'''\
# Installs the course's learner package of this notebook's release (the test helpers and the
# visible tests' expected values, no solutions) where Jupyter lacks it: Colab, Binder, a laptop.
RELEASE = "{learner_version(root)}"
try:
    import attention_learner
except ImportError:
    %pip install --quiet "{requirement}"
    import attention_learner
if getattr(attention_learner, "__version__", None) != RELEASE:
    print(f"This notebook is of release {{RELEASE}} but attention-learner "
          f"{{getattr(attention_learner, '__version__', '(unknown)')}} is installed: its expected "
          'values may not match. Install this release with: %pip install "{requirement}"')'''


def documents(root: Path = ROOT) -> list[Path]:
    """The text files that may tell a reader how to install the learner package."""
    found = [
        *root.glob("*.md"),
        *root.glob("chapters/*/*.md"),
        root / "learner" / "README.md",
        root / "binder" / "requirements.txt",
    ]
    return sorted(p for p in found if p.is_file())


def with_requirement(text: str, root: Path = ROOT) -> str:
    """``text`` with every pip requirement of the learner package made this release's (from
    the repository's tag, or from PyPI at this version)."""
    text = _FROM_GIT.sub(install_requirement(root), text)
    return _FROM_PYPI.sub(f"attention-learner=={learner_version(root)}", text)


def derive_notebook(nb: nbformat.NotebookNode, root: Path = ROOT) -> bool:
    """Give a source notebook this release's install cell and pip lines; True if it changed."""
    changed = False
    installs = [c for c in nb.cells if INSTALL_TAG in c.metadata.get("tags", [])]
    if len(installs) != 1 or installs[0].cell_type != "code":
        raise SystemExit(f"a notebook needs exactly one code cell tagged {INSTALL_TAG!r}")
    cell = installs[0]
    if cell.source != install_cell_source(root):
        cell.source, changed = install_cell_source(root), True
    for other in nb.cells:
        if other is not cell:
            new = with_requirement(other.source, root)
            changed |= new != other.source
            other.source = new
    return changed


def derive_install_references(source_notebooks: list[Path], root: Path = ROOT) -> list[Path]:
    """Rewrite the install cell and pip lines of ``source_notebooks`` and of the documents
    from the repository URL and the learner version; returns the files that changed."""
    written = []
    for path in documents(root):
        text = path.read_text(encoding="utf-8")
        if (new := with_requirement(text, root)) != text:
            path.write_text(new, encoding="utf-8")
            written.append(path)
    for path in source_notebooks:
        nb = nbformat.read(path, as_version=4)
        if derive_notebook(nb, root):
            nbformat.write(nb, path)
            written.append(path)
    return written
