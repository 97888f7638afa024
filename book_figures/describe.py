"""Words generated from the data a figure draws, for its alt text and the prose around it.

A sentence such as "la reads the second the and street" about a trained model's attention
map is a measurement: another seed or another torch may change it. The page computes such
phrases with these helpers and glues them into its alt texts and prose (``glue``, below),
so that what the words say is what the figure shows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# The mime prefix myst-nb's own glue gives a value that is stored but not displayed
# (``myst_nb.ext.glue.GLUE_PREFIX``, the scrapbook convention its reader looks for).
GLUE_PREFIX = "application/papermill.record/"


def glue(name: str, value: object, display: bool = False) -> None:
    """Glue ``value`` under ``name`` for the page's ``{glue:text}`` roles, as ``myst_nb.glue``.

    The same output as myst-nb's (a display-data output whose metadata names the value), with
    two differences: NumPy and torch scalars become Python numbers first (their reprs,
    ``np.float64(0.5)`` or ``tensor(0.5)``, are what a role's format spec would have to read),
    and myst-nb is not imported, which cost every page a second in its kernel. Outside an
    IPython shell (the page tests run cells in a plain namespace) it does nothing. Not
    displayed by default.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is None:
        return
    from IPython.core.formatters import format_display_data
    from IPython.display import display as ipython_display

    if isinstance(value, np.generic):
        value = value.item()
    elif type(value).__module__.startswith("torch") and getattr(value, "ndim", None) == 0:
        value = value.item()
    bundle, metadata = format_display_data(value)
    prefix = "" if display else GLUE_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipython_display({prefix + mime: data for mime, data in bundle.items()}, raw=True, metadata=metadata)


def and_list(items: Sequence[object]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    words = [str(item) for item in items]
    if not words:
        return ""
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def strongest_columns(row: np.ndarray, col_labels: Sequence[str], share: float = 0.5) -> list[str]:
    """The labels of the largest entry of ``row`` (n_k,) and of any entry at least ``share`` of it.

    Labels that occur twice in ``col_labels`` are told apart by their order ("the first the").
    """
    row = np.asarray(row, dtype=np.float64)
    order = np.argsort(-row, kind="stable")
    keep = [int(j) for j in order if row[j] >= share * row[order[0]]]
    return [_column_name(j, col_labels) for j in sorted(keep)]


def _column_name(j: int, labels: Sequence[str]) -> str:
    label = labels[j]
    if list(labels).count(label) == 1:
        return label
    same = [i for i, other in enumerate(labels) if other == label]  # positions of this label
    ordinal = ("first", "second", "third", "fourth", "fifth", "sixth")[same.index(j)]
    return f"the {ordinal} {label}"


def describe_rows(
    weights: np.ndarray, row_labels: Sequence[str], col_labels: Sequence[str], share: float = 0.5
) -> str:
    """One clause per row of an (n_q, n_k) map: "le reads the first the, la reads the and street"."""
    w = np.asarray(weights, dtype=np.float64)
    clauses = [
        f"{label} reads {and_list(strongest_columns(w[r], col_labels, share))}"
        for r, label in enumerate(row_labels)
    ]
    return "; ".join(clauses)


def heads_by_column(weights: np.ndarray, row: int, col_labels: Sequence[str]) -> dict[str, list[int]]:
    """For one query row of (h, n_q, n_k) weights: the heads grouped by the column they weigh most."""
    w = np.asarray(weights, dtype=np.float64)
    groups: dict[str, list[int]] = {}
    for head in range(w.shape[0]):
        groups.setdefault(_column_name(int(w[head, row].argmax()), col_labels), []).append(head)
    return groups


def describe_heads(weights: np.ndarray, row: int, col_labels: Sequence[str]) -> str:
    """ "every head reads car", or "heads 0 and 3 read the, heads 1 and 2 read car"."""
    groups = heads_by_column(weights, row, col_labels)
    if len(groups) == 1:
        return f"every head reads {next(iter(groups))}"
    parts = []
    for column, heads in groups.items():
        who = f"head {heads[0]}" if len(heads) == 1 else f"heads {and_list(heads)}"
        parts.append(f"{who} {'reads' if len(heads) == 1 else 'read'} {column}")
    return ", ".join(parts)
