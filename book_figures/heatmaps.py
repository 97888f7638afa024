"""Attention weights as heatmaps: one panel per head, layer or example, stacked vertically.

``show_heatmaps`` draws on a new figure and returns it; the page cell ends with that figure as
its last value (not assigned, no ``;``), and MyST-NB renders it once (give that cell a
``mystnb.figure`` caption and an ``mystnb.image.alt`` text: the helper draws, the page says
what the figure shows). The figure is not registered with pyplot (``book_figures.style``
says why), so ``plt.show()`` does not show it and nothing shows it twice. The
figure follows the book's style (``book_figures.style``): at most ``MAX_WIDTH`` inches wide,
large fonts, panels one under the other so that it stays readable on a phone.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage

from book_figures.style import BOOK_STYLE, MAX_WIDTH, MIN_FONT, new_figure

# Tick labels: one sequence for every panel, or one sequence per panel.
Labels = Sequence[str] | Sequence[Sequence[str]]

# Largest side of one heatmap cell, in inches (small matrices would otherwise be huge).
MAX_CELL = 0.5
# Width of one character of a MIN_FONT tick label, in inches (DejaVu Sans, about 0.6 em).
CHAR = 0.6 * MIN_FONT / 72


def show_heatmaps(
    weights: np.ndarray,
    row_labels: Labels | None = None,
    col_labels: Labels | None = None,
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
    other (for example one per head), each with its own title. ``row_labels`` and
    ``col_labels`` are either one sequence of labels for every panel or one sequence per
    panel (panels that show different sentences carry their own words). Colours run from 0 to
    ``vmax`` (1, the range of a softmax weight, unless told otherwise) and one horizontal
    colorbar under the panels serves every panel, so that the keys get the whole width.
    ``annotate`` writes each weight in its cell. ``size`` is the height of one panel in
    inches before the labels; the width follows the number of keys and never exceeds
    ``MAX_WIDTH``. Column labels stand upright (rotated 90 degrees) so that neighbours never
    overlap.
    """
    panels = _stack_panels(weights)  # (p, n_q, n_k)
    p, n_q, n_k = panels.shape
    rows = _labels_per_panel(row_labels, p, n_q, "row_labels")
    cols = _labels_per_panel(col_labels, p, n_k, "col_labels")
    longest_row = max((len(str(label)) for panel in rows if panel for label in panel), default=2)
    longest_col = max((len(str(label)) for panel in cols if panel for label in panel), default=2)
    figsize = _heatmap_figure_size(p, n_q, n_k, size, longest_row, longest_col, titles is not None)
    with mpl.rc_context(BOOK_STYLE):
        fig = new_figure(figsize)
        axes = fig.subplots(p, 1, squeeze=False)
        column = axes[:, 0]  # (p,) one Axes per panel
        for i, ax in enumerate(column):
            image = _draw_heatmap(ax, panels[i], cmap=cmap, vmax=vmax)  # panels[i]: (n_q, n_k)
            _label_heatmap(ax, n_q, n_k, rows[i], cols[i], xlabel=xlabel, ylabel=ylabel)
            if titles is not None:
                ax.set_title(titles[i])
            if annotate:
                _write_cell_values(ax, panels[i], vmax=vmax)
        fig.colorbar(
            image,
            ax=column.tolist(),
            orientation="horizontal",
            location="bottom",
            fraction=0.9 / (p * (n_q + 4)),
            aspect=30,
            shrink=0.8,
            label=colorbar_label,
        )
    return fig


def _stack_panels(weights: np.ndarray) -> np.ndarray:
    """``weights`` as a float64 (p, n_q, n_k) stack; a single (n_q, n_k) matrix gives p = 1."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2:
        w = w[None]  # (1, n_q, n_k)
    if w.ndim != 3:
        raise ValueError(f"expected (n_q, n_k) or (p, n_q, n_k) weights, got shape {w.shape}")
    return w


def _labels_per_panel(labels: Labels | None, p: int, n: int, name: str) -> list[Sequence[str] | None]:
    """``labels`` as one label sequence (or None) per panel, each checked to have ``n`` labels."""
    if labels is None:
        return [None] * p
    if len(labels) and not isinstance(labels[0], str):  # one sequence per panel
        per_panel = [list(panel) for panel in labels]
        if len(per_panel) != p:
            raise ValueError(f"{name}: {len(per_panel)} label sequences for {p} panels")
    else:
        per_panel = [list(labels)] * p
    for panel in per_panel:
        if len(panel) != n:
            raise ValueError(f"{name}: {len(panel)} labels for {n} rows or columns")
    return per_panel


def _heatmap_figure_size(
    p: int, n_q: int, n_k: int, size: float, longest_row: int, longest_col: int, has_titles: bool
) -> tuple[float, float]:
    """(width, height) in inches of ``p`` stacked (n_q, n_k) heatmaps and a colorbar under them.

    Each cell gets the same budget across and down: at most ``MAX_CELL`` inches, small
    enough that ``n_q`` rows fit in ``size`` inches and ``n_k`` columns fit in ``MAX_WIDTH``
    beside the row labels (``longest_row`` characters) and the axis label. Upright column
    labels of ``longest_col`` characters and titles need room under and above each panel.
    """
    row_room = longest_row * CHAR + 0.55  # row labels and the y-axis label
    cell = min(MAX_CELL, size / max(n_q, 1), (MAX_WIDTH - row_room - 0.15) / max(n_k, 1))
    label_room = longest_col * CHAR + 0.45  # upright column labels and the x-axis label
    title_room = 0.35 if has_titles else 0.1
    width = min(MAX_WIDTH, n_k * cell + row_room + 0.15)
    height = p * (n_q * cell + label_room + title_room) + 0.85  # + the colorbar and its label
    return width, height


def _draw_heatmap(ax: Axes, weights: np.ndarray, cmap: str, vmax: float) -> AxesImage:
    """Draw one (n_q, n_k) matrix on ``ax``, colours from 0 to ``vmax``, framed on all sides."""
    image = ax.imshow(weights, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    ax.spines[:].set_visible(True)  # the book style hides the top and right spines
    return image


def _label_heatmap(
    ax: Axes,
    n_q: int,
    n_k: int,
    row_labels: Sequence[str] | None,
    col_labels: Sequence[str] | None,
    xlabel: str,
    ylabel: str,
) -> None:
    """One tick per row and column of the (n_q, n_k) heatmap on ``ax``, named by the labels if given.

    Column labels (usually tokens) are rotated so that long ones do not overlap.
    """
    ax.set_xticks(range(n_k))
    ax.set_yticks(range(n_q))
    if col_labels is not None:
        ax.set_xticklabels(col_labels, rotation=90)
    if row_labels is not None:
        ax.set_yticklabels(row_labels)
    ax.set_ylabel(ylabel)
    ax.set_xlabel(xlabel)


def _write_cell_values(ax: Axes, weights: np.ndarray, vmax: float) -> None:
    """Write each entry of the (n_q, n_k) ``weights`` in its cell: ".75", and "0" or "1".

    Two decimals without the leading zero fit a cell at ``MIN_FONT`` points. The text is
    white on cells darker than 60 % of ``vmax`` and black elsewhere.
    """
    n_q, n_k = weights.shape
    for r in range(n_q):
        for c in range(n_k):
            value = weights[r, c]
            colour = "white" if value > 0.6 * vmax else "black"
            ax.text(c, r, cell_text(value), ha="center", va="center", fontsize=MIN_FONT, color=colour)


def cell_text(value: float) -> str:
    """A weight in a heatmap cell: "0" and "1" when they round to it, else ".75" or "-.25"."""
    text = f"{value:.2f}"
    if text in ("0.00", "-0.00"):
        return "0"
    if text == "1.00":
        return "1"
    return text.replace("0.", ".", 1)
