"""docs/claims.md: every "measured" entry names what shows it, and that thing exists.

The audit lists each page's claims under a heading that names the page (``## Chapter 3: ...
(`chapters/03_scaled_dot_product/why_sqrt_dk.md`)``). The "shown" cell of a measured entry
names, in backticks, at least one of (the format is written at the top of docs/claims.md):

- ``claim-<name>``: a ``say("<name>", ...)`` or ``assert_claim("<name>", ...)`` of
  ``book_figures.claims`` in the page's source;
- ``glue:<key>``: a glue role of that key in the page's source (``{glue:text}`<key>```), so
  that the prose shows the computed value;
- a file of the repository (a test, another page where the claim is measured);
- a name of the page's code, which must occur in its source.

Every name an entry gives is checked, not just one, so that an entry cannot point at an
assertion that was renamed or removed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "docs" / "claims.md"
SECTION = re.compile(r"^## .*\(`([^`]+\.md)`\)\s*$", re.M)
BACKTICKED = re.compile(r"`([^`]+)`")


def sections() -> dict[str, list[tuple[str, str]]]:
    """{page: [(claim, shown)]} of the audit's tables."""
    text = AUDIT.read_text(encoding="utf-8")
    found: dict[str, list[tuple[str, str]]] = {}
    heads = list(SECTION.finditer(text))
    for head, following in zip(heads, heads[1:] + [None], strict=True):
        body = text[head.end() : following.start() if following else len(text)]
        rows = [line for line in body.splitlines() if re.match(r"^\| (?!claim \||-)", line)]
        found.setdefault(head.group(1), []).extend(
            tuple(part.strip() for part in row.strip().strip("|").rsplit(" | ", 1)) for row in rows
        )
    return found


def glue_key_used(key: str, source: str) -> bool:
    return re.search(r"\{glue(?::text)?\}`" + re.escape(key) + r"(?::[^`]*)?`", source) is not None


def claim_made(name: str, source: str) -> bool:
    return re.search(r"\b(?:say|assert_claim)\(\s*[\"']" + re.escape(name) + r"[\"']", source) is not None


def problems_of(page: str, entries: list[tuple[str, str]]) -> list[str]:
    """What is wrong with the measured entries of one page's section."""
    source = (ROOT / page).read_text(encoding="utf-8")
    problems = []
    for claim, shown in entries:
        if not shown.startswith("measured"):
            continue
        names = BACKTICKED.findall(shown)
        if not names:
            problems.append(f"{claim!r}: a measured entry names nothing that shows it")
        for name in names:
            if name.startswith("claim-"):
                ok = claim_made(name.removeprefix("claim-"), source)
            elif name.startswith("glue:"):
                ok = glue_key_used(name.removeprefix("glue:"), source)
            else:
                ok = (ROOT / name).exists() or name in source
            if not ok:
                problems.append(f"{claim!r}: `{name}` is not in {page} (nor a file of the repository)")
    return problems


AUDITED = sections()


@pytest.mark.parametrize("page", sorted(AUDITED))
def test_every_measured_entry_names_what_shows_it(page: str):
    assert (ROOT / page).exists(), f"docs/claims.md audits {page}, which does not exist"
    problems = problems_of(page, AUDITED[page])
    assert not problems, f"docs/claims.md, {page}:\n" + "\n".join(problems)


def test_the_audit_check_sees_missing_names(tmp_path, monkeypatch):
    page = tmp_path / "p.md"
    page.write_text(
        'x = 1\nassert_claim("p-ok", "x > 0", "t", x=x)\nsay("p-words", w)\n'
        "Text {glue:text}`p-value:.2f` here.\n",
        encoding="utf-8",
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    entries = [
        ("a", "measured (`claim-p-ok`, `claim-p-words`, `glue:p-value`, `p.md`, `x = 1`)"),
        ("b", "measured (printed)"),
        ("c", "measured (`claim-p-gone`, `glue:p-other`)"),
        ("d", "derived"),
    ]
    assert problems_of("p.md", entries) == [
        "'b': a measured entry names nothing that shows it",
        "'c': `claim-p-gone` is not in p.md (nor a file of the repository)",
        "'c': `glue:p-other` is not in p.md (nor a file of the repository)",
    ]


def test_make_book_runs_the_checks_of_numbers_and_claims_after_building():
    """``make book`` fails when a built page's digits or recorded claims do not hold."""
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    checks = re.search(r"^BOOK_CHECKS := (.+)$", makefile, re.M)
    assert checks, "the Makefile names no BOOK_CHECKS"
    files = checks.group(1).split()
    assert {"tests/test_page_numbers.py", "tests/test_book_claims.py"} <= set(files), files
    assert all((ROOT / name).exists() for name in files), files
    recipe = re.search(r"^book: .*?(?=^\S)", makefile, re.M | re.S).group(0)
    build, check = recipe.find("jupyter-book build"), recipe.find("$(BOOK_CHECKS)")
    assert 0 <= build < check, "the book target must run $(BOOK_CHECKS) after jupyter-book build"
    assert 'ATTENTION_BOOK_HTML="$(CURDIR)/_build/html"' in recipe[build : check + 20]
