"""Grading on submit hides the whole exchange from every job (SECURITY.md, "The course's own
services").

A watcher (``autograde --watch INBOUND --exchange ROOT``, as tests/test_watch.py runs it)
grades a submission whose first solution cell, before defining anything, looks for the
exchange: its root, the course's inbound folder (every student's submissions), its feedback
folder (everyone's released pages, one of them planted here), and tries to write a forged
feedback page there. Had it seen or written anything, the cell raises before the solution is
defined and every test of the notebook fails; the submission keeps every point instead, and
the exchange holds no forged page. Run with the watcher as root (a container, CI) and as
uid 65534 (through ``setpriv``, owning the whole course, as on a JupyterHub).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest

from tests.notebook_runner import grade_id, solved_notebook
from tests.security.grade_as import NOBODY, hand_over, identity_prefix
from tests.test_course_run import COURSE
from tests.test_watch import FULL, Watch

pytestmark = [pytest.mark.security, pytest.mark.grading, pytest.mark.slow, pytest.mark.xdist_group("watch")]

A = "03_scaled_dot_product"
IDENTITIES = ["root", "user"] if os.getuid() == 0 else ["user"]


class WatchAs(Watch):
    """The watcher of tests/test_watch.py, started as ``identity``: as root, or as uid 65534
    owning the whole course (its exchange, source, OUT and logs)."""

    def __init__(self, root: Path, identity: str) -> None:
        super().__init__(root)
        self.identity = identity
        self.prefix = identity_prefix(identity)

    def start(self) -> None:
        hand_over(self.identity, self.root)
        super().start()


@pytest.fixture(params=IDENTITIES)
def course_root(request):
    root = Path(tempfile.mkdtemp(prefix="attention-exchange-"))
    os.chmod(root, 0o755)
    try:
        yield root, request.param
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _looks_for_the_exchange(targets: dict[str, str]) -> str:
    return textwrap.dedent(f"""
        import os as _os
        _targets = {targets!r}
        _found = [_targets[k] for k in ('root', 'inbound', 'planted') if _os.path.exists(_targets[k])]
        try:
            with open(_targets['forged'], 'w') as _handle:
                _handle.write('<html>10 / 10</html>')
            _found.append('wrote ' + _targets['forged'])
        except OSError:
            pass
        if _found:
            raise RuntimeError('ATTACK WORKED: ' + '; '.join(_found))
    """)


def test_a_job_sees_nothing_of_the_exchange_and_writes_nothing_there(course_root):
    root, identity = course_root
    watch = WatchAs(root, identity)
    course = watch.exchange / COURSE
    planted = course / "feedback" / "planted.html"
    planted.parent.mkdir(exist_ok=True)
    planted.write_text("another student's feedback")
    targets = {
        "root": str(watch.exchange),
        "inbound": str(course / "inbound"),
        "planted": str(planted),
        "forged": str(course / "feedback" / "forged.html"),
    }
    with pytest.raises(RuntimeError, match="ATTACK WORKED"):  # outside a job, the attack sees it all
        exec(_looks_for_the_exchange(targets), {})
    (course / "feedback" / "forged.html").unlink()
    notebook = solved_notebook(A)
    first = next(c for c in notebook.cells if (c.metadata.get("nbgrader") or {}).get("solution"))
    first.source = _looks_for_the_exchange(targets) + first.source
    assert grade_id(first)  # a graded solution cell: raising there costs every test
    watch.start()
    try:
        secret, _ = watch.drop("mallory", notebook)
        page = watch.feedback(secret)
    finally:
        watch.stop()
    assert "ATTACK WORKED" not in page and "10 / 10" in page, page[-2000:]
    assert watch.result("mallory")["score"] == FULL
    owner = (watch.out / "mallory" / A / "results.json").stat().st_uid
    assert owner == (NOBODY if watch.prefix else os.getuid())  # the watcher ran as that identity
    assert not (course / "feedback" / "forged.html").exists()
