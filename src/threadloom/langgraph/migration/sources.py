"""Migration sources: one reader per kind, each thread's history oldest first.

Adapter layer. Every source is read through its producer's public API or its documented
format, never guessed, and never written (each is opened read-only):

- `sqlite`: a LangGraph SqliteSaver file (AsyncSqliteSaver writes the same file), read
  with `SqliteSaver(conn).list(config)` on a read-only connection;
- `postgres`: a PostgresSaver database, `PostgresSaver.from_conn_string(url).list(config)`;
- `naas-sqlite`: the naas document service's SQLite file
  (`langgraph/migration/readers/naas_documents.py`):
  schema-2 documents as they are, schema-1 checkpoints restored (SPEC §2.6, §5.3).

LangGraph's `pending_writes` leave out each write's task path, which orders a step's
writes (`writes_sort_key`) and names the node that wrote them; the SQLite and PostgreSQL
sources read it with the saver's own statement and keep it only when the writes it
returns are, in order, those the public API returned (else the path stays "", as in
naas's migration).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import CheckpointTuple, writes_sort_key
from langgraph.checkpoint.serde.base import SerializerProtocol
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadloom.engine.format import uri
from threadloom.errors import MigrationError
from threadloom.langgraph.migration.readers.foreign import (
    POSTGRES_CHECKPOINT_WHERE,
    POSTGRES_SAVER_TABLES,
    POSTGRES_SAVER_THREADS,
    QUICK_CHECK,
    SQLITE_SAVER_THREADS,
)
from threadloom.langgraph.migration.readers.naas_documents import NaasDocumentsFile
from threadloom.langgraph.migration.urls import redact, scrub
from threadloom.langgraph.tuples import checkpoint_tuple
from threadloom.protocol import CHECKPOINTS, CHECKPOINTS_V1, WRITES_V1, restore

#: Task paths of one checkpoint's pending writes: task id -> task path.
TaskPaths = dict[str, str]


@dataclass
class ThreadHistory:
    """One thread of a source.

    Attributes:
        thread_id: the thread.
        checkpoints: checkpoint tuples (every namespace) oldest first, as the source's
            API returns them (schema-1 documents restored).
        task_paths: per `(checkpoint_ns, checkpoint_id)`, the task path of each task
            that has pending writes there, where the source knows it.
        documents: schema-2 documents to store as they are, `(collection, data)`.
    """

    thread_id: str
    checkpoints: list[CheckpointTuple] = field(default_factory=list)
    task_paths: dict[tuple[str, str], TaskPaths] = field(default_factory=dict)
    documents: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


class Source:
    """What every source offers the copier."""

    kind = ""

    def describe(self) -> dict[str, Any]:
        """The report's `source`: the kind, and the path or the URL (password redacted)."""
        raise NotImplementedError

    def thread_ids(self) -> list[str]:
        """Every thread of the source, sorted."""
        raise NotImplementedError

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        """The histories of `thread_ids` that exist in the source, one at a time."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of the source."""


def _paths_if_same(
    public: Sequence[tuple[str, str, Any]], rows: Sequence[tuple[str, str, str, int]]
) -> TaskPaths:
    """Task paths from `(task_id, channel, task_path, idx)` rows, when those rows sorted as
    the saver sorts them are the writes the public API returned (same tasks, channels,
    order); otherwise none."""
    ordered = sorted(rows, key=lambda r: writes_sort_key(r[2], r[0], r[3]))
    if [(r[0], r[1]) for r in ordered] != [(w[0], w[1]) for w in public]:
        return {}
    paths: TaskPaths = {}
    for task_id, _, path, _ in ordered:
        if paths.setdefault(task_id, path) != path:
            return {}  # one task, two paths: not what LangGraph writes; keep none
    return {t: p for t, p in paths.items() if p}


# -- LangGraph SqliteSaver ---------------------------------------------------------------


class _SaverSource(Source):
    """A LangGraph saver read through its own `list`, with the task paths `list` drops
    looked up per checkpoint (kept only when they match the writes `list` returned)."""

    def _read(self, thread_id: str) -> list[CheckpointTuple]:
        """The thread's checkpoint tuples, newest first (MigrationError on failure)."""
        raise NotImplementedError

    def _task_paths(self, item: CheckpointTuple, thread_id: str, key: tuple[str, str]) -> TaskPaths:
        """The task path of each task of the checkpoint's pending writes ({}: none kept)."""
        raise NotImplementedError

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        for thread_id in thread_ids:
            found = self._read(thread_id)
            if not found:
                continue
            history = ThreadHistory(thread_id, found[::-1])
            for item in found:
                if not item.pending_writes:
                    continue
                conf = item.config["configurable"]
                key = (conf["checkpoint_ns"], conf["checkpoint_id"])
                paths = self._task_paths(item, thread_id, key)
                if paths:
                    history.task_paths[key] = paths
            yield history


class SqliteSaverSource(_SaverSource):
    """A LangGraph SqliteSaver (or AsyncSqliteSaver) file, read-only.

    Opened immutable when it has no `-wal` file (nothing, not even a side file, is
    created); with one, read-only with SQLite's locks, so a WAL is read, never folded in.
    """

    kind = "sqlite"

    def __init__(self, path: str, serde: SerializerProtocol | None = None) -> None:
        from langgraph.checkpoint.sqlite import SqliteSaver

        self.path = path
        immutable = not os.path.exists(path + "-wal")
        try:
            self.conn = sqlite3.connect(
                uri(path, readonly=True, immutable=immutable), uri=True, check_same_thread=False
            )
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
            return _paths_if_same(
                item.pending_writes or [], [(r[0], r[1], r[4], int(r[5])) for r in rows]
            )
        except sqlite3.Error:  # a file from before task paths existed: none to keep
            return {}

    def close(self) -> None:
        self.conn.close()


# -- LangGraph PostgresSaver -------------------------------------------------------------


class PostgresSaverSource(_SaverSource):
    """A LangGraph PostgresSaver database (its URL's password never appears in a message)."""

    kind = "postgres"

    def __init__(self, url: str, serde: SerializerProtocol | None = None) -> None:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver
        from psycopg.rows import dict_row

        self.url = url
        self.conn: Any = None
        try:
            # As PostgresSaver.from_conn_string connects (and naas's migration does).
            self.conn = psycopg.Connection.connect(
                url, autocommit=True, prepare_threshold=0, row_factory=dict_row
            )
            self.saver = PostgresSaver(self.conn, serde=serde)
            row = self.conn.execute(POSTGRES_SAVER_TABLES).fetchone()
        except Exception as exc:  # psycopg's errors: connection, authentication, database
            self._close_quietly()
            raise MigrationError(
                f"cannot read the PostgreSQL database {redact(url)} ({scrub(str(exc), url)}); "
                "check the URL (--source-url or POSTGRES_URL) and that the server runs"
            ) from None
        if not row or int(row["n"]) < 3:
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
        return _paths_if_same(item.pending_writes or [], rows)

    def _close_quietly(self) -> None:
        if self.conn is not None:
            with contextlib.suppress(Exception):  # a failed connection: nothing to free
                self.conn.close()

    def close(self) -> None:
        self._close_quietly()


# -- the naas document service's SQLite file ---------------------------------------------


class NaasSqliteSource(Source):
    """The LangGraph documents of one naas scope in its document service's SQLite file.

    Schema-2 documents are stored as they are (byte for byte the service's); a schema-1
    checkpoint (the whole checkpoint in one document, SPEC §2.6) is restored with its
    schema-1 writes and written as schema 2, unless the thread holds it in schema 2 too.
    """

    kind = "naas-sqlite"

    def __init__(
        self,
        path: str,
        namespace: str,
        agent_id: str,
        serde: SerializerProtocol | None = None,
    ) -> None:
        self.path = path
        self.namespace = namespace
        self.agent_id = agent_id
        self.file = NaasDocumentsFile(path)
        self.loads = (serde if serde is not None else JsonPlusSerializer()).loads_typed

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "path": self.path,
            "namespace": self.namespace,
            "agent_id": self.agent_id,
        }

    def thread_ids(self) -> list[str]:
        found = self.file.thread_ids(self.namespace, self.agent_id)
        if found:
            return found
        others = self.file.scopes()
        if others:
            listed = ", ".join(
                f"{s.namespace} / {s.agent_id} ({s.threads} threads)" for s in others
            )
            raise MigrationError(
                f"{self.path!r} holds no checkpoints of namespace {self.namespace!r}, agent id "
                f"{self.agent_id!r}; it holds {listed}: give --namespace and --agent-id"
            )
        return []

    def histories(self, thread_ids: Sequence[str]) -> Iterator[ThreadHistory]:
        for thread_id, docs in self.file.threads(self.namespace, self.agent_id, thread_ids):
            yield history_of(
                thread_id, [(d.collection, d.data) for d in docs], self.path, loads=self.loads
            )

    def close(self) -> None:
        self.file.close()


def history_of(
    thread_id: str,
    docs: Sequence[tuple[str, dict[str, Any]]],
    where: str,
    *,
    loads: Any = None,
) -> ThreadHistory:
    """A thread's history from its documents, as the naas document service holds them.

    Schema-2 documents are kept as they are (`documents`); each schema-1 checkpoint that
    the thread does not also hold in schema 2 is restored with its schema-1 writes
    (`checkpoints`, oldest first) with `loads` (default: LangGraph's
    `JsonPlusSerializer().loads_typed`). `where` names the source in errors.

    Raises:
        MigrationError: a schema-1 document the serializer cannot load.
    """
    if loads is None:
        loads = JsonPlusSerializer().loads_typed
    current = {(d["checkpoint_ns"], d["checkpoint_id"]) for c, d in docs if c == CHECKPOINTS}
    history = ThreadHistory(thread_id)
    legacy: list[dict[str, Any]] = []
    legacy_writes: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for collection, data in docs:
        if collection == CHECKPOINTS_V1:
            if (data["checkpoint_ns"], data["checkpoint_id"]) not in current:
                legacy.append(data)
        elif collection == WRITES_V1:
            key = (data["checkpoint_ns"], data["checkpoint_id"])
            legacy_writes.setdefault(key, []).append(data)
        else:
            history.documents.append((collection, data))
    for data in sorted(legacy, key=lambda d: d["checkpoint_id"]):
        writes = legacy_writes.get((data["checkpoint_ns"], data["checkpoint_id"]), [])
        try:
            restored = restore(data, writes, {}, loads)
        except Exception as exc:  # a document the serializer cannot load
            raise MigrationError(
                f"schema-1 checkpoint {data['checkpoint_id']!r} of thread {thread_id!r} "
                f"in {where} cannot be read ({exc})"
            ) from None
        history.checkpoints.append(checkpoint_tuple(restored))
    return history
