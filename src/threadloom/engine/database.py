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
from threadloom.engine.sql import Row, fetchall
from threadloom.engine.store import ContentStore
from threadloom.errors import EngineError, FormatError

__all__ = ["BUSY_TIMEOUT_MS", "Database", "Row", "fetchall"]

BUSY_TIMEOUT_MS = 30_000


class Database:
    """An open threadloom file.

    Connections come from a small pool: each operation borrows one for its
    transaction and gives it back, so short-lived threads (LangGraph runs async
    checkpointing on executor threads) reuse connections instead of opening one
    each. A thread that already holds a connection reuses it (nested reads see
    one snapshot). After a fork the child never touches the parent's connections.

    Args:
        path: the file; created with the current format if missing.
        synchronous: SQLite `synchronous` level (`NORMAL` is durable across
            process crashes in WAL mode; `FULL` also across power loss).
        pool_size: most idle connections kept open.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "NORMAL",
        pool_size: int = 8,
    ) -> None:
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise EngineError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        self.path = str(Path(path))
        self.synchronous = synchronous.upper()
        self.pool_size = pool_size
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[apsw.Connection] = []
        self._pid = os.getpid()
        self._inherited: list[apsw.Connection] = []
        self._closed = False
        self.migrate()
        #: Blocks and dictionaries of the file (the physical layer under every body).
        self.content = ContentStore(self)

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

    def _acquire(self) -> apsw.Connection:
        with self._lock:
            if self._closed:
                raise EngineError("the database is closed; open a new Saver")
            if self._pid != os.getpid():
                # Connections must not cross a fork: keep the parent's alive (closing
                # them here could disturb the parent) and start an empty pool.
                self._inherited.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
                self._write_lock = threading.Lock()  # another thread may have held it
            if self._idle:
                return self._idle.pop()
        return self._open()

    def _release(self, conn: apsw.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
        conn.close()

    @contextlib.contextmanager
    def connection(self) -> Iterator[apsw.Connection]:
        """Borrow a connection (this thread's current one, if it already holds one)."""
        held = getattr(self._local, "held", None)
        if held is not None and getattr(self._local, "pid", None) == os.getpid():
            yield held
            return
        conn = self._acquire()
        self._local.held, self._local.pid = conn, os.getpid()
        try:
            yield conn
        finally:
            self._local.held = None
            self._release(conn)

    @contextlib.contextmanager
    def write(self) -> Iterator[apsw.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on any error.

        Writers of this process queue on a lock first: SQLite's busy handler sleeps
        in steps of milliseconds, a lock hands over as soon as the writer before is done.
        Other processes still meet the busy timeout.
        """
        with self.connection() as conn:
            if conn.in_transaction:
                raise EngineError("a write cannot start inside another transaction")
            with self._write_lock:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    yield conn
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")

    @contextlib.contextmanager
    def read(self) -> Iterator[apsw.Connection]:
        """A read transaction, so several queries see one snapshot (nested reads share it)."""
        with self.connection() as conn:
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    def migrate(self) -> None:
        """Create or upgrade the schema to FORMAT_VERSION.

        Raises:
            FormatError: the file was written by a newer threadloom.
        """
        with self.write() as conn:
            version: int = fetchall(conn, "PRAGMA user_version")[0][0]
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
        """Close the idle connections and refuse new borrowers (in this process)."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
            mine = self._pid == os.getpid()
        if mine:
            for conn in idle:
                with contextlib.suppress(apsw.Error):
                    conn.close()
