"""The book's figure helpers (matplotlib): shared by every chapter's pages, never by grading.

Pages import them as ``from book_figures import show_heatmaps, use_book_style``. Each
plotting function draws on a new figure and returns it; the page cell ends with that figure
as its last value, and gives the cell a caption and an alt text (``mystnb.figure``,
``mystnb.image.alt``). ``style`` holds the sizes and fonts that keep figures readable on a
phone, ``heatmaps`` the attention-weight heatmaps, ``bars`` the bar charts,
``transformer_diagram`` the drawing of the whole model, and ``describe`` the words about a
figure generated from its data (and ``glue``, myst-nb's, for NumPy and torch numbers).
"""

from book_figures.bars import plot_position_changes, plot_weights_bar
from book_figures.describe import glue
from book_figures.heatmaps import show_heatmaps
from book_figures.style import BOOK_STYLE, MAX_WIDTH, integer_ticks, new_figure, use_book_style
from book_figures.transformer_diagram import ATTENTION_TYPES, draw_transformer

__all__ = [
    "ATTENTION_TYPES",
    "BOOK_STYLE",
    "MAX_WIDTH",
    "draw_transformer",
    "glue",
    "integer_ticks",
    "new_figure",
    "plot_position_changes",
    "plot_weights_bar",
    "show_heatmaps",
    "use_book_style",
]
