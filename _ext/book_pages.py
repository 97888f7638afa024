"""A small Sphinx extension that adjusts what jupyter-book 1.x puts on every page.

Loaded from ``_config.yml`` (``sphinx.local_extensions``). It runs on the
``html-page-context`` event after sphinx-book-theme has filled the page's context, and:

- keeps the Binder and Colab launch buttons on the exercise notebooks only: on a narrative
  ``.md`` page they would open a Markdown file in Jupyter, which is not what a reader wants;
- drops sphinx-thebe's scripts and stylesheet. The book does not use Thebe, and sphinx-thebe
  registers its inline configuration script twice under jupyter-book, so every page threw
  ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared`` and referred to a
  script on a CDN.

On the ``doctree-read`` event, right after myst-nb has executed a page and written it to
``_build/jupyter_execute``, it also

- warns (so ``-W`` fails the build) for every cell that draws a figure and shows no image,
  or declares a figure it does not show (the rule is ``figure_cells.figure_problems``);
- fills glued values into alt texts: an image's alt text, written in the cell's
  ``mystnb.image.alt``, may contain ``{glue:text}`key:format``` like the page's prose, and
  gets the value the page glued under ``key``, so that a number in an alt text comes from
  the computation too. An unknown key is a warning.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from docutils import nodes
from figure_cells import figure_problems
from myst_nb.core.variables import format_plain_text
from sphinx.application import Sphinx
from sphinx.util import logging

logger = logging.getLogger(__name__)

GLUE_ROLE = re.compile(r"\{glue(?::text)?\}`([^`]+)`")

THEBE_MARKERS = ("THEBE_JS_URL", "sphinx-thebe", "thebe@")


def _is_thebe(asset: Any) -> bool:
    """Whether a script or stylesheet entry of the page context belongs to sphinx-thebe."""
    filename = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", "") or "")
    return any(marker in filename or marker in body for marker in THEBE_MARKERS)


def _is_launch_dropdown(button: Any) -> bool:
    return isinstance(button, dict) and "launch" in str(button.get("label", "")).lower()


def adjust_page(app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any) -> None:
    """Remove thebe assets everywhere and launch buttons outside the ``.ipynb`` pages."""
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [asset for asset in context[key] if not _is_thebe(asset)]
    suffix = str(context.get("page_source_suffix", ""))
    buttons = context.get("header_buttons")
    if buttons is not None and suffix != ".ipynb":
        context["header_buttons"] = [b for b in buttons if not _is_launch_dropdown(b)]


def _executed(app: Sphinx, docname: str, suffix: str) -> Path:
    """The file myst-nb wrote for ``docname`` under ``<outdir>/../jupyter_execute``."""
    return Path(app.outdir).parent.joinpath("jupyter_execute", *f"{docname}{suffix}".split("/"))


def glued_text(glue: dict[str, Any], spec: str) -> str | None:
    """``key[:format]`` of a glue role as text, formatted as myst-nb formats ``{glue:text}``.

    None if the page glued nothing under ``key``.
    """
    key, _, fmt = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if key not in glue:
        return None
    try:
        return format_plain_text(glue[key].get("data", {}).get("text/plain", ""), fmt)
    except (TypeError, ValueError):  # a value the format spec cannot read
        return None


def check_executed_page(app: Sphinx, doctree: nodes.document) -> None:
    """Figures without their image, and glue roles in alt texts (see the module docstring)."""
    docname = app.env.docname
    is_notebook = any(node.get("nb_element") == "cell_code" for node in doctree.findall(nodes.container))
    if not is_notebook or Path(app.env.doc2path(docname)).suffix != ".md":
        return  # a Markdown page, or an exercise notebook (shown, never executed)
    executed = _executed(app, docname, ".ipynb")
    if executed.exists():
        notebook = json.loads(executed.read_text(encoding="utf-8"))
        for problem in figure_problems(notebook):
            logger.warning(f"figure that does not render: {problem}", location=docname)
    images = [image for image in doctree.findall(nodes.image) if "{glue" in image.get("alt", "")]
    if not images:
        return
    glue_file = _executed(app, docname, ".glue.json")
    glue = json.loads(glue_file.read_text(encoding="utf-8")) if glue_file.exists() else {}
    for image in images:
        specs = [match.group(1) for match in GLUE_ROLE.finditer(image["alt"])]
        for spec in (spec for spec in specs if glued_text(glue, spec) is None):
            logger.warning(f"alt text: no glued value {spec!r}, or not one its format reads", location=image)
        image["alt"] = GLUE_ROLE.sub(lambda m: glued_text(glue, m.group(1)) or m.group(0), image["alt"])


def setup(app: Sphinx) -> dict[str, Any]:
    # sphinx-book-theme adds its buttons at the default priority (500); run after it.
    app.connect("html-page-context", adjust_page, priority=900)
    app.connect("doctree-read", check_executed_page)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
