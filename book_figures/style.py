"""The book's figure style: sizes and fonts that stay readable on a phone.

A figure is scaled down to the width of the text column, 342 px on a 390 px phone. A
figure of ``MAX_WIDTH`` inches (480 CSS px: 100 px per inch) is then shown at 71 % of its
size, and text of ``MIN_FONT`` points at about 9.6 points: every text of a book figure is at least
``MIN_FONT`` points (``BOOK_STYLE``, set for a whole page by ``use_book_style``), figures are
at most ``MAX_WIDTH`` wide and stack several panels vertically instead of side by side.
Axes that count things (positions, keys, steps) get integer ticks (``integer_ticks``).

Figures are saved at twice that resolution (``DPI`` = 200 pixels per inch) and shown at half
their pixel size (``SHOWN_PER_INCH`` CSS px per inch, the width and height given to the page
with the image), so a phone's screen of two or three device pixels per CSS pixel gets sharp
lines and text instead of an upscaled 100 dpi image.

The proof is in the PNG: in a Jupyter kernel, ``use_book_style`` makes every figure display
as a PNG that records the size of its smallest text (``SMALLEST_FONT_KEY``, a PNG text
chunk, measured by ``smallest_font_pt`` on the drawn figure) and its resolution
(``DPI_KEY``), and ``tests/test_browser.py`` turns them into the size a reader sees at 390 px.

How a figure reaches the page, in a Jupyter kernel. matplotlib's inline backend is loaded
lazily, by the first figure pyplot creates; loaded inside the ``rc_context`` of a helper, it
switched interactive mode on, and leaving the context switched it off again, so that every
later pyplot figure of the page was silently dropped. ``use_book_style`` therefore loads the
inline backend itself (``%matplotlib inline``), at the top of the page. The helpers draw on
figures that pyplot does not track (``new_figure``): such a figure is shown exactly when it
is the last value of its cell, never by ``plt.show()`` and never twice. Figures a page
draws with pyplot itself end their cell with ``plt.show()``.
"""

from __future__ import annotations

import io
import struct
import zlib
from typing import Literal

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import MaxNLocator

# Widest figure, in inches, and smallest text, in points (see the module docstring).
MAX_WIDTH = 4.8
MIN_FONT = 13.0
DPI = 200  # pixels per inch of the saved PNG
SHOWN_PER_INCH = 100  # CSS px per inch as the page shows it: a 2x image
SMALLEST_FONT_KEY = "Book smallest font (pt)"
DPI_KEY = "Book dpi"

BOOK_STYLE = {
    "font.size": 14,
    "axes.titlesize": 14,
    "axes.labelsize": 14,
    "xtick.labelsize": MIN_FONT,
    "ytick.labelsize": MIN_FONT,
    "legend.fontsize": MIN_FONT,
    "legend.title_fontsize": MIN_FONT,
    "figure.titlesize": 15,
    "figure.dpi": DPI,
    "savefig.dpi": DPI,
    "axes.spines.top": False,
    "axes.spines.right": False,
}


def use_book_style() -> None:
    """Set matplotlib's defaults for the book's figures (large fonts, no top/right spines).

    In a Jupyter kernel it also loads the inline backend first (see the module docstring);
    outside one (a plain ``python``, the page tests) it only sets the defaults.
    """
    _load_inline_backend()
    mpl.rcParams.update(BOOK_STYLE)


def _load_inline_backend() -> None:
    """``%matplotlib inline`` and the book's PNG display, in a Jupyter kernel; else nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # matplotlib without IPython: nothing to display to
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "kernel"):
        shell.run_line_magic("matplotlib", "inline")
        shell.display_formatter.formatters["image/png"].for_type(Figure, figure_png_shown)


def smallest_font_pt(fig: Figure, draw: bool = True) -> float:
    """The size, in points, of the smallest visible non-empty text of ``fig`` once drawn.

    Tick labels get their text when the figure is drawn; ``draw=False`` reads a figure that
    has just been drawn (saved) as it is.
    """
    if draw:
        fig.draw_without_rendering()
    sizes = []
    for text in fig.findobj(Text):
        if not (text.get_visible() and text.get_text().strip()):
            continue  # hidden, or empty (a minor tick's label, an unused title)
        if text.axes is not None and not text.axes.get_visible():
            continue
        sizes.append(text.get_fontsize())
    return float(min(sizes)) if sizes else float("inf")


def figure_png(fig: Figure) -> bytes:
    """``fig`` as the PNG a page shows (tight bounding box), recording its smallest text size.

    The figure is drawn once, by ``savefig``; the sizes are read from that drawing and written
    into the PNG as text chunks (``SMALLEST_FONT_KEY``, ``DPI_KEY``).
    """
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    smallest = smallest_font_pt(fig, draw=False)
    return _with_text_chunks(buffer.getvalue(), {SMALLEST_FONT_KEY: f"{smallest:.2f}", DPI_KEY: str(DPI)})


def figure_png_shown(fig: Figure) -> tuple[bytes, dict[str, int]]:
    """``figure_png(fig)`` with the size the page shows it at: ``SHOWN_PER_INCH / DPI`` of its pixels.

    IPython passes the metadata (``width``, ``height`` in CSS px) with the image, and myst-nb
    writes them on the ``<img>``: the 2x PNG fills the same box a 100 dpi one did.
    """
    png = figure_png(fig)
    width, height = struct.unpack(">II", png[16:24])  # IHDR: width, height after signature, length, type
    return png, {"width": round(width * SHOWN_PER_INCH / DPI), "height": round(height * SHOWN_PER_INCH / DPI)}


def _with_text_chunks(png: bytes, texts: dict[str, str]) -> bytes:
    """``png`` with a tEXt chunk per entry of ``texts``, right after its IHDR chunk."""
    ihdr_end = 8 + 4 + 4 + 13 + 4  # signature, then IHDR: length, type, 13 bytes of data, CRC
    chunks = b""
    for key, value in texts.items():
        data = key.encode("latin-1") + b"\0" + value.encode("latin-1")
        body = b"tEXt" + data
        chunks += struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))
    return png[:ihdr_end] + chunks + png[ihdr_end:]


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure of ``figsize`` inches, constrained layout, that pyplot does not track."""
    return Figure(figsize=figsize, layout="constrained")


def integer_ticks(ax: Axes, axis: Literal["x", "y", "both"] = "x") -> None:
    """Put ticks only on whole numbers along ``axis`` ("x", "y" or "both")."""
    if axis in ("x", "both"):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if axis in ("y", "both"):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
