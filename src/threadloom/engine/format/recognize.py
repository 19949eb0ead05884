"""What a path holds, decided before anything is changed (engine layer).

A threadloom file is opened; a missing or empty file becomes one; anything else
(a LangGraph SqliteSaver file, another application's SQLite database, a file that
is not SQLite at all) is refused with its own error, and its bytes stay as they
were: the look is a read-only connection that creates no side file.
"""

from __future__ import annotations

import enum
import os
import time
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import apsw

from threadloom.engine.format.features import KIND, KIND_KEY
from threadloom.errors import (
    DamagedDatabaseError,
    EngineError,
    ForeignDatabaseError,
    LangGraphFileError,
    LangGraphStoreFileError,
    NaasDocumentsFileError,
    NotSQLiteError,
)

#: The first bytes of every SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"
#: Tables every threadloom file holds (format 1 and later).
OUR_TABLES = frozenset({"meta", "scopes", "threads", "checkpoints", "writes", "vals"})
#: Columns of LangGraph SqliteSaver's `checkpoints` table.
_SQLITE_SAVER_COLUMNS = frozenset({"thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint"})


class Kind(enum.Enum):
    """What a path holds."""

    NEW = "new"  # missing, empty, or an SQLite database without any table
    OURS = "threadloom"


def uri(path: str, *, readonly: bool, immutable: bool = False) -> str:
    """An SQLite URI for `path` (query options never parsed out of a file name)."""
    query = {"mode": "ro"} if readonly else {}
    if immutable:
        query["immutable"] = "1"
    quoted = urllib.parse.quote(os.path.abspath(path))
    return f"file:{quoted}" + (f"?{urllib.parse.urlencode(query)}" if query else "")


def has_content(path: str) -> bool:
    """True when the file at `path` exists and is not empty (a `-wal` with frames)."""
    try:
        return os.path.getsize(path) > 0
    except OSError:
        return False


def writable(path: str) -> bool:
    """Whether this process may write the file at `path` (if it exists) and its folder."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.exists(path) and not os.access(path, os.W_OK):
        return False
    return os.access(folder, os.W_OK)


def readable(conn: apsw.Connection, path: str, flags: int) -> apsw.Connection:
    """A connection to a file this process may not write that leaves nothing on disk:
    `conn` (read-only, at `path`), or an immutable one in its place (`conn` closed).

    A read-only SQLite connection to a WAL file creates the `-wal` and its index
    (`-shm`) when they are missing, and cannot remove them on close (nor can it create
    them in a read-only folder). Without a `-wal` no process has the file open and the
    file holds every committed page, so it is opened immutable: no lock, no side file.
    Limit: a writer (of another user) starting meanwhile is seen by the next
    connection, which reads its WAL (the file's pool retires immutable ones once a
    `-wal` exists); a read under way while that writer folds its WAL into the file may
    fail as damaged, and succeeds when run again.
    """
    if os.path.exists(path + "-wal"):
        conn.execute("PRAGMA schema_version").fetchall()
        return conn
    conn.close()
    return apsw.Connection(uri(path, readonly=True, immutable=True), flags=flags)


def look(path: str) -> apsw.Connection:
    """A read-only connection that changes nothing on disk, not even a side file.

    Without a `-wal` file the database file holds every committed page, so it is
    opened immutable (no lock, no `-shm`). With one, the WAL must be read: a plain
    read-only open, which may map the existing `-shm`.
    """
    wal = os.path.exists(path + "-wal")
    flags = apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    return apsw.Connection(uri(path, readonly=True, immutable=not wal), flags=flags)


def _schema(path: str) -> tuple[set[str], set[str], bool]:
    """The file's table names, the columns of its `checkpoints` table, if any, and
    whether its `meta` names it a threadloom file (format 8 on).

    An immutable read takes no lock, so another process folding its WAL into the file at
    that moment can tear it (SQLite then says "malformed"): a failed read is tried again,
    the last time with an ordinary locked read-only open, before the file is called
    damaged.
    """
    for attempt in range(_READS):
        try:
            locked = attempt == _READS - 1 and not _wal_without_log(path)
            conn = _locked(path) if locked else look(path)
            try:
                tables = {
                    row[0]
                    for row in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")
                }
                columns = (
                    {row[1] for row in conn.execute("PRAGMA table_info(checkpoints)")}
                    if "checkpoints" in tables
                    else set()
                )
                ours = "meta" in tables and _named_ours(conn)
            finally:
                conn.close()
            return tables, columns, ours
        except (apsw.Error, UnicodeDecodeError):
            if attempt == _READS - 1:
                raise
            time.sleep(0.01 * (attempt + 1))
    raise AssertionError("unreachable")


def _named_ours(conn: apsw.Connection) -> bool:
    """True if the file's `meta` table says it is a threadloom file."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(meta)")}
    if not {"key", "value"} <= columns:
        return False
    found = conn.execute("SELECT value FROM meta WHERE key = ?", (KIND_KEY,)).fetchall()
    return bool(found) and found[0][0] == KIND


#: How many times `_schema` reads a file before it calls it damaged (and `identify` its
#: header while another process is still writing it).
_READS = 3


def _head(path: str) -> bytes:
    """The first bytes of the file, as many as SQLite's header has."""
    try:
        with open(path, "rb") as handle:
            return handle.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise EngineError(f"cannot read {path!r}: {exc.strerror}; check its permissions") from None


def _unsettled(head: bytes, path: str) -> bool:
    """True for a header another process may be writing at this moment: a new database's
    first page being written (zeros, or a part of SQLite's header), or an empty file
    beside a WAL. Such a file is read again before it is called foreign."""
    if not head:
        return os.path.exists(path + "-wal")
    if head == SQLITE_HEADER:
        return False
    return SQLITE_HEADER.startswith(head) or not head.strip(b"\0")


def _wal_without_log(path: str) -> bool:
    """True for a WAL-mode database with no `-wal` file: no writer holds it, so an immutable
    read cannot be torn, and a locked read-only open would create `-wal` and `-shm` files
    beside it (SQLite makes them for WAL-mode readers)."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(20)
    except OSError:
        return False
    return len(header) == 20 and header[18:20] == b"\x02\x02" and not os.path.exists(path + "-wal")


def _locked(path: str) -> apsw.Connection:
    """A read-only connection that takes SQLite's locks (so no writer can tear the read)."""
    return apsw.Connection(
        uri(path, readonly=True), flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )


#: Tables of the naas document service's SQLite file (`DocumentSecondaryAdapterSQLite`,
#: the engine's `storage/documents.sqlite`).
NAAS_TABLES = frozenset({"abi_documents", "abi_document_collections"})
#: Tables of LangGraph's SqliteStore.
_SQLITE_STORE_TABLES = frozenset({"store", "store_migrations"})


class Found(enum.Enum):
    """What `identify` found at a path."""

    NEW = "new"  # missing, empty, or an SQLite database without any table
    THREADLOOM = "threadloom"
    SQLITE_SAVER = "sqlite"  # LangGraph SqliteSaver / AsyncSqliteSaver (the same file)
    SQLITE_STORE = "sqlite-store"  # LangGraph SqliteStore alone
    NAAS_DOCUMENTS = "naas-sqlite"  # the naas document service's SQLite file
    FOREIGN = "foreign"  # another application's SQLite database


#: How messages name each kind of file.
DESCRIPTIONS = {
    Found.NEW: "a new (missing or empty) file",
    Found.THREADLOOM: "a threadloom file",
    Found.SQLITE_SAVER: "a LangGraph SqliteSaver database",
    Found.SQLITE_STORE: "a LangGraph SqliteStore database",
    Found.NAAS_DOCUMENTS: "a naas document service file (storage/documents.sqlite)",
    Found.FOREIGN: "another application's SQLite database",
}


@dataclass(frozen=True)
class Identity:
    """What a path holds (`identify`).

    Attributes:
        found: the kind of file.
        tables: its table names.
        store: it also holds LangGraph SqliteStore tables (beside a SqliteSaver's).
    """

    found: Found
    tables: frozenset[str] = frozenset()
    store: bool = False

    @property
    def description(self) -> str:
        """The kind in words ("a LangGraph SqliteSaver database")."""
        if self.found is Found.FOREIGN:
            shown = ", ".join(sorted(self.tables)[:5])
            return f"{DESCRIPTIONS[self.found]} (tables: {shown})"
        return DESCRIPTIONS[self.found]


def identify(path: str) -> Identity:
    """Say what `path` holds without changing it.

    Raises:
        NotSQLiteError: the file is not an SQLite database.
        DamagedDatabaseError: it starts like one but its schema cannot be read.
        EngineError: it cannot be read (permissions, a directory).
    """
    target = Path(path)
    if not target.exists():
        return Identity(Found.NEW)
    if target.is_dir():
        raise EngineError(f"{path!r} is a directory; give the path of a file")
    head = _head(path)
    for attempt in range(_READS):
        if not _unsettled(head, path):
            break
        time.sleep(0.01 * (attempt + 1))
        head = _head(path)
    if not head:
        if not os.path.exists(path + "-wal"):
            return Identity(Found.NEW)
        # An empty file beside its WAL: a database another process is creating, whose
        # first pages are in the WAL until a checkpoint folds them in. SQLite reads it.
    elif head != SQLITE_HEADER:
        raise NotSQLiteError(
            f"{path!r} is not an SQLite database (nor a threadloom file); it was left "
            "untouched: give the path of a threadloom file, or a new path to create one"
        )
    try:
        names, columns, ours = _schema(path)
    except (apsw.Error, UnicodeDecodeError) as exc:
        raise DamagedDatabaseError(
            f"{path!r} starts like an SQLite database but cannot be read as one ({exc}); "
            "it was left untouched: restore it from a backup or give another path"
        ) from None
    tables = frozenset(names)
    store = tables >= _SQLITE_STORE_TABLES
    if ours or tables >= OUR_TABLES:
        return Identity(Found.THREADLOOM, tables)
    if not tables:
        return Identity(Found.NEW)
    if columns >= _SQLITE_SAVER_COLUMNS and "writes" in tables:
        return Identity(Found.SQLITE_SAVER, tables, store)
    if tables >= NAAS_TABLES:
        return Identity(Found.NAAS_DOCUMENTS, tables)
    if store:
        return Identity(Found.SQLITE_STORE, tables, store)
    return Identity(Found.FOREIGN, tables)


def recognize(path: str) -> Kind:
    """Classify `path` without changing it.

    Raises:
        NotSQLiteError: the file is not an SQLite database.
        LangGraphFileError: it is a LangGraph SqliteSaver file.
        NaasDocumentsFileError: it is the naas document service's SQLite file.
        ForeignDatabaseError: it is another application's SQLite database (a
            `LangGraphStoreFileError` for a LangGraph SqliteStore file).
        EngineError: it cannot be read (permissions, a directory).
    """
    found = identify(path)
    if found.found is Found.THREADLOOM:
        return Kind.OURS
    if found.found is Found.NEW:
        return Kind.NEW
    if found.found is Found.SQLITE_SAVER:
        raise LangGraphFileError(
            f"{path!r} is a LangGraph SqliteSaver database, not a threadloom file; it was "
            "left untouched: keep using SqliteSaver on it, or give threadloom a new path "
            f"and copy its threads with `threadloom migrate {path} --db NEW.db --apply`"
        )
    if found.found is Found.NAAS_DOCUMENTS:
        raise NaasDocumentsFileError(
            f"{path!r} is a naas document service file, not a threadloom file; it was left "
            "untouched: give threadloom a new path and copy its threads with "
            f"`threadloom migrate {path} --from naas-sqlite --db NEW.db --apply`"
        )
    if found.found is Found.SQLITE_STORE:
        raise LangGraphStoreFileError(
            f"{path!r} is a LangGraph SqliteStore database, not a threadloom file; it was "
            "left untouched: give threadloom a new path and copy its items with "
            f"`threadloom migrate --store --store-source {path} --db NEW.db --apply`"
        )
    raise ForeignDatabaseError(
        f"{path!r} is {found.description}; it was left untouched: give threadloom a path of its own"
    )
