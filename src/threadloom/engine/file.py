"""One threadloom file per path and process: connections, transactions, migrations.

Engine layer. `File.open(path)` returns the process's one object for a path, so every
saver, store, server and viewer on it shares one pool, one write lock and one content
store. Discipline (our own connections only, never apsw's process-wide settings): WAL,
a busy timeout, foreign keys on, no double-quoted string literals, `BEGIN IMMEDIATE`
for writes, and a fork check before a connection is reused.

Invariants:
- nothing is changed before the path is recognised as ours or new (`recognize.py`);
- a read-only file is never written: no journal-mode change, no migration;
- the WAL is kept to `WAL_LIMIT` (32 MiB in a training: wal_fold.py), folded in on the last close;
- `":memory:"` is a private database of one `File`: a file of its own in a new temporary
  folder (so every pooled connection shares it, with the same WAL discipline as any
  file), removed with its folder when the File closes.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterator
from pathlib import Path

import apsw

from threadloom.engine import lock_wait
from threadloom.engine.borrowed import Borrowed
from threadloom.engine.content.content_store import ContentStore
from threadloom.engine.format import features, functions
from threadloom.engine.format.recognize import Kind, has_content, readable, recognize, uri, writable
from threadloom.engine.format.schema import (
    FORMAT_VERSION,
    MIGRATIONS,
    ONLY_WITH,
    rebuild_due,
    rebuilds_due,
)
from threadloom.engine.format.tables import BODY_TABLES, BodyTable
from threadloom.engine.lock_wait import BUSY_TIMEOUT_MS, Waiting
from threadloom.engine.sql import fetchall
from threadloom.engine.wal_fold import Folding
from threadloom.errors import BusyError, CorruptionError, EngineError, FormatError, ReadOnlyError

__all__ = ["BUSY_TIMEOUT_MS", "MEMORY", "WAL_LIMIT", "File"]

log = logging.getLogger("threadloom.engine")

#: Bytes the WAL is truncated to after each checkpoint (`journal_size_limit`).
WAL_LIMIT = 4 * 1024 * 1024
_SYNCHRONOUS = frozenset({"OFF", "NORMAL", "FULL", "EXTRA"})
_PAGE_SIZES = frozenset(1 << bits for bits in range(9, 17))
#: The path of a private in-memory database (as `sqlite3` and LangGraph's savers take it).
MEMORY = ":memory:"

_registry: dict[tuple[str, bool], File] = {}
_registry_lock = threading.Lock()
_open_files: weakref.WeakSet[File] = weakref.WeakSet()


class File:
    """An open threadloom file.

    Use `File.open(path)` to share the process's object for `path`; the constructor
    makes a private one (as another process would have), which tests use.

    Connections come from a small pool: each operation borrows one for its
    transaction and gives it back, so short-lived threads (LangGraph runs async
    checkpointing on executor threads) reuse connections instead of opening one
    each. A thread that already holds a connection reuses it (nested reads see
    one snapshot). After a fork the child never touches the parent's connections.

    Args:
        path: the file; created with the current format if missing or empty.
            `":memory:"`: a new private database, shared by this object's connections
            and removed when it closes (in a temporary folder, never synced to disk).
        readonly: open without writing anything; None (default) decides from the
            permissions of the file and its folder.
        synchronous: SQLite `synchronous` level (`NORMAL` is durable across
            process crashes in WAL mode; `FULL` also across power loss).
        pool_size: most idle connections kept open.
        page_size: bytes per page of a file this open creates (a power of two from 512
            to 65536; None: SQLite's 4096); an existing file keeps its own.

    Raises:
        NotOurFileError: the path holds something threadloom did not write (untouched).
        FormatError: the file has a newer format, or an older one and is read-only.
        EngineError: the path cannot be opened, or `synchronous` is unknown.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        synchronous: str = "NORMAL",
        pool_size: int = 8,
        page_size: int | None = None,
    ) -> None:
        if page_size is not None and page_size not in _PAGE_SIZES:
            raise EngineError(
                f"page_size must be a power of two from 512 to 65536, not {page_size!r}"
            )
        if synchronous.upper() not in _SYNCHRONOUS:
            raise EngineError(
                f"synchronous must be OFF, NORMAL, FULL or EXTRA, not {synchronous!r}"
            )
        self.path = str(Path(path))
        if self.path.startswith("file:"):
            raise EngineError(
                f"{self.path!r} is an SQLite URI, not a file path; give the file's path "
                f"(or {MEMORY!r} for a private database that lives as long as it is open)"
            )
        #: The temporary folder of a `":memory:"` database (removed on close), else None.
        self.scratch: str | None = None
        if self.path == MEMORY:
            if readonly:
                raise ReadOnlyError(
                    f"{MEMORY!r} is a new empty database and cannot be opened read-only; "
                    "open it without readonly=True"
                )
            self.scratch = tempfile.mkdtemp(prefix="threadloom-memory-")
            self.path = os.path.join(self.scratch, "memory.db")
            # Removed on close, and also when the object is dropped unclosed (as tests
            # drop an InMemoryStore) or the process exits.
            weakref.finalize(self, shutil.rmtree, self.scratch, ignore_errors=True)
            synchronous = "OFF"  # nothing of it outlives the process: no fsync
        kind = recognize(self.path)
        #: The process may not write the file or its folder: connections are opened
        #: read-only (SQLite then reads the WAL without changing anything on disk).
        self.locked = not writable(self.path)
        if readonly is None:
            readonly = self.locked
        if readonly and kind is Kind.NEW:
            raise ReadOnlyError(
                f"{self.path!r} does not exist (or is empty) and cannot be created read-only; "
                "open it writable once, or check the path"
            )
        if self.locked and not readonly:
            raise ReadOnlyError(
                f"{self.path!r} cannot be written: this process may not write the file or "
                "its folder; give this process write permission on both (or work on a copy)"
            )
        self.readonly = readonly
        #: The page size the connection that creates the file sets (None: SQLite's).
        self._new_page_size = page_size if kind is Kind.NEW else None
        #: A read-only open that found a WAL with content leaves it as found: its
        #: connections never fold it into the file on close (another process's writes,
        #: or a crashed writer's, stay for their writer or the next writable open).
        self._keep_wal = readonly and has_content(self.path + "-wal")
        self.synchronous = synchronous.upper()
        self.pool_size = pool_size
        self._local = threading.local()
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._idle: list[apsw.Connection] = []
        self._pid = os.getpid()
        self._inherited: list[apsw.Connection] = []
        self._closed = False
        self._wal_checked = False
        #: Connections opened immutable (see `_readable`), retired once a `-wal` appears.
        self._immutable: set[int] = set()
        #: The empty copies of the tables a current-format file lacks, attached to
        #: its connections (features.py).
        self._absent = features.Copies(FORMAT_VERSION)
        self._users = 0
        self._key: tuple[str, bool] | None = None
        #: The WAL's checkpoints, moved off the commits while a long job writes.
        self.folding = Folding(self.own_connection, self.retire, self._writer_lock, WAL_LIMIT)
        try:
            if readonly:
                self._check_format()
            else:
                self.migrate()
            self._new_page_size = None  # made now: later connections find it
            #: Blocks and dictionaries of the file (the physical layer under every body).
            self.content = ContentStore(self, self.body_tables)
        except BaseException:
            self._close()
            raise
        _open_files.add(self)

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool | None = None,
        synchronous: str = "NORMAL",
        page_size: int | None = None,
    ) -> File:
        """Return this process's `File` for `path`, opening it on first use.

        Every `open` is matched by one `close`; the last close closes the file. A
        read-only and a writable open of one path are two objects (the first never
        writes). A second writable open must ask for the same `synchronous` level.
        `page_size` applies only when this open creates the file.
        """
        if str(path) == MEMORY:
            # Private: every open of ":memory:" is a database of its own.
            opened = cls(path, readonly=readonly, synchronous=synchronous, page_size=page_size)
            opened._users = 1
            return opened
        if readonly is None:
            readonly = not writable(str(path)) if os.path.exists(path) else False
        key = (os.path.realpath(path), bool(readonly))
        with _registry_lock:
            found = _registry.get(key)
            if found is not None and not found._closed and found._pid == os.getpid():
                if found.synchronous != synchronous.upper() and not readonly:
                    raise EngineError(
                        f"{str(path)!r} is already open in this process with "
                        f"synchronous={found.synchronous}; open it with the same level"
                    )
                found._users += 1
                return found
            opened = cls(path, readonly=readonly, synchronous=synchronous, page_size=page_size)
            opened._users = 1
            opened._key = key
            _registry[key] = opened
            return opened

    @property
    def body_tables(self) -> dict[str, BodyTable]:
        """Every table whose rows hold bodies this file encodes (retraining, verify, compact)."""
        return BODY_TABLES

    # -- connections -----------------------------------------------------------------------

    def _open(self) -> apsw.Connection:
        # A read-only open of a file we may write still opens read-write connections
        # (with `query_only`): SQLite then removes the WAL and its index it created when
        # the last connection closes, as it cannot on a read-only connection. A WAL with
        # content found at open is left as it was (`_keep_wal`).
        flags = apsw.SQLITE_OPEN_URI | (
            apsw.SQLITE_OPEN_READONLY
            if self.locked
            else apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_CREATE
        )
        try:
            conn = apsw.Connection(uri(self.path, readonly=self.locked), flags=flags)
            if self.locked:
                conn = self._readable(conn, flags)
        except apsw.Error as exc:
            raise EngineError(
                f"cannot open {self.path!r}: {exc}; check the path and its permissions"
            ) from exc
        conn.set_busy_handler(Waiting(self.path))
        functions.install(conn)
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DML, 0)
        conn.config(apsw.SQLITE_DBCONFIG_DQS_DDL, 0)
        self._absent.attach(conn)
        if self._new_page_size is not None:
            # Before the switch to WAL, which fixes the page size of an empty file.
            conn.execute(f"PRAGMA page_size={self._new_page_size}")
        if not self.readonly:
            if not self._wal_checked:
                self._set_wal(conn)
            conn.execute(f"PRAGMA journal_size_limit={WAL_LIMIT}")
        else:
            conn.execute("PRAGMA query_only=1")
            if self._keep_wal:
                conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
        conn.execute(f"PRAGMA synchronous={self.synchronous}")
        conn.execute("PRAGMA foreign_keys=ON")
        return conn

    def _readable(self, conn: apsw.Connection, flags: int) -> apsw.Connection:
        """`recognize.readable`: immutable connections are retired once a writer appears."""
        found = readable(conn, self.path, flags)
        if found is not conn:
            self._immutable.add(id(found))
        return found

    def _set_wal(self, conn: apsw.Connection) -> None:
        lock_wait.switch_to_wal(conn, self.path)
        self._wal_checked = True

    def _forked(self) -> None:
        """After a fork (with `_lock` held): connections must not cross it, so keep the
        parent's alive (closing them here could disturb the parent) and start an empty
        pool, and a fresh write lock (another thread may have held it)."""
        if self._pid != os.getpid():
            self._inherited.extend(self._idle)
            self._idle = []
            self._pid = os.getpid()
            self._write_lock = threading.Lock()

    def _writer_lock(self) -> threading.Lock:
        """The lock this process's writers queue on (this process's own after a fork)."""
        with self._lock:
            self._forked()
            return self._write_lock

    def _acquire(self, refresh: bool = True, needs: Collection[str] = ()) -> apsw.Connection:
        with self._lock:
            if self._closed:
                raise EngineError("the file is closed; open a new Saver")
            if self._pid != os.getpid():
                self._forked()
            found: apsw.Connection | None = None
            while self._idle:
                conn = self._idle.pop()
                if id(conn) in self._immutable and os.path.exists(self.path + "-wal"):
                    # A writer appeared: its commits are in the WAL this one never reads.
                    self._forget(conn)
                    conn.close()
                    continue
                found = conn
                break
        if found is None:
            return self._open()
        if refresh:  # a write refreshes inside its transaction instead (`write`)
            self._absent.refresh(found, needs)
        return found

    def own_connection(self) -> apsw.Connection:
        """A connection outside the pool (its caller closes it with `retire`)."""
        return self._open()

    def sees_commits(self, conn: apsw.Connection) -> bool:
        """False for an immutable connection once a `-wal` (a writer) appeared."""
        return not (id(conn) in self._immutable and os.path.exists(self.path + "-wal"))

    def retire(self, conn: apsw.Connection) -> None:
        """Close a connection of `own_connection`."""
        self._forget(conn)
        conn.close()

    def _forget(self, conn: apsw.Connection) -> None:
        """Drop what the pool notes of a connection about to close (its id may be reused)."""
        self._immutable.discard(id(conn))
        self._absent.forget(conn)

    def _release(self, conn: apsw.Connection) -> None:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        with self._lock:
            if not self._closed and len(self._idle) < self.pool_size:
                self._idle.append(conn)
                return
            self._forget(conn)
        conn.close()

    @property
    def closed(self) -> bool:
        """True once the last user closed the file."""
        return self._closed

    def connection(self, needs: Collection[str] = ()) -> Borrowed:
        """Borrow a connection (this thread's current one, if it already holds one);
        `needs`: the features its statements read (`features.Copies.current`)."""
        return Borrowed(self, True, needs)

    def damaged(self, exc: BaseException) -> CorruptionError:
        """The error a read raises when SQLite's own structures are damaged."""
        return CorruptionError(
            f"{self.path!r} is damaged ({type(exc).__name__}: {exc}); run `threadloom verify "
            f"--db {self.path}` to see what, and restore the file from a backup"
        )

    @contextlib.contextmanager
    def write(self, needs: Collection[str] = ()) -> Iterator[apsw.Connection]:
        """A `BEGIN IMMEDIATE` transaction: committed on success, rolled back on any error
        (`needs`: as `connection` takes it).

        Writers of this process queue on a lock first: SQLite's busy handler sleeps
        in steps of milliseconds, a lock hands over as soon as the writer before is done.
        Other processes still meet the busy timeout.

        Raises:
            ReadOnlyError: the file is open read-only.
            BusyError: another process kept the write lock past the busy timeout.
        """
        if self.locked:
            raise ReadOnlyError(
                f"{self.path!r} cannot be written: this process may not write the file or "
                "its folder; give this process write permission on both (or work on a copy)"
            )
        if self.readonly:
            raise ReadOnlyError(
                f"{self.path!r} is open read-only (readonly=True); open it without "
                "readonly=True to change it"
            )
        local = self._local
        held: apsw.Connection | None = getattr(local, "held", None)
        # Checked before the lock too, which this thread may be holding (a nested write).
        if held is not None and getattr(local, "pid", None) == os.getpid() and held.in_transaction:
            raise EngineError("a write cannot start inside another transaction")
        # Queue on the lock before taking a connection: writers waiting their turn hold
        # none, so the pool grows with the readers, not with the queue of writers.
        with self._writer_lock(), Borrowed(self, refresh=False) as conn:
            started = time.monotonic()
            try:
                conn.execute("BEGIN IMMEDIATE")
                # Another connection may have made a feature since this one looked
                # (no statement when nothing was committed since its own last commit).
                self._absent.refresh(conn, needs, fresh=True)
                self.folding.prepare(conn)
            except apsw.BusyError:
                raise BusyError(
                    f"another process held {self.path!r} for writing for "
                    f"{time.monotonic() - started:.0f} s, longer than the busy timeout "
                    f"({lock_wait.BUSY_TIMEOUT_MS // 1000} s); retry, or find the process that "
                    "keeps a transaction open"
                ) from None
            undo: list[Callable[[], None]] = []
            self._local.undo = undo
            try:
                yield conn
                conn.execute("COMMIT")
                self._absent.committed(conn)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                for forget in undo:
                    forget()
                raise
            finally:
                self._local.undo = None

    @contextlib.contextmanager
    def read(self, needs: Collection[str] = ()) -> Iterator[apsw.Connection]:
        """A read transaction, so several queries see one snapshot (nested reads share it)."""
        with self.connection(needs) as conn:
            if conn.in_transaction:
                yield conn
                return
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")

    # -- format ----------------------------------------------------------------------------

    def _check_format(self) -> None:
        with self.connection() as conn:
            version = int(fetchall(conn, "PRAGMA user_version")[0][0])
            stale = rebuilds_due(conn) if version == FORMAT_VERSION else []
        if version > FORMAT_VERSION:
            raise self._newer(version)
        if stale:
            raise FormatError(
                f"{self.path!r} has a table an older threadloom made after the file moved to "
                f"format {FORMAT_VERSION}, and is open read-only: stop the older threadloom "
                "and open the file writable once to rebuild it"
            )
        if version < FORMAT_VERSION:
            raise FormatError(
                f"{self.path!r} has on-disk format {version}, older than this threadloom's "
                f"({FORMAT_VERSION}), and is open read-only: open it writable once to "
                "upgrade it (or read it with the threadloom that wrote it)"
            )

    def _newer(self, version: int) -> FormatError:
        return FormatError(
            f"{self.path!r} has on-disk format {version}, newer than this threadloom "
            f"understands ({FORMAT_VERSION}); upgrade threadloom"
        )

    def migrate(self) -> None:
        """Create or upgrade the schema to FORMAT_VERSION.

        A new file gets `meta` alone; the other tables come when a feature first writes
        (engine/format/features.py). The write lock is taken only when the file is not
        at this format yet, so opening a current file does not wait for another
        process's writer.

        Raises:
            FormatError: the file was written by a newer threadloom.
        """
        with self.connection() as conn:
            version = int(fetchall(conn, "PRAGMA user_version")[0][0])
            current = version == FORMAT_VERSION and not rebuilds_due(conn)
        if not current:
            with self.write() as conn:
                version = int(fetchall(conn, "PRAGMA user_version")[0][0])
                if version > FORMAT_VERSION:
                    raise self._newer(version)
                if version == 0 and not fetchall(conn, "SELECT 1 FROM main.sqlite_schema"):
                    features.create(conn)
                else:
                    for reached, step in enumerate(MIGRATIONS, 1):
                        rebuild = reached in ONLY_WITH
                        if rebuild_due(conn, reached) if rebuild else reached > version:
                            conn.execute(step)
                self._absent.changed(conn)
                if version < FORMAT_VERSION:
                    conn.execute(f"PRAGMA user_version={FORMAT_VERSION}")
                    log.info("%s: on-disk format %d -> %d", self.path, version, FORMAT_VERSION)
        # Connections opened before the file had its format (a new file, made here or
        # by another process meanwhile) see the tables it lacks now.
        with self._lock:
            pooled = list(self._idle)
        for conn in pooled:
            self._absent.attach(conn)

    # -- features (format 8) ---------------------------------------------------------------

    def if_rolled_back(self, forget: Callable[[], None]) -> None:
        """Call `forget` if this thread's write transaction rolls back (a cache of what
        the transaction wrote, such as a row id, must not outlive it)."""
        undo: list[Callable[[], None]] | None = getattr(self._local, "undo", None)
        if undo is None:
            raise EngineError("if_rolled_back is for a write transaction's writes")
        undo.append(forget)

    def ensure(self, conn: apsw.Connection, feature: str) -> None:
        """Make `feature`'s tables (features.py) in the caller's write transaction."""
        self._absent.ensure(conn, feature, self.if_rolled_back)

    def checkpoints_aside(self) -> contextlib.AbstractContextManager[None]:
        """While held, commits leave the WAL's checkpoints to a thread (wal_fold.py)."""
        return self.folding.aside()

    def between_checkpoints(self) -> contextlib.AbstractContextManager[None]:
        """Around a step's `write` in `checkpoints_aside`: no checkpoint meanwhile (wal_fold)."""
        return self.folding.step()

    # -- closing ---------------------------------------------------------------------------

    def checkpoint_wal(self) -> None:
        """Fold the WAL into the file and truncate it (a no-op while others hold it: this
        tidying never waits for another process, the next close does it)."""
        if self.readonly:
            return
        with self.connection() as conn:
            conn.set_busy_timeout(0)
            try:
                with contextlib.suppress(apsw.BusyError, apsw.LockedError):
                    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            finally:
                conn.set_busy_handler(Waiting(self.path))

    def close(self) -> None:
        """Give back one `open` of this file; the last one closes its connections.

        The last close folds the WAL into the file first, so a file at rest carries
        no `-wal` (SQLite removes it with the last connection of every process).
        """
        with _registry_lock:
            self._users = max(self._users - 1, 0)
            if self._users:
                return
            if self._key is not None and _registry.get(self._key) is self:
                del _registry[self._key]
        self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            mine = self._pid == os.getpid()
        if mine and not self.readonly:
            with contextlib.suppress(EngineError):
                self.checkpoint_wal()
        with self._lock:
            idle, self._idle = self._idle, []
            self._closed = True
        if mine:
            for conn in idle:
                with contextlib.suppress(apsw.Error):
                    conn.close()
            if self.scratch is not None:
                shutil.rmtree(self.scratch, ignore_errors=True)


@atexit.register
def _close_all() -> None:
    # A process that exits with files open still leaves them tidy (no -wal behind).
    for opened in list(_open_files):
        with contextlib.suppress(Exception):
            opened._close()
