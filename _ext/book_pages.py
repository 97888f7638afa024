"""A small Sphinx extension that adjusts what jupyter-book 1.x puts on every page.

Loaded from ``_config.yml`` (``sphinx.local_extensions``). It runs on the
``html-page-context`` event after sphinx-book-theme has filled the page's context, and:

- keeps the Binder and Colab launch buttons on the exercise notebooks only: on a narrative
  ``.md`` page they would open a Markdown file in Jupyter, which is not what a reader wants;
- drops sphinx-thebe's scripts and stylesheet. The book does not use Thebe, and sphinx-thebe
  registers its inline configuration script twice under jupyter-book, so every page threw
  ``SyntaxError: Identifier 'THEBE_JS_URL' has already been declared`` and referred to a
  script on a CDN.
"""

from __future__ import annotations

from typing import Any

from sphinx.application import Sphinx

THEBE_MARKERS = ("THEBE_JS_URL", "sphinx-thebe", "thebe@")


def _is_thebe(asset: Any) -> bool:
    """Whether a script or stylesheet entry of the page context belongs to sphinx-thebe."""
    filename = str(getattr(asset, "filename", "") or "")
    body = str(getattr(asset, "attributes", {}).get("body", "") or "")
    return any(marker in filename or marker in body for marker in THEBE_MARKERS)


def _is_launch_dropdown(button: Any) -> bool:
    return isinstance(button, dict) and "launch" in str(button.get("label", "")).lower()


def adjust_page(
    app: Sphinx, pagename: str, templatename: str, context: dict[str, Any], doctree: Any
) -> None:
    """Remove thebe assets everywhere and launch buttons outside the ``.ipynb`` pages."""
    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [asset for asset in context[key] if not _is_thebe(asset)]
    suffix = str(context.get("page_source_suffix", ""))
    buttons = context.get("header_buttons")
    if buttons is not None and suffix != ".ipynb":
        context["header_buttons"] = [b for b in buttons if not _is_launch_dropdown(b)]


def setup(app: Sphinx) -> dict[str, Any]:
    # sphinx-book-theme adds its buttons at the default priority (500); run after it.
    app.connect("html-page-context", adjust_page, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
