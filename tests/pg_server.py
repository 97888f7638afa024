"""A throwaway PostgreSQL server for the gradebook tests, started without systemd.

``initdb`` and ``pg_ctl`` from Debian's ``postgresql`` package (``/usr/lib/postgresql/<N>/bin``)
create a cluster in a temporary folder and serve it on 127.0.0.1 only, on a free port, with
the Unix socket inside the data folder (nothing in /var/run, nothing shared with another
server). The cluster's superuser is reached through that socket by peer authentication; the
tests log in over TCP as an ordinary role with a random password (``scram-sha-256``) that may
create databases, so every test can work in a database of its own.

``initdb`` refuses to run as root: as root (CI, containers) every server command runs as the
``postgres`` system user (``runuser -u postgres --``), which owns the temporary folder.

Command line (what ``.ci/run`` could use; it has its own shell version so that it needs no venv):

    python -m tests.pg_server start FOLDER    prints the URL; the server keeps running
    python -m tests.pg_server stop FOLDER
"""

from __future__ import annotations

import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROLE = "grader"
DATABASE = "gradebook"
URL_VARIABLE = "ATTENTION_TEST_PG_URL"


def find_bin_dir() -> Path | None:
    """The newest ``/usr/lib/postgresql/<N>/bin`` holding initdb and pg_ctl, else PATH's."""
    versions = []
    for folder in Path("/usr/lib/postgresql").glob("*/bin"):
        if (folder / "initdb").exists() and (folder / "pg_ctl").exists():
            match = re.fullmatch(r"\d+", folder.parent.name)
            versions.append((int(match.group()) if match else 0, folder))
    if versions:
        return max(versions)[1]
    initdb, pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
    if initdb and pg_ctl and Path(initdb).resolve().parent == Path(pg_ctl).resolve().parent:
        return Path(initdb).resolve().parent
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def server_user() -> str:
    """The system user the server runs as, which is also the cluster's superuser (peer login)."""
    return "postgres" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name


def _as_server_user(command: list[str]) -> list[str]:
    """Run as ``postgres`` when we are root (initdb and postgres refuse root), else as is."""
    if os.geteuid() != 0:
        return command
    runuser = shutil.which("runuser")
    if runuser:
        return [runuser, "-u", "postgres", "--", *command]
    setpriv = shutil.which("setpriv")
    if setpriv:
        user = pwd.getpwnam("postgres")
        return [setpriv, f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--init-groups", *command]
    raise RuntimeError("running as root, and neither runuser nor setpriv is installed")


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(_as_server_user(command), capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command)} exited with {done.returncode}:\n"
            f"{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return done


@dataclass
class PostgresServer:
    """One cluster in ``folder`` (data/, the socket, the log), serving 127.0.0.1:``port``."""

    bin_dir: Path
    folder: Path
    port: int
    password: str

    @property
    def data(self) -> Path:
        return self.folder / "data"

    @property
    def url(self) -> str:
        """The SQLAlchemy URL of the role's own database, through psycopg 3."""
        return f"postgresql+psycopg://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    @classmethod
    def start(cls, folder: Path | None = None, bin_dir: Path | None = None) -> PostgresServer:
        """initdb, pg_ctl start (waiting until it accepts connections), then a role and a database."""
        bin_dir = bin_dir or find_bin_dir()
        if bin_dir is None:
            raise FileNotFoundError("PostgreSQL is not installed (no initdb/pg_ctl found)")
        folder = Path(folder or tempfile.mkdtemp(prefix="attention-pg-")).resolve()
        folder.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(folder, user.pw_uid, user.pw_gid)
        folder.chmod(0o700)
        server = cls(bin_dir, folder, free_port(), secrets.token_hex(16))
        _run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(server.data),
                "--auth-local=peer",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ],
            cwd=folder,
        )
        for attempt in range(3):  # the port may be taken between free_port() and the bind
            options = f"-k {folder} -h 127.0.0.1 -p {server.port} -c fsync=off"
            try:
                _run(
                    [
                        str(bin_dir / "pg_ctl"),
                        "-D",
                        str(server.data),
                        "-l",
                        str(folder / "log"),
                        "-o",
                        options,
                        "-w",
                        "-t",
                        "60",
                        "start",
                    ],
                    cwd=folder,
                )
                break
            except RuntimeError:
                if attempt == 2:
                    raise
                server.port = free_port()
        server.psql(f"CREATE ROLE {ROLE} LOGIN CREATEDB PASSWORD '{server.password}'")
        server.psql(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        return server

    def psql(self, sql: str) -> str:
        """Run one statement as the cluster's superuser, through the socket (peer authentication)."""
        command = [
            str(self.bin_dir / "psql"),
            "-h",
            str(self.folder),
            "-p",
            str(self.port),
            "-U",
            server_user(),
            "-d",
            "postgres",
            "-v",
            "ON_ERROR_STOP=1",
            "-Atc",
            sql,
        ]
        return _run(command, cwd=self.folder).stdout

    def stop(self) -> None:
        """pg_ctl stop (fast: running sessions are cut), then remove the folder."""
        try:
            _run(
                [str(self.bin_dir / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop"],
                cwd=self.folder,
            )
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("start", "stop"):
        print("usage: python -m tests.pg_server start|stop FOLDER", file=sys.stderr)
        return 2
    action, folder = argv[0], Path(argv[1]).resolve()
    bin_dir = find_bin_dir()
    if bin_dir is None:
        print("PostgreSQL is not installed", file=sys.stderr)
        return 1
    if action == "start":
        server = PostgresServer.start(folder, bin_dir)
        print(server.url)
    else:
        _run([str(bin_dir / "pg_ctl"), "-D", str(folder / "data"), "-m", "fast", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
