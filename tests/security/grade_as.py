"""Run the grader's commands as root or as uid 65534, and grade a class of submissions so.

The security tests run each command once per identity: as root (a container, CI) and as an
ordinary user. For the user, when the suite runs as root, :func:`run_as` holds the
interpreter's path open to uid 65534 (``tests.interpreter_access``), hands the whole folder
to that uid, runs the command through ``setpriv`` and puts ``HOME`` in the folder; when the
suite is not root the command already runs as an ordinary user and is left as it is.
:func:`autograde_command` spells ``python -m grader autograde``; :func:`grade_class_as`
grades ``root/submitted`` into ``root/out`` with ``root/source`` through both.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

from tests import interpreter_access

NOBODY = 65534


def switches(identity: str) -> bool:
    """Whether running as ``identity`` means leaving this process's uid (only as root)."""
    return identity == "user" and os.getuid() == 0


def identity_prefix(identity: str) -> list[str]:
    """What a command is prefixed with to run as ``identity`` (``setpriv`` to uid 65534, or nothing)."""
    if switches(identity):
        return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return []


def chown_tree(root: Path, uid: int = NOBODY) -> None:
    """Give ``root`` and all below it to ``uid``: iterative, byte-safe (names that are not
    UTF-8), and never through a symlink (the link is given, not what it points at)."""
    stack = [os.fsencode(root)]
    while stack:
        folder = stack.pop()
        os.chown(folder, uid, uid, follow_symlinks=False)
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                os.chown(entry.path, uid, uid, follow_symlinks=False)


def hand_over(identity: str, root: Path, make: Iterable[Path] = ()) -> None:
    """As the user when the suite is root: hold the interpreter's path open to uid 65534, make
    the folders ``make``, and give ``root`` with all below it to that uid (else nothing)."""
    if switches(identity):
        interpreter_access.hold()
        for folder in make:
            folder.mkdir()
        chown_tree(root, NOBODY)


def run_as(
    identity: str,
    command: list[str],
    root: Path,
    env: Mapping[str, str] | None = None,
    make: Iterable[Path] = (),
) -> tuple[list[str], dict[str, str]]:
    """``command`` and its environment (``env``, else this one) to run as ``identity``. As
    root, or when the suite is not root: unchanged. As the user when the suite is root:
    ``root`` handed over (:func:`hand_over`), the command run through ``setpriv``, and
    ``HOME`` set to ``root``."""
    env = dict(os.environ if env is None else env)
    if switches(identity):
        hand_over(identity, root, make)
        command = [*identity_prefix(identity), *command]
        env["HOME"] = str(root)
    return command, env


def autograde_command(
    submitted: Path,
    out: Path,
    *extra: str,
    source: Path | None = None,
    timeout: int | str | None = None,
    workers: int | None = 2,
    quiet: bool = True,
) -> list[str]:
    """``python -m grader autograde SUBMITTED --out OUT`` with ``--source``, ``--timeout`` and
    ``--workers`` where given, ``--quiet`` unless not, then ``extra``."""
    command = [sys.executable, "-m", "grader", "autograde", str(submitted), "--out", str(out)]
    if source is not None:
        command += ["--source", str(source)]
    if timeout is not None:
        command += ["--timeout", str(timeout)]
    if workers is not None:
        command += ["--workers", str(workers)]
    if quiet:
        command.append("--quiet")
    return [*command, *extra]


def grade_class_as(
    identity: str, root: Path, timeout: int, run_timeout: int, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess:
    """Run autograde on root/submitted -> root/out (source root/source) as ``identity``
    ("root" or "user"), each notebook limited to ``timeout`` seconds, the run to ``run_timeout``;
    ``env``: the environment to start from (this one by default)."""
    out = root / "out"
    command = autograde_command(root / "submitted", out, source=root / "source", timeout=timeout)
    command, env = run_as(identity, command, root, env, make=[out])
    return subprocess.run(command, capture_output=True, text=True, timeout=run_timeout, env=env, cwd=root)
