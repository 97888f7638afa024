"""The whole encoder-decoder Transformer in one drawing, labelled with the course's names.

``draw_transformer()`` draws, top to bottom as a phone reads it, the source tokens going
through the embedding and ``positional_encoding`` into a stack of ``EncoderLayer`` blocks,
their output (the memory) feeding every ``DecoderLayer``'s ``cross_attn``, and the target
tokens going through the decoder to the output logits. The three attention types are
coloured and numbered 1 to 3 (``ATTENTION_TYPES``: the number, the name, the module and
the mask of each); the page's caption links each number to its chapter. Every sublayer's
residual path is an arrow of its own, from the sublayer's input around it into the
``norm(x + ·)`` that adds it back. The names are those of the book's one encoder-decoder,
``grader.reference.seq2seq.TinyTranslator`` (chapters 6 and 8), ``output_proj`` included.
"""

from __future__ import annotations

import matplotlib as mpl
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch

from book_figures.style import BOOK_STYLE, new_figure

# number -> (name, colour); the drawing marks each attention box with its number.
ATTENTION_TYPES = {
    1: ("encoder self-attention", "#d9ecf7"),
    2: ("masked decoder self-attention", "#fde3cf"),
    3: ("cross-attention", "#dff2dc"),
}
EDGE = {1: "#2b7bba", 2: "#d9711c", 3: "#3c9a35"}
WIDTH = 4.55  # inches: 12.5-point text is shown at 9.4 points on a 390 px phone
FONT = 12.5
LEFT, RIGHT = 0.5, 3.9  # the boxes' column, in inches
GAP = 0.2  # between two boxes, where the arrow goes
BLOCK_RIGHT = RIGHT + 0.26  # the right edge of a layer's dashed block
RESIDUAL_X = RIGHT + 0.13  # the residual paths run down the right of the boxes, inside the block
MEMORY_X = RIGHT + 0.42  # and the memory outside the blocks

# The drawing, top to bottom: (kind, text, attention type or 0). Kinds: "io" (tokens in or
# logits out), "box" (a step), "attention" (an attention sublayer), "group" (starts a layer
# block, its title), "end" (ends it).
ROWS: list[tuple[str, str, int]] = [
    ("io", "source tokens (B, n_src)", 0),
    ("box", "src_embed · √d_model\n+ positional_encoding", 0),
    ("group", "EncoderLayer × N", 0),
    ("attention", "EncoderLayer.self_attn\nmask: source padding", 1),
    ("box", "norm1(x + ·)", 0),
    ("box", "EncoderLayer.ff", 0),
    ("box", "norm2(x + ·)", 0),
    ("end", "memory", 0),
    ("io", "target tokens, shifted right", 0),
    ("box", "tgt_embed · √d_model\n+ positional_encoding", 0),
    ("group", "DecoderLayer × N", 0),
    ("attention", "DecoderLayer.self_attn\ncausal_mask & target padding", 2),
    ("box", "norm1(y + ·)", 0),
    ("attention", "DecoderLayer.cross_attn\nQ: decoder; K, V: memory\nmask: source padding", 3),
    ("box", "norm2(y + ·)", 0),
    ("box", "DecoderLayer.ff", 0),
    ("box", "norm3(y + ·)", 0),
    ("end", "", 0),
    ("io", "output_proj: logits (B, n_tgt, V)", 0),
]


def _height(text: str) -> float:
    """A box's height in inches: room for its lines of text."""
    return 0.22 + 0.24 * (text.count("\n") + 1)


def _box(ax: Axes, top: float, text: str, face: str, edge: str) -> float:
    """A rounded box whose top edge is at ``top``; returns its bottom edge."""
    h = _height(text)
    ax.add_patch(
        FancyBboxPatch(
            (LEFT, top - h),
            RIGHT - LEFT,
            h,
            boxstyle="round,pad=0,rounding_size=0.08",
            facecolor=face,
            edgecolor=edge,
            linewidth=1.2,
        )
    )
    ax.text((LEFT + RIGHT) / 2, top - h / 2, text, ha="center", va="center", fontsize=FONT, linespacing=1.25)
    return top - h


def _badge(ax: Axes, x: float, y: float, number: int) -> None:
    """The number of an attention type in a filled circle."""
    ax.add_patch(Circle((x, y), 0.17, facecolor=EDGE[number], edgecolor="none"))
    ax.text(x, y, str(number), ha="center", va="center", fontsize=FONT, color="white", fontweight="bold")


def _arrow(
    ax: Axes, start: tuple[float, float], end: tuple[float, float], colour: str = "0.25", rad: float = 0.0
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=12,
            linewidth=1.3,
            color=colour,
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=0,
            shrinkB=0,
        )
    )


def draw_transformer() -> Figure:
    """The encoder-decoder Transformer of chapters 5 and 6 (post-norm), one layer of each drawn.

    Each box is a step of the course's modules; the attention boxes carry the number and
    colour of their type (``ATTENTION_TYPES``) and the mask they are given.
    """
    heights = {"io": _height(""), "box": 0.0, "attention": 0.0, "group": 0.34, "end": 0.28}
    total = sum(heights[kind] or _height(text) for kind, text, _ in ROWS) + GAP * len(ROWS) + 0.2
    with mpl.rc_context(BOOK_STYLE):
        fig = new_figure((WIDTH, total))
        fig.set_layout_engine(None)
        ax = fig.add_axes((0, 0, 1, 1))
        ax.set_xlim(0, WIDTH)
        ax.set_ylim(0, total)
        ax.set_axis_off()
        middle = (LEFT + RIGHT) / 2
        y, previous_bottom, group_top = total - 0.1, None, None
        memory_from = cross_attention = None
        sublayer_input = None  # the height of the arrow entering the latest sublayer
        for kind, text, number in ROWS:
            if kind == "group":
                group_top = y
                ax.text(
                    LEFT - 0.06, y - 0.17, text, ha="left", va="center", fontsize=FONT, style="italic"
                )  # left of the arrow that enters the block
                y -= heights["group"]
                continue
            if kind == "end":
                ax.add_patch(
                    FancyBboxPatch(
                        (LEFT - 0.12, y + GAP / 2 - 0.05),
                        BLOCK_RIGHT - LEFT + 0.12,
                        group_top - y - GAP / 2 + 0.05,
                        boxstyle="round,pad=0,rounding_size=0.1",
                        facecolor="none",
                        edgecolor="0.55",
                        linewidth=1.0,
                        linestyle="--",
                    )
                )
                if text == "memory":  # the block's output leaves it downwards, then turns right
                    memory_from = (middle, y + GAP, y + GAP / 2 - 0.05 - 0.12)  # x, from, turn
                y -= heights["end"]
                previous_bottom = None if text == "memory" else previous_bottom
                continue
            top = y
            if previous_bottom is not None:
                _arrow(ax, (middle, previous_bottom), (middle, top))
            if kind == "attention" or text.endswith(".ff"):
                # a sublayer: its input is the arrow just above it (or, first in a layer, the
                # arrow that enters the layer's block)
                sublayer_input = top + (GAP / 2 if previous_bottom is not None else heights["group"] / 2)
            face, edge = ("0.93", "0.35") if kind == "io" else ("white", "0.35")
            if kind == "attention":
                face, edge = ATTENTION_TYPES[number][1], EDGE[number]
            bottom = _box(ax, top, text, face, edge)
            if text.startswith("norm") and sublayer_input is not None:  # the residual path
                mid = (top + bottom) / 2
                ax.plot([middle, RESIDUAL_X, RESIDUAL_X], [sublayer_input, sublayer_input, mid],
                        color="0.45", linewidth=1.1)  # fmt: skip
                _arrow(ax, (RESIDUAL_X, mid), (RIGHT, mid), colour="0.45")
                sublayer_input = None
            if kind == "attention":
                _badge(ax, LEFT - 0.27, (top + bottom) / 2, number)
                if number == 3:
                    cross_attention = (RIGHT, (top + bottom) / 2)
            previous_bottom = bottom
            y = bottom - GAP
        # the memory: the last encoder layer's output, read by every decoder layer's cross_attn
        x_memory = MEMORY_X
        x_from, y_from, y_turn = memory_from
        ax.plot(
            [x_from, x_from, x_memory, x_memory],
            [y_from, y_turn, y_turn, cross_attention[1]],
            color=EDGE[3],
            linewidth=1.3,
        )
        _arrow(ax, (x_memory, cross_attention[1]), cross_attention, colour=EDGE[3])
        ax.text(
            x_memory + 0.12,
            (y_turn + cross_attention[1]) / 2,
            "memory",
            rotation=90,
            ha="center",
            va="center",
            fontsize=FONT,
            color=EDGE[3],
        )
        used = total - (y - 0.1)  # the height the rows took, in inches
        ax.set_ylim(y - 0.1, total)
        fig.set_size_inches(WIDTH, used)
    return fig
