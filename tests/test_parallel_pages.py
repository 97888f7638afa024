"""The book's pages executed ahead on every core (``_ext/parallel_pages.py``), on a small book.

Three pages, each of which glues when its kernel started and stopped and sleeps a second,
built twice with the book's extensions in myst-nb's cache mode:

- the first build executes the three pages ahead, two at a time: the first two pages'
  kernels ran at the same time, and each page's HTML shows its glued values and its figure;
- the copy under ``_build/jupyter_execute`` holds the outputs, on the first build and on the
  second, where every page comes from the cache (the book's figure rule reads that copy);
- a page that raises still fails the build, with its error, as it does without the extension.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .mini_book import build_book, write_book

pytestmark = [pytest.mark.book, pytest.mark.slow, pytest.mark.xdist_group("book")]

PAGE = """
# Page {n}

```{{code-cell}} ipython3
import time

from book_figures import glue, show_heatmaps, use_book_style

use_book_style()
started = time.time()
time.sleep(1.0)
{body}
glue("started-{n}", started, display=False)
glue("stopped-{n}", time.time(), display=False)
```

```{{code-cell}} ipython3
---
mystnb:
  figure:
    caption: A heatmap of page {n}.
    name: fig-page-{n}
  image:
    alt: "A heatmap."
---
import numpy as np

show_heatmaps(np.eye(2) / 8)
```

Page {n} started at {{glue:text}}`started-{n}:.3f`.
"""


def make_book(folder: Path, bodies: list[str]) -> Path:
    pages = [PAGE.format(n=n, body=body) for n, body in enumerate(bodies, start=1)]
    return write_book(folder, pages, "cache", ("book_pages", "parallel_pages"))


def glued(folder: Path, n: int) -> dict[str, float]:
    glue = json.loads((folder / "_build" / "jupyter_execute" / f"page{n}.glue.json").read_text())
    return {key: float(value["data"]["text/plain"]) for key, value in glue.items()}


def images_in_copy(folder: Path, n: int) -> int:
    copy = json.loads((folder / "_build" / "jupyter_execute" / f"page{n}.ipynb").read_text())
    outputs = [o for c in copy["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    return sum("image/png" in o.get("data", {}) for o in outputs)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: the pages run one after another")
def test_pages_run_ahead_two_at_a_time_and_their_copies_keep_the_outputs(tmp_path):
    book = make_book(tmp_path / "book", ["", "", ""])
    code, log = build_book(book)
    assert code == 0, log[-3000:]
    assert f"executed 3 of 3 pages ahead on {min(3, os.cpu_count())} cores" in log, log[-3000:]
    times = {n: glued(book, n) for n in (1, 2, 3)}
    # two pages start together: some pair ran at the same time (each started before the other stopped)
    span = {n: (times[n][f"started-{n}"], times[n][f"stopped-{n}"]) for n in times}
    pairs = ((1, 2), (1, 3), (2, 3))
    overlapping = [(a, b) for a, b in pairs if span[a][0] < span[b][1] and span[b][0] < span[a][1]]
    assert overlapping, times
    for n in (1, 2, 3):
        html = (book / "_build" / "html" / f"page{n}.html").read_text()
        assert f'started at <span class="pasted-text">{times[n][f"started-{n}"]:.3f}' in html
        assert "<img" in html and images_in_copy(book, n) == 1

    code, log = build_book(book)  # every page from the cache now
    assert code == 0, log[-3000:]
    assert "pages ahead" not in log and "WARNING" not in log, log[-3000:]
    assert [images_in_copy(book, n) for n in (1, 2, 3)] == [1, 1, 1]


def test_a_page_that_raises_still_fails_the_build_with_its_error(tmp_path):
    book = make_book(tmp_path / "book", ["", "raise ValueError('page two is broken')"])
    code, log = build_book(book)
    assert code != 0, log[-3000:]
    assert "executed 1 of 2 pages ahead" in log, log[-3000:]
    assert "page2" in log and "Executing notebook failed" in log, log[-3000:]
