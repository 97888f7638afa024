"""The book's figure style: sizes and fonts that stay readable on a phone.

A figure is scaled to the width of the text column, about 350 px on a 390 px phone, so the
book's figures are at most ``MAX_WIDTH`` inches wide, use large fonts (``BOOK_STYLE``, set
for a whole page by ``use_book_style``) and stack several panels vertically instead of side
by side. Axes that count things (positions, keys, steps) get integer ticks
(``integer_ticks``).

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

from typing import Literal

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

# Widest figure, in inches: at matplotlib's 100 dpi a 6.4-inch figure is 640 px, shown at
# a little over half size on a phone, where 13-point text is still about 10 px high.
MAX_WIDTH = 6.4

BOOK_STYLE = {
    "font.size": 14,
    "axes.titlesize": 14,
    "axes.labelsize": 14,
    "xtick.labelsize": 13,
    "ytick.labelsize": 13,
    "legend.fontsize": 12,
    "figure.titlesize": 15,
    "figure.dpi": 100,
    "savefig.dpi": 100,
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
    """``%matplotlib inline`` when running in a Jupyter kernel, else nothing."""
    try:
        from IPython import get_ipython
    except ImportError:  # matplotlib without IPython: nothing to display to
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "kernel"):
        shell.run_line_magic("matplotlib", "inline")


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure of ``figsize`` inches, constrained layout, that pyplot does not track."""
    return Figure(figsize=figsize, layout="constrained")


def integer_ticks(ax: Axes, axis: Literal["x", "y", "both"] = "x") -> None:
    """Put ticks only on whole numbers along ``axis`` ("x", "y" or "both")."""
    if axis in ("x", "both"):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if axis in ("y", "both"):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
