"""Plotting helpers shared by every chapter's pages (matplotlib, no seaborn).

Each function draws on a new figure and returns it, so that a page cell ends with the
figure and MyST-NB renders it once (give that cell a ``mystnb.figure`` caption and an
``mystnb.image.alt`` text: the helpers draw, the page says what the figure shows).

The book is read on phones as well as on wide screens. A figure is scaled to the width of
the text column, about 350 px on a 390 px phone, so the helpers keep figures at most
``MAX_WIDTH`` inches wide, use large fonts (``use_book_style``) and stack several panels
vertically instead of side by side. Axes that count things (positions, keys, steps) get
integer ticks (``integer_ticks``).
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import matplotlib.pyplot as plt
import numpy as np
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
    """Set matplotlib's defaults for the book's figures (large fonts, no top/right spines)."""
    mpl.rcParams.update(BOOK_STYLE)


def integer_ticks(ax: Axes, axis: str = "x") -> None:
    """Put ticks only on whole numbers along ``axis`` ("x", "y" or "both")."""
    if axis in ("x", "both"):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if axis in ("y", "both"):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def show_heatmaps(
    weights: np.ndarray,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    titles: Sequence[str] | None = None,
    xlabel: str = "keys",
    ylabel: str = "queries",
    cmap: str = "Reds",
    annotate: bool = False,
    size: float = 3.0,
    vmax: float = 1.0,
    colorbar_label: str = "weight",
) -> Figure:
    """Attention weights as heatmaps, one panel per leading index, stacked vertically.

    ``weights`` is (n_q, n_k) for one panel or (p, n_q, n_k) for ``p`` panels, one under the
    other (for example one per head), each with its own title. Colours run from 0 to
    ``vmax`` (1, the range of a softmax weight, unless told otherwise). ``size`` is the
    height of one panel in inches before the labels; the width follows the number of keys
    and never exceeds ``MAX_WIDTH``.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2:
        w = w[None]  # (1, n_q, n_k)
    if w.ndim != 3:
        raise ValueError(f"expected (n_q, n_k) or (p, n_q, n_k) weights, got shape {w.shape}")
    p, n_q, n_k = w.shape
    with mpl.rc_context(BOOK_STYLE):
        cell = min(0.42, size / max(n_q, 1), (MAX_WIDTH - 2.6) / max(n_k, 1))  # inches per cell
        label_room = 1.4 if col_labels is not None else 0.8
        width = min(MAX_WIDTH, n_k * cell + 2.8)
        height = p * (n_q * cell + label_room + (0.4 if titles is not None else 0.1)) + 0.2
        fig, axes = plt.subplots(p, 1, figsize=(width, height), squeeze=False, layout="constrained")
        panels = axes[:, 0]
        for i, ax in enumerate(panels):
            im = ax.imshow(w[i], cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
            ax.set_xticks(range(n_k))
            ax.set_yticks(range(n_q))
            if col_labels is not None:
                ax.set_xticklabels(col_labels, rotation=60, ha="right", rotation_mode="anchor")
            if row_labels is not None:
                ax.set_yticklabels(row_labels)
            ax.set_ylabel(ylabel)
            ax.set_xlabel(xlabel)
            ax.spines[:].set_visible(True)
            if titles is not None:
                ax.set_title(titles[i])
            if annotate:
                for r in range(n_q):
                    for c in range(n_k):
                        value = w[i, r, c]
                        colour = "white" if value > 0.6 * vmax else "black"
                        ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=10,
                                color=colour)
        fig.colorbar(im, ax=panels.tolist(), shrink=min(1.0, 0.9 / p + 0.3), label=colorbar_label)
    return fig


def plot_weights_bar(
    weights: np.ndarray, labels: Sequence[str], title: str = "", highlight: str | None = None
) -> Figure:
    """One query's attention weights over the tokens, as a bar chart."""
    w = np.asarray(weights, dtype=np.float64)
    with mpl.rc_context(BOOK_STYLE):
        fig, ax = plt.subplots(figsize=(min(MAX_WIDTH, max(4.5, 0.45 * len(labels) + 1.0)), 3.4),
                               layout="constrained")
        colours = ["tab:red" if lab == highlight else "tab:blue" for lab in labels]
        ax.bar(range(len(labels)), w, color=colours)
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, rotation=60, ha="right", rotation_mode="anchor")
        ax.set_ylabel("weight")
        ax.set_ylim(0, max(1e-9, float(w.max())) * 1.15)
        if title:
            ax.set_title(title)
    return fig


def plot_position_changes(
    changes: dict[str, np.ndarray], labels: Sequence[str], cut: int, title: str = ""
) -> Figure:
    """How far each position's output moved after the inputs after position ``cut`` changed.

    ``changes`` maps a legend entry to an (n,) array, for example the largest absolute change
    of each output row; one group of bars per position, one colour per entry. The perturbed
    positions (after ``cut``) are shaded.
    """
    n = len(labels)
    with mpl.rc_context(BOOK_STYLE):
        fig, ax = plt.subplots(figsize=(min(MAX_WIDTH, max(5.0, 0.6 * n + 2.0)), 3.8),
                               layout="constrained")
        width = 0.8 / len(changes)
        for i, (name, values) in enumerate(changes.items()):
            x = np.arange(n) + (i - (len(changes) - 1) / 2) * width
            ax.bar(x, np.asarray(values, dtype=np.float64), width=width, label=name)
        ax.axvspan(cut + 0.5, n - 0.5, color="0.9", zorder=0, label="changed inputs")
        ax.set_xticks(range(n))
        ax.set_xticklabels(labels, rotation=45, ha="right", rotation_mode="anchor")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel("largest change\nof the output")
        ax.legend(loc="upper left")
        if title:
            ax.set_title(title)
    return fig
