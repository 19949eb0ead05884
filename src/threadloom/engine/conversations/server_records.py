"""The Agent Server's registry: its assistants, versions, threads, runs and crons.

Engine layer (docs/FORMAT.md, `server_records`). A record is an opaque body the adapter
encodes (`codec` names its serializer's type) under `(kind, id)` in one scope; the
engine only stores, replaces and deletes them, each batch in one write transaction, so a
batch is all there or not at all. Deleting a thread's `threads` row deletes the records
that name it (a trigger), whoever deletes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, NamedTuple

from threadloom.engine.conversations.leases import Scoped
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.sql import fetch, fetchall

__all__ = ["KINDS", "ServerRecord", "ServerRecords"]

#: The kinds of record, as the in-memory runtime names its lists.
KINDS: Final = ("assistant", "assistant_version", "thread", "run", "cron")

_COLUMNS: Final = "kind, id, thread_id, codec, body"
#: The `meta` key set once a server has kept its registry in the file.
_STARTED: Final = "server_registry"


class ServerRecord(NamedTuple):
    """One record: its kind and id, the thread it belongs to, its encoded body."""

    kind: str
    id: str
    thread_id: str | None
    codec: str
    body: bytes


class ServerRecords:
    """The registry records of one scope of a file.

    Args:
        file: the open file (writable to change records).
        scope: the scope (its row, and the file's registry table, are made by the
            first change if no write made them yet: format 8).
    """

    def __init__(self, file: File, scope: Scoped) -> None:
        self.file = file
        self._scope = scope

    @property
    def scope(self) -> int:
        """The scope's row id (-1, holding no record, before the scope's first write)."""
        found = self._scope.id
        return found if found is not None else -1

    def load(self) -> list[ServerRecord]:
        """Every record of the scope, by kind and id."""
        with self.file.read() as conn:
            rows: list[ServerRecord] = fetch(
                conn,
                ServerRecord,
                f"SELECT {_COLUMNS} FROM server_records WHERE scope = ? ORDER BY kind, id",
                (self.scope,),
            )
        return rows

    def started(self) -> bool:
        """Whether a server ever wrote its registry to this file (it may be empty now)."""
        with self.file.read() as conn:
            return bool(fetchall(conn, "SELECT 1 FROM meta WHERE key = ?", (_STARTED,)))

    def apply(
        self,
        upserts: Sequence[ServerRecord],
        deletes: Iterable[tuple[str, str]],
        *,
        start: bool = False,
    ) -> None:
        """Store `upserts` (replacing a record of the same kind and id) and delete the
        `(kind, id)` records of `deletes`, in one write transaction; `start` also marks
        the registry as kept in this file (`started`)."""
        gone = list(deletes)
        if not upserts and not gone and not start:
            return
        with self.file.write() as conn:
            scope = self._scope.ensure_id(conn)
            self.file.ensure(conn, features.SERVER)
            if start:
                conn.execute(
                    "INSERT INTO meta(key, value) VALUES(?, 1) ON CONFLICT(key) DO NOTHING",
                    (_STARTED,),
                )
            conn.executemany(
                "DELETE FROM server_records WHERE scope = ? AND kind = ? AND id = ?",
                [(scope, kind, key) for kind, key in gone],
            )
            conn.executemany(
                f"INSERT INTO server_records(scope, {_COLUMNS}) VALUES(?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(scope, kind, id) DO UPDATE SET thread_id = excluded.thread_id, "
                "codec = excluded.codec, body = excluded.body",
                [(scope, *record) for record in upserts],
            )

    def sizes(self, thread_ids: Sequence[str] | None = None) -> dict[str, tuple[int, int]]:
        """`thread_id -> (records, bytes)` of the records that name each thread (default:
        every thread with records); the bytes are the stored bodies'."""
        with self.file.read() as conn:
            if not fetchall(conn, "SELECT 1 FROM sqlite_schema WHERE name = 'server_records'"):
                return {}  # a file of an older format, opened read-only
            rows = fetchall(
                conn,
                "SELECT thread_id, count(*), sum(length(body)) FROM server_records "
                "WHERE scope = ? AND thread_id IS NOT NULL GROUP BY thread_id",
                (self.scope,),
            )
        wanted = None if thread_ids is None else set(thread_ids)
        return {
            str(tid): (int(n), int(size))
            for tid, n, size in rows
            if wanted is None or tid in wanted
        }
