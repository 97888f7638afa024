"""Plotting helpers shared by every chapter's pages (matplotlib, no seaborn).

Each function draws on a new figure and returns it, so that a page cell ends with the
figure and MyST-NB renders it once.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure


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
) -> Figure:
    """Attention weights as heatmaps, one panel per leading index.

    ``weights`` is (n_q, n_k) for one panel or (p, n_q, n_k) for ``p`` panels side by side
    (for example one per head). Colours run from 0 to 1, the range of a softmax weight.
    """
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim == 2:
        w = w[None]  # (1, n_q, n_k)
    if w.ndim != 3:
        raise ValueError(f"expected (n_q, n_k) or (p, n_q, n_k) weights, got shape {w.shape}")
    p, n_q, n_k = w.shape
    fig, axes = plt.subplots(
        1, p, figsize=(size * p * max(1.0, n_k / n_q) ** 0.5 + 0.8, size), squeeze=False
    )
    for i, ax in enumerate(axes[0]):
        im = ax.imshow(w[i], cmap=cmap, vmin=0.0, vmax=1.0, aspect="auto")
        ax.set_xticks(range(n_k))
        ax.set_yticks(range(n_q))
        if col_labels is not None:
            ax.set_xticklabels(col_labels, rotation=60, ha="right")
        if row_labels is not None:
            ax.set_yticklabels(row_labels)
        if i == 0:
            ax.set_ylabel(ylabel)
        else:
            ax.set_yticklabels([])
        ax.set_xlabel(xlabel)
        if titles is not None:
            ax.set_title(titles[i])
        if annotate:
            for r in range(n_q):
                for c in range(n_k):
                    value = w[i, r, c]
                    colour = "white" if value > 0.6 else "black"
                    ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=7, color=colour)
    fig.colorbar(im, ax=axes[0].tolist(), shrink=0.8, label="weight")
    return fig


def plot_weights_bar(
    weights: np.ndarray, labels: Sequence[str], title: str = "", highlight: str | None = None
) -> Figure:
    """One query's attention weights over the tokens, as a bar chart."""
    w = np.asarray(weights, dtype=np.float64)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.55 * len(labels)), 2.8))
    colours = ["tab:red" if lab == highlight else "tab:blue" for lab in labels]
    ax.bar(range(len(labels)), w, color=colours)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.set_ylabel("weight")
    ax.set_ylim(0, max(1e-9, float(w.max())) * 1.15)
    if title:
        ax.set_title(title)
    fig.tight_layout()
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
    fig, ax = plt.subplots(figsize=(max(5.0, 0.7 * n + 1.5), 3.0))
    width = 0.8 / len(changes)
    for i, (name, values) in enumerate(changes.items()):
        x = np.arange(n) + (i - (len(changes) - 1) / 2) * width
        ax.bar(x, np.asarray(values, dtype=np.float64), width=width, label=name)
    ax.axvspan(cut + 0.5, n - 0.5, color="0.9", zorder=0, label="changed inputs")
    ax.set_xticks(range(n))
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.set_xlim(-0.5, n - 0.5)
    ax.set_ylabel("largest change of the output")
    ax.legend(fontsize=8, loc="upper left")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    return fig
