"""The built book as a reader sees it: every page in headless Chromium, at 1280 and 390 px.

The book is built once per session (``built_book`` in ``tests/conftest.py``) and served from
127.0.0.1. Every page listed in ``_toc.yml`` is loaded at a desktop width (1280 px) and at a
phone width (390 px), and the test asserts what a reader would otherwise find by hand:

- no error in the browser console;
- math typeset by the MathJax copy shipped with the site: no raw ``$``, ``\\(`` or TeX left in
  the text, no MathJax error, no display equation wider than the text column at 1280 px;
- no raw Markdown pipe table and no unrendered MyST directive or role in the text;
- no horizontal overflow at 390 px, except inside a scroll container the theme provides
  (tables and code scroll inside their own box);
- no display equation or table cut off at 390 px by the box that scrolls it unless that box
  shows the scroll cue of ``_static/book.css`` (a shadow on the side where more lies);
- every figure's text at least ``MIN_FIGURE_PT`` points as shown at 390 px: the smallest
  text size the build recorded in the figure's PNG (``book_figures.style.figure_png``),
  scaled by the width the figure is displayed at;
- every image with a real alt text (not empty, not a hashed file name);
- every internal link (and its ``#fragment``) resolving to a built file.

A full-page screenshot of each page at both widths is saved under ``_build/screenshots/``
(the folder is printed), for a person to look at.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them when missing)
and ``selenium``; the test is skipped with a message when they are not there.
"""

from __future__ import annotations

import base64
import functools
import http.server
import re
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

import pytest

from .conftest import ROOT, toc_files

pytestmark = [
    pytest.mark.book,
    pytest.mark.slow,
    pytest.mark.browser,
    pytest.mark.xdist_group("book"),
]

WIDTHS = {"desktop": 1280, "phone": 390}
MIN_FIGURE_PT = 9.0  # the smallest text a figure may show a reader, in points
SCREENSHOTS = ROOT / "_build" / "screenshots"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
]

# What the page looks like to a reader, as JSON: run in the page after MathJax has finished.
INSPECT_PAGE = r"""
const vw = document.documentElement.clientWidth;
const article = document.querySelector("article.bd-article") || document.body;

// The text a reader reads: the article without code, outputs, typeset math and scripts.
const clone = article.cloneNode(true);
clone.querySelectorAll(
  "pre, code, script, style, mjx-container, .MathJax, .cell_output, .output, .highlight, mjx-assistive-mml"
).forEach((el) => el.remove());
const text = clone.textContent;

// Elements sticking out of the viewport on the right, not inside a scroll container.
function scrolls(el) {  // a box the reader can scroll sideways (clipping hides content)
  const style = getComputedStyle(el);
  return ["auto", "scroll"].includes(style.overflowX);
}
const overflowing = [];
for (const el of document.body.querySelectorAll("*")) {
  const rect = el.getBoundingClientRect();
  if (rect.width === 0 || rect.height === 0 || rect.right <= vw + 1) continue;
  if (getComputedStyle(el).visibility === "hidden") continue;  // e.g. a closed side drawer
  if (el.closest("mjx-assistive-mml")) continue;  // MathJax's visually hidden copy for readers
  let contained = false;
  for (let a = el.parentElement; a && a !== document.body; a = a.parentElement) {
    if (scrolls(a)) { contained = true; break; }
  }
  if (contained) continue;
  if (overflowing.some((o) => o.node.contains(el))) continue;  // report the outermost only
  const math = el.closest("mjx-container");
  const what = math ? "math " + JSON.stringify(math.textContent.slice(0, 60))
                    : el.tagName.toLowerCase() + "." + [...el.classList].join(".");
  overflowing.push({node: el, what: what, right: Math.round(rect.right)});
}

// Display equations wider than the box that holds them.
const wideMath = [];
for (const el of article.querySelectorAll('mjx-container[display="true"]')) {
  const box = el.parentElement;
  if (el.scrollWidth > box.clientWidth + 2) {
    wideMath.push((el.querySelector("mjx-assistive-mml") ? "" : "") +
                  (box.id || box.className || "math") + ": " + el.scrollWidth + " px in " +
                  box.clientWidth + " px");
  }
}

// Display equations and tables cut off by the box that scrolls them, with no visible cue that
// they scroll: the box's background must draw the scrolling shadows of _static/book.css
// (gradients, one part attached to the content: background-attachment "local").
function scroller(el) {  // the element itself or the nearest ancestor that clips sideways
  for (let box = el; box && box !== document.body; box = box.parentElement) {
    if (getComputedStyle(box).overflowX !== "visible") return box;
  }
  return null;
}
function hasCue(box) {
  const style = getComputedStyle(box);
  return style.backgroundImage.includes("gradient") && style.backgroundAttachment.includes("local");
}
const clippedWithoutCue = [];
for (const el of article.querySelectorAll('mjx-container[display="true"], table')) {
  const box = scroller(el);
  const rect = el.getBoundingClientRect();
  if (rect.width === 0 || rect.height === 0) continue;  // hidden (a closed dropdown)
  const width = Math.max(el.scrollWidth, Math.round(rect.width));
  if (!box || box.scrollWidth <= box.clientWidth + 1 || hasCue(box)) continue;
  const what = el.tagName === "TABLE" ? "table " + JSON.stringify(el.textContent.trim().slice(0, 40))
                                      : "math " + JSON.stringify(el.textContent.slice(0, 40));
  clippedWithoutCue.push(what + ": " + width + " px in a " + box.clientWidth + " px box with no scroll cue");
}

return JSON.stringify({
  text: text,
  clippedWithoutCue: clippedWithoutCue,
  mathSources: article.querySelectorAll(".math").length,
  typeset: article.querySelectorAll("mjx-container").length,
  mathErrors: article.querySelectorAll("mjx-merror, [data-mjx-error]").length,
  overflowing: overflowing.map((o) => o.what + " (right edge " + o.right + " px)"),
  pageWidth: document.documentElement.scrollWidth,
  viewport: vw,
  wideMath: wideMath,
  images: [...document.querySelectorAll("img")].map((img) => ({
    src: img.getAttribute("src"), alt: img.getAttribute("alt"),
    shown: img.getBoundingClientRect().width > 0,
    url: img.src, natural: img.naturalWidth, displayed: img.getBoundingClientRect().width,
    inFigure: img.closest("figure") !== null})),
  links: [...document.querySelectorAll("a[href]")].map((a) => a.href),
});
"""

WAIT_FOR_MATHJAX = """
const done = arguments[arguments.length - 1];
const mj = window.MathJax;
if (!mj || !mj.startup || !mj.startup.promise) { done("no MathJax"); return; }
mj.startup.promise.then(() => done("typeset")).catch((e) => done("error: " + e));
"""

RAW_MATH = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\$[^$\s][^$]*\$|\\(frac|sqrt|begin|mathbb|operatorname)\b")
RAW_TABLE = re.compile(r"\|\s*:?-{3,}:?\s*\|")
RAW_MYST = re.compile(r"```\{|:::\{|\{(glue|download|doc|ref|numref|code-cell|admonition)[:}]")
HASHED = re.compile(r"^[0-9a-f]{16,}|\.(png|jpe?g|svg)$", re.I)


def _chromium() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        pytest.skip("needs chromium and chromedriver (apt-get install chromium chromium-driver)")
    return browser, driver


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - the base class's signature
        pass


@pytest.fixture(scope="session")
def book_url(built_book: Path) -> Iterator[str]:
    """The built book served over HTTP on 127.0.0.1 (a free port), for the session."""
    handler = functools.partial(_QuietHandler, directory=str(built_book))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for the session, with its console log available."""
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = _chromium()
    profile = tempfile.mkdtemp(prefix="book-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.add_argument(f"--window-size={WIDTHS['desktop']},900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    print(f"\nscreenshots of every page are saved in {SCREENSHOTS}")
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def _set_width(driver, width: int) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride",
        {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": width < 600},
    )


def _screenshot(driver, path: Path, width: int) -> None:
    white = {"color": {"r": 255, "g": 255, "b": 255, "a": 1}}  # not black below short pages
    driver.execute_cdp_cmd("Emulation.setDefaultBackgroundColorOverride", white)
    height = driver.execute_script("return document.documentElement.scrollHeight")
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": min(int(height), 30000), "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def _console_errors(driver) -> list[str]:
    return [
        entry["message"]
        for entry in driver.get_log("browser")
        if entry["level"] == "SEVERE" and "favicon.ico" not in entry["message"]
    ]


def _broken_links(links: list[str], page_url: str, base: str, html_dir: Path) -> list[str]:
    broken = []
    for link in links:
        if not link.startswith(base):
            continue  # external: not checked here (the build must not need the network)
        parsed = urlparse(link)
        target = html_dir / unquote(parsed.path[len(urlparse(base).path) :])
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            broken.append(f"{link} (no file {target.relative_to(html_dir)})")
            continue
        if parsed.fragment and target.suffix == ".html":
            html = target.read_text(encoding="utf-8", errors="replace")
            if not re.search(r'id="' + re.escape(unquote(parsed.fragment)) + '"', html):
                broken.append(f"{link} (no id {parsed.fragment!r})")
    return broken


def figure_text_pt(png: Path, natural: float, displayed: float) -> float | None:
    """The smallest text of a book figure, in points, as shown ``displayed`` px wide.

    None if the PNG does not record it. The PNG's ``dpi`` pixels make an inch, a CSS pixel is
    1/96 inch on screen, and the image is scaled by ``displayed / natural``.
    """
    from PIL import Image

    from book_figures.style import DPI_KEY, SMALLEST_FONT_KEY

    with Image.open(png) as image:
        text = getattr(image, "text", {})
    if SMALLEST_FONT_KEY not in text or DPI_KEY not in text or not natural:
        return None
    return float(text[SMALLEST_FONT_KEY]) * float(text[DPI_KEY]) / 96 * (displayed / natural)


def small_figure_text(images: list[dict], base: str, html_dir: Path) -> list[str]:
    """Problems with the text size of the page's figures (see ``figure_text_pt``)."""
    problems = []
    for image in images:
        if not image["inFigure"] or not image["url"].startswith(base):
            continue
        png = html_dir / unquote(urlparse(image["url"]).path[len(urlparse(base).path) :])
        size = figure_text_pt(png, image["natural"], image["displayed"])
        if size is None:
            problems.append(f"figure {image['src']} does not record its smallest text size")
        elif size < MIN_FIGURE_PT:
            problems.append(
                f"figure {image['src']}: its smallest text is {size:.1f} pt as shown "
                f"({image['displayed']:.0f} px of {image['natural']} px)"
            )
    return problems


def inspect(driver, url: str, html_dir: Path, base: str, page: str, width_name: str) -> list[str]:
    """Load one page at one width and return the problems a reader would see."""
    import json

    width = WIDTHS[width_name]
    _set_width(driver, width)
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(url)
    mathjax = driver.execute_async_script(WAIT_FOR_MATHJAX)
    seen = json.loads(driver.execute_script(INSPECT_PAGE))
    problems = [f"console error: {message}" for message in _console_errors(driver)]
    if mathjax.startswith("error"):
        problems.append(f"MathJax failed: {mathjax}")
    if seen["mathSources"] and not seen["typeset"]:
        problems.append(f"{seen['mathSources']} math elements but nothing typeset ({mathjax})")
    if seen["mathErrors"]:
        problems.append(f"{seen['mathErrors']} MathJax errors")
    text = seen["text"]
    for name, pattern in (("raw TeX", RAW_MATH), ("raw pipe table", RAW_TABLE), ("raw MyST", RAW_MYST)):
        for match in list(pattern.finditer(text))[:3]:
            context = text[max(0, match.start() - 40) : match.end() + 40].replace("\n", " ")
            problems.append(f"{name}: ...{context}...")
    if width_name == "phone":
        if seen["pageWidth"] > seen["viewport"] + 1:
            problems.append(f"the page is {seen['pageWidth']} px wide in a {seen['viewport']} px viewport")
        problems += [f"overflows the phone screen: {what}" for what in seen["overflowing"][:5]]
        problems += [f"cut off: {what}" for what in seen["clippedWithoutCue"]]
        problems += small_figure_text(seen["images"], base, html_dir)
    else:
        problems += [f"display equation wider than the column: {what}" for what in seen["wideMath"]]
    for image in seen["images"]:
        alt = (image["alt"] or "").strip()
        if len(alt) < 3 or HASHED.search(alt):
            problems.append(f"image {image['src']} has alt text {alt!r}")
    if width_name == "desktop":  # links are the same at both widths
        problems += [f"broken link: {b}" for b in _broken_links(seen["links"], url, base, html_dir)]
    _screenshot(driver, SCREENSHOTS / f"{page.replace('/', '__')}-{width}.png", width)
    return problems


@pytest.mark.parametrize("page", toc_files())
def test_page_reads_well_in_chromium(page, browser, book_url, built_book):
    url = urljoin(book_url, f"{page}.html")
    problems = []
    for width_name in WIDTHS:
        problems += [
            f"[{WIDTHS[width_name]} px] {problem}"
            for problem in inspect(browser, url, built_book, book_url, page, width_name)
        ]
    assert not problems, f"{page}.html:\n" + "\n".join(problems)


def test_the_inspection_sees_defects(browser, book_url, tmp_path):
    """The checks are not blind: a page with each defect fails each check."""
    import json

    bad = tmp_path / "bad.html"
    bad.write_text(
        "<html><body><article class='bd-article'>"
        "<p>Raw math $x^2$ and \\(y\\), and a table:</p><p>| a | b |\n|---|---|</p>"
        "<p>```{note}</p><img src='x.png' alt='0123456789abcdef0123.png'>"
        "<div style='width: 2000px'>wide</div>"
        "<script>undefined_function_of_this_page();</script>"
        "</article></body></html>",
        encoding="utf-8",
    )
    _set_width(browser, WIDTHS["phone"])
    browser.get_log("browser")
    browser.get(bad.as_uri())
    seen = json.loads(browser.execute_script(INSPECT_PAGE))
    assert RAW_MATH.search(seen["text"]) and RAW_TABLE.search(seen["text"])
    assert RAW_MYST.search(seen["text"])
    assert seen["overflowing"] and seen["pageWidth"] > seen["viewport"]
    assert any(HASHED.search(image["alt"]) for image in seen["images"])
    assert _console_errors(browser), "the deliberate ReferenceError was not seen"
    assert seen["clippedWithoutCue"] == []  # nothing here scrolls: the page itself overflows

    # a wide table in a scroll box: cut off without the cue, accepted with it
    cue = (
        "background: linear-gradient(to right, #fff 30%, transparent) left center / 2.5em 100% "
        "no-repeat local, radial-gradient(farthest-side at 0 50%, #0004, transparent) left center "
        "/ 0.9em 100% no-repeat scroll;"
    )
    cut = tmp_path / "cut.html"
    cut.write_text(
        "<html><body><article class='bd-article'>"
        "<div style='width: 300px; overflow-x: auto'><table><tr><td><div style='width: 900px'>bare</div>"
        "</td></tr></table></div>"
        f"<div style='width: 300px; overflow-x: auto; {cue}'><table><tr><td><div style='width: 900px'>cued"
        "</div></td></tr></table></div></article></body></html>",
        encoding="utf-8",
    )
    browser.get(cut.as_uri())
    seen = json.loads(browser.execute_script(INSPECT_PAGE))
    assert len(seen["clippedWithoutCue"]) == 1 and "bare" in seen["clippedWithoutCue"][0], seen

    # a figure whose text is too small at 390 px, and one that does not say how small
    from book_figures.style import figure_png_shown, new_figure

    fig = new_figure((6.4, 2.0))
    fig.text(0.5, 0.5, "small print", fontsize=8)
    png, shown = figure_png_shown(fig)  # shown at the width a page gives it: half its pixels
    (tmp_path / "small.png").write_bytes(png)
    fig.savefig(tmp_path / "silent.png")
    figures = tmp_path / "figures.html"
    figures.write_text(
        f"<html><body><figure><img src='small.png' width='{shown['width']}' "
        "alt='a figure with small print'>"
        "</figure><figure><img src='silent.png' alt='a figure without its record'>"
        "</figure></body></html>",
        encoding="utf-8",
    )
    browser.get(figures.as_uri())
    seen = json.loads(browser.execute_script(INSPECT_PAGE))
    problems = small_figure_text(seen["images"], tmp_path.as_uri() + "/", tmp_path)
    assert len(problems) == 2 and "smallest text is" in problems[0] and "does not record" in problems[1]


def test_math_renders_from_disk_without_a_server(browser, built_book):
    """``_build/html`` opened from disk (file://) still typesets math with its own MathJax."""
    import json

    page = built_book / "chapters" / "03_scaled_dot_product" / "scaled_dot_product_attention.html"
    _set_width(browser, WIDTHS["desktop"])
    browser.get_log("browser")
    browser.get(page.as_uri())
    assert browser.execute_async_script(WAIT_FOR_MATHJAX) == "typeset"
    seen = json.loads(browser.execute_script(INSPECT_PAGE))
    assert seen["typeset"] > 10 and not seen["mathErrors"]
    assert not RAW_MATH.search(seen["text"])
    assert not _console_errors(browser)
