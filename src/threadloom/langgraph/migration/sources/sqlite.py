"""The `sqlite` source: a LangGraph SqliteSaver file (AsyncSqliteSaver writes the same file).

Adapter layer. Read with `SqliteSaver(conn).list(config)` on a read-only connection, the
task paths with the saver's own statement (`base.SaverSource`); the file is never written.
Recognized by `engine.format.identify` (`Found.SQLITE_SAVER`). Its Store source is a
SqliteStore file (or a SqliteSaver file with the Store's tables), read with `SqliteStore`.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any

from threadloom.engine.foreign import QUICK_CHECK, SQLITE_SAVER_THREADS
from threadloom.engine.format import DESCRIPTIONS, Found, uri
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.sources.base import (
    OpenedStore,
    SaverSource,
    SourceKind,
    TaskPaths,
    paths_if_same,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol


class SqliteSaverSource(SaverSource):
    """A LangGraph SqliteSaver (or AsyncSqliteSaver) file, read-only.

    Opened immutable when it has no `-wal` file (nothing, not even a side file, is
    created); with one, read-only with SQLite's locks, so a WAL is read, never folded in.
    """

    kind = "sqlite"

    def __init__(self, path: str, serde: SerializerProtocol | None = None) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = path
        try:
            self.conn = _read_only(path)
        except sqlite3.Error as exc:
            raise MigrationError(f"cannot open {path!r} ({exc}); check its permissions") from None
        self.saver = SqliteSaver(self.conn, serde=serde)
        try:
            problems = [str(row[0]) for row in self.conn.execute(QUICK_CHECK).fetchmany(3)]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems))
            # On a read-only connection setup() creates nothing: the tables exist.
            self.saver.setup()
        except sqlite3.Error as exc:
            self.conn.close()
            raise MigrationError(
                f"{path!r} cannot be read as a SqliteSaver file ({exc}); it was left "
                "untouched and nothing was copied: restore it from a backup"
            ) from None

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": self.path}

    def thread_ids(self) -> list[str]:
        try:
            return [str(row[0]) for row in self.conn.execute(SQLITE_SAVER_THREADS)]
        except sqlite3.Error as exc:
            raise MigrationError(f"cannot list the threads of {self.path!r} ({exc})") from None

    def _read(self, thread_id: str) -> list[CheckpointTuple]:
        try:
            return list(self.saver.list({"configurable": {"thread_id": thread_id}}))
        except sqlite3.Error as exc:
            raise MigrationError(
                f"reading thread {thread_id!r} of {self.path!r} failed ({exc}); the target "
                "keeps every checkpoint copied before it: rerun once the file is readable"
            ) from None

    def _task_paths(self, item: CheckpointTuple, thread_id: str, key: tuple[str, str]) -> TaskPaths:
        from langgraph.checkpoint.sqlite.utils import pending_writes_sql

        try:
            rows = self.conn.execute(pending_writes_sql(True), (thread_id, *key))
            return paths_if_same(
                item.pending_writes or [], [(r[0], r[1], r[4], int(r[5])) for r in rows]
            )
        except sqlite3.Error:  # a file from before task paths existed: none to keep
            return {}

    def close(self) -> None:
        self.conn.close()


def _read_only(path: str) -> sqlite3.Connection:
    """A read-only connection: immutable when the file has no `-wal` file (nothing, not even
    a side file, is created); with one, with SQLite's locks, so a WAL is read, never
    folded in."""
    immutable = not os.path.exists(path + "-wal")
    return sqlite3.connect(
        uri(path, readonly=True, immutable=immutable), uri=True, check_same_thread=False
    )


def open_store(path: str) -> OpenedStore:
    """The SqliteStore of the file `path` (identified as holding the Store's tables)."""
    from langgraph.store.sqlite import SqliteStore

    conn = _read_only(path)
    return SqliteStore(conn), conn.close, {"kind": "sqlite", "path": path}


KIND = SourceKind(
    name=SqliteSaverSource.kind,
    wanted=DESCRIPTIONS[Found.SQLITE_SAVER],
    opens=lambda path, options: SqliteSaverSource(path, options.serde),
    found=Found.SQLITE_SAVER,
    store=open_store,
)
