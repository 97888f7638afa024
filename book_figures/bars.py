"""Bar charts of the book: one query's weights over tokens, per-position output changes.

Each function draws on a new figure in the book's style (``book_figures.style``) and returns
it; the page cell ends with that figure as its last value and MyST-NB renders it once.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib as mpl
import numpy as np
from matplotlib.figure import Figure

from book_figures.style import BOOK_STYLE, MAX_WIDTH, new_figure


def plot_weights_bar(
    weights: np.ndarray, labels: Sequence[str], title: str = "", highlight: str | None = None
) -> Figure:
    """One query's attention weights over the tokens, as a bar chart.

    ``weights`` is (n_k,), one bar per entry of ``labels``; the bar whose label equals
    ``highlight`` is red, the others blue. The width grows with the number of tokens up to
    ``MAX_WIDTH``.
    """
    w = np.asarray(weights, dtype=np.float64)  # (n_k,)
    width = min(MAX_WIDTH, max(4.5, 0.45 * len(labels) + 1.0))
    with mpl.rc_context(BOOK_STYLE):
        fig = new_figure((width, 3.4))
        ax = fig.subplots()
        colours = ["tab:red" if label == highlight else "tab:blue" for label in labels]
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
        fig = new_figure((min(MAX_WIDTH, max(5.0, 0.6 * n + 2.0)), 3.8))
        ax = fig.subplots()
        bar_width = 0.8 / len(changes)  # the entries share 0.8 of each position's slot
        for i, (name, values) in enumerate(changes.items()):
            x = np.arange(n) + (i - (len(changes) - 1) / 2) * bar_width  # (n,) centred groups
            ax.bar(x, np.asarray(values, dtype=np.float64), width=bar_width, label=name)
        ax.axvspan(cut + 0.5, n - 0.5, color="0.9", zorder=0, label="changed inputs")
        ax.set_xticks(range(n))
        ax.set_xticklabels(labels, rotation=45, ha="right", rotation_mode="anchor")
        ax.set_xlim(-0.5, n - 0.5)
        ax.set_ylabel("largest change\nof the output")
        ax.legend(loc="upper left")
        if title:
            ax.set_title(title)
    return fig
