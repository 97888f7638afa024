"""The book's figure helpers (``book_figures``): what they draw is what they were given.

Fast unit tests, no book build: labels come from the data drawn (one label sequence per
panel when the panels show different sentences), and a figure from a helper is not tracked
by pyplot (so ``plt.show()`` never shows it a second time).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402 - after choosing the backend
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from book_figures import plot_position_changes, plot_weights_bar, show_heatmaps  # noqa: E402


def tick_labels(ax, axis: str) -> list[str]:
    ticks = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_text() for t in ticks]


def test_each_panel_carries_its_own_labels():
    wide = "the tired cat did not cross the street because it was too wide".split()
    tired = wide[:-1] + ["tired"]
    fig = show_heatmaps(
        np.random.default_rng(0).random((2, 3, len(wide))),
        row_labels=["head 0", "head 1", "readout"],
        col_labels=[wide, tired],
        titles=["too wide", "too tired"],
    )
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert [tick_labels(ax, "x") for ax in panels] == [wide, tired]
    assert [tick_labels(ax, "y") for ax in panels] == [["head 0", "head 1", "readout"]] * 2


def test_one_label_sequence_serves_every_panel():
    fig = show_heatmaps(np.ones((3, 2, 2)) / 2, col_labels=["a", "b"], titles=["0", "1", "2"])
    assert [tick_labels(ax, "x") for ax in fig.axes if ax.get_title()] == [["a", "b"]] * 3


@pytest.mark.parametrize(
    "labels, message",
    [(["a", "b", "c"], "3 labels for 2"), ([["a", "b"]], "1 label sequences for 2 panels")],
)
def test_labels_that_do_not_fit_the_data_are_refused(labels, message):
    with pytest.raises(ValueError, match=message):
        show_heatmaps(np.ones((2, 2, 2)) / 2, col_labels=labels)


def test_helper_figures_are_not_tracked_by_pyplot():
    plt.close("all")
    figures = [
        show_heatmaps(np.eye(2)),
        plot_weights_bar(np.array([0.2, 0.8]), ["a", "b"]),
        plot_position_changes({"x": np.zeros(3)}, ["a", "b", "c"], cut=0),
    ]
    assert plt.get_fignums() == []
    for fig in figures:
        assert fig.get_layout_engine() is not None  # constrained layout, as the pages expect


def test_the_transformer_drawing_names_the_course_modules_and_the_three_attention_types():
    from matplotlib.text import Text

    from book_figures import ATTENTION_TYPES, draw_transformer

    fig = draw_transformer()
    texts = " ".join(t.get_text() for t in fig.findobj(Text))
    for name in (
        "EncoderLayer.self_attn",
        "DecoderLayer.self_attn",
        "DecoderLayer.cross_attn",
        "positional_encoding",
        "causal_mask",
        "source padding",
        "target padding",
        "memory",
    ):
        assert name in texts, name
    badges = [t.get_text() for t in fig.findobj(Text) if t.get_text() in {"1", "2", "3"}]
    assert sorted(badges) == sorted(str(n) for n in ATTENTION_TYPES) == ["1", "2", "3"]


def test_every_helper_writes_text_of_at_least_the_book_minimum():
    from book_figures import draw_transformer
    from book_figures.style import MIN_FONT, smallest_font_pt

    heatmap = show_heatmaps(
        np.full((2, 3, 4), 0.25),
        row_labels=list("abc"),
        col_labels=list("wxyz"),
        titles=["one", "two"],
        annotate=True,
    )
    assert smallest_font_pt(heatmap) >= MIN_FONT
    assert smallest_font_pt(plot_weights_bar(np.array([0.2, 0.8]), ["a", "b"], title="t")) >= MIN_FONT
    assert smallest_font_pt(plot_position_changes({"x": np.zeros(3)}, ["a", "b", "c"], cut=0)) >= MIN_FONT
    assert smallest_font_pt(draw_transformer()) >= 12.5  # a drawing 4.55 inches wide


def test_a_figure_png_records_its_smallest_text_and_the_browser_rule_reads_it(tmp_path):
    import io

    from PIL import Image

    from book_figures.style import DPI, DPI_KEY, SMALLEST_FONT_KEY, figure_png, new_figure
    from tests.test_browser import figure_text_pt

    fig = new_figure((6.4, 3.0))
    ax = fig.subplots()
    ax.set_title("a title", fontsize=14)
    ax.text(0.5, 0.5, "small print", fontsize=8)
    png = figure_png(fig)
    image = Image.open(io.BytesIO(png))
    assert image.text[SMALLEST_FONT_KEY] == "8.00" and image.text[DPI_KEY] == str(DPI)
    (tmp_path / "f.png").write_bytes(png)
    # shown 320 px wide out of 640: 8 pt * DPI / 96 px per inch * 0.5
    assert abs(figure_text_pt(tmp_path / "f.png", 640, 320) - 8 * DPI / 96 * 0.5) < 1e-9


@pytest.mark.book
@pytest.mark.slow
def test_the_book_glue_writes_what_myst_nb_glue_writes():
    """book_figures.glue avoids importing myst-nb in every kernel; its outputs are myst-nb's."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            "import numpy as np\nfrom book_figures import glue\n"
            "glue('a', np.float64(0.5))\nglue('b', (2, 3))\nglue('c', 'text', display=True)"
        ),
        nbformat.v4.new_code_cell(
            "from myst_nb import glue\n"
            "glue('a', 0.5, display=False)\nglue('b', (2, 3), display=False)\nglue('c', 'text')"
        ),
    ]
    NotebookClient(notebook, kernel_name="python3", timeout=120).execute()
    ours, theirs = ([dict(output) for output in cell.outputs] for cell in notebook.cells)
    assert ours == theirs and len(ours) == 3
