"""The sanitizer's metadata check (grader/autograde/nbgrader_adapters.py) against nbgrader's own.

``CheckCellMetadataOnce`` runs nbgrader's ``CheckCellMetadata`` with the metadata schema
compiled once; on every notebook, valid or tampered with, it must decide exactly as
nbgrader does, and give nbgrader its ``jsonschema`` back afterwards.
"""

from __future__ import annotations

import copy
import re

import jsonschema
import pytest
from nbgrader.nbgraderformat import common as nbgrader_format
from nbgrader.preprocessors import CheckCellMetadata

from grader.autograde.nbgrader_adapters import CheckCellMetadataOnce
from tests.notebook_runner import grade_id, is_test_cell, source_notebook

A = "03_scaled_dot_product"


def tampered(edit) -> object:
    """The source notebook with ``edit(metadata)`` applied to its first test cell's metadata."""
    nb = copy.deepcopy(source_notebook(A))
    cell = next(c for c in nb.cells if is_test_cell(c))
    edit(cell.metadata.nbgrader)
    return nb


EDITS = {
    "unchanged": lambda m: None,
    "points as text": lambda m: m.update(points="ten"),
    "grade as text": lambda m: m.update(grade="yes"),
    "unknown key": lambda m: m.update(extra_credit=True),
    "no grade id": lambda m: m.pop("grade_id"),
    "old schema": lambda m: m.update(schema_version=1),
    "negative points": lambda m: m.update(points=-5),
}


def outcome(preprocessor, nb) -> str:
    try:
        preprocessor.preprocess(nb, {})
    except Exception as exc:  # the kind of refusal is what must agree
        return type(exc).__name__
    return "accepted"


@pytest.mark.parametrize("edit", EDITS, ids=list(EDITS))
def test_decides_as_nbgrader_does(edit):
    ours = outcome(CheckCellMetadataOnce(), tampered(EDITS[edit]))
    theirs = outcome(CheckCellMetadata(), tampered(EDITS[edit]))
    assert ours == theirs
    assert nbgrader_format.jsonschema is jsonschema  # given back, also after a refusal


def test_a_schema_violation_is_refused():
    """Not every edit above may pass: the comparison would then prove nothing."""
    assert outcome(CheckCellMetadataOnce(), tampered(EDITS["points as text"])) != "accepted"
    assert outcome(CheckCellMetadataOnce(), tampered(EDITS["unchanged"])) == "accepted"
    assert grade_id(next(c for c in source_notebook(A).cells if is_test_cell(c)))


def test_source_cells_answer_as_the_gradebook_does(tmp_path):
    """Each record once, with the gradebook's values; a missing one fails every time."""
    from nbgrader.api import Gradebook, MissingEntry

    from grader.autograde.gradebook import SourceCells
    from grader.nbgrader_course import generate_assignment, temporary_course
    from grader.paths import SOLUTIONS

    db_url = f"sqlite:///{tmp_path / 'gradebook.db'}"
    with temporary_course(SOLUTIONS, db_url) as api:
        generate_assignment(api, A)
    gradebook = Gradebook(db_url)
    try:
        cells = SourceCells(gradebook)
        test_id = grade_id(next(c for c in source_notebook(A).cells if is_test_cell(c)))
        row = gradebook.find_source_cell(test_id, A, A)
        first = cells.find_source_cell(test_id, A, A)
        assert (first.source, first.checksum, first.locked, first.cell_type) == (
            row.source, row.checksum, row.locked, row.cell_type)  # fmt: skip
        assert cells.find_source_cell(test_id, A, A) is first  # read once
        assert cells.find_graded_cell(test_id, A, A).max_score == gradebook.find_graded_cell(
            test_id, A, A).max_score  # fmt: skip
        for _ in range(2):
            with pytest.raises(MissingEntry):
                cells.find_source_cell("no_such_cell", A, A)
    finally:
        gradebook.close()


# ------------------------------------------------------------------ notebooks written as data


def _rendered(nb) -> str:
    """The notebook as formgrader renders it (nbconvert's classic HTML, as nbgrader's formgrade extends)."""
    from nbconvert import HTMLExporter

    body, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    return body


MARKDOWN_ATTACKS = {
    "img onerror": '<img src=x onerror="alert(1)">',
    "script": "<script>alert(1)</script>",
    "javascript link": "[a](javascript:alert(1))",
    "mixed case, tab, escaped colon": "[a](JaVa\tScRiPt\\:alert(1))",
    "character reference": "[a](jav&#97;script:alert(1))",
    "named colon": "[a](javascript&colon;alert(1))",
    "double-encoded": "&amp;lt;script&amp;gt;alert(1)&amp;lt;/script&amp;gt;",
    "pointy destination": "[a](< javascript:alert(1)>)",
    "autolink": "<javascript:alert(1)>",
    "svg onload": '<svg onload="alert(1)"></svg>',
    "comment": "<!-- --><img src=x onerror=alert(1)>",
    "vbscript": "[a](vbscript:msgbox(1))",
}


@pytest.mark.parametrize("text", MARKDOWN_ATTACKS.values(), ids=list(MARKDOWN_ATTACKS))
def test_markdown_cannot_open_a_tag_or_a_script_url(text):
    import nbformat

    from grader.autograde.inert_notebook import ZWSP, make_inert

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell(text)])
    make_inert(nb)
    body = _rendered(nb)
    notebook_part = body[body.index('id="notebook-container"') :]
    assert "alert(1)" in notebook_part or "msgbox(1)" in notebook_part  # still readable as text
    assert not re.search(r"<(img|script|svg|iframe)\b", notebook_part, re.I)
    assert not re.search(r"""(href|src)=["']?\s*(javascript|vbscript):""", notebook_part, re.I)
    assert nb.cells[0].source.replace(ZWSP, "").replace("&", "").strip()  # nothing deleted


def test_markdown_of_the_course_reads_as_before():
    from grader.autograde.inert_notebook import inert_text

    for text in (
        "A softmax $p_i = e^{x_i} / \\sum_j e^{x_j}$ where a < b and 3<4.",
        "**bold**, `code`, [a link](https://example.org/x?a=1&b=2)",
        "x = 1 if y >= 2 else 0",
    ):
        assert inert_text(text) == text


def test_outputs_keep_text_and_images_only():
    import nbformat

    from grader.autograde.inert_notebook import make_inert

    png = "iVBORw0KGgo="
    cell = nbformat.v4.new_code_cell(
        "x",
        outputs=[
            nbformat.v4.new_output(
                "display_data", {"text/html": "<script>alert(1)</script>", "text/plain": "<HTML object>"}
            ),
            nbformat.v4.new_output("display_data", {"application/javascript": "alert(1)"}),
            nbformat.v4.new_output(
                "display_data",
                {"image/svg+xml": "<svg onload=alert(1)></svg>", "image/png": png},
                metadata={"image/png": {"width": "1 onerror=alert(1)", "height": 4}},
            ),
            nbformat.v4.new_output("display_data", {"image/png": '"><script>alert(1)</script>'}),
            nbformat.v4.new_output("stream", name="stdout", text="<b>printed</b>"),
        ],
    )
    nb = nbformat.v4.new_notebook(cells=[cell], metadata={"widgets": {"state": {}}, "title": "<script>"})
    removed = make_inert(nb)
    nbformat.validate(nb)
    outputs = nb.cells[0].outputs
    assert [sorted(o.get("data", {})) for o in outputs] == [
        ["text/plain"],
        ["text/plain"],
        ["image/png", "text/plain"],
        ["text/plain"],
        [],
    ]
    assert "not shown: text/html" in outputs[0].data["text/plain"]
    assert outputs[2].metadata == {"image/png": {"height": 4}}  # a width that is no number is gone
    assert outputs[4].text == "<b>printed</b>"  # text stays text: templates escape it
    assert {"text/html", "application/javascript", "image/svg+xml", "image/png"} <= set(removed)
    assert dict(nb.metadata) == {}
    body = _rendered(nb)
    assert "alert(1)" not in body[body.index('id="notebook-container"') :]


def test_raw_cells_and_attachments_are_data():
    import nbformat

    from grader.autograde.inert_notebook import make_inert

    raw = nbformat.v4.new_raw_cell("<script>alert(1)</script>", metadata={"format": "text/html"})
    shown = nbformat.v4.new_markdown_cell("![x](attachment:x.svg)")
    shown.attachments = {
        "x.svg": {"image/svg+xml": "PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+"},
        "y.png": {"image/png": "iVBORw0KGgo="},
    }
    nb = nbformat.v4.new_notebook(cells=[raw, shown])
    make_inert(nb)
    assert nb.cells[0].metadata == {} and not re.search(r"<[a-z/]", nb.cells[0].source)
    assert dict(nb.cells[1].attachments) == {"y.png": {"image/png": "iVBORw0KGgo="}}
    body = _rendered(nb)
    assert "<script>alert(1)" not in body
