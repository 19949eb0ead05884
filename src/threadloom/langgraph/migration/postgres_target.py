"""The target of a migration out: LangGraph's PostgresSaver (and PostgresStore) tables in
a PostgreSQL database, given by its URL.

Adapter layer. Everything is written with LangGraph's own classes and statements:
`setup()` creates (or upgrades) the schema; a thread's checkpoint and blob rows
(`postgres_rows.py`: what `PostgresSaver.put` would write) and its pending writes (each
with its stored task path and index, which `put_writes` would renumber) go in with the
saver's insert statements and serializer, batched in one pipeline; Store items through
`PostgresStore.batch`, then given back their own times. What the
target holds is read first, by key columns (statements in `engine.foreign`), so a rerun
writes only what is missing. One transaction per thread and per Store page: an
interrupted run leaves whole threads. A dry run never calls `setup()` and writes
nothing; a database without the tables reads as empty. The URL's password never
appears in a message (`urls.redact`, `urls.scrub`).
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from threadloom.engine.foreign import (
    POSTGRES_STORE_TABLE,
    POSTGRES_STORE_TIMES,
    POSTGRES_TARGET_CHECKPOINTS,
    POSTGRES_TARGET_WRITE_KEYS,
)
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.postgres_rows import BlobRow, CheckpointRow
from threadloom.langgraph.migration.sources.base import needs_extra
from threadloom.langgraph.migration.sources.postgres import ENV, connect
from threadloom.langgraph.migration.urls import redact, scrub

if TYPE_CHECKING:
    from langgraph.checkpoint.serde.base import SerializerProtocol
    from langgraph.store.base import Item

#: The URL schemes of a PostgreSQL target.
SCHEMES = ("postgresql", "postgres")
#: How a refusal says what to give.
GIVE_URL = f"give --target-url postgresql://USER@HOST:PORT/DATABASE (or set {ENV})"

#: A pending-write row: thread, namespace, checkpoint, task, task path, index, channel,
#: and the value (serialized on writing).
WriteRow = tuple[str, str, str, str, str, int, str, Any]


class HeldCheckpoint(NamedTuple):
    """A checkpoint the target holds, as its row stores it (the blobs left out)."""

    parent_id: str | None
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]


def check_url(url: str) -> None:
    """Refuse a URL that is not a PostgreSQL one (before anything is opened)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise MigrationError(f"{redact(url)} is not a PostgreSQL URL; {GIVE_URL}")


class PostgresTarget:
    """A PostgreSQL database to migrate threads (and Store items) out to.

    Args:
        url: the database's URL (`postgresql://...`).
        serde: the serializer of the target's blobs and writes (None: LangGraph's
            default, as PostgresSaver's).

    Raises:
        MigrationError: the URL is not PostgreSQL's, the drivers (the `migrate` extra)
            are missing, or the database cannot be reached.
    """

    kind = "postgres"

    def __init__(self, url: str, serde: SerializerProtocol | None = None) -> None:
        check_url(url)
        self.url = url
        #: The connection `write` uses (opened by `setup`, when applying).
        self.writer: Any = None
        self.conn, self.saver, tables = connect(
            url,
            serde,
            doing="writing",
            hint=f"check the URL (--target-url or {ENV}) and that the server runs; nothing "
            "was written",
        )
        #: The saver's tables exist (a dry run on a new database reads it as empty).
        self.ready = tables >= 3
        self._store: Any = None

    def describe(self) -> dict[str, Any]:
        """The report's `target`: the kind and the URL (password redacted)."""
        return {"kind": self.kind, "url": redact(self.url)}

    def failed(self, what: str, exc: Exception) -> MigrationError:
        """The error of a statement that failed mid-run (what was written stays)."""
        return MigrationError(
            f"{what} at {redact(self.url)} failed ({scrub(str(exc), self.url)}); every "
            "thread written before is kept: rerun once the database answers, and the "
            "rest is copied"
        )

    def setup(self) -> None:
        """Create or upgrade the saver's tables (`PostgresSaver.setup`), and open the
        connection `write` uses; only when applying."""
        import psycopg

        try:
            self.saver.setup()
            self.writer = psycopg.Connection.connect(self.url, autocommit=True, prepare_threshold=0)
        except Exception as exc:
            raise self.failed("creating the PostgresSaver tables", exc) from None
        self.ready = True

    def checkpoints(self, thread_id: str) -> dict[tuple[str, str], HeldCheckpoint]:
        """The thread's checkpoints the target holds, by `(checkpoint_ns, checkpoint_id)`."""
        if not self.ready:
            return {}
        try:
            rows = self.conn.execute(POSTGRES_TARGET_CHECKPOINTS, (thread_id,)).fetchall()
        except Exception as exc:
            raise self.failed(f"reading thread {thread_id!r}", exc) from None
        return {
            (r["checkpoint_ns"], r["checkpoint_id"]): HeldCheckpoint(
                r["parent_checkpoint_id"], r["checkpoint"], r["metadata"]
            )
            for r in rows
        }

    def write_keys(self, thread_id: str) -> set[tuple[str, str, str, int]]:
        """The thread's pending writes the target holds, by their key columns."""
        if not self.ready:
            return set()
        try:
            rows = self.conn.execute(POSTGRES_TARGET_WRITE_KEYS, (thread_id,)).fetchall()
        except Exception as exc:
            raise self.failed(f"reading thread {thread_id!r}", exc) from None
        return {(r["checkpoint_ns"], r["checkpoint_id"], r["task_id"], int(r["idx"])) for r in rows}

    def write(
        self,
        thread_id: str,
        blobs: Sequence[BlobRow],
        checkpoints: Sequence[CheckpointRow],
        writes: Sequence[tuple[Any, ...]],
    ) -> None:
        """Write a thread's blob, checkpoint and pending-write rows in one transaction,
        with the saver's own statements (one pipelined batch each), on a connection of
        its own (`setup`), so the caller may read the next thread on `conn` meanwhile
        (from another thread of the process)."""
        if not blobs and not checkpoints and not writes:
            return
        from psycopg.types.json import Jsonb

        saver = self.saver
        conn = self.writer
        try:
            with conn.transaction(), conn.pipeline(), conn.cursor() as cur:
                if blobs:
                    cur.executemany(saver.UPSERT_CHECKPOINT_BLOBS_SQL, blobs)
                if checkpoints:
                    cur.executemany(
                        saver.UPSERT_CHECKPOINTS_SQL,
                        [(*row[:4], Jsonb(row[4]), Jsonb(row[5])) for row in checkpoints],
                    )
                if writes:
                    cur.executemany(saver.INSERT_CHECKPOINT_WRITES_SQL, writes)
        except Exception as exc:
            raise self.failed(f"writing thread {thread_id!r}", exc) from None

    def write_row(self, row: WriteRow) -> tuple[Any, ...]:
        """A pending-write row with its value serialized, as `put_writes` stores it."""
        return (*row[:7], *self.saver.serde.dumps_typed(row[7]))

    # -- the Store ----------------------------------------------------------------------

    def open_store(self, apply: bool) -> None:
        """Open the target's PostgresStore; applying, create or upgrade its tables."""
        try:
            from langgraph.store.postgres import PostgresStore
        except ImportError as exc:
            raise needs_extra("a PostgresStore database", exc, doing="writing") from None
        self._store = PostgresStore(self.conn)
        try:
            if apply:
                self._store.setup()
                self._store_ready = True
            else:
                row = self.conn.execute(POSTGRES_STORE_TABLE).fetchone()
                self._store_ready = bool(row) and int(row["n"]) >= 1
        except Exception as exc:
            raise self.failed("opening the PostgresStore", exc) from None

    def held_items(self, items: Sequence[Item]) -> list[bool]:
        """Whether the target's Store holds each item's key."""
        from langgraph.store.base import GetOp

        if self._store is None or not self._store_ready:
            return [False] * len(items)
        try:
            found = self._store.batch(
                [GetOp(tuple(i.namespace), i.key, refresh_ttl=False) for i in items]
            )
        except Exception as exc:
            raise self.failed("reading the PostgresStore", exc) from None
        return [hit is not None for hit in found]

    def put_items(self, items: Sequence[Item]) -> int:
        """Put items (create-only: the caller passes those the target lacks) with their own
        times, in one transaction; return how many."""
        from langgraph.store.base import PutOp

        if not items:
            return 0
        times = [
            (_aware(i.created_at), _aware(i.updated_at), ".".join(i.namespace), i.key)
            for i in items
        ]
        try:
            with self.conn.transaction():
                self._store.batch(
                    [PutOp(tuple(i.namespace), i.key, dict(i.value), index=False) for i in items]
                )
                with self.conn.cursor() as cur:
                    cur.executemany(POSTGRES_STORE_TIMES, times)
        except Exception as exc:
            raise self.failed("writing Store items", exc) from None
        return len(items)

    def close(self) -> None:
        """Close the connections."""
        for conn in (self.conn, self.writer):
            if conn is not None:
                with contextlib.suppress(Exception):  # a failed connection: nothing to free
                    conn.close()
        self.conn = self.writer = None


def _aware(moment: datetime.datetime) -> datetime.datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.timezone.utc)
