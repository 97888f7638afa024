"""The built book: a clean, warning-free build that shows everything and leaks nothing.

The session-scoped ``built_book`` fixture (``tests/conftest.py``, shared with the browser
test) runs ``jupyter-book build --all -W --keep-going`` once, from nothing, in a temporary
folder. The tests here read the HTML it wrote.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

import pytest

from .conftest import ROOT, toc_files
from .mini_book import build_book, write_book

sys.path.insert(0, str(ROOT / "_ext"))  # the book's Sphinx extensions and their rules
from figure_cells import declared_figure, figure_problems  # noqa: E402 - needs _ext on the path

pytest.importorskip("yaml")  # installed with jupyter-book

pytestmark = [pytest.mark.book, pytest.mark.slow, pytest.mark.xdist_group("book")]

SOLUTION_MARKERS = (
    "### BEGIN SOLUTION",
    "### END SOLUTION",
    "### BEGIN HIDDEN TESTS",
    "### END HIDDEN TESTS",
    "BEGIN SOLUTION",
    "BEGIN HIDDEN TESTS",
)
TEXT_SUFFIXES = {".html", ".htm", ".txt", ".md", ".ipynb", ".js", ".json", ".py", ".inv"}


# --- what the toc promises -------------------------------------------------------------


def exercise_pages() -> list[str]:
    """Toc entries that are a chapter's exercise notebook: chapters/<a>/<a>."""
    return [f for f in toc_files() if re.fullmatch(r"chapters/([^/]+)/\1", f)]


def chapter_pages(assignment: str) -> list[str]:
    return [f for f in toc_files() if f.startswith(f"chapters/{assignment}/")]


def test_toc_lists_the_core_pages():
    files = toc_files()
    assert files[0] == "intro"
    assert "notation" in files
    assert "chapters/03_scaled_dot_product/03_scaled_dot_product" in files


def test_every_toc_page_has_an_html_file(built_book):
    missing = [f for f in toc_files() if not (built_book / f"{f}.html").exists()]
    assert not missing, f"pages in _toc.yml without HTML: {missing}"


# --- no solution anywhere --------------------------------------------------------------


def cell_sources(notebook: Path) -> list[str]:
    data = json.loads(notebook.read_text(encoding="utf-8"))
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in data["cells"]]


def marked_blocks(source: str) -> list[str]:
    """Lines between BEGIN SOLUTION / END SOLUTION and BEGIN / END HIDDEN TESTS markers."""
    lines, inside = [], False
    for line in source.splitlines():
        if re.search(r"### BEGIN (SOLUTION|HIDDEN TESTS)", line):
            inside = True
        elif re.search(r"### END (SOLUTION|HIDDEN TESTS)", line):
            inside = False
        elif inside:
            lines.append(line)
    return lines


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def is_telling(line: str) -> bool:
    """Whether a solution line says enough to be a leak (not `else:` or an import)."""
    code = normalise(re.sub(r"\s+#.*$", "", line))
    if len(code) < 12 or code.startswith("#"):
        return False
    if re.match(r"^(import|from)\s", code):
        return False
    if re.fullmatch(r"(if|elif|else|for|while|try|except|with|def|class)\b.*:", code):
        return False
    return True


def secret_lines() -> dict[str, set[str]]:
    """For each assignment: telling solution/hidden-test lines absent from its release."""
    secrets: dict[str, set[str]] = {}
    for source in sorted(ROOT.glob("solutions/*/*.ipynb")):
        assignment = source.parent.name
        released = ROOT / "chapters" / assignment / source.name
        public = (
            {normalise(line) for s in cell_sources(released) for line in s.splitlines()}
            if released.exists()
            else set()
        )
        lines = {
            normalise(re.sub(r"\s+#.*$", "", line))
            for cell in cell_sources(source)
            for line in marked_blocks(cell)
            if is_telling(line)
        }
        secrets[assignment] = {line for line in lines if line not in public}
    return secrets


def readable_text(path: Path) -> str:
    """A built file as a reader would see it: tags dropped, entities decoded, cells joined."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix == ".ipynb":
        try:
            data = json.loads(raw)
        except json.JSONDecodeError:
            return normalise(raw)
        parts = []
        for cell in data.get("cells", []):
            parts.append("".join(cell.get("source", "")))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
        return normalise("\n".join(parts))
    if path.suffix in {".html", ".htm"}:
        without_tags = re.sub(r"<[^>]+>", "", raw)
        return normalise(html.unescape(without_tags))
    return normalise(raw)


def built_texts(html_dir: Path) -> dict[Path, tuple[str, str]]:
    texts = {}
    for path in html_dir.rglob("*"):
        if "mathjax" in path.relative_to(html_dir).parts[:2]:
            continue  # MathJax's own 24 MB of scripts, copied from the sphinx-mathjax-offline package
        if path.is_file() and path.suffix in TEXT_SUFFIXES:
            raw = path.read_text(encoding="utf-8", errors="replace")
            texts[path] = (raw, readable_text(path))
    return texts


def test_the_secret_line_finder_sees_a_leak(tmp_path):
    page = tmp_path / "page.html"
    page.write_text(
        '<pre><span class="n">scores</span> <span class="o">=</span> '
        '<span class="n">Q</span> <span class="o">@</span> <span class="n">K</span>'
        '<span class="o">.</span><span class="n">T</span></pre>',
        encoding="utf-8",
    )
    assert "scores = Q @ K.T" in readable_text(page)
    assert is_telling("    scores = Q @ K.T / math.sqrt(d_k)  # (n_q, n_k)")
    assert not is_telling("    else:")
    assert not is_telling("    import numpy as np")


def test_no_solution_marker_in_the_book(built_book):
    hits = []
    for path, (raw, text) in built_texts(built_book).items():
        for marker in SOLUTION_MARKERS:
            if marker in raw or marker in text:
                hits.append(f"{path.relative_to(built_book)}: {marker!r}")
    assert not hits, "solution markers found in the built book:\n" + "\n".join(hits)


def test_no_solution_line_in_the_book(built_book):
    secrets = secret_lines()
    if not secrets:
        pytest.skip("no solutions/*/*.ipynb in this checkout")
    assert any(secrets.values()), "found no solution lines to look for: is the parser broken?"
    texts = built_texts(built_book)
    leaks = []
    for assignment, lines in secrets.items():
        for line in sorted(lines):
            for path, (_, text) in texts.items():
                if line in text:
                    leaks.append(f"{assignment}: {line!r} in {path.relative_to(built_book)}")
    assert not leaks, "solution lines found in the built book:\n" + "\n".join(leaks)


# --- the exercise pages: downloadable, launchable --------------------------------------


@pytest.mark.parametrize("page", exercise_pages())
def test_exercise_page_offers_the_notebook_for_download(built_book, page):
    name = Path(page).name + ".ipynb"
    page_html = built_book / f"{page}.html"
    text = page_html.read_text(encoding="utf-8")
    links = re.findall(r'href="([^"]*' + re.escape(name) + r')"', text)
    local = [link for link in links if not link.startswith("http")]
    assert local, f"{page_html.name} has no download link to {name}"
    for link in local:
        target = (page_html.parent / link).resolve()
        assert target.exists(), f"download link {link} points to a missing file"
        released = json.loads(target.read_text(encoding="utf-8"))
        assert released["cells"], f"{link} is an empty notebook"
    launch = [
        link
        for link in links
        if link.startswith(("https://mybinder.org", "https://colab.research.google.com"))
    ]
    assert launch, f"{page_html.name} has no Binder or Colab launch button"


def test_exercise_notebooks_are_shown_not_executed(built_book):
    for page in exercise_pages():
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        assert "NotImplementedError" in text  # the stub is shown...
        assert "Traceback" not in text  # ...but was never run


# --- math and figures --------------------------------------------------------------------


def test_math_is_typeset_with_mathjax_shipped_with_the_book(built_book):
    for page in ["intro", "notation", *chapter_pages("03_scaled_dot_product")]:
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        scripts = re.findall(r'<script[^>]+src="([^"]*mathjax[^"]*)"', text, re.I)
        assert scripts, f"{page}: no MathJax script"
        for src in scripts:  # a local file, so the site renders math offline and from disk
            assert not re.match(r"(https?:)?//", src), f"{page}: MathJax from the network: {src}"
            local = (built_book / page).parent / src.split("?")[0]
            assert local.resolve().is_file(), f"{page}: {src} is not in the built site"
    formula_page = built_book / "chapters/03_scaled_dot_product/scaled_dot_product_attention.html"
    text = formula_page.read_text(encoding="utf-8")
    assert 'class="math notranslate nohighlight"' in text
    assert r"\sqrt{d_k}" in text


@pytest.mark.parametrize(
    "page",
    [p for p in chapter_pages("03_scaled_dot_product") if not p.endswith("03_scaled_dot_product")],
)
def test_chapter_3_pages_show_figures(built_book, page):
    page_html = built_book / f"{page}.html"
    sources = re.findall(r'<img[^>]+src="([^"]+\.png)"', page_html.read_text(encoding="utf-8"))
    assert sources, f"{page_html.name} has no figure"
    for src in sources:
        image = (page_html.parent / src).resolve()
        assert image.exists() and image.stat().st_size > 5_000, f"{src} missing or empty"


def test_no_page_loads_a_script_from_the_network(built_book):
    for page in toc_files():
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        remote = re.findall(r'<script[^>]+src="((?:https?:)?//[^"]+)"', text)
        assert not remote, f"{page}: scripts from the network: {remote}"


def test_launch_buttons_only_on_exercise_notebooks(built_book):
    exercises = set(exercise_pages())
    for page in toc_files():
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        launch = re.search(r'href="https://(mybinder\.org|colab\.research\.google\.com)', text)
        if page in exercises:
            assert launch, f"{page}: an exercise notebook without launch buttons"
        else:
            assert not launch, f"{page}: a narrative page with launch buttons"


def test_every_figure_is_numbered_with_a_caption_and_alt_text(built_book):
    for page in toc_files():
        if page in exercise_pages():
            continue
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        for image in re.findall(r"<img[^>]*>", text):
            alt = re.search(r'alt="([^"]*)"', image)
            assert alt and len(alt.group(1)) >= 20, f"{page}: an image without real alt text"
            assert not re.search(r"[0-9a-f]{16}", alt.group(1)), f"{page}: a hashed alt text"
        figures = re.findall(r"<figure[^>]*>(.*?)</figure>", text, re.S)
        images = re.findall(r'<img[^>]+src="[^"]*_images/', text)
        assert len(figures) >= len(images), f"{page}: an image outside a captioned figure"
        for figure in figures:
            assert re.search(r'class="caption-number">Fig\. \d+', figure), (
                f"{page}: a figure without a number"
            )


def test_every_chapter_has_objectives_and_a_summary(built_book):
    chapters = sorted({f.split("/")[1] for f in toc_files() if f.startswith("chapters/")})
    for assignment in chapters:
        texts = " ".join(
            (built_book / f"{p}.html").read_text(encoding="utf-8") for p in chapter_pages(assignment)
        )
        assert "Learning objectives" in texts, f"{assignment}: no learning objectives"
        first = (built_book / f"{chapter_pages(assignment)[0]}.html").read_text(encoding="utf-8")
        assert re.search(r'class="admonition[^"]*".*?Learning objectives', first, re.S), (
            f"{assignment}: learning objectives are not an admonition on the chapter's first page"
        )
        assert re.search(r">\s*Summary", texts), f"{assignment}: no summary"


# --- every figure renders ------------------------------------------------------------------


def executed_pages(html_dir: Path) -> dict[str, dict]:
    """The narrative pages as the build executed them (``_build/jupyter_execute``), by toc entry."""
    folder = html_dir.parent / "jupyter_execute"
    pages = {}
    for page in toc_files():
        executed = folder / f"{page}.ipynb"
        if page not in exercise_pages() and executed.exists():
            pages[page] = json.loads(executed.read_text(encoding="utf-8"))
    return pages


def test_every_figure_cell_shows_its_image(built_book):
    pages = executed_pages(built_book)
    assert len(pages) >= 15, f"only {len(pages)} executed pages found next to {built_book}"
    problems = [f"{page}: {line}" for page, notebook in pages.items() for line in figure_problems(notebook)]
    assert not problems, "figures that do not render:\n" + "\n".join(problems)


def test_every_declared_figure_is_an_image_on_its_page(built_book):
    """As many images in captioned figures in the HTML as figure cells in the page."""
    for page, notebook in executed_pages(built_book).items():
        declared = [c for c in notebook["cells"] if c["cell_type"] == "code" and declared_figure(c)]
        text = (built_book / f"{page}.html").read_text(encoding="utf-8")
        shown = [f for f in re.findall(r"<figure[^>]*>(.*?)</figure>", text, re.S) if "<img" in f]
        assert len(shown) >= len(declared), f"{page}: {len(declared)} figures declared, {len(shown)} shown"
        for cell in declared:
            name = declared_figure(cell)["name"]
            assert re.search(rf'<figure[^>]*id="{re.escape(name)}"[^>]*>.*?<img', text, re.S), (
                f"{page}: figure {name} has no image"
            )


MINI_PAGE = """
# A page

```{{code-cell}} ipython3
import numpy as np

from book_figures import glue, show_heatmaps, use_book_style

use_book_style()
glue("weight", np.float64(0.125))  # a NumPy number, not displayed
```

```{{code-cell}} ipython3
---
mystnb:
  figure:
    caption: One heatmap.
    name: fig-one
  image:
    alt: "A heatmap whose largest weight is {{glue:text}}`weight:.2f`, glued."
---
{last_line}
```
"""


def build_mini_book(folder: Path, last_line: str) -> tuple[int, str]:
    """A one-page book with the book's own extensions, built as the book is (-W --keep-going)."""
    return build_book(write_book(folder, [MINI_PAGE.format(last_line=last_line)], "force", ("book_pages",)))


def test_a_figure_that_does_not_render_fails_the_build_and_alt_texts_get_glued_values(tmp_path):
    code, log = build_mini_book(tmp_path / "broken", "fig = show_heatmaps(np.eye(2) / 8)")
    assert code != 0, log[-3000:]
    assert "figure that does not render: code cell 2 (fig-one) shows no image" in log, log[-3000:]

    code, log = build_mini_book(tmp_path / "fixed", "show_heatmaps(np.eye(2) / 8)")
    assert code == 0, log[-3000:]
    page = (tmp_path / "fixed" / "_build" / "html" / "page1.html").read_text(encoding="utf-8")
    assert re.search(r'<img[^>]+alt="A heatmap whose largest weight is 0.12, glued."', page), page[-3000:]


def test_the_sidebar_names_each_chapter_as_the_landing_page_does(built_book):
    intro = (ROOT / "intro.md").read_text(encoding="utf-8")
    entries = re.findall(r"^(\d+)\. \*\*(.+?)\*\* \(\[start reading\]\(([^)]+)\.md\)\)", intro, re.M)
    page = (built_book / "intro.html").read_text(encoding="utf-8")
    start = page.find('bd-sidenav">')
    sidebar = page[start : page.find("</nav>", start)]  # the left-hand navigation only
    links = {
        # (Sphinx types an apostrophe as a typographic one: "today's" becomes "today’s")
        href: html.unescape(re.sub(r"<[^>]+>", "", text)).strip().replace("\u2019", "'")
        for href, text in re.findall(r'<a class="reference internal" href="([^"]+)">(.*?)</a>', sidebar, re.S)
    }
    for number, title, target in entries:
        assert links.get(f"{target}.html") == f"{number}. {title}", (target, links.get(f"{target}.html"))
