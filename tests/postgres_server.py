"""A real, throwaway PostgreSQL server for tests: `initdb` into a temporary directory, started
with `pg_ctl` on a free port of 127.0.0.1 (no Unix socket), stopped and deleted at the end.

The server binaries come from Debian's `postgresql` package (`apt-get install postgresql`), which
keeps them off PATH in /usr/lib/postgresql/<version>/bin. initdb refuses to run as root, so as
root the cluster is made and run by the `postgres` user (or `nobody`). Authentication is `trust`
except for the role `kb_secret`, which needs its password (scram-sha-256), so tests can check
that credentials come from PGPASSWORD or a password file and nowhere else.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from pathlib import Path

SUPERUSER = "kb_admin"
PASSWORD_ROLE = "kb_secret"
READER_ROLE = "kb_reader"
_HBA = f"""\
host all {PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256
host all all 127.0.0.1/32 trust
"""


def find_bindir() -> Path | None:
    """The directory of initdb and pg_ctl: on PATH, else Debian's newest versioned one."""
    on_path = shutil.which("pg_ctl")
    if on_path and shutil.which("initdb"):
        return Path(on_path).parent
    found = glob.glob("/usr/lib/postgresql/*/bin/pg_ctl")
    if not found:
        return None
    newest = max(found, key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0)
    return Path(newest).parent


class PostgresServer:
    def __init__(self, bindir: Path):
        self.bindir = bindir
        self.user = _unprivileged_user() if os.geteuid() == 0 else None
        self.root = Path(tempfile.mkdtemp(prefix="kb-postgres-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = 0
        if self.user is not None:
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)

    # --- lifecycle -------------------------------------------------------------------------

    def init(self) -> PostgresServer:
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--no-sync",
        )
        (self.data / "pg_hba.conf").write_text(_HBA)
        return self

    def start(self) -> None:
        self.port = self.port or _free_port()
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c fsync=off -c full_page_writes=off -c max_connections=60"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
            "-o", options, "start",
        )  # fmt: skip

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    # --- databases and roles ---------------------------------------------------------------

    def url(self, database: str, user: str = SUPERUSER) -> str:
        return f"postgresql://{user}@127.0.0.1:{self.port}/{database}"

    def create_database(self, prefix: str = "kb") -> str:
        """A new, empty database; returns its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.admin(f'CREATE DATABASE "{name}"')
        return name

    def admin(self, sql: str, database: str = "postgres") -> list[tuple]:
        """Run `sql` as the superuser (autocommit); the rows it returns, if any."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    # --- helpers ---------------------------------------------------------------------------

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bindir / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user.pw_name, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise subprocess.CalledProcessError(
                done.returncode, command, done.stdout, done.stderr + log
            )


def _unprivileged_user() -> pwd.struct_passwd:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name)
    raise RuntimeError("running as root with neither a `postgres` nor a `nobody` user for initdb")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
