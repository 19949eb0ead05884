"""A throwaway PostgreSQL server for PostgresSaver: initdb + pg_ctl in a temp directory.

The server listens on 127.0.0.1 on a free port, runs as the `postgres` user
when the benchmark runs as root (root cannot run initdb), and is stopped and
its directory removed at the end of the run. If it cannot start, the reason is
kept so the scripts can say why PostgresSaver was skipped.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _pg_bindir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PostgresServer:
    """A throwaway PostgreSQL cluster on 127.0.0.1 (initdb + pg_ctl in a temp directory).

    `start()` never raises: on failure `dsn` stays None and `reason` says why.
    As root it runs the server as the `postgres` user (root cannot run initdb).
    """

    def __init__(self) -> None:
        self.dsn: str | None = None
        self.reason = ""
        self.tmp: Path | None = None
        self._as: list[str] = []
        self._bindir: Path | None = None
        self._count = 0

    def _run(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*self._as, *argv], capture_output=True, text=True, timeout=timeout, check=False
        )

    def start(self) -> bool:
        """Start the cluster; return whether it runs."""
        try:
            return self._start()
        except Exception as exc:  # any failure means "skip Postgres", with the reason shown
            self.reason = f"{type(exc).__name__}: {exc}"
            self.stop()
            return False

    def _start(self) -> bool:
        bindir = _pg_bindir()
        if bindir is None and os.geteuid() == 0 and shutil.which("apt-get"):
            note("PostgreSQL not found; apt-get install -y postgresql ...")
            subprocess.run(
                ["apt-get", "install", "-y", "postgresql"],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
                timeout=600,
            )
            bindir = _pg_bindir()
        if bindir is None:
            self.reason = "no initdb/pg_ctl on this machine (apt-get install -y postgresql)"
            return False
        self._bindir = bindir
        self.tmp = Path(tempfile.mkdtemp(prefix="threadloom-bench-pg-"))
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                self.reason = "running as root and there is no 'postgres' user to run initdb as"
                return False
            os.chown(self.tmp, user.pw_uid, user.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        data, log = self.tmp / "data", self.tmp / "server.log"
        done = self._run(
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--no-sync",
        )
        if done.returncode != 0:
            self.reason = f"initdb failed: {done.stderr.strip().splitlines()[-1:]}"
            return False
        port = _free_port()
        options = f"-p {port} -k {self.tmp} -c listen_addresses=127.0.0.1"
        done = self._run(
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
            "start",
        )
        if done.returncode != 0:
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            self.reason = f"pg_ctl start failed: {done.stderr.strip()} {tail}"
            return False
        self.dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=disable"
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            self.version = conn.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        return True

    def new_database(self) -> str:
        """Create an empty database; return its DSN."""
        import psycopg

        assert self.dsn is not None
        self._count += 1
        name = f"bench_{os.getpid()}_{self._count}"
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
                "-D",
                str(self.tmp / "data"),
                "-m",
                "fast",
                "-w",
                "-t",
                "60",
                "stop",
            )
        shutil.rmtree(self.tmp, ignore_errors=True)
        self.tmp = None
        self.dsn = None


@contextlib.contextmanager
def postgres_if(names: Sequence[str]) -> Iterator[PostgresServer]:
    """Start Postgres when PostgresSaver is among `names`; always tear it down."""
    server = PostgresServer()
    if "PostgresSaver" in names:
        if server.start():
            note(f"PostgreSQL {server.version} running on {server.dsn}")
        else:
            print(f"PostgresSaver skipped: {server.reason}")
    try:
        yield server
    finally:
        server.stop()
