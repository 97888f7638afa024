"""REPORT/similarity.html: one self-contained page (inline CSS, no script, no outside file).

First the submissions that match a known solution (the course's own, or published
answers), as one table; then, per exercise: what was compared, the clusters of similar
submissions, the matches with a known solution side by side, and the top pairs with the two
cells side by side, each matching region in the same colour and letter on both sides. It
opens with what the scores mean and do not mean.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from grader.similarity.known import NEAR_KNOWN
from grader.similarity.scoring import (
    COMMON_ANSWER_FRACTION,
    COMMON_FLOOR,
    LONG_MATCH,
    MAX_COMMON_FRACTION,
    MIN_SHARED,
)
from grader.similarity.winnowing import K, W

if TYPE_CHECKING:
    from grader.similarity.run import ExerciseResult, KnownMatch, Match, Report

TOP_PAIRS = 10  # pairs (and known-solution matches) shown side by side per exercise (the CSVs have every one)
NAMES_SHOWN = 50  # members listed per cluster or common answer
REGION_COLOURS = ["#fff3b0", "#c9f2d0", "#cfe3ff", "#ffd6e0", "#e6d5ff", "#ffe1c2"]

CSS = """
body { font: 16px/1.5 system-ui, -apple-system, "Segoe UI", sans-serif; color: #1f2328;
       margin: 0 auto; padding: 1rem; max-width: 1400px; overflow-wrap: anywhere; }
h1 { font-size: 1.6rem; margin: 0.5rem 0; }
h2 { font-size: 1.3rem; border-top: 2px solid #d0d7de; padding-top: 1rem; margin-top: 2rem; }
h3 { font-size: 1.1rem; }
h4 { font-size: 1rem; margin: 0 0 0.5rem; }
.verdict { background: #fff8c5; border: 1px solid #d4a72c; border-radius: 6px; padding: 0.75rem 1rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1rem; }
dl.facts dt { font-weight: 600; }
dl.facts dd { margin: 0; }
.scroll { overflow-x: auto; }
table.list { border-collapse: collapse; overflow-wrap: normal; }
table.list td:last-child { min-width: 16rem; }
table.list th, table.list td { border: 1px solid #d0d7de; padding: 0.25rem 0.5rem; text-align: left;
                               vertical-align: top; }
.id { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; overflow-wrap: anywhere; }
.pair { border: 1px solid #d0d7de; border-radius: 6px; padding: 0.75rem; margin: 1rem 0; }
.sides { display: grid; grid-template-columns: 1fr 1fr; gap: 0.75rem; }
@media (max-width: 800px) { .sides { grid-template-columns: 1fr; } }
.side { min-width: 0; }
.side h5 { margin: 0 0 0.25rem; font-size: 0.95rem; }
pre.code { margin: 0; padding: 0.25rem 0; background: #f6f8fa; border-radius: 4px; overflow-x: auto;
           overflow-wrap: normal;
           font: 13px/1.45 ui-monospace, SFMono-Regular, Menlo, monospace; }
pre.code code { display: inline-block; min-width: 100%; font: inherit; }
pre.code .line { display: block; padding-right: 0.5rem; }
pre.code .ln { display: inline-block; width: 2.5em; text-align: right; color: #6e7781;
               user-select: none; margin-right: 0.5em; }
pre.code .tag { display: inline-block; width: 1.2em; font-weight: 700; color: #57606a; }
.muted { color: #57606a; }
""" + "".join(f"pre.code .m{i} {{ background: {c}; }}\n" for i, c in enumerate(REGION_COLOURS))


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _anchor(result: ExerciseResult) -> str:
    return "ex-" + "".join(
        c if c.isalnum() else "-" for c in f"{result.exercise.assignment}-{result.exercise.label}"
    )


def _region_tag(number: int) -> str:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return letters[number % 26] + ("" if number < 26 else str(number // 26))


def _code(source: str, regions: dict[int, int]) -> str:
    lines = []
    for number, text in enumerate(source.splitlines() or [""], start=1):
        region = regions.get(number)
        css = "line" if region is None else f"line m{region % len(REGION_COLOURS)}"
        tag = "" if region is None else _region_tag(region)
        title = "" if region is None else f' title="matching region {tag}"'
        lines.append(
            f'<span class="{css}"{title}><span class="ln">{number}</span>'
            f'<span class="tag">{tag}</span>{_e(text)}</span>'
        )
    return '<pre class="code"><code>' + "".join(lines) + "</code></pre>"


def _names(students: list[str]) -> str:
    shown = ", ".join(f'<span class="id">{_e(s)}</span>' for s in students[:NAMES_SHOWN])
    more = len(students) - NAMES_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def _sides(
    a: str,
    source_a: str,
    lines_a: dict[int, int],
    b: str,
    source_b: str,
    lines_b: dict[int, int],
    facts: str,
    kind: str = "pair",
) -> str:
    """Two cells side by side under a heading naming both, their matching regions marked;
    ``kind`` is the article's class: ``pair`` (two students) or ``pair known`` (one and a known solution)."""
    a, b = _e(a), _e(b)
    return (
        f'<article class="{kind}">'
        f'<h4><span class="id">{a}</span> and <span class="id">{b}</span>: {facts}</h4>'
        '<div class="sides">'
        f'<div class="side"><h5 class="id">{a}</h5>{_code(source_a, lines_a)}</div>'
        f'<div class="side"><h5 class="id">{b}</h5>{_code(source_b, lines_b)}</div>'
        "</div></article>"
    )


def _pair(match: Match) -> str:
    facts = (
        f"score {match.pair.score:.2f}, {match.shared_lines} matching lines, "
        f"{match.pair.shared} shared fingerprints"
    )
    return _sides(
        match.a.student, match.a.source, match.lines_a, match.b.student, match.b.source, match.lines_b, facts
    )


def _known_match(match: KnownMatch) -> str:
    facts = (
        f"Jaccard {match.score:.2f}, {match.shared_lines} matching lines, {match.shared} shared fingerprints"
    )
    return _sides(
        match.entry.student,
        match.entry.source,
        match.lines_entry,
        match.known.student,
        match.known.source,
        match.lines_known,
        facts,
        "pair known",
    )


def _known_table(report: Report) -> str:
    """Every submission matching a known solution, best first, in one table."""
    folders = ", ".join(f'<span class="id">{_e(f)}</span>' for f in report.against)
    parts = [
        '<section id="known"><h2>Matching a known solution</h2>',
        f'<p class="muted">Each submission compared with every known solution of its exercise, '
        f"read from {folders} as a submission is: the share of fingerprints the two have in common "
        "(Jaccard, 0 to 1, none dropped as common, none weighted), listed at the threshold or more. "
        "A known solution is evidence however many handed it in, so these are listed even when the "
        "pairs between students are not.</p>",
    ]
    if not report.known:
        parts.append('<p class="muted">None: no submission matches a known solution.</p></section>')
        return "".join(parts)
    rows = "".join(
        f"<tr><td>{_e(r.exercise.assignment)}</td><td>{_e(r.exercise.label)}</td>"
        f'<td class="id">{_e(k.entry.student)}</td><td class="id">{_e(k.known.student)}</td>'
        f"<td>{k.score:.2f}</td><td>{k.shared_lines}</td></tr>"
        for r, k in report.known
    )
    parts.append(
        '<div class="scroll"><table class="list"><thead><tr><th>assignment</th><th>exercise</th>'
        "<th>student</th><th>known solution</th><th>score</th><th>matching lines</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div></section>"
    )
    return "".join(parts)


def _exercise(result: ExerciseResult, threshold: float) -> str:
    ex = result.exercise
    parts = [
        f'<section class="exercise" id="{_anchor(result)}">',
        f"<h2>{_e(ex.assignment)}: {_e(ex.label)}</h2>",
        f"<p>{len(result.entries)} submissions compared; {result.compared} pairs shared at least "
        f"one fingerprint and were scored; {len(result.matches)} scored {threshold:g} or more. "
        f"{result.nothing_own} had no code of their own to compare (only what was given, or "
        f"only what most submissions share); {result.common} fingerprints were dropped as "
        f"shared by more than {MAX_COMMON_FRACTION:.0%} of the submissions. "
        f"{len(result.known)} match one of the {result.known_solutions} known solutions.</p>",
    ]
    parts.append("<h3>Clusters</h3>")
    if result.clusters:
        parts.append(
            '<p class="muted">Submissions linked by pairs at or above the threshold, by being identical '
            f"once normalised ({LONG_MATCH} fingerprints or more), or by each scoring {NEAR_KNOWN:g} or "
            "more against the same known solution, however many handed them in (code so common is "
            "left out of the pairs' scores) (a chain: not every two members need be similar).</p><ol>"
        )
        for group in result.clusters:
            parts.append(
                f"<li>{len(group.students)} submissions, best pair {group.best:.2f}: "
                f"{_names(group.students)}</li>"
            )
        parts.append("</ol>")
    else:
        parts.append('<p class="muted">None: no pair scored at or above the threshold.</p>')
    if result.common_answers:
        parts.append(
            "<h3>Common answers</h3>"
            '<p class="muted">Submissions alike only in a short piece of code (fewer than '
            f"{LONG_MATCH} shared fingerprints) that more than {COMMON_ANSWER_FRACTION:.0%} of the "
            f"submissions (or {COMMON_FLOOR}) also hold: an answer many wrote, which is no "
            "evidence of copying between any two of them; not listed as pairs.</p><ul>"
        )
        for group in result.common_answers:
            parts.append(f"<li>{len(group.students)} submissions: {_names(group.students)}</li>")
        parts.append("</ul>")
    if result.known:
        shown_known = result.known[:TOP_PAIRS]
        parts.append(f"<h3>Matching a known solution ({len(shown_known)} of {len(result.known)})</h3>")
        parts += [_known_match(k) for k in shown_known]
    if result.matches:
        shown = result.matches[:TOP_PAIRS]
        parts.append(f"<h3>Top pairs ({len(shown)} of {len(result.matches)})</h3>")
        parts += [_pair(m) for m in shown]
    parts.append("</section>")
    return "".join(parts)


def _skipped(report: Report) -> str:
    if not report.skipped:
        return '<p class="muted">Every submitted cell was compared.</p>'
    return _table(report.skipped, "why")


def _table(skips: list, last: str) -> str:
    rows = "".join(
        f"<tr><td>{_e(s.assignment)}</td><td>{_e(s.exercise)}</td>"
        f'<td class="id">{_e(s.student)}</td><td>{_e(s.why)}</td></tr>'
        for s in skips
    )
    return (
        '<div class="scroll"><table class="list"><thead><tr><th>assignment</th><th>exercise</th>'
        f"<th>student</th><th>{last}</th></tr></thead><tbody>{rows}</tbody></table></div>"
    )


def _notes(report: Report) -> str:
    if not report.notes:
        return ""
    return (
        '<section id="notes"><h2>Compared in part</h2><p class="muted">Compared, but not '
        "as handed in: the exercise's cell was missing (the learner's other cells were read), "
        "or cells were left out by the report's limits. Each is worth a look.</p>"
        + _table(report.notes, "note")
        + "</section>"
    )


def render(report: Report) -> str:
    contents = "".join(
        f'<li><a href="#{_anchor(r)}">{_e(r.exercise.assignment)}: {_e(r.exercise.label)}</a> '
        f"({len(r.matches)} pairs, {len(r.clusters)} clusters, {len(r.common_answers)} common answers, "
        f"{len(r.known)} matching a known solution)</li>"
        for r in report.results
    )
    body = [
        "<header><h1>Similarity of submitted code</h1>",
        '<p class="verdict"><strong>Evidence, not a verdict.</strong> A score says how much of two '
        "submissions' code for an exercise (its cell, and any cell the learner added) is the same "
        "once names, comments, prints, dead expressions, literals and layout are set aside, counting "
        "code that few submissions share more than code that many do, and leaving "
        "out everything the notebook gave the learner. It does not say who wrote what, or that "
        "anybody copied: short exercises, a common textbook idiom or a shared study group can make "
        "honest work alike. Read both cells, and talk with the students, before drawing any "
        "conclusion. This report changes no grade.</p>",
        '<dl class="facts">',
        f"<dt>threshold</dt><dd>{report.threshold:g} (weighted Jaccard of fingerprint sets, 0 to 1)</dd>",
        f"<dt>source</dt><dd>{_e(report.source)}</dd>",
        f"<dt>known solutions</dt><dd>{', '.join(_e(f) for f in report.against)}</dd>",
        f"<dt>submissions</dt><dd>{report.submissions}</dd>",
        f"<dt>pairs scored</dt><dd>{report.pairs_compared}</dd>",
        f"<dt>method</dt><dd>normalised AST tokens, {K}-grams winnowed in windows of {W}, each "
        f"weighted by its rarity; a pair needs {MIN_SHARED} or more shared fingerprints to be listed, "
        f"and a short match that many submissions hold is a common answer, not a pair</dd>",
        f"<dt>time</dt><dd>{report.seconds:.1f} s</dd>",
        "</dl>",
        f"<nav><h2>Exercises</h2><ul>{contents}</ul></nav></header><main>",
        '<section id="not-compared"><h2>Not compared</h2>',
        _skipped(report),
        "</section>",
        _notes(report),
        _known_table(report),
        *(_exercise(r, report.threshold) for r in report.results),
        "</main>",
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>Similarity report</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
