"""One SQLite file: per-thread apsw connections, transactions, migrations.

Discipline (our own connections only, never apsw's process-wide settings): WAL,
a busy timeout, foreign keys on, no double-quoted string literals, `BEGIN
IMMEDIATE` for writes, and a fork check before a connection is reused.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw

from threadloom.engine.schema import FORMAT_VERSION, MIGRATIONS
from threadloom.errors import EngineError, FormatError

BUSY_TIMEOUT_MS = 30_000


class Database:
    """An open threadloom file.

    Connections are made per OS thread (apsw connections must not interleave
    transactions across threads) and re-made after a fork.

    Args:
        path: the file; created with the current format if missing.
        synchronous: SQLite `synchronous` level (`NORMAL` is durable across
            process crashes in WAL mode; `FULL` also across power loss).
    """

    def __init__(self, path: str | os.PathLike[str], *, synchronous: str = "NORMAL") -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise EngineError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        self.path = str(Path(path))
        self.synchronous = synchronous.upper()
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[apsw.Connection] = []
        self._closed = False
        self.migrate()

    def _open(self) -> apsw.Connection:
        try:
            conn = apsw.Connection(self.path)
        except apsw.Error as exc:
            raise EngineError(
                f"cannot open {self.path!r}: {exc}; check the path and its permissions"
            ) from exc
        conn.set_busy_timeout(BUSY_TIMEOUT_MS)
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    @property
    def conn(self) -> apsw.Connection:
        """This thread's connection (opened on first use, re-opened after a fork)."""
        if self._closed:
            raise EngineError("the database is closed; open a new Saver")
        conn = getattr(self._local, "conn", None)
        if conn is None or self._local.pid != os.getpid():
            conn = self._open()
            self._local.conn = conn
            self._local.pid = os.getpid()
            with self._lock:
                self._all.append(conn)
        return conn

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on any error."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """A read transaction, so several queries see one snapshot."""
        conn = self.conn
        if not conn.in_transaction:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
        else:
            yield conn

    def migrate(self) -> None:
        """Create or upgrade the schema to FORMAT_VERSION.

        Raises:
            FormatError: the file was written by a newer threadloom.
        """
        with self.write() as conn:
            version = conn.execute("PRAGMA user_version").fetchall()[0][0]
            if version > FORMAT_VERSION:
                raise FormatError(
                    f"{self.path!r} has on-disk format {version}, newer than this threadloom "
                    f"understands ({FORMAT_VERSION}); upgrade threadloom"
                )
            for step in MIGRATIONS[version:]:
                conn.execute(step)
            if version < FORMAT_VERSION:
                conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")

    def close(self) -> None:
        """Close every connection this object opened (in this process)."""
        with self._lock:
            conns, self._all = self._all, []
            self._closed = True
        for conn in conns:
            with contextlib.suppress(apsw.Error):
                conn.close()
