"""Execute the book's pages on every core before Sphinx reads them, one kernel per page.

Jupyter Book 1 runs Sphinx with one reader process, so myst-nb executes the pages one after
another: on a 2-core machine half of the build's time is one idle core. The book executes in
myst-nb's ``cache`` mode, where a page whose code cells hash to an entry of the execution
cache (``_build/.jupyter_cache``) is not executed again but takes that entry's outputs.

``execute_pages_ahead`` (connected to ``env-before-read-docs``) uses exactly that door: it
reads each page that Sphinx is about to read the way myst-nb reads it, leaves out what
myst-nb would not execute (excluded patterns, pages already cached, plain Markdown), runs
the rest in a pool of worker processes (one kernel each, as many workers as cores), and puts
every page that ran without error into the cache. myst-nb then finds each one there. A page
that fails here is not cached: myst-nb executes it again in its own turn and reports its
error as it always does, so ``-W`` and ``raise_on_error`` keep their meaning.

Pages share no files (each computes what it shows), so their order does not matter; the
longest sources start first, so that the last page to finish is a short one.

One more repair belongs here. For a page it takes from the cache, myst-nb 1.x writes the
page's copy under ``_build/jupyter_execute`` from the notebook as read, without the outputs it
merged from the cache (an executed page's copy has them, since execution fills the notebook
in place). ``write_executed_copy`` (``doctree-read``, before the book's own checks read that
copy) writes the merged notebook there, glue outputs taken out as myst-nb takes them out, so
that the copy is the same whether the page ran now, ran ahead, or ran in an earlier build.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

import nbformat
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging

LOG = logging.getLogger(__name__)


def _cache_path(env: BuildEnvironment) -> str:
    return env.mystnb_config.execution_cache_path or ".jupyter_cache"


def _notebook_page(env: BuildEnvironment, docname: str) -> tuple[str, Any, Any] | None:
    """(path, notebook as myst-nb reads it, read format) of a page myst-nb executes through
    its cache, else None (plain Markdown, an excluded pattern, a page with its own settings)."""
    from myst_nb.core.read import create_nb_reader

    config = env.mystnb_config
    path = str(env.doc2path(docname))
    if config.execution_mode != "cache" or not os.path.isfile(path):
        return None
    posix = PurePosixPath(Path(path).as_posix())
    if any(posix.match(pattern) for pattern in config.execution_excludepatterns):
        return None
    text = Path(path).read_text(encoding="utf-8")
    reader = create_nb_reader(path, env.myst_config, config, text)
    if reader is None:
        return None
    notebook = reader.read(text)
    if config.metadata_key in notebook.metadata:  # a page that sets its own execution
        return None
    return path, notebook, reader.read_fmt


def _pending_page(env: BuildEnvironment, docname: str) -> tuple[str, Any, Any] | None:
    """A page myst-nb would execute now: one of its cache's pages that is not in the cache."""
    from jupyter_cache import get_cache

    page = _notebook_page(env, docname)
    if page is None:
        return None
    try:
        get_cache(_cache_path(env)).match_cache_notebook(page[1])
    except KeyError:
        return page
    return None


def _execute(path: str, notebook: Any, timeout: int | None, allow_errors: bool) -> tuple[Any, float, bool]:
    """In a worker: the notebook executed in its page's folder (as myst-nb runs it)."""
    from jupyter_cache.executors.utils import single_nb_execution

    result = single_nb_execution(
        notebook, cwd=str(Path(path).parent), timeout=timeout, allow_errors=allow_errors, meta_override=True
    )
    return notebook, result.time, result.err is None


def execute_pages_ahead(app: Sphinx, env: BuildEnvironment, docnames: list[str]) -> None:
    """Execute every page that Sphinx will read and myst-nb would execute, in parallel."""
    config = env.mystnb_config
    if config.execution_in_temp:  # the pages would run elsewhere than here: leave them
        return
    pending = [page for page in map(lambda name: _pending_page(env, name), docnames) if page]
    workers = min(len(pending), os.cpu_count() or 1)
    if workers < 2:  # nothing to share between cores: myst-nb executes as usual
        return
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn

    cache = get_cache(_cache_path(env))
    pending.sort(key=lambda page: -os.path.getsize(page[0]))
    start = time.monotonic()
    # spawn, not fork: a fresh interpreter per worker shares no sockets or threads with Sphinx
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = [(path, read_fmt, pool.submit(_execute, path, notebook, config.execution_timeout,
                                                config.execution_allow_errors))
                   for path, notebook, read_fmt in pending]  # fmt: skip
        failed = 0
        for path, read_fmt, future in futures:
            notebook, seconds, succeeded = future.result()
            if not succeeded:
                failed += 1  # myst-nb runs it again and reports the error
                continue
            stage = cache.add_nb_to_project(path, read_data=read_fmt)
            bundle = CacheBundleIn(notebook, stage.uri, data={"execution_seconds": seconds})
            cache.cache_notebook_bundle(bundle, check_validity=False, overwrite=True)
    elapsed = time.monotonic() - start
    LOG.info(f"executed {len(pending) - failed} of {len(pending)} pages ahead on {workers} cores "
             f"in {elapsed:.1f} s")  # fmt: skip


def write_executed_copy(app: Sphinx, doctree: Any) -> None:
    """The page's executed notebook (outputs from the cache) as its ``jupyter_execute`` copy."""
    env = app.env
    page = _notebook_page(env, env.docname)
    if page is None:
        return
    from jupyter_cache import get_cache
    from myst_nb.ext.glue import extract_glue_data_cell

    try:
        _, merged = get_cache(_cache_path(env)).merge_match_into_notebook(page[1])
    except KeyError:  # not in the cache: myst-nb executed it and wrote its copy itself
        return
    for cell in merged.cells:
        if cell.cell_type == "code":
            extract_glue_data_cell(cell)  # drops the glue outputs from the cell, as myst-nb does
    copy = Path(app.outdir).parent.joinpath("jupyter_execute", *f"{env.docname}.ipynb".split("/"))
    copy.parent.mkdir(parents=True, exist_ok=True)
    copy.write_text(nbformat.writes(merged), encoding="utf-8")


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("env-before-read-docs", execute_pages_ahead)
    app.connect("doctree-read", write_executed_copy, priority=400)  # the book's checks run at 500
    return {"parallel_read_safe": True, "parallel_write_safe": True}
