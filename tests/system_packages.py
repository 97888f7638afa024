"""Tests that need a Debian package (not a pip one), and the line that names what is missing.

Without Chromium or PostgreSQL their tests skip, and pytest's own "SKIPPED [n] file:line:
reason" entries are easy to miss among the others. ``summary_lines`` turns the skipped reports
into one line per group, for example::

    SKIPPED 26 browser tests: Chromium and chromedriver are missing; install them with:
    sudo apt-get install chromium chromium-driver

(on one line). ``tests/conftest.py`` prints them at the end of the run. The reports are the
controller's, so the count is right under ``pytest -n 2`` too.

A skip belongs to a group when its reason contains the group's ``reason`` text; the skip
sites use these words: ``_chromium()`` in ``tests/test_browser.py``, ``pg_base_url`` in
``tests/test_postgres.py`` and the PostgreSQL test in ``tests/test_distributed.py``
(``tests/test_first_contact.py`` checks that they still do).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

BROWSER_MISSING = "needs chromium and chromedriver"
POSTGRES_MISSING = "PostgreSQL is not installed"


@dataclass(frozen=True)
class Group:
    reason: str  # text that every skip reason of the group contains
    tests: str  # what was skipped, as in "SKIPPED 8 PostgreSQL tests"
    advice: str  # what is missing, and the one command that installs it


GROUPS = (
    Group(
        BROWSER_MISSING,
        "browser tests",
        "Chromium and chromedriver are missing; "
        "install them with: sudo apt-get install chromium chromium-driver",
    ),
    Group(
        POSTGRES_MISSING,
        "PostgreSQL tests",
        "PostgreSQL is missing; install it with: sudo apt-get install postgresql",
    ),
)


def skip_reason(report) -> str:
    """The reason of a skipped report: its longrepr is (path, line, "Skipped: reason")."""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple | list) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)  # any other shape still holds the reason somewhere in its text


def summary_lines(skipped_reports: Iterable) -> list[str]:
    """One line per group that had skips, in GROUPS order; nothing when none did."""
    counts = dict.fromkeys(GROUPS, 0)
    for report in skipped_reports:
        reason = skip_reason(report)
        for group in GROUPS:
            if group.reason in reason:
                counts[group] += 1
                break
    return [f"SKIPPED {count} {group.tests}: {group.advice}" for group, count in counts.items() if count]
