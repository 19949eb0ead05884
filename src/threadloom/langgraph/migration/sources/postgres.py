"""The `postgres` source: a LangGraph PostgresSaver database, given by its URL.

Adapter layer. Read with `PostgresSaver(conn).list(config)` as
`PostgresSaver.from_conn_string(url)` connects, the task paths with the saver's own
`SELECT_SQL` (`base.SaverSource`); the URL's password never appears in a message.
Recognized by its URL's scheme (`postgresql://`, `postgres://`), or read from
`$POSTGRES_URL` when none is given; its Store source is the PostgresStore of the same
kind of URL. Its drivers (psycopg, langgraph-checkpoint-postgres) come with the
`migrate` extra; without them opening says so in one line (`base.needs_extra`).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from threadloom.engine.foreign import (
    POSTGRES_CHECKPOINT_WHERE,
    POSTGRES_SAVER_TABLES,
    POSTGRES_SAVER_THREADS,
)
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.sources.base import (
    OpenedStore,
    SaverSource,
    SourceKind,
    TaskPaths,
    needs_extra,
    paths_if_same,
)
from threadloom.langgraph.migration.urls import redact, scrub

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol

#: Where a PostgreSQL source's URL is read from when none is given.
ENV = "POSTGRES_URL"


def connect(
    url: str, serde: SerializerProtocol | None, *, doing: str, hint: str
) -> tuple[Any, Any, int]:
    """A connection made as PostgresSaver.from_conn_string makes it (and naas's
    migration), a PostgresSaver over it, and how many of the saver's tables exist.

    Raises:
        MigrationError: the drivers (the `migrate` extra) are missing (`doing`: reading or
            writing), or the database cannot be reached (the message ends with `hint`).
    """
    try:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise needs_extra("a PostgresSaver database", exc, doing=doing) from None
    conn: Any = None
    try:
        conn = psycopg.Connection.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
        saver = PostgresSaver(conn, serde=serde)
        row = conn.execute(POSTGRES_SAVER_TABLES).fetchone()
    except Exception as exc:  # psycopg's errors: connection, authentication, database
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()
        verb = "read" if doing == "reading" else "reach"
        raise MigrationError(
            f"cannot {verb} the PostgreSQL database {redact(url)} ({scrub(str(exc), url)}); " + hint
        ) from None
    return conn, saver, int(row["n"]) if row else 0


class PostgresSaverSource(SaverSource):
    """A LangGraph PostgresSaver database (its URL's password never appears in a message)."""

    kind = "postgres"

    def __init__(self, url: str, serde: SerializerProtocol | None = None) -> None:
        self.url = url
        self.conn, self.saver, tables = connect(
            url,
            serde,
            doing="reading",
            hint="check the URL (--source-url or POSTGRES_URL) and that the server runs",
        )
        if tables < 3:
            self._close_quietly()
            raise MigrationError(
                f"the PostgreSQL database {redact(url)} holds no LangGraph PostgresSaver "
                "tables (checkpoints, checkpoint_writes, checkpoint_blobs); give the database "
                "the application's PostgresSaver writes to"
            )

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "url": redact(self.url)}

    def _failed(self, what: str, exc: Exception) -> MigrationError:
        return MigrationError(
            f"{what} of {redact(self.url)} failed ({scrub(str(exc), self.url)}); the target "
            "keeps every checkpoint copied before it: rerun once the database answers"
        )

    def thread_ids(self) -> list[str]:
        try:
            rows = self.conn.execute(POSTGRES_SAVER_THREADS).fetchall()
        except Exception as exc:
            raise self._failed("listing the threads", exc) from None
        return [str(row["thread_id"]) for row in rows]

    def _read(self, thread_id: str) -> list[CheckpointTuple]:
        try:
            return list(self.saver.list({"configurable": {"thread_id": thread_id}}))
        except Exception as exc:
            raise self._failed(f"reading thread {thread_id!r}", exc) from None

    def _task_paths(self, item: CheckpointTuple, thread_id: str, key: tuple[str, str]) -> TaskPaths:
        try:
            row = self.conn.execute(
                self.saver.SELECT_SQL + POSTGRES_CHECKPOINT_WHERE, (thread_id, *key)
            ).fetchone()
            # The saver's pending_writes column: [task_id, channel, type, blob, task_path, idx].
            rows = [
                (bytes(w[0]).decode(), bytes(w[1]).decode(), bytes(w[4]).decode(), int(w[5]))
                for w in (row or {}).get("pending_writes") or []
            ]
        except Exception:  # another layout than this LangGraph's: keep no path
            return {}
        return paths_if_same(item.pending_writes or [], rows)

    def _close_quietly(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # a failed connection: nothing to free
                self.conn.close()

    def close(self) -> None:
        self._close_quietly()


def open_store(url: str) -> OpenedStore:
    """The PostgresStore of the database at `url`."""
    try:
        import psycopg
        from langgraph.store.postgres import PostgresStore
        from psycopg.rows import dict_row
    except ImportError as exc:
        raise needs_extra("a PostgresStore database", exc) from None

    try:
        conn = psycopg.Connection.connect(
            url, autocommit=True, prepare_threshold=0, row_factory=dict_row
        )
    except Exception as exc:  # psycopg's errors: connection, authentication, database
        raise MigrationError(
            f"cannot read the PostgreSQL database {redact(url)} ({scrub(str(exc), url)}); "
            "check the URL and that the server runs"
        ) from None
    return PostgresStore(conn), conn.close, {"kind": "postgres", "url": redact(url)}


KIND = SourceKind(
    name=PostgresSaverSource.kind,
    wanted="a PostgreSQL URL",
    opens=lambda url, options: PostgresSaverSource(url, options.serde),
    schemes=("postgresql", "postgres"),
    env=ENV,
    unset=f"give the PostgreSQL URL with --source-url or set {ENV}",
    store=open_store,
)
