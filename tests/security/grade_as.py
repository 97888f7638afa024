"""Grade a class of submissions with ``python -m grader autograde`` as root or as uid 65534.

The security tests grade the same way: the command on ``root/submitted`` into ``root/out``
with ``root/source``, and, for the ordinary-user identity when the suite runs as root, the
interpreter's path opened to uid 65534 (``tests.interpreter_access``), the whole folder
handed to that uid, and the command run through ``setpriv`` with ``HOME`` in the folder.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.security.test_attacks import _chown_tree, _open_path_to_python

NOBODY = 65534


def grade_class_as(identity: str, root: Path, timeout: int, run_timeout: int) -> subprocess.CompletedProcess:
    """Run autograde on root/submitted -> root/out (source root/source) as ``identity``
    ("root" or "user"), each notebook limited to ``timeout`` seconds, the run to ``run_timeout``."""
    submitted, out, source = root / "submitted", root / "out", root / "source"
    command = [
        sys.executable,
        "-m",
        "grader",
        "autograde",
        str(submitted),
        "--out",
        str(out),
        "--source",
        str(source),
        "--timeout",
        str(timeout),
        "--workers",
        "2",
        "--quiet",
    ]
    env = dict(os.environ)
    if identity == "user" and os.getuid() == 0:
        _open_path_to_python()
        out.mkdir()
        _chown_tree(root, NOBODY)
        command = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *command]
        env["HOME"] = str(root)
    return subprocess.run(command, capture_output=True, text=True, timeout=run_timeout, env=env, cwd=root)
