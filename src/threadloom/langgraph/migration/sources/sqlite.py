"""The `sqlite` source: a LangGraph SqliteSaver file (AsyncSqliteSaver writes the same file).

Adapter layer. Read on a read-only connection through the file's documented format, as
SqliteSaver's own `list` reads it (`engine/foreign/langgraph_databases.py`: the same
statements and order; values loaded with the serializer, LangGraph's JsonPlusSerializer
by default; pending writes in `writes_sort_key` order), so migrating a SqliteSaver file
needs only langgraph-checkpoint, which threadloom depends on, and not
langgraph-checkpoint-sqlite. The file is never written. Recognized by
`engine.format.identify` (`Found.SQLITE_SAVER`). Its Store source is a SqliteStore file
(or a SqliteSaver file with the Store's tables), read with `SqliteStore` (the `migrate`
extra).
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import TYPE_CHECKING, Any

from threadloom.engine.foreign import (
    QUICK_CHECK,
    SQLITE_SAVER_CHECKPOINTS,
    SQLITE_SAVER_COLUMNS,
    SQLITE_SAVER_THREADS,
    SQLITE_SAVER_WRITES,
    SQLITE_SAVER_WRITES_PATHLESS,
)
from threadloom.engine.format import DESCRIPTIONS, Found, uri
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.sources.base import (
    OpenedStore,
    SaverSource,
    SourceKind,
    TaskPaths,
    needs_extra,
    paths_if_same,
)

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol


_KEYS = ("thread_id", "checkpoint_ns", "checkpoint_id")
#: The columns SqliteSaver's `list` reads, per table (`task_path` may be missing: see below).
_COLUMNS = {
    "checkpoints": frozenset((*_KEYS, "parent_checkpoint_id", "type", "checkpoint", "metadata")),
    "writes": frozenset((*_KEYS, "task_id", "idx", "channel", "type", "value")),
}


class SqliteSaverSource(SaverSource):
    """A LangGraph SqliteSaver (or AsyncSqliteSaver) file, read-only.

    Opened immutable when it has no `-wal` file (nothing, not even a side file, is
    created); with one, read-only with SQLite's locks, so a WAL is read, never folded in.
    """

    kind = "sqlite"

    def __init__(self, path: str, serde: SerializerProtocol | None = None) -> None:
        from langgraph.checkpoint.serde.base import maybe_add_typed_methods
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.path = path
        # As BaseCheckpointSaver takes its serializer (SqliteSaver's default included).
        self.serde = maybe_add_typed_methods(serde if serde is not None else JsonPlusSerializer())
        #: Task paths of the pending writes of each checkpoint read, by (ns, id).
        self._paths: dict[tuple[str, str], TaskPaths] = {}
        try:
            self.conn = _read_only(path)
        except sqlite3.Error as exc:
            raise MigrationError(f"cannot open {path!r} ({exc}); check its permissions") from None
        try:
            problems = [str(row[0]) for row in self.conn.execute(QUICK_CHECK).fetchmany(3)]
            if problems != ["ok"]:
                raise sqlite3.DatabaseError("; ".join(problems))
            for table, wanted in _COLUMNS.items():
                columns = {str(row[0]) for row in self.conn.execute(SQLITE_SAVER_COLUMNS, (table,))}
                if not wanted <= columns:
                    missing = ", ".join(sorted(wanted - columns))
                    raise sqlite3.DatabaseError(f"its {table} table lacks {missing}")
            # A file from before task paths existed reads every path as '' (as SqliteSaver).
            self._writes = (
                SQLITE_SAVER_WRITES if "task_path" in columns else SQLITE_SAVER_WRITES_PATHLESS
            )
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
            rows = self.conn.execute(SQLITE_SAVER_CHECKPOINTS, (thread_id,)).fetchall()
            return [self._tuple(*row) for row in rows]
        except sqlite3.Error as exc:
            raise MigrationError(
                f"reading thread {thread_id!r} of {self.path!r} failed ({exc}); the target "
                "keeps every checkpoint copied before it: rerun once the file is readable"
            ) from None
        except Exception as exc:  # the serializer's: a value it cannot load
            raise MigrationError(
                f"a value of thread {thread_id!r} in {self.path!r} cannot be loaded "
                f"({type(exc).__name__}: {exc}); give migrate the serializer the "
                "application's SqliteSaver used (serde=, e.g. its EncryptedSerializer)"
            ) from None

    def _tuple(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        parent_id: str | None,
        kind: str,
        blob: bytes,
        metadata: bytes | str | None,
    ) -> CheckpointTuple:
        """One row of `checkpoints` as SqliteSaver's `list` returns it."""
        from langgraph.checkpoint.base import CheckpointTuple, writes_sort_key

        writes = sorted(
            self.conn.execute(self._writes, (thread_id, ns, checkpoint_id)).fetchall(),
            key=lambda r: writes_sort_key(r[4], r[0], r[5]),
        )
        pending = [
            (task, channel, self.serde.loads_typed((t, v))) for task, channel, t, v, _, _ in writes
        ]
        paths = paths_if_same(pending, [(r[0], r[1], r[4], int(r[5])) for r in writes])
        if paths:
            self._paths[(ns, checkpoint_id)] = paths

        def config(checkpoint: str) -> Any:
            ids = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint}
            return {"configurable": ids}

        return CheckpointTuple(
            config(checkpoint_id),
            self.serde.loads_typed((kind, blob)),
            json.loads(metadata) if metadata is not None else {},
            config(parent_id) if parent_id else None,
            pending,
        )

    def _task_paths(self, item: CheckpointTuple, thread_id: str, key: tuple[str, str]) -> TaskPaths:
        return self._paths.pop(key, {})

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
    try:
        from langgraph.store.sqlite import SqliteStore
    except ImportError as exc:  # langgraph-checkpoint-sqlite: the migrate extra
        raise needs_extra("a LangGraph SqliteStore", exc) from None

    conn = _read_only(path)
    return SqliteStore(conn), conn.close, {"kind": "sqlite", "path": path}


KIND = SourceKind(
    name=SqliteSaverSource.kind,
    wanted=DESCRIPTIONS[Found.SQLITE_SAVER],
    opens=lambda path, options: SqliteSaverSource(path, options.serde),
    found=Found.SQLITE_SAVER,
    store=open_store,
)
