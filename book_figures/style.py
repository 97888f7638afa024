"""The book's figure style: sizes and fonts that stay readable on a phone.

A figure is scaled to the width of the text column, about 350 px on a 390 px phone, so the
book's figures are at most ``MAX_WIDTH`` inches wide, use large fonts (``BOOK_STYLE``, set
for a whole page by ``use_book_style``) and stack several panels vertically instead of side
by side. Axes that count things (positions, keys, steps) get integer ticks
(``integer_ticks``).
"""

from __future__ import annotations

from typing import Literal

import matplotlib as mpl
from matplotlib.axes import Axes
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
    """Set matplotlib's defaults for the book's figures (large fonts, no top/right spines)."""
    mpl.rcParams.update(BOOK_STYLE)


def integer_ticks(ax: Axes, axis: Literal["x", "y", "both"] = "x") -> None:
    """Put ticks only on whole numbers along ``axis`` ("x", "y" or "both")."""
    if axis in ("x", "both"):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if axis in ("y", "both"):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
