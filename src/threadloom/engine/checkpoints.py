"""Checkpoints, pending writes and values of one scope, stored as schema-2 documents.

Invariants:
- a checkpoint put is one transaction: its new values and its row commit together;
- existing refs are never rewritten; an unchanged channel is reused without being
  serialized, also after a restart (the parent's entries come from its row);
- every body is blake3-checked when decoded (see codec.py);
- reads resolve values level by level in one query per thread and level.
"""

from __future__ import annotations

import builtins
import threading
import time
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, NamedTuple, TypeVar, cast

import apsw

from threadloom.engine.cache import DEFAULT_CAPACITY, ValueCache
from threadloom.engine.database import Database, Row, fetchall
from threadloom.engine.store import Packed
from threadloom.errors import (
    CheckpointConflictError,
    EngineError,
    MissingDocumentsError,
    ProtocolError,
)
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    ITEMS,
    PARTS,
    WRITES,
    WRITES_V1,
    Known,
    KnownReferences,
    Planner,
    Put,
    Restored,
    Serialization,
    collection_of,
    configurable,
    raw_value,
    read_entries,
    references,
    restore,
)
from threadloom.protocol.constants import RETENTION_GRACE_SECONDS
from threadloom.protocol.restore import RawChannel, channel_values, raw_channels

_CHECKPOINT_FIELDS = ("checkpoint", "metadata", "channels")
_ID_FIELDS = frozenset({"agent_id", "thread_id", "ref", "_schema"})
_PAGE = 64
_RETRIES = 3
_SMALL_PLAN = 32


class Loaded(NamedTuple):
    """A checkpoint read from the file: its tuple and its logical document."""

    tuple: Restored
    data: dict[str, Any]


def _sql_ids(values: Iterable[Any]) -> Any:
    """Bind a sequence of str or int as a SQLite carray (one query instead of one per id)."""
    items = tuple(values)
    if items and isinstance(items[0], int):
        return apsw.carray(array("q", items))
    return apsw.carray(items)


class CheckpointStore:
    """The checkpoints of one scope (namespace + agent id) in a threadloom file.

    Args:
        db: the open file.
        namespace: document namespace of the scope.
        agent_id: agent id of the scope (prefix of every document key).
        serialization: the serializer (from the adapter); None opens the scope for its
            documents only (serve, export, import).
        cache_bytes: size of the decoded-value cache (0 disables it).
    """

    def __init__(
        self,
        db: Database,
        *,
        namespace: str,
        agent_id: str,
        serialization: Serialization | None = None,
        cache_bytes: int = DEFAULT_CAPACITY,
    ) -> None:
        if not isinstance(namespace, str) or not namespace or "\0" in namespace:
            raise ProtocolError("namespace must be a non-empty string without NUL")
        self.db = db
        self.content = db.content
        self.namespace = namespace
        self.agent_id = agent_id
        self.planner = Planner(agent_id, serialization)
        self.memory = KnownReferences()
        self.cache = ValueCache(cache_bytes)
        #: Seconds a value document is safe from collection after it is written (SPEC §6).
        self.grace = RETENTION_GRACE_SECONDS
        self._thread_rows: dict[str, int] = {}
        self._closures: _Lru[tuple[Any, ...], tuple[dict[str, Any], Any]] = _Lru(32)
        self._epoch = 0
        with db.write() as conn:
            conn.execute(
                "INSERT INTO scopes(namespace, agent_id) VALUES(?, ?) ON CONFLICT DO NOTHING",
                (namespace, agent_id),
            )
            self.scope: int = fetchall(
                conn,
                "SELECT id FROM scopes WHERE namespace = ? AND agent_id = ?",
                (namespace, agent_id),
            )[0][0]
            self._epoch = self._read_epoch(conn)

    # -- threads ---------------------------------------------------------------------------

    def _thread(self, conn: apsw.Connection, thread_id: str) -> int | None:
        rows = fetchall(
            conn,
            "SELECT id FROM threads WHERE scope = ? AND thread_id = ?",
            (self.scope, thread_id),
        )
        return rows[0][0] if rows else None

    def _ensure_thread(self, conn: apsw.Connection, thread_id: str, now: float) -> int:
        conn.execute(
            "INSERT INTO threads(scope, thread_id, created_at, updated_at) VALUES(?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING",
            (self.scope, thread_id, now, now),
        )
        found = self._thread(conn, thread_id)
        assert found is not None
        self._thread_rows[thread_id] = found
        return found

    def _reserve(
        self,
        conn: apsw.Connection,
        thread_id: str,
        count: int,
        now: float,
        packs: Sequence[Packed] = (),
    ) -> tuple[int, int]:
        """Check the GC epoch, then reserve `count` sequence numbers of a thread (created
        if needed), in one statement when the thread's row id is remembered.

        Returns:
            The thread's row id and the first reserved number. Row ids are never
            reused (AUTOINCREMENT), so a remembered id is checked by the update itself.

        Raises:
            _StaleMemory: see `_check_epoch` (the caller's transaction rolls back).
        """
        sql = (
            "UPDATE threads SET seq = seq + ?, updated_at = ? WHERE id = ? "
            "RETURNING seq, (SELECT value FROM meta WHERE key = 'gc_epoch')"
        )
        thread = self._thread_rows.get(thread_id)
        rows = fetchall(conn, sql, (count, now, thread)) if thread is not None else []
        if not rows:
            thread = self._ensure_thread(conn, thread_id, now)
            rows = fetchall(conn, sql, (count, now, thread))
        end, epoch = rows[0]
        self._check_epoch(conn, packs, int(epoch or 0))
        return cast(int, thread), int(end) - count + 1

    # -- collection epoch -------------------------------------------------------------------
    #
    # Remembered refs let a put skip values the file holds. Only a deletion of values
    # (delete, prune, GC, in any process) can make that memory wrong, and each one bumps
    # `meta.gc_epoch` in its transaction. A put reads the epoch inside its own write
    # transaction and plans again from the file if it moved.

    def _read_epoch(self, conn: apsw.Connection) -> int:
        rows = fetchall(conn, "SELECT value FROM meta WHERE key = 'gc_epoch'")
        return int(rows[0][0]) if rows else 0

    def _bump_epoch(self, conn: apsw.Connection) -> None:
        """Record a deletion of values (inside the deleting transaction)."""
        before = self._read_epoch(conn)
        conn.execute(
            "INSERT INTO meta(key, value) VALUES('gc_epoch', ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (before + 1,),
        )
        if before == self._epoch:
            # Nobody else deleted since we last looked, and the caller forgets the
            # threads it touched: the rest of our memory stays valid.
            self._epoch = before + 1

    def _check_epoch(
        self, conn: apsw.Connection, packs: Sequence[Packed] = (), epoch: int | None = None
    ) -> None:
        if epoch is None:
            epoch = self._read_epoch(conn)
        content = self.content
        if content.epoch != epoch:
            content.reload(conn)
        current = content.current.ident if content.current else None
        if epoch != self._epoch or any(
            p.dictionary is not None and p.dictionary != current for p in packs
        ):
            # A retraining retired the dictionary these bodies were packed with, or
            # values were deleted: plan and pack again.
            raise _StaleMemory(epoch)

    def _refresh(self, epoch: int) -> None:
        # Everything remembered about the file may name deleted rows: start over.
        self.memory = KnownReferences(self.memory.capacity)
        self.cache = ValueCache(self.cache.capacity)
        self._closures = _Lru(self._closures.capacity)
        self._thread_rows.clear()
        self._epoch = epoch

    def thread_ids(self) -> list[str]:
        """Return the thread ids of this scope that hold checkpoints, sorted."""
        with self.db.read() as conn:
            rows = fetchall(
                conn,
                "SELECT thread_id FROM threads t WHERE scope = ? AND EXISTS "
                "(SELECT 1 FROM checkpoints c WHERE c.thread = t.id) ORDER BY thread_id",
                (self.scope,),
            )
        return [r[0] for r in rows]

    # -- writing ---------------------------------------------------------------------------

    def put(
        self, config: Mapping[str, Any], checkpoint: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Store a checkpoint and the values it introduces in one transaction.

        Returns:
            The config of the stored checkpoint.

        Raises:
            ProtocolError: malformed config, checkpoint or metadata.
            CheckpointConflictError: the id is stored with different content.
        """
        config = _root_namespace(config)
        conf = config["configurable"]
        thread_id: str = conf["thread_id"]
        ns: str = conf["checkpoint_ns"]
        parent_id = conf.get("checkpoint_id")
        if not isinstance(metadata, Mapping):
            raise ProtocolError(f"metadata must be a mapping, got {type(metadata).__name__}")
        for _ in range(_RETRIES):
            try:
                return self._put(config, checkpoint, metadata, thread_id, ns, parent_id)
            except _StaleMemory as stale:
                self._refresh(stale.epoch)
        raise EngineError("other processes keep deleting values while this put runs; retry it")

    def _put(
        self,
        config: Mapping[str, Any],
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        thread_id: str,
        ns: str,
        parent_id: str | None,
    ) -> dict[str, Any]:
        known = self._recall(thread_id, ns, parent_id, metadata)
        plan = self.planner.plan_checkpoint(config, checkpoint, metadata, known)
        values = plan.puts[:-1]
        document = plan.puts[-1]
        stored = self._existing(thread_id, values)
        fresh = [p for p in values if p.data["ref"] not in stored]
        packs = self.content.pack_many(
            [
                *(_value_body(p.data) for p in fresh),
                {k: document.data[k] for k in _CHECKPOINT_FIELDS},
            ]
        )
        encoded = [(p.data["ref"], packed) for p, packed in zip(fresh, packs, strict=False)]
        head = packs[-1]
        now = time.time()
        with self.db.write() as conn:
            thread, seq = self._reserve(conn, thread_id, len(encoded) + 1, now, packs)
            self._insert_values(conn, thread, encoded, seq, now)
            conn.execute(
                "INSERT INTO checkpoints(thread, checkpoint_ns, checkpoint_id, parent_id, schema, "
                "seq, body, digest, created_at, blocks) VALUES(?, ?, ?, ?, 2, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (
                    thread,
                    ns,
                    document.data["checkpoint_id"],
                    parent_id,
                    seq + len(encoded),
                    head.body,
                    head.digest,
                    now,
                    len(head.keys),
                ),
            )
            if conn.changes() == 0:
                self._compare(conn, thread, document)
            else:
                self.content.link(conn, [head], now)
            due = self.content.note_inline(conn, packs)
        if due:
            self.content.train()
        self.cache.put_many(thread, ((p.data["ref"], _value_body(p.data)) for p in fresh))
        self.memory.remember(
            (thread_id, ns, document.data["checkpoint_id"]),
            _union(known.refs, plan.refs),
            plan.entries,
        )
        return plan.config

    def put_writes(
        self,
        config: Mapping[str, Any],
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store pending writes: the first write of a (task, index) wins; special writes replace."""
        config = _root_namespace(config)
        plan = self.planner.plan_writes(config, writes, task_id, task_path or "")
        if not plan.puts:
            return
        conf = config["configurable"]
        thread_id: str = conf["thread_id"]
        parts = [p for p in plan.puts if p.collection != WRITES]
        documents = [p for p in plan.puts if p.collection == WRITES]
        for _ in range(_RETRIES):
            try:
                self._put_writes(thread_id, parts, documents)
                return
            except _StaleMemory as stale:
                self._refresh(stale.epoch)
        raise EngineError("other processes keep deleting values while put_writes runs; retry it")

    def _put_writes(self, thread_id: str, parts: Sequence[Put], documents: Sequence[Put]) -> None:
        stored = self._existing(thread_id, parts, always=True)
        fresh = [p for p in parts if p.data["ref"] not in stored]
        everything = self.content.pack_many(
            [
                *(_value_body(p.data) for p in fresh),
                *({"value": p.data["value"]} for p in documents),
            ]
        )
        encoded = [(p.data["ref"], packed) for p, packed in zip(fresh, everything, strict=False)]
        rows = list(zip(documents, everything[len(fresh) :], strict=True))
        now = time.time()
        with self.db.write() as conn:
            thread, seq = self._reserve(conn, thread_id, len(encoded) + len(rows), now, everything)
            self._insert_values(conn, thread, encoded, seq, now)
            seq += len(encoded)
            for offset, (put, packed) in enumerate(rows):
                data = put.data
                key = (thread, data["checkpoint_ns"], data["checkpoint_id"], data["task_id"])
                if put.if_version == 0:
                    conflict = "DO NOTHING"
                else:
                    conflict = (
                        "DO UPDATE SET task_path = excluded.task_path, "
                        "channel = excluded.channel, seq = excluded.seq, body = excluded.body, "
                        "digest = excluded.digest, blocks = excluded.blocks, "
                        "version = version + 1"
                    )
                    self.content.unlink_rows(
                        conn,
                        "writes",
                        "thread = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? "
                        "AND idx = ?",
                        (*key, data["index"]),
                    )
                conn.execute(
                    "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_id, idx, "
                    "task_path, channel, schema, seq, body, digest, created_at, blocks) "
                    f"VALUES(?, ?, ?, ?, ?, ?, ?, 2, ?, ?, ?, ?, ?) ON CONFLICT {conflict}",
                    (
                        *key,
                        data["index"],
                        data["task_path"],
                        data["channel"],
                        seq + offset,
                        packed.body,
                        packed.digest,
                        now,
                        len(packed.keys),
                    ),
                )
                if packed.keys and conn.changes():
                    self.content.link(conn, [packed], now)
            due = self.content.note_inline(conn, everything)
        if due:
            self.content.train()

    def _insert_values(
        self,
        conn: apsw.Connection,
        thread: int,
        encoded: Sequence[tuple[str, Packed]],
        seq: int,
        now: float,
    ) -> None:
        sql = (
            "INSERT INTO vals(thread, ref, seq, body, digest, created_at, blocks) "
            "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
        )
        conn.executemany(
            sql,
            [
                (thread, ref, seq + i, packed.body, packed.digest, now, 0)
                for i, (ref, packed) in enumerate(encoded)
                if not packed.keys
            ],
        )
        for i, (ref, packed) in enumerate(encoded):
            if packed.keys:
                # One at a time: a row already stored must not count its blocks twice.
                conn.execute(
                    sql, (thread, ref, seq + i, packed.body, packed.digest, now, len(packed.keys))
                )
                if conn.changes():
                    self.content.link(conn, [packed], now)

    def _existing(self, thread_id: str, puts: Sequence[Put], *, always: bool = False) -> set[str]:
        """Return which planned values the thread already stores (one query).

        A plan made with warm memory holds only new values, so small plans skip the
        query unless `always`: INSERT ... ON CONFLICT DO NOTHING leaves stored values
        untouched either way; the query only saves compressing them again.
        """
        if not puts or (not always and len(puts) <= _SMALL_PLAN):
            return set()
        with self.db.read() as conn:
            thread = self._thread(conn, thread_id)
            if thread is None:
                return set()
            rows = fetchall(
                conn,
                "SELECT ref FROM vals WHERE thread = ? AND ref IN carray(?)",
                (thread, _sql_ids(p.data["ref"] for p in puts)),
            )
        return {r[0] for r in rows}

    def _compare(self, conn: apsw.Connection, thread: int, document: Put) -> None:
        data = document.data
        self._same_checkpoint(conn, thread, data, {k: data[k] for k in _CHECKPOINT_FIELDS})

    def _recall(
        self, thread_id: str, ns: str, parent_id: str | None, metadata: Mapping[str, Any]
    ) -> Known:
        parents = metadata.get("parents")
        ancestors = list(parents.items()) if isinstance(parents, Mapping) else []
        parent = (ns, parent_id) if parent_id else None
        known = self.memory.recall(thread_id, parent, ancestors)
        if parent is None or known.entries:
            return known
        entries = self._parent_entries(thread_id, ns, parent_id)  # type: ignore[arg-type]
        if not entries:
            return known
        return Known(known.refs, entries)

    def _parent_entries(
        self, thread_id: str, ns: str, parent_id: str
    ) -> dict[str, tuple[Any, dict[str, Any]]]:
        """Read the parent's channel entries from its row (after a restart)."""
        with self.db.read() as conn:
            rows = fetchall(
                conn,
                "SELECT c.body, c.digest FROM checkpoints c JOIN threads t ON c.thread = t.id "
                "WHERE t.scope = ? AND t.thread_id = ? AND c.checkpoint_ns = ? AND "
                "c.checkpoint_id = ? AND c.schema = 2",
                (self.scope, thread_id, ns, parent_id),
            )
            if not rows:
                return {}
            stored = self.content.unpack(conn, rows[0][0], rows[0][1], f"checkpoint {parent_id}")
        if "parts" in stored["checkpoint"]:
            return {}
        parent = self.planner.loads(raw_value(stored["checkpoint"], {}))
        return read_entries(stored["channels"], parent.get("channel_versions") or {})

    # -- reading ---------------------------------------------------------------------------

    def get(self, config: Mapping[str, Any]) -> Restored | None:
        """Return the checkpoint `config` names, or the latest of its thread and namespace."""
        conf = configurable(config)
        ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = conf.get("checkpoint_id")
        sql = _SELECT + " WHERE t.scope = ? AND t.thread_id = ? AND c.checkpoint_ns = ?"
        args: list[Any] = [self.scope, conf["thread_id"], ns]
        if checkpoint_id:
            sql += " AND c.checkpoint_id = ?"
            args.append(checkpoint_id)
        sql += " ORDER BY c.checkpoint_id DESC LIMIT 1"
        # Every row read here is immutable or append-only, so the statements need no
        # shared snapshot; a thread deleted between them surfaces as missing values,
        # and the read is then repeated in one transaction to answer consistently.
        try:
            with self.db.connection() as conn:
                rows = fetchall(conn, sql, args)
                return self._load(conn, rows)[0].tuple if rows else None
        except MissingDocumentsError:
            with self.db.read() as conn:
                rows = fetchall(conn, sql, args)
                return self._load(conn, rows)[0].tuple if rows else None

    def list(
        self,
        config: Mapping[str, Any] | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> Iterator[Restored]:
        """Yield checkpoints newest first, across threads and namespaces unless `config` narrows."""
        if limit is not None and limit <= 0:
            return
        sql = "SELECT c.id FROM checkpoints c JOIN threads t ON c.thread = t.id WHERE t.scope = ?"
        args: list[Any] = [self.scope]
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            sql += " AND t.thread_id = ?"
            args.append(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            sql += " AND c.checkpoint_ns = ?"
            args.append(conf["checkpoint_ns"])
        if conf.get("checkpoint_id"):
            sql += " AND c.checkpoint_id = ?"
            args.append(conf["checkpoint_id"])
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        if before_id:
            sql += " AND c.checkpoint_id < ?"
            args.append(before_id)
        sql += " ORDER BY c.checkpoint_id DESC, t.thread_id, c.checkpoint_ns"
        with self.db.read() as conn:
            ids = [r[0] for r in fetchall(conn, sql, args)]
        wanted = dict(filter or {})
        remaining = limit
        for start in range(0, len(ids), _PAGE):
            page = ids[start : start + _PAGE]
            with self.db.read() as conn:
                rows = fetchall(
                    conn,
                    _SELECT + " WHERE c.id IN carray(?) ORDER BY c.checkpoint_id DESC, "
                    "t.thread_id, c.checkpoint_ns",
                    (_sql_ids(page),),
                )
                if wanted:
                    rows = [r for r in rows if self._matches(conn, r, wanted)]
                loaded = self._load(conn, rows) if rows else []
            for item in loaded:
                yield item.tuple
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return

    def _matches(self, conn: apsw.Connection, row: Row, wanted: Mapping[str, Any]) -> bool:
        stored = self.content.unpack(conn, row[7], row[8], f"checkpoint {row[4]}")
        fetched = self._fetch_parts(row[1], stored["metadata"])
        metadata = self.planner.loads(raw_value(stored["metadata"], fetched))
        return all(metadata.get(k) == v for k, v in wanted.items())

    def _fetch_parts(self, thread: int, stored: Mapping[str, Any]) -> dict[str, Any]:
        if "parts" not in stored:
            return {}
        with self.db.read() as conn:
            return self._values(conn, thread, stored["parts"])

    def _values(self, conn: apsw.Connection, thread: int, refs: Iterable[str]) -> dict[str, Any]:
        """Return the decoded value bodies of `refs` that exist (cache first, then one query)."""
        wanted = refs if isinstance(refs, (set, frozenset, list, tuple)) else list(refs)
        found = self.cache.get_many(thread, wanted)
        missing = [ref for ref in wanted if ref not in found]
        if not missing:
            return found
        rows = fetchall(
            conn,
            "SELECT ref, body, digest FROM vals WHERE thread = ? AND ref IN carray(?)",
            (thread, _sql_ids(missing)),
        )
        decoded = self.content.unpack_many(
            conn, [(body, digest, f"value {ref}") for ref, body, digest in rows]
        )
        loaded = [(row[0], data) for row, data in zip(rows, decoded, strict=True)]
        self.cache.put_many(thread, loaded)
        found.update(loaded)
        return found

    def _load(self, conn: apsw.Connection, rows: Sequence[Row]) -> builtins.list[Loaded]:
        """Load checkpoint rows with their writes and values in a few set-based queries.

        A checkpoint row never changes once written (create-only), so its decoded
        document and the values it reaches are kept in a small LRU keyed by the row's
        identity and digest; only its pending writes are read again every time.
        """
        docs: list[dict[str, Any]] = []
        closures: list[tuple[Mapping[str, Any], Mapping[str, RawChannel]] | None] = []
        for row in rows:
            hit = self._closures.get(_closure_key(row))
            docs.append(hit[0] if hit else self._document(conn, row))
            closures.append(hit[1] if hit else None)
        writes: dict[int, list[dict[str, Any]]] = {row[0]: [] for row in rows}
        found = fetchall(
            conn,
            "SELECT c.id, w.task_id, w.idx, w.task_path, w.channel, w.schema, w.body, w.digest "
            "FROM checkpoints c JOIN writes w ON w.thread = c.thread AND "
            "w.checkpoint_ns = c.checkpoint_ns AND w.checkpoint_id = c.checkpoint_id "
            "WHERE c.id IN carray(?)",
            (_sql_ids(writes),),
        )
        bodies = self.content.unpack_many(
            conn, [(r[6], r[7], f"pending write {r[1]}/{r[2]}") for r in found]
        )
        for (owner, task_id, idx, task_path, channel, _, _, _), data in zip(
            found, bodies, strict=True
        ):
            data.update(task_id=task_id, index=idx, task_path=task_path, channel=channel)
            writes[owner].append(data)
        misses = [i for i, closure in enumerate(closures) if closure is None]
        if misses:
            resolved = self._resolve(conn, [rows[i] for i in misses], [docs[i] for i in misses])
            for i in misses:
                fetched: Mapping[str, Any] = resolved[rows[i][1]]
                raw: Mapping[str, RawChannel] = (
                    raw_channels(docs[i]["channels"], fetched) if docs[i]["_schema"] == 2 else {}
                )
                closures[i] = (fetched, raw)
                self._closures.put(_closure_key(rows[i]), (docs[i], closures[i]))
        loaded = []
        for row, doc, closure in zip(rows, docs, closures, strict=True):
            mine = writes[row[0]]
            fetched, raw = closure or ({}, {})
            if any(references(w) for w in mine):
                fetched = {**fetched, **self._fetch_all(conn, row[1], mine)}
            result = restore(
                doc,
                mine,
                fetched,
                self.planner.loads,
                sort_key=_writes_sort_key,
                raw=raw if doc["_schema"] == 2 else None,
            )
            if doc["_schema"] == 2 and (row[2], row[3], row[4]) not in self.memory:
                referenced: set[str] = set()
                for item in [doc, *mine]:
                    _reachable(item, fetched, referenced)
                self.memory.remember(
                    (row[2], row[3], row[4]),
                    referenced,
                    read_entries(doc["channels"], result.checkpoint.get("channel_versions") or {}),
                )
            loaded.append(Loaded(result, doc))
        return loaded

    def _document(self, conn: apsw.Connection, row: Row) -> dict[str, Any]:
        _, _, thread_id, ns, checkpoint_id, parent_id, schema, body, digest = row
        data: dict[str, Any] = self.content.unpack(
            conn, body, digest, f"checkpoint {checkpoint_id} of thread {thread_id!r}"
        )
        data.update(
            agent_id=self.agent_id,
            thread_id=thread_id,
            checkpoint_ns=ns,
            _schema=schema,
            checkpoint_id=checkpoint_id,
            parent_id=parent_id,
        )
        return data

    def _resolve(
        self, conn: apsw.Connection, rows: Sequence[Row], docs: Sequence[dict[str, Any]]
    ) -> dict[int, dict[str, Any]]:
        """Fetch every value the documents reference: one query per thread and level."""
        roots: dict[int, list[Mapping[str, Any]]] = {}
        for row, doc in zip(rows, docs, strict=True):
            roots.setdefault(row[1], []).append(doc)
        return {thread: self._fetch_all(conn, thread, found) for thread, found in roots.items()}

    def _fetch_all(
        self, conn: apsw.Connection, thread: int, roots: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Return every value document reachable from `roots`, level by level.

        Raises:
            MissingDocumentsError: a referenced value is not stored.
        """
        have: dict[str, Any] = {}
        level = {ref for root in roots for ref, _ in references(root)}
        while level:
            found = self._values(conn, thread, level)
            missing = level - found.keys()
            if missing:
                raise MissingDocumentsError(sorted(missing))
            have.update(found)
            level = {ref for data in found.values() for ref in _children(data)} - have.keys()
        return have

    def delta_history(
        self, config: Mapping[str, Any], channels: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """Walk the parent chain of a checkpoint from storage (LangGraph's DeltaChannel history).

        For each channel: the writes of ancestors oldest to newest (each checkpoint's in
        LangGraph's write order) down to the nearest ancestor whose channel values hold the
        channel, whose value becomes the `seed`.
        """
        if not channels:
            return {}
        conf = configurable(config)
        ns = conf.get("checkpoint_ns") or ""
        remaining = set(channels)
        collected: dict[str, list[list[tuple[str, str, Any]]]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        with self.db.read() as conn:
            thread = self._thread(conn, conf["thread_id"])
            chain = self._chain(conn, thread, ns, conf.get("checkpoint_id")) if thread else []
            for start in range(0, len(chain), _PAGE):
                if not remaining:
                    break
                page = chain[start : start + _PAGE]
                stored_thread = cast(int, thread)  # the chain is empty without a stored thread
                bodies = {
                    cid: self.content.unpack(conn, body, digest, f"checkpoint {cid}")
                    for cid, body, digest in conn.execute(
                        "SELECT checkpoint_id, body, digest FROM checkpoints WHERE thread = ? "
                        "AND checkpoint_ns = ? AND checkpoint_id IN carray(?) AND schema = 2",
                        (stored_thread, ns, _sql_ids(page)),
                    )
                }
                writes = self._channel_writes(conn, stored_thread, ns, page, remaining)
                for cid in page:
                    if cid not in bodies:
                        remaining.clear()  # a broken chain ends the walk, as LangGraph's does
                    if not remaining:
                        break
                    stored = bodies[cid]["channels"]
                    for channel in remaining:
                        group = [w for w in writes.get(cid, []) if w[1] == channel]
                        if group:
                            collected[channel].append(group)
                    here = {ch: stored[ch] for ch in remaining if ch in stored}
                    if here:
                        fetched = self._fetch_all(conn, stored_thread, [{"channels": here}])
                        seeds.update(channel_values(here, fetched, self.planner.loads))
                        remaining -= here.keys()
        result: dict[str, dict[str, Any]] = {}
        for channel in channels:
            ordered = [w for group in reversed(collected[channel]) for w in group]
            entry: dict[str, Any] = {"writes": ordered}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    def _chain(
        self, conn: apsw.Connection, thread: int, ns: str, checkpoint_id: str | None
    ) -> builtins.list[str]:
        """Return the ancestors' ids of a checkpoint (or the latest), parent first."""
        if not checkpoint_id:
            latest = fetchall(
                conn,
                "SELECT max(checkpoint_id) FROM checkpoints WHERE thread = ? AND checkpoint_ns = ?",
                (thread, ns),
            )
            checkpoint_id = latest[0][0]
            if checkpoint_id is None:
                return []
        rows = fetchall(
            conn,
            "WITH RECURSIVE chain(cid, depth) AS ("
            " SELECT parent_id, 0 FROM checkpoints"
            " WHERE thread = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"
            " UNION ALL SELECT c.parent_id, chain.depth + 1 FROM checkpoints c JOIN chain"
            " ON c.thread = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = chain.cid)"
            " SELECT cid FROM chain WHERE cid IS NOT NULL ORDER BY depth",
            (thread, ns, checkpoint_id),
        )
        return [r[0] for r in rows]

    def _channel_writes(
        self, conn: apsw.Connection, thread: int, ns: str, ids: Sequence[str], wanted: set[str]
    ) -> dict[str, builtins.list[tuple[str, str, Any]]]:
        """Return the writes of `ids` to `wanted` channels, per checkpoint, in LangGraph's order."""
        found: dict[str, list[tuple[tuple[str, str, int], str, dict[str, Any]]]] = {}
        for cid, task_id, idx, task_path, channel, body, digest in conn.execute(
            "SELECT checkpoint_id, task_id, idx, task_path, channel, body, digest FROM writes "
            "WHERE thread = ? AND checkpoint_ns = ? AND checkpoint_id IN carray(?) "
            "AND channel IN carray(?)",
            (thread, ns, _sql_ids(ids), _sql_ids(sorted(wanted))),
        ):
            data = self.content.unpack(conn, body, digest, f"pending write {task_id}/{idx}")
            found.setdefault(cid, []).append(((task_path, task_id, idx), channel, data))
        result: dict[str, list[tuple[str, str, Any]]] = {}
        for cid, items in found.items():
            items.sort(key=lambda item: item[0])
            fetched = self._fetch_all(conn, thread, [data for _, _, data in items])
            result[cid] = [
                (key[1], channel, self.planner.loads(raw_value(data["value"], fetched)))
                for key, channel, data in items
            ]
        return result

    # -- documents -------------------------------------------------------------------------

    def documents(self, thread_id: str | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """Yield `(collection, key, data)` of the scope's logical documents in put order."""
        with self.db.read() as conn:
            if thread_id is None:
                threads = fetchall(
                    conn,
                    "SELECT id, thread_id FROM threads WHERE scope = ? ORDER BY thread_id",
                    (self.scope,),
                )
            else:
                threads = fetchall(
                    conn,
                    "SELECT id, thread_id FROM threads WHERE scope = ? AND thread_id = ?",
                    (self.scope, thread_id),
                )
        for thread, tid in threads:
            yield from self._thread_documents(thread, tid)

    def _thread_documents(
        self, thread: int, thread_id: str
    ) -> Iterator[tuple[str, str, dict[str, Any]]]:
        for found in self._select("t.id = ?", [thread], tables=(0, 1, 2), ordered=True):
            yield found.collection, found.key, found.data

    def find_documents(
        self,
        collection: str,
        *,
        thread_id: str | None = None,
        checkpoint_ns: str | None = None,
        checkpoint_ids: Sequence[str] | None = None,
        before: str | None = None,
        refs: Sequence[str] | None = None,
    ) -> builtins.list[StoredDocument]:
        """The scope's documents of one collection, narrowed by the fields given (all ANDed).

        What the document service's `find` needs to answer for the LangGraph collections;
        every other predicate is applied by the caller on the documents returned.
        """
        table = {CHECKPOINTS: 1, WRITES: 2, BLOBS: 0, ITEMS: 0, PARTS: 0}.get(collection)
        if table is None:
            return []
        where = ["t.scope = ?"]
        args: builtins.list[Any] = [self.scope]
        if thread_id is not None:
            where.append("t.thread_id = ?")
            args.append(thread_id)
        if table == 0:
            prefixes = {BLOBS: ("b-",), ITEMS: ("c-", "e-"), PARTS: ("p-",)}[collection]
            where.append(f"substr(x.ref, 1, 2) IN ({', '.join('?' * len(prefixes))})")
            args.extend(prefixes)
            if refs is not None:
                where.append("x.ref IN carray(?)")
                args.append(_sql_ids(refs) if refs else apsw.carray(("",)))
        else:
            where.append("x.schema = 2")
            if checkpoint_ns is not None:
                where.append("x.checkpoint_ns = ?")
                args.append(checkpoint_ns)
            if checkpoint_ids is not None:
                where.append("x.checkpoint_id IN carray(?)")
                args.append(_sql_ids(checkpoint_ids) if checkpoint_ids else apsw.carray(("",)))
            if before is not None:
                where.append("x.checkpoint_id < ?")
                args.append(before)
        return self._select(" AND ".join(where), args, tables=(table,), ordered=False)

    def _select(
        self, where: str, args: Sequence[Any], *, tables: Sequence[int], ordered: bool
    ) -> builtins.list[StoredDocument]:
        """Documents of rows matching `where` (on `t` = threads and `x` = the table)."""
        parts = {
            0: "SELECT x.seq, 0, x.ref, NULL, NULL, NULL, NULL, NULL, NULL, x.body, x.digest, "
            "t.thread_id, x.created_at, 1 FROM vals x JOIN threads t ON x.thread = t.id",
            1: "SELECT x.seq, 1, x.checkpoint_ns, x.checkpoint_id, x.parent_id, x.schema, NULL, "
            "NULL, NULL, x.body, x.digest, t.thread_id, x.created_at, 1 FROM checkpoints x "
            "JOIN threads t ON x.thread = t.id",
            2: "SELECT x.seq, 2, x.checkpoint_ns, x.checkpoint_id, x.task_id, x.idx, x.task_path, "
            "x.channel, x.schema, x.body, x.digest, t.thread_id, x.created_at, x.version "
            "FROM writes x JOIN threads t ON x.thread = t.id",
        }
        sql = " UNION ALL ".join(f"{parts[i]} WHERE {where}" for i in tables)
        bound = [a for _ in tables for a in args]
        if ordered:
            sql += " ORDER BY 1"
        names = ("value {2}", "checkpoint {3}", "pending write {4}/{5}")
        with self.db.read() as conn:
            rows = fetchall(conn, sql, bound)
            decoded = self.content.unpack_many(
                conn, [(r[9], r[10], names[r[1]].format(*r)) for r in rows]
            )
        key = self.planner.key
        found: builtins.list[StoredDocument] = []
        for row, stored in zip(rows, decoded, strict=True):
            _, table, a, b, c, d, e, f, g, _, _, thread_id, created, version = row
            base = {"agent_id": self.agent_id, "thread_id": thread_id}
            if table == 0:
                data = {**base, "ref": a, "_schema": 2, **stored}
                found.append(
                    StoredDocument(collection_of(a), key(thread_id, a), data, created, version)
                )
            elif table == 1:
                data = {
                    **base,
                    "checkpoint_ns": a,
                    "_schema": d,
                    "checkpoint_id": b,
                    "parent_id": c,
                    **stored,
                }
                collection = CHECKPOINTS if d == 2 else CHECKPOINTS_V1
                found.append(
                    StoredDocument(collection, key(thread_id, a, b), data, created, version)
                )
            else:
                data = {
                    **base,
                    "checkpoint_ns": a,
                    "_schema": g,
                    "checkpoint_id": b,
                    "task_id": c,
                    "task_path": e,
                    "index": d,
                    "channel": f,
                    **stored,
                }
                collection = WRITES if g == 2 else WRITES_V1
                found.append(
                    StoredDocument(collection, key(thread_id, a, b, c, d), data, created, version)
                )
        return found

    def keys(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Every document key of the scope -> (collection, identifying fields).

        Read from the key columns only (no body is decoded): what the document service
        needs to answer `get` and `delete` by id.
        """
        key = self.planner.key
        out: dict[str, tuple[str, dict[str, Any]]] = {}
        with self.db.read() as conn:
            for thread_id, ref in conn.execute(
                "SELECT t.thread_id, x.ref FROM vals x JOIN threads t ON x.thread = t.id "
                "WHERE t.scope = ?",
                (self.scope,),
            ):
                out[key(thread_id, ref)] = (
                    collection_of(ref),
                    {"thread_id": thread_id, "ref": ref},
                )
            for thread_id, ns, cid, schema in conn.execute(
                "SELECT t.thread_id, x.checkpoint_ns, x.checkpoint_id, x.schema FROM checkpoints x "
                "JOIN threads t ON x.thread = t.id WHERE t.scope = ?",
                (self.scope,),
            ):
                out[key(thread_id, ns, cid)] = (
                    CHECKPOINTS if schema == 2 else CHECKPOINTS_V1,
                    {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid},
                )
            for thread_id, ns, cid, task_id, idx, schema in conn.execute(
                "SELECT t.thread_id, x.checkpoint_ns, x.checkpoint_id, x.task_id, x.idx, x.schema "
                "FROM writes x JOIN threads t ON x.thread = t.id WHERE t.scope = ?",
                (self.scope,),
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

    def delete_document(self, collection: str, fields: Mapping[str, Any]) -> bool:
        """Delete one document by its identifying fields; False when it was not stored.

        Deleting a value can leave checkpoints that reference it unreadable, exactly as
        on the document service; the savers delete values only when nothing references
        them.
        """
        table = _TABLE_OF.get(collection)
        if table is None:
            raise ProtocolError(f"{collection!r} is not a LangGraph document collection")
        ident: tuple[Any, ...]
        if table == "vals":
            where, ident = "ref = ?", (fields["ref"],)
        elif table == "checkpoints":
            where, ident = (
                "checkpoint_ns = ? AND checkpoint_id = ?",
                (fields["checkpoint_ns"], fields["checkpoint_id"]),
            )
        else:
            where, ident = (
                "checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? AND idx = ?",
                (
                    fields["checkpoint_ns"],
                    fields["checkpoint_id"],
                    fields["task_id"],
                    fields["index"],
                ),
            )
        thread_id = fields["thread_id"]
        with self.db.write() as conn:
            thread = self._thread(conn, thread_id)
            if thread is None:
                return False
            condition = f"thread = ? AND {where}"
            self.content.unlink_rows(conn, table, condition, (thread, *ident))
            conn.execute(f"DELETE FROM {table} WHERE {condition}", (thread, *ident))
            gone = conn.changes() > 0
            if gone and table == "vals":
                self._bump_epoch(conn)
                self.cache.drop(thread, [fields["ref"]])
            self.content.sweep(conn, self.grace)
        if gone:
            self.memory.forget(thread_id)
        return gone

    def replace_write(self, data: Mapping[str, Any]) -> int:
        """Store a pending-write document, replacing one with the same key; return its version."""
        body = {k: v for k, v in data.items() if k not in _IDENTITY["writes"]}
        for _ in range(_RETRIES):
            try:
                return self._replace_write(data, body)
            except _StaleMemory as stale:
                self._refresh(stale.epoch)
        raise EngineError("other processes keep deleting values while writing; retry")

    def _replace_write(self, data: Mapping[str, Any], body: dict[str, Any]) -> int:
        packed = self.content.pack_many([body])[0]
        now = time.time()
        with self.db.write() as conn:
            thread, seq = self._reserve(conn, data["thread_id"], 1, now, [packed])
            key = (thread, data["checkpoint_ns"], data["checkpoint_id"], data["task_id"])
            self.content.unlink_rows(
                conn,
                "writes",
                "thread = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_id = ? "
                "AND idx = ?",
                (*key, data["index"]),
            )
            version = fetchall(
                conn,
                "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, "
                "channel, schema, seq, body, digest, created_at, blocks) "
                "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
                "task_path = excluded.task_path, channel = excluded.channel, seq = excluded.seq, "
                "body = excluded.body, digest = excluded.digest, blocks = excluded.blocks, "
                "version = version + 1 RETURNING version",
                (
                    *key,
                    data["index"],
                    data.get("task_path") or "",
                    data["channel"],
                    int(data["_schema"]),
                    seq,
                    packed.body,
                    packed.digest,
                    now,
                    len(packed.keys),
                ),
            )[0][0]
            self.content.link(conn, [packed], now)
        return int(version)

    # -- importing -------------------------------------------------------------------------

    def import_documents(self, documents: Iterable[tuple[str, Mapping[str, Any]]]) -> ImportCount:
        """Store logical documents of this scope, create-only, one transaction per thread.

        `documents` are `(collection, data)` pairs as `documents()` yields them (without the
        key) or as the document service holds them, in put order (values before what
        references them). A value or pending write already stored is kept; a checkpoint
        already stored must be identical.

        Raises:
            ProtocolError: a document of another agent id (re-key it first) or malformed.
            CheckpointConflictError: a checkpoint id is stored with other content.
        """
        threads: dict[str, list[tuple[str, Mapping[str, Any], dict[str, Any]]]] = {}
        for collection, data in documents:
            table = _TABLE_OF.get(collection)
            if table is None:
                raise ProtocolError(f"{collection!r} is not a LangGraph document collection")
            if data.get("agent_id") != self.agent_id:
                raise ProtocolError(
                    f"a document of agent id {data.get('agent_id')!r} cannot go into scope "
                    f"{self.agent_id!r}: re-key it (export/import --agent-id) first"
                )
            thread_id = data.get("thread_id")
            if not isinstance(thread_id, str) or not thread_id:
                raise ProtocolError(f"a {collection} document has no thread_id")
            body = {k: v for k, v in data.items() if k not in _IDENTITY[table]}
            threads.setdefault(thread_id, []).append((collection, data, body))
        count = ImportCount()
        for thread_id, docs in threads.items():
            for _ in range(_RETRIES):
                try:
                    self._import(thread_id, docs, count)
                    break
                except _StaleMemory as stale:
                    self._refresh(stale.epoch)
            else:
                raise EngineError("other processes keep deleting values while importing; retry")
            self.memory.forget(thread_id)
        return count

    def _import(
        self,
        thread_id: str,
        docs: Sequence[tuple[str, Mapping[str, Any], dict[str, Any]]],
        count: ImportCount,
    ) -> None:
        packs = self.content.pack_many(body for _, _, body in docs)
        stored = ImportCount()
        now = time.time()
        with self.db.write() as conn:
            thread, seq = self._reserve(conn, thread_id, len(docs), now, packs)
            for offset, ((collection, data, body), packed) in enumerate(
                zip(docs, packs, strict=True)
            ):
                table = _TABLE_OF[collection]
                common = (seq + offset, packed.body, packed.digest, now, len(packed.keys))
                if table == "vals":
                    conn.execute(
                        "INSERT INTO vals(thread, ref, seq, body, digest, created_at, blocks) "
                        "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (thread, data["ref"], *common),
                    )
                elif table == "checkpoints":
                    conn.execute(
                        "INSERT INTO checkpoints(thread, checkpoint_ns, checkpoint_id, parent_id, "
                        "schema, seq, body, digest, created_at, blocks) "
                        "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (
                            thread,
                            data["checkpoint_ns"],
                            data["checkpoint_id"],
                            data.get("parent_id"),
                            int(data["_schema"]),
                            *common,
                        ),
                    )
                else:
                    conn.execute(
                        "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_id, idx, "
                        "task_path, channel, schema, seq, body, digest, created_at, blocks) "
                        "VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                        (
                            thread,
                            data["checkpoint_ns"],
                            data["checkpoint_id"],
                            data["task_id"],
                            data["index"],
                            data.get("task_path") or "",
                            data["channel"],
                            int(data["_schema"]),
                            *common,
                        ),
                    )
                if conn.changes():
                    stored.stored += 1
                    self.content.link(conn, [packed], now)
                    continue
                stored.present += 1
                if table == "checkpoints":
                    self._same_checkpoint(conn, thread, data, body)
            due = self.content.note_inline(conn, packs)
        count.stored += stored.stored
        count.present += stored.present
        if due:
            self.content.train()

    def _same_checkpoint(
        self, conn: apsw.Connection, thread: int, data: Mapping[str, Any], body: dict[str, Any]
    ) -> None:
        rows = fetchall(
            conn,
            "SELECT parent_id, schema, body, digest FROM checkpoints WHERE thread = ? "
            "AND checkpoint_ns = ? AND checkpoint_id = ?",
            (thread, data["checkpoint_ns"], data["checkpoint_id"]),
        )
        parent_id, schema, stored_body, digest = rows[0]
        stored = self.content.unpack(
            conn, stored_body, digest, f"checkpoint {data['checkpoint_id']}"
        )
        if parent_id != data.get("parent_id") or schema != data["_schema"] or stored != body:
            raise CheckpointConflictError(
                f"checkpoint {data['checkpoint_id']!r} of thread {data['thread_id']!r} is already "
                "stored with different content; checkpoint ids are create-only, use a new id"
            )

    # -- deleting --------------------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every document of `thread_id` in this scope."""
        self.memory.forget(thread_id)
        with self.db.write() as conn:
            thread = self._thread(conn, thread_id)
            if thread is None:
                return
            for table in ("writes", "checkpoints", "vals"):
                self.content.unlink_rows(conn, table, "thread = ?", (thread,))
                conn.execute(f"DELETE FROM {table} WHERE thread = ?", (thread,))
            conn.execute("DELETE FROM threads WHERE id = ?", (thread,))
            self._bump_epoch(conn)
            self.content.sweep(conn, self.grace)
        self._thread_rows.pop(thread_id, None)
        self.cache.drop(thread)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata `run_id` is in `run_ids`."""
        wanted = set(run_ids)
        if not wanted:
            return
        with self.db.write() as conn:
            doomed: dict[int, list[tuple[int, str, str]]] = {}
            for row in fetchall(conn, _SELECT + " WHERE t.scope = ?", (self.scope,)):
                stored = self.content.unpack(conn, row[7], row[8], f"checkpoint {row[4]}")
                fetched = self._fetch_all(conn, row[1], [{"metadata": stored["metadata"]}])
                metadata = self.planner.loads(raw_value(stored["metadata"], fetched))
                if metadata.get("run_id") in wanted:
                    doomed.setdefault(row[1], []).append((row[0], row[3], row[4]))
            for thread, items in doomed.items():
                self._delete_checkpoints(conn, thread, items)
                self._collect(conn, thread)
                self.memory.forget(self._thread_name(conn, thread))

    def copy_thread(self, source: str, target: str) -> None:
        """Copy every document of thread `source` into thread `target` (same scope)."""
        now = time.time()
        with self.db.write() as conn:
            origin = self._thread(conn, source)
            if origin is None:
                return
            copy = self._ensure_thread(conn, target, now)
            conn.execute(
                "UPDATE threads SET seq = max(seq, (SELECT seq FROM threads WHERE id = ?1)) "
                "WHERE id = ?2",
                (origin, copy),
            )
            # The copies share the originals' blocks: count the chunked rows the target
            # does not hold yet (the others are skipped by ON CONFLICT DO NOTHING).
            for table, identity in _IDENTITIES.items():
                same = " AND ".join(f"d.{column} = s.{column}" for column in identity)
                shared = fetchall(
                    conn,
                    f"SELECT s.body FROM {table} s WHERE s.thread = ?1 AND s.blocks > 0 AND "
                    f"NOT EXISTS (SELECT 1 FROM {table} d WHERE d.thread = ?2 AND {same})",
                    (origin, copy),
                )
                self.content.relink(conn, [r[0] for r in shared])
            conn.execute(
                "INSERT INTO vals(thread, ref, seq, body, digest, created_at, blocks) "
                "SELECT ?2, ref, seq, body, digest, ?3, blocks FROM vals WHERE thread = ?1 "
                "ON CONFLICT DO NOTHING",
                (origin, copy, now),
            )
            conn.execute(
                "INSERT INTO checkpoints(thread, checkpoint_ns, checkpoint_id, parent_id, schema, "
                "seq, body, digest, created_at, blocks) SELECT ?2, checkpoint_ns, checkpoint_id, "
                "parent_id, schema, seq, body, digest, ?3, blocks FROM checkpoints "
                "WHERE thread = ?1 ON CONFLICT DO NOTHING",
                (origin, copy, now),
            )
            conn.execute(
                "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, "
                "channel, schema, seq, body, digest, created_at, blocks) SELECT ?2, checkpoint_ns, "
                "checkpoint_id, task_id, idx, task_path, channel, schema, seq, body, digest, ?3, "
                "blocks FROM writes WHERE thread = ?1 ON CONFLICT DO NOTHING",
                (origin, copy, now),
            )

    def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        """Prune threads: `keep_latest` keeps each namespace's newest checkpoint, `delete` all.

        `keep_latest` is safe for DeltaChannel threads: it also keeps the ancestors
        (and their writes) that rebuilding the kept checkpoint's DeltaChannels needs, up
        to the nearest ancestor holding each channel's value or snapshot.

        Raises:
            ValueError: unknown strategy.
        """
        if strategy not in {"keep_latest", "delete"}:
            raise ValueError(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            self.memory.forget(thread_id)
            with self.db.write() as conn:
                thread = self._thread(conn, thread_id)
                if thread is None:
                    continue
                kept = self._needed(conn, thread)
                doomed = [
                    (rid, ns, cid)
                    for rid, ns, cid in fetchall(
                        conn,
                        "SELECT id, checkpoint_ns, checkpoint_id FROM checkpoints WHERE thread = ?",
                        (thread,),
                    )
                    if (ns, cid) not in kept
                ]
                self._delete_checkpoints(conn, thread, doomed)
                self._collect(conn, thread)

    def _needed(self, conn: apsw.Connection, thread: int) -> set[tuple[str, str]]:
        """Each namespace's newest checkpoint and the ancestors its DeltaChannels rebuild from.

        A DeltaChannel that has changed since its last snapshot is named in the head's
        `counters_since_delta_snapshot` metadata and absent from its channel values;
        its history runs back to the nearest ancestor that holds its value.
        """
        kept: set[tuple[str, str]] = set()
        heads = fetchall(
            conn,
            "SELECT checkpoint_ns, max(checkpoint_id) FROM checkpoints WHERE thread = ? "
            "GROUP BY checkpoint_ns",
            (thread,),
        )
        for ns, head in heads:
            kept.add((ns, head))
            body = self._body(conn, thread, ns, head)
            if body is None:
                continue
            fetched = self._fetch_all(conn, thread, [{"metadata": body["metadata"]}])
            metadata = self.planner.loads(raw_value(body["metadata"], fetched))
            counters = metadata.get("counters_since_delta_snapshot") or {}
            needed = set(counters) - body["channels"].keys()
            if not needed:
                continue
            for ancestor in self._chain(conn, thread, ns, head):
                found = self._body(conn, thread, ns, ancestor)
                if found is None:
                    break
                kept.add((ns, ancestor))
                needed -= found["channels"].keys()
                if not needed:
                    break
        return kept

    def _body(
        self, conn: apsw.Connection, thread: int, ns: str, checkpoint_id: str
    ) -> dict[str, Any] | None:
        rows = fetchall(
            conn,
            "SELECT body, digest FROM checkpoints WHERE thread = ? AND checkpoint_ns = ? AND "
            "checkpoint_id = ?",
            (thread, ns, checkpoint_id),
        )
        if not rows:
            return None
        return cast(
            "dict[str, Any]",
            self.content.unpack(conn, rows[0][0], rows[0][1], f"checkpoint {checkpoint_id}"),
        )

    def _delete_checkpoints(
        self, conn: apsw.Connection, thread: int, items: Sequence[tuple[int, str, str]]
    ) -> None:
        for rid, ns, cid in items:
            where = "thread = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
            self.content.unlink_rows(conn, "writes", where, (thread, ns, cid))
            self.content.unlink_rows(conn, "checkpoints", "id = ?", (rid,))
            conn.execute(f"DELETE FROM writes WHERE {where}", (thread, ns, cid))
            conn.execute("DELETE FROM checkpoints WHERE id = ?", (rid,))

    def _collect(self, conn: apsw.Connection, thread: int) -> int:
        """Delete the thread's values no document references, older than `self.grace` seconds.

        Runs inside the caller's write transaction. Returns how many were deleted.
        """
        items = [
            (body, digest, f"checkpoint {cid}")
            for cid, body, digest in conn.execute(
                "SELECT checkpoint_id, body, digest FROM checkpoints WHERE thread = ?", (thread,)
            )
        ]
        items.extend(
            (body, digest, f"pending write {tid}")
            for tid, body, digest in conn.execute(
                "SELECT task_id, body, digest FROM writes WHERE thread = ?", (thread,)
            )
        )
        roots: list[dict[str, Any]] = self.content.unpack_many(conn, items)
        live = self._fetch_all(conn, thread, roots).keys()
        cutoff = time.time() - self.grace
        doomed = [
            ref
            for (ref,) in fetchall(
                conn,
                "SELECT ref FROM vals WHERE thread = ? AND created_at < ?",
                (thread, cutoff),
            )
            if ref not in live
        ]
        if doomed:
            where = "thread = ? AND ref IN carray(?)"
            self.content.unlink_rows(conn, "vals", where, (thread, _sql_ids(doomed)))
            conn.execute(f"DELETE FROM vals WHERE {where}", (thread, _sql_ids(doomed)))
            self.cache.drop(thread, doomed)
            self._bump_epoch(conn)
        self.content.sweep(conn, self.grace)
        return len(doomed)

    def _thread_name(self, conn: apsw.Connection, thread: int) -> str:
        return str(fetchall(conn, "SELECT thread_id FROM threads WHERE id = ?", (thread,))[0][0])


class StoredDocument(NamedTuple):
    """One logical document as the file holds it (for the document service)."""

    collection: str
    key: str
    data: dict[str, Any]
    created_at: float
    version: int


class ImportCount:
    """Documents `import_documents` stored, and those it found already stored."""

    def __init__(self) -> None:
        self.stored = 0
        self.present = 0


#: Table of each LangGraph collection, and the fields of its documents that live in columns.
_TABLE_OF = {
    CHECKPOINTS: "checkpoints",
    CHECKPOINTS_V1: "checkpoints",
    WRITES: "writes",
    WRITES_V1: "writes",
    BLOBS: "vals",
    ITEMS: "vals",
    PARTS: "vals",
}
_IDENTITY = {
    "vals": frozenset({"agent_id", "thread_id", "ref", "_schema"}),
    "checkpoints": frozenset(
        {"agent_id", "thread_id", "checkpoint_ns", "_schema", "checkpoint_id", "parent_id"}
    ),
    "writes": frozenset(
        {
            "agent_id",
            "thread_id",
            "checkpoint_ns",
            "_schema",
            "checkpoint_id",
            "task_id",
            "task_path",
            "index",
            "channel",
        }
    ),
}

#: The columns that identify a row of each body table within its thread.
_IDENTITIES = {
    "vals": ("ref",),
    "checkpoints": ("checkpoint_ns", "checkpoint_id"),
    "writes": ("checkpoint_ns", "checkpoint_id", "task_id", "idx"),
}

_SELECT = (
    "SELECT c.id, c.thread, t.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.schema, "
    "c.body, c.digest FROM checkpoints c JOIN threads t ON c.thread = t.id"
)


K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A small thread-safe LRU map."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items.move_to_end(key)
            return found

    def put(self, key: K, value: V) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)


def _children(data: Mapping[str, Any]) -> Iterable[str]:
    """The refs a value document points to (`references` without the estimates)."""
    value = data.get("value")
    if value is not None:  # a value blob, an element or a pending write
        return value.get("parts") or ()
    elements = data.get("elements")
    if elements is not None:
        return [ref for ref, _ in elements]
    return data.get("chunks") or ()


def _closure_key(row: Row) -> tuple[Any, ...]:
    """Identity of a checkpoint row's content: thread, namespace, id and body digest."""
    return (row[1], row[3], row[4], bytes(row[8]))


class _StaleMemory(Exception):
    """Values were deleted since the memory a plan relied on was built."""

    def __init__(self, epoch: int) -> None:
        super().__init__(epoch)
        self.epoch = epoch


def _root_namespace(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validate `config`; an absent or None `checkpoint_ns` means the root namespace `""`."""
    conf = configurable(config)
    if conf.get("checkpoint_ns") is not None:
        return config
    return {**config, "configurable": {**conf, "checkpoint_ns": ""}}


def _writes_sort_key(write: Mapping[str, Any]) -> tuple[str, str, int]:
    """LangGraph's `writes_sort_key`: (task_path, task_id, idx)."""
    return (write.get("task_path") or "", write["task_id"], write["index"])


def _value_body(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in data.items() if k not in _ID_FIELDS}


def _union(known: Any, planned: set[str]) -> frozenset[str]:
    if isinstance(known, frozenset):
        return known | planned
    if isinstance(known, set):
        return frozenset(known | planned)
    return frozenset(planned)


def _reachable(data: Mapping[str, Any], fetched: Mapping[str, Any], into: set[str]) -> None:
    for ref, _ in references(data):
        if ref not in into and ref in fetched:
            into.add(ref)
            _reachable(fetched[ref], fetched, into)
