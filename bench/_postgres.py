"""The benchmarks' PostgreSQL: the tests' throwaway server (`tests/_postgres.py`), installed
with apt when missing and the script runs as root.

`postgres_if` starts it only when a Postgres subject is measured and always tears it down;
when it cannot start, the run says why and goes on without Postgres.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests._postgres import PostgresServer, pg_bindir  # noqa: E402 (needs the path above)

__all__ = ["PostgresServer", "postgres_if"]


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _install_if_missing() -> None:
    """Install Debian's postgresql package when no server binaries exist (root with apt only)."""
    if pg_bindir() is not None or os.geteuid() != 0 or not shutil.which("apt-get"):
        return
    note("PostgreSQL not found; apt-get install -y postgresql ...")
    subprocess.run(
        ["apt-get", "install", "-y", "postgresql"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        check=False,
        timeout=600,
    )


@contextlib.contextmanager
def postgres_if(
    names: Sequence[str], wanted: Sequence[str] = ("PostgresSaver",)
) -> Iterator[PostgresServer]:
    """Start Postgres when one of `wanted` is among `names`; always tear it down."""
    server = PostgresServer(prefix="threadloom-bench-pg-")
    chosen = [name for name in wanted if name in names]
    if chosen:
        _install_if_missing()
        if server.start():
            note(f"PostgreSQL {server.version} running on {server.dsn}")
        else:
            print(f"{', '.join(chosen)} skipped: {server.reason}")
    try:
        yield server
    finally:
        server.stop()
