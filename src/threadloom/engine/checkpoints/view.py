"""The document view of a scope: its rows as the logical schema-2 documents.

Engine layer. What `documents()`, `threadloom serve`, export and import use: the
documents exactly as the shared engine's document service holds them (collection,
key, data, version), reads by collection and identifying fields, deletes and
replacements by key, and create-only imports in put order (`intake.py`).
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from threadloom.engine.checkpoints.intake import Intake
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.content import deltas
from threadloom.engine.format import idkeys, refkeys
from threadloom.engine.format.tables import (
    CHECKPOINT_ROWS,
    DOCUMENT_FIELDS,
    OWNERS,
    REPLACE_WRITE,
    TABLE_OF,
    TASK_ID,
    VALS,
    WRITE_KEY,
    WRITE_ROWS,
)
from threadloom.engine.sql import fetch, fetchall, ids
from threadloom.engine.threads import threadfacts, threadindex
from threadloom.errors import ProtocolError
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    ITEMS,
    PARTS,
    WRITES,
    WRITES_V1,
    collection_of,
)


class StoredDocument(NamedTuple):
    """One logical document as the file holds it (for the document service)."""

    collection: str
    key: str
    data: dict[str, Any]
    created_at: float
    version: int


class CheckpointHead(NamedTuple):
    """A stored checkpoint's identifying columns (no body decoded)."""

    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    schema: int


class WritePlace(NamedTuple):
    """Where a pending write sits: its checkpoint, task, index, task path and channel."""

    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    task_path: str
    channel: str


class _ValueRow(NamedTuple):
    seq: int
    ref: str
    body: bytes
    digest: bytes
    thread_id: str
    created_at: float
    thread: int  # the row id: a delta body's base is a row of the same thread


class _CheckpointRow(NamedTuple):
    seq: int
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    schema: int
    body: bytes
    digest: bytes
    thread_id: str
    created_at: float


class _WriteRow(NamedTuple):
    seq: int
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    task_path: str
    channel: str
    schema: int
    body: bytes
    digest: bytes
    thread_id: str
    created_at: float
    version: int


_Row = _ValueRow | _CheckpointRow | _WriteRow

#: Per table (0 vals, 1 checkpoints, 2 writes): the row shape, its query (`t` = threads,
#: `x` = the table) and how an error names a row.
_SHAPES: dict[int, tuple[Any, str, str]] = {
    0: (
        _ValueRow,
        f"SELECT x.seq, x.ref_key, x.body, {VALS.unsealed('x')}, t.thread_id, x.created_at, "
        "x.thread FROM vals x" + OWNERS,
        "value {ref}",
    ),
    1: (
        _CheckpointRow,
        "SELECT x.seq, x.checkpoint_ns, x.checkpoint_id, x.parent_id, x.schema, x.body, "
        f"{CHECKPOINT_ROWS.unsealed('x')}, t.thread_id, x.created_at FROM checkpoints x" + OWNERS,
        "checkpoint {checkpoint_id}",
    ),
    2: (
        _WriteRow,
        f"SELECT x.seq, x.checkpoint_ns, x.checkpoint_id, {TASK_ID}, x.idx, x.task_path, "
        f"x.channel, x.schema, x.body, {WRITE_ROWS.unsealed('x')}, t.thread_id, x.created_at, "
        "x.version FROM writes x" + OWNERS,
        "pending write {task_id}/{idx}",
    ),
}


class Documents(Intake):
    """The logical documents of one scope.

    Args:
        scope: the scope.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def documents(
        self, thread_id: str | None = None, *, since: int | None = None
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Yield `(collection, key, data)` of the scope's logical documents in put order
        (with `since`, only the rows stored after the thread's `seq` was `since`)."""
        scope = self.scope
        with scope.file.read() as conn:
            sql = "SELECT id, thread_id FROM threads WHERE scope = ?"
            args: list[Any] = [scope.id]
            if thread_id is not None:
                sql += " AND thread_id = ?"
                args.append(thread_id)
            threads = fetchall(conn, sql + " ORDER BY thread_id", args)
        for thread, _ in threads:
            where, args = ("t.id = ?", [thread])
            if since is not None:
                where, args = ("t.id = ? AND x.seq > ?", [thread, since])
            for found in self._select(where, args, tables=(0, 1, 2), ordered=True):
                yield found.collection, found.key, found.data

    def find(
        self,
        collection: str,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_ids: Sequence[str] | None = None,
        before: str | None = None,
        after: str | None = None,
        refs: Sequence[str] | None = None,
        newest: int | None = None,
    ) -> builtins.list[StoredDocument]:
        """The scope's documents of one collection, narrowed by the fields given (all ANDed).

        What the document service's `find` needs to answer for the LangGraph collections;
        every other predicate is applied by the caller on the documents returned. With
        `newest` (checkpoints only), only that many, highest checkpoint id first: a
        saver's "latest checkpoint" reads one row, not the thread's history.
        """
        table = {CHECKPOINTS: 1, WRITES: 2, BLOBS: 0, ITEMS: 0, PARTS: 0}.get(collection)
        if table is None:
            return []
        where = ["t.scope = ?"]
        args: builtins.list[Any] = [self.scope.id]
        if thread_id is not None:
            where.append("t.thread_id = ?")
            args.append(thread_id)
        if table == 0:
            # A ref's collection is its first letter (SPEC 3.1): the first byte of a key,
            # or, for a ref kept whole, the two characters after its NUL (refkeys.py).
            letters = {BLOBS: b"b", ITEMS: b"ce", PARTS: b"p"}[collection]
            marks = ", ".join("?" * len(letters))
            where.append(
                f"(substr(x.ref_key, 1, 1) IN ({marks}) OR substr(x.ref_key, 1, 3) IN ({marks}))"
            )
            args.extend(bytes((letter,)) for letter in letters)
            args.extend(bytes((refkeys.WHOLE, letter)) + b"-" for letter in letters)
            if refs is not None:
                where.append("x.ref_key IN carray(?)")
                args.append(ids(refkeys.keys(refs)))
        else:
            where.append("x.schema = 2")
            if checkpoint_ns is not None:
                where.append("x.checkpoint_ns = ?")
                args.append(checkpoint_ns)
            if checkpoint_ids is not None:
                where.append("x.checkpoint_id IN carray(?)")
                args.append(ids(checkpoint_ids))
            if before is not None:
                where.append("x.checkpoint_id < ?")
                args.append(before)
            if after is not None:
                where.append("x.checkpoint_id > ?")
                args.append(after)
        tail = ""
        if newest is not None and table == 1:
            tail = " ORDER BY x.checkpoint_id DESC LIMIT ?"
            args.append(newest)
        elif table == 2:
            # A checkpoint's writes in its task ids' text order, as when they were all
            # text: the key orders a UUID's stored form after every text id (idkeys.py).
            tail = f" ORDER BY x.thread, x.checkpoint_ns, x.checkpoint_id, {TASK_ID}, x.idx"
        return self._select(" AND ".join(where), args, tables=(table,), ordered=False, tail=tail)

    def _select(
        self,
        where: str,
        args: Sequence[Any],
        *,
        tables: Sequence[int],
        ordered: bool,
        tail: str = "",
    ) -> builtins.list[StoredDocument]:
        """Documents of rows matching `where` (on `t` = threads and `x` = the table), in
        put order (`seq`) across the tables when `ordered`, else in the order `tail` (an
        ORDER BY / LIMIT clause of one table's query) gives."""
        scope = self.scope
        rows: list[_Row] = []
        with scope.file.read() as conn:
            for table in tables:
                shape, sql, _ = _SHAPES[table]
                order = " ORDER BY x.seq" if ordered else tail
                found = fetch(conn, shape, f"{sql} WHERE {where}{order}", args)
                if shape is _ValueRow:
                    found = [row._replace(ref=refkeys.text(row.ref)) for row in found]
                rows.extend(found)
            if ordered and len(tables) > 1:
                rows.sort(key=lambda row: row.seq)
            decoded = scope.content.unpack_many(
                conn,
                [(r.body, r.digest, _name(r)) for r in rows],
                [r.thread if isinstance(r, _ValueRow) else 0 for r in rows],
            )
        return [self._document(row, stored) for row, stored in zip(rows, decoded, strict=True)]

    def _document(self, row: _Row, stored: dict[str, Any]) -> StoredDocument:
        key = self.scope.planner.key
        base = {"agent_id": self.scope.agent_id, "thread_id": row.thread_id}
        if isinstance(row, _ValueRow):
            data = {**base, "ref": row.ref, "_schema": 2, **stored}
            return StoredDocument(
                collection_of(row.ref), key(row.thread_id, row.ref), data, row.created_at, 1
            )
        if isinstance(row, _CheckpointRow):
            data = {
                **base,
                "checkpoint_ns": row.checkpoint_ns,
                "_schema": row.schema,
                "checkpoint_id": row.checkpoint_id,
                "parent_id": row.parent_id,
                **stored,
            }
            return StoredDocument(
                CHECKPOINTS if row.schema == 2 else CHECKPOINTS_V1,
                key(row.thread_id, row.checkpoint_ns, row.checkpoint_id),
                data,
                row.created_at,
                1,
            )
        data = {
            **base,
            "checkpoint_ns": row.checkpoint_ns,
            "_schema": row.schema,
            "checkpoint_id": row.checkpoint_id,
            "task_id": row.task_id,
            "task_path": row.task_path,
            "index": row.idx,
            "channel": row.channel,
            **stored,
        }
        return StoredDocument(
            WRITES if row.schema == 2 else WRITES_V1,
            key(row.thread_id, row.checkpoint_ns, row.checkpoint_id, row.task_id, row.idx),
            data,
            row.created_at,
            row.version,
        )

    def keys(self, thread_id: str | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every document key of the scope (or of one thread) -> (collection, identifying
        fields).

        Read from the key columns only (no body is decoded): what the document service
        needs to answer `get` and `delete` by id.
        """
        scope = self.scope
        key = scope.planner.key
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        where = "WHERE t.scope = ?" + ("" if thread_id is None else " AND t.thread_id = ?")
        args = (scope.id,) if thread_id is None else (scope.id, thread_id)
        with scope.file.read() as conn:
            for thread_id, stored in conn.execute(
                "SELECT t.thread_id, x.ref_key FROM vals x JOIN threads t ON x.thread = t.id "
                + where,
                args,
            ):
                ref = refkeys.text(stored)
                out[key(thread_id, ref)] = (
                    collection_of(ref),
                    {"thread_id": thread_id, "ref": ref},
                )
            for thread_id, ns, cid, schema in conn.execute(
                "SELECT t.thread_id, x.checkpoint_ns, x.checkpoint_id, x.schema FROM checkpoints x "
                "JOIN threads t ON x.thread = t.id " + where,
                args,
            ):
                out[key(thread_id, ns, cid)] = (
                    CHECKPOINTS if schema == 2 else CHECKPOINTS_V1,
                    {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid},
                )
            for thread_id, ns, cid, task_id, idx, schema in conn.execute(
                f"SELECT t.thread_id, x.checkpoint_ns, x.checkpoint_id, {TASK_ID}, x.idx, x.schema "
                "FROM writes x JOIN threads t ON x.thread = t.id " + where,
                args,
            ):
                out[key(thread_id, ns, cid, task_id, idx)] = (
                    WRITES if schema == 2 else WRITES_V1,
                    {
                        "thread_id": thread_id,
                        "checkpoint_ns": ns,
                        "checkpoint_id": cid,
                        "task_id": task_id,
                        "index": idx,
                    },
                )
        return out

    def present_refs(self, thread_id: str, refs: Iterable[str]) -> set[str]:
        """Those of `refs` the thread holds as value rows (key columns only, no body read)."""
        wanted = list(refs)
        if not wanted:
            return set()
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT x.ref_key FROM vals x JOIN threads t ON x.thread = t.id "
                "WHERE t.scope = ? AND t.thread_id = ? AND x.ref_key IN carray(?)",
                (self.scope.id, thread_id, ids(refkeys.keys(wanted))),
            )
        return {refkeys.text(ref) for (ref,) in rows}

    def heads(self, thread_id: str) -> builtins.list[CheckpointHead]:
        """A thread's checkpoints (every namespace, both schemas), read from their key
        columns only: what a migration compares the source's with (present, diverged)."""
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT x.checkpoint_ns, x.checkpoint_id, x.parent_id, x.schema "
                "FROM checkpoints x JOIN threads t ON x.thread = t.id "
                "WHERE t.scope = ? AND t.thread_id = ? ORDER BY x.checkpoint_id",
                (self.scope.id, thread_id),
            )
        return [CheckpointHead(str(ns), str(c), p, int(v)) for ns, c, p, v in rows]

    def write_keys(self, thread_id: str) -> set[tuple[str, str, str, int]]:
        """A thread's pending writes as `(checkpoint_ns, checkpoint_id, task_id, index)`,
        from their key columns only."""
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                f"SELECT x.checkpoint_ns, x.checkpoint_id, {TASK_ID}, x.idx "
                "FROM writes x JOIN threads t ON x.thread = t.id "
                "WHERE t.scope = ? AND t.thread_id = ?",
                (self.scope.id, thread_id),
            )
        return {(str(ns), str(c), str(task), int(idx)) for ns, c, task, idx in rows}

    def write_places(self, thread_id: str) -> builtins.list[WritePlace]:
        """A thread's pending writes by their key columns (no body read), in LangGraph's
        order of one checkpoint's writes (`writes_sort_key`: task path, task id, index)
        within each `(checkpoint_ns, checkpoint_id)`: what a migration out needs beside
        the values `list` returns, which leave out each write's path and index."""
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                f"SELECT x.checkpoint_ns, x.checkpoint_id, {TASK_ID} AS task, x.idx, x.task_path, "
                "x.channel FROM writes x JOIN threads t ON x.thread = t.id "
                "WHERE t.scope = ? AND t.thread_id = ? "
                "ORDER BY x.checkpoint_ns, x.checkpoint_id, x.task_path, task, x.idx",
                (self.scope.id, thread_id),
            )
        return [
            WritePlace(str(ns), str(c), str(task), int(idx), str(path or ""), str(channel))
            for ns, c, task, idx, path, channel in rows
        ]

    def delete(self, collection: str, fields: Mapping[str, Any]) -> bool:
        """Delete one document by its identifying fields; False when it was not stored.

        Deleting a value can leave checkpoints that reference it unreadable, exactly as
        on the document service; the savers delete values only when nothing references
        them.
        """
        table = TABLE_OF.get(collection)
        if table is None:
            raise ProtocolError(f"{collection!r} is not a LangGraph document collection")
        ident: tuple[Any, ...]
        if table == "vals":
            where, ident = "ref_key = ?", (refkeys.key(fields["ref"]),)
        elif table == "checkpoints":
            where, ident = (
                "checkpoint_ns = ? AND checkpoint_id = ?",
                (fields["checkpoint_ns"], fields["checkpoint_id"]),
            )
        else:
            where, ident = (
                "checkpoint_ns = ? AND checkpoint_id = ? AND task_key = ? AND idx = ?",
                (
                    fields["checkpoint_ns"],
                    fields["checkpoint_id"],
                    idkeys.key(fields["task_id"]),
                    fields["index"],
                ),
            )
        thread_id = fields["thread_id"]
        scope = self.scope
        with scope.file.write() as conn:
            thread = scope.thread(conn, thread_id)
            if thread is None:
                return False
            condition = f"thread = ? AND {where}"
            held = threadfacts.row_bytes(conn, scope.content, table, condition, (thread, *ident))
            if table == "vals":
                # A delta of this chunk that stays is stored whole first (deltas.py).
                settled = deltas.plan(conn, scope.content.raw_many, thread, [fields["ref"]])
                deltas.write(conn, settled)
                held -= sum(change[3] for change in settled)
            scope.content.unlink_rows(conn, table, condition, (thread, *ident))
            if table == "checkpoints":
                conn.execute(
                    "DELETE FROM checkpoint_keys WHERE checkpoint IN "
                    f"(SELECT id FROM checkpoints WHERE {condition})",
                    (thread, *ident),
                )
            conn.execute(f"DELETE FROM {table} WHERE {condition}", (thread, *ident))
            gone = conn.changes() > 0
            if gone and table == "vals":
                scope.bump_epoch(conn)
                scope.cache.drop(thread, [fields["ref"]])
            if gone:
                threadindex.shrink(conn, thread, held)
                if table == "checkpoints" and fields["checkpoint_ns"] == "":
                    scope.reindex(conn, thread, recount=False)
            scope.content.sweep(conn, scope.grace)
        if gone:
            scope.memory.forget(thread_id)
        return gone

    def replace_write(self, data: Mapping[str, Any]) -> int:
        """Store a pending-write document, replacing one with the same key; return its version."""
        body = {k: v for k, v in data.items() if k not in DOCUMENT_FIELDS["writes"]}
        return self.scope.retrying(lambda: self._replace_write(data, body), "a write")

    def _replace_write(self, data: Mapping[str, Any], body: dict[str, Any]) -> int:
        scope = self.scope
        packed = scope.content.pack_many([body])[0]
        now = time.time()
        with scope.file.write() as conn:
            thread, seq, _ = scope.reserve(conn, data["thread_id"], 1, now, [packed])
            task_key = idkeys.key(data["task_id"])
            where = (thread, data["checkpoint_ns"], data["checkpoint_id"], task_key, data["index"])
            threadindex.shrink(
                conn, thread, threadfacts.row_bytes(conn, scope.content, "writes", WRITE_KEY, where)
            )
            scope.content.unlink_rows(conn, "writes", WRITE_KEY, where)
            columns = (
                data["checkpoint_ns"],
                data["checkpoint_id"],
                data["task_id"],
                data["index"],
                data.get("task_path") or "",
                data["channel"],
                int(data["_schema"]),
            )
            version = fetchall(
                conn,
                REPLACE_WRITE,
                (
                    *where[:4],
                    *columns[3:],
                    seq,
                    packed.body,
                    scope.seal(WRITE_ROWS, packed.digest, data["thread_id"], *columns),
                    now,
                    len(packed.keys),
                ),
            )[0][0]
            scope.content.link(conn, [packed], now)
        return int(version)


_NAMING = {shape: naming for shape, _, naming in _SHAPES.values()}


def _name(row: _Row) -> str:
    """How an error names a row's document."""
    return str(_NAMING[type(row)].format_map(row._asdict()))
