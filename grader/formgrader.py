"""``python -m grader formgrader OUT [--port P]``: nbgrader's formgrader on an autograde OUT.

OUT is an nbgrader course directory (``grader/autograde/course_dir.py``): ``source/``,
``autograded/``, ``feedback/``, the gradebook and the ``nbgrader_config.py`` that names it.
This starts a Jupyter server in OUT with nbgrader's formgrader extension, listening on
127.0.0.1 only, behind a token drawn here and handed to Jupyter through its environment
(never its command line, which every local user can read); it prints the formgrader's URL
with that token, as Jupyter prints its own, and runs until Ctrl-C (or SIGTERM).

"Manage Assignments" lists the assignments of OUT/source/ handed out (released, or with a
graded submission) with the gradebook's due dates and submission counts
(``formgrader_server._gradebook_api``), and "Manual Grading" every autograded submission;
grades given there go into the gradebook, and "Generate
Feedback" rewrites OUT/feedback/ with nbgrader's pages (hidden tests' code left out, see
course_dir.FEEDBACK_PREPROCESSORS). OUT has no ``submitted/`` folder, and the server
(``grader/formgrader_server.py``) has no autograde route: grading stays with
``python -m grader autograde``. That server offers nothing but formgrader's grading pages and
API, under a strict Content-Security-Policy, and the notebooks it shows were written as data
(``autograde/inert_notebook.py``): no script a student wrote runs in the instructor's browser.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from grader.autograde.course_dir import CONFIG

HOST = "127.0.0.1"
READY_SECONDS = 60.0


class FormgraderError(RuntimeError):
    """OUT is not a graded course folder, or the server did not start; one line."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((HOST, 0))
        return probe.getsockname()[1]


def server_command(out: Path, port: int) -> list[str]:
    """The Jupyter server of ``grader/formgrader_server.py`` in OUT, on loopback: nbgrader's
    formgrader with the routes manual grading needs, no other service, a strict CSP."""
    return [
        sys.executable,
        "-m",
        "grader.formgrader_server",
        f"--ServerApp.root_dir={out}",
        f"--ServerApp.ip={HOST}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.open_browser=False",
        "--ServerApp.allow_remote_access=False",
        "--ServerApp.default_url=/formgrader",
        "--ServerApp.terminals_enabled=False",
        # as root (a container), Jupyter asks for this; loopback and the token still hold
        *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []),
    ]


def start(out: Path, port: int = 0) -> tuple[subprocess.Popen, str, str]:
    """The running server, its formgrader URL (token included) and the token; the caller
    stops it (:func:`stop`)."""
    out = out.resolve()
    if not (out / CONFIG).is_file():
        raise FormgraderError(
            f"{out} is not an autograde output folder (it has no {CONFIG}): "
            "run python -m grader autograde SUBMITTED --out OUT first"
        )
    port = port or free_port()
    token = secrets.token_hex(24)
    env = dict(os.environ, JUPYTER_TOKEN=token)
    # the scripts nbgrader runs by name (alembic) are beside this interpreter
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    # what it writes (gradebook journal, regenerated feedback) is as private as OUT itself
    umask = 0o027 if out.stat().st_mode & 0o050 == 0o050 else 0o077
    process = subprocess.Popen(server_command(out, port), cwd=out, env=env, stdin=subprocess.DEVNULL,
                               start_new_session=True, umask=umask)  # fmt: skip
    base = f"http://{HOST}:{port}"
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise FormgraderError(
                f"the Jupyter server stopped at once (exit status {process.returncode}, "
                f"its messages are above); is port {port} in use?"
            )
        try:
            with urllib.request.urlopen(f"{base}/formgrader/api/status?token={token}", timeout=2):
                return process, f"{base}/formgrader?token={token}", token
        except (urllib.error.URLError, OSError):
            time.sleep(0.3)
    stop(process)
    raise FormgraderError(f"the Jupyter server did not answer on {base} within {READY_SECONDS:.0f} s")


def stop(process: subprocess.Popen) -> None:
    """SIGTERM (Jupyter would ask on a terminal for SIGINT), then SIGKILL after 10 s."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(out: Path, port: int) -> int:
    process, url, _token = start(out, port)
    print(f"formgrader on {out}: {url}\n(listening on {HOST} only; Ctrl-C stops it)", flush=True)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a service manager stops it so
    try:
        process.wait()
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        stop(process)
    print("formgrader stopped")
    return 0
