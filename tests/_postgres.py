"""A throwaway PostgreSQL server: initdb + pg_ctl in a temporary directory, on 127.0.0.1.

Shared by the test fixtures (`tests/conftest.py`) and the benchmarks (`bench/_postgres.py`),
so it imports neither pytest nor anything of the benchmarks. The server is the machine's
own PostgreSQL (Debian's `postgresql` package; `.ci/deps` installs it in CI), run as the
`postgres` user when the caller is root (root cannot run initdb), listening on a free port
of 127.0.0.1 with trust authentication, and removed with its directory by `stop()`.

`start()` never raises: it returns whether the server runs and leaves the reason in
`reason` otherwise; `missing` tells "no PostgreSQL on this machine" (which a test may skip
for outside CI) from "PostgreSQL is here but would not start" (a failure everywhere).
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

#: Where Debian puts the server binaries (`initdb` and `pg_ctl` are not on PATH there).
DEBIAN_BINDIRS = "/usr/lib/postgresql/*/bin/initdb"
#: Attempts at binding a free port: another process may take it between choice and bind.
PORT_ATTEMPTS = 3


def pg_bindir() -> Path | None:
    """The directory holding `initdb` and `pg_ctl` (PATH first, then Debian's), or None."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"), key=lambda p: _major(p.parent.parent)
    )
    return versions[-1].parent if versions else None


def _major(path: Path) -> int:
    """The major version a Debian directory (`/usr/lib/postgresql/15`) is named after."""
    return int(path.name) if path.name.isdigit() else 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (initdb + pg_ctl in a temp directory).

    Attributes:
        dsn: the URL of the `postgres` database while the server runs, else None.
        version: the server's version string once started.
        reason: why `start()` returned False.
        missing: True when `start()` failed because no PostgreSQL binaries exist.
    """

    def __init__(self, prefix: str = "threadloom-pg-") -> None:
        self.dsn: str | None = None
        self.version = ""
        self.reason = ""
        self.missing = False
        self.tmp: Path | None = None
        self._prefix = prefix
        self._as: list[str] = []
        self._bindir: Path | None = None
        self._count = 0

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self) -> bool:
        """Start the cluster; return whether it runs (see `reason` when not)."""
        try:
            started = self._start()
        except Exception as exc:  # any failure is reported through `reason`, never raised
            self.reason = f"{type(exc).__name__}: {exc}"
            started = False
        if not started:
            self.stop()
        return started

    def _start(self) -> bool:
        bindir = pg_bindir()
        if bindir is None:
            self.missing = True
            self.reason = (
                "no PostgreSQL server binaries (initdb, pg_ctl) on PATH or in "
                f"{DEBIAN_BINDIRS}; install them with `apt-get install -y postgresql`"
            )
            return False
        self._bindir = bindir
        self.tmp = Path(tempfile.mkdtemp(prefix=self._prefix))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                self.reason = "running as root and there is no 'postgres' user to run initdb as"
                return False
            os.chown(self.tmp, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        data = self.tmp / "data"
        done = self._run(
            str(bindir / "initdb"),
            *("-D", str(data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync"),
        )
        if done.returncode != 0:
            self.reason = f"initdb failed: {done.stderr.strip().splitlines()[-1:]}"
            return False
        for _ in range(PORT_ATTEMPTS):
            port = _free_port()
            if self._pg_ctl_start(bindir, data, port):
                break
        else:
            return False
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            self.version = str(row[0]) if row else "?"
        return True

    def _pg_ctl_start(self, bindir: Path, data: Path, port: int) -> bool:
        assert self.tmp is not None
        log = self.tmp / "server.log"
        options = f"-p {port} -k {self.tmp} -c listen_addresses=127.0.0.1"
        done = self._run(
            str(bindir / "pg_ctl"),
            *("-D", str(data), "-l", str(log), "-o", options, "-w", "-t", "60", "start"),
        )
        if done.returncode == 0:
            return True
        tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
        self.reason = f"pg_ctl start failed: {done.stderr.strip()} {tail}"
        return False

    def new_database(self) -> str:
        """Create an empty database; return its URL."""
        import psycopg

        assert self.dsn is not None, "start() the server first"
        self._count += 1
        name = f"db_{os.getpid()}_{self._count}"
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return self.dsn.replace("/postgres?", f"/{name}?")

    def drop_database(self, dsn: str) -> None:
        """Drop a database made by `new_database` (ignoring errors)."""
        import psycopg

        if self.dsn is None:
            return
        name = dsn.rsplit("/", 1)[1].split("?")[0]
        with contextlib.suppress(Exception), psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server and remove its directory (safe to call twice)."""
        if self.tmp is None:
            return
        if self.dsn is not None and self._bindir is not None:
            self._run(
                str(self._bindir / "pg_ctl"),
                *("-D", str(self.tmp / "data"), "-m", "fast", "-w", "-t", "60", "stop"),
            )
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None
        self.dsn = None
