"""Every guarded claim of the built book, re-checked from the numbers of that build.

A page's comparative words are chosen from its numbers (``book_figures.claims.say``) or
guarded by an assertion (``assert_claim``); either way the executed page records the claim
under the glue key ``claim-<name>``, and myst-nb writes every glued value of a page to
``_build/jupyter_execute/<page>.glue.json``. For each recorded claim this test

- re-checks it against its own numbers (``claims.check_record``: the words the numbers
  choose, or the assertion's condition);
- finds its words in the page's HTML, as the reader sees them: a sentence edited without its
  assertion, or a glued phrase that did not render, fails here;
- checks that every page whose source makes claims recorded them all (a cached or stale
  execution would not have).

``make book`` runs this file on the book it has just built (``ATTENTION_BOOK_HTML``), so that
two builds, one on a quiet machine and one under load, are each checked by their own numbers.
"""

from __future__ import annotations

import ast
import html
import json
import re
from pathlib import Path

import pytest

from book_figures.claims import RECORD_PREFIX, check_record

from .conftest import ROOT

pytestmark = [pytest.mark.book, pytest.mark.slow, pytest.mark.xdist_group("book")]

CLAIM_CALL = re.compile(r"\b(?:say|assert_claim)\(\s*\n?\s*[\"']([^\"']+)[\"']")


def page_text(page_html: Path) -> str:
    """The readable text of a built page, its images' alt texts included (after the body's text).

    Tags dropped, entities and typographic quotes undone, white space collapsed.
    """
    body = page_html.read_text(encoding="utf-8")
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", body, flags=re.S)
    alts = re.findall(r"<img\b[^>]*\balt=\"([^\"]*)\"", body)
    text = html.unescape(re.sub(r"<[^>]+>", " ", body) + " " + " ".join(alts))
    text = text.translate(str.maketrans({"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"'}))
    return re.sub(r"\s+", " ", text)


def recorded_claims(html_dir: Path) -> dict[str, dict[str, dict]]:
    """{docname: {claim name: record}} from the build's glue files."""
    executed = html_dir.parent / "jupyter_execute"
    found: dict[str, dict[str, dict]] = {}
    for glue_file in sorted(executed.rglob("*.glue.json")):
        docname = str(glue_file.relative_to(executed)).removesuffix(".glue.json")
        for key, value in json.loads(glue_file.read_text(encoding="utf-8")).items():
            if key.startswith(RECORD_PREFIX):
                text = ast.literal_eval(value["data"]["text/plain"])  # the repr of a JSON string
                found.setdefault(docname, {})[key.removeprefix(RECORD_PREFIX)] = json.loads(text)
    return found


def claims_in_source(page: Path) -> set[str]:
    """The names of the claims a page's code makes (literal first arguments of say / assert_claim)."""
    return set(CLAIM_CALL.findall(page.read_text(encoding="utf-8")))


def test_every_recorded_claim_holds_and_is_on_its_page(built_book: Path):
    claims = recorded_claims(built_book)
    assert claims, "the build recorded no claim: is book_figures.claims used by the pages?"
    problems = []
    for docname, records in claims.items():
        text = page_text(built_book / f"{docname}.html")
        for name, record in records.items():
            problems += [f"{docname}: {name}: {p}" for p in check_record(record)]
            if record["text"] not in text:
                problems.append(f"{docname}: {name}: {record['text']!r} is not in the page's HTML")
    assert not problems, "\n".join(problems)


def test_every_claim_a_page_makes_was_recorded_by_its_build(built_book: Path):
    claims = recorded_claims(built_book)
    missing = []
    for page in sorted(ROOT.glob("chapters/*/*.md")) + sorted(ROOT.glob("*.md")):
        docname = str(page.relative_to(ROOT).with_suffix(""))
        if not (built_book / f"{docname}.html").exists():
            continue
        names = {name for name in claims_in_source(page) if "{" not in name}  # f-string names vary
        missing += [f"{docname}: {name}" for name in sorted(names - set(claims.get(docname, {})))]
    assert not missing, "claims in a page's code that its build did not record:\n" + "\n".join(missing)


def test_the_text_extraction_reads_what_a_reader_reads(tmp_path):
    page = tmp_path / "p.html"
    page.write_text(
        "<html><script>x = 'no'</script><p>the raw gradient is <span class=\"pasted-text\">7.8 times"
        '</span>\n larger &amp; attention&#8217;s</p><img src="a.png" alt="a line that grows"/></html>',
        encoding="utf-8",
    )
    assert page_text(page).strip() == "the raw gradient is 7.8 times larger & attention's a line that grows"
    source = tmp_path / "p.md"
    source.write_text('say("a-b", x)\nassert_claim(\n    "c", "x > 1", "t")\nsay(f"d-{n}", y)\n')
    assert claims_in_source(source) == {"a-b", "c"}
