"""Writing checkpoints and pending writes of one scope: one transaction per put.

Engine layer. Invariants:
- a checkpoint put is one transaction: its new values, its row and its metadata keys
  commit together;
- existing refs are never rewritten; an unchanged channel is reused without being
  serialized, also after a restart (the parent's entries come from its row);
- bodies are encoded outside the transaction; the GC epoch and the dictionary they
  were packed with are checked inside it (`Scope.reserve`), and a stale plan is made again.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import apsw
import ormsgpack

from threadloom.engine.checkpoints.scope import KeptCompressor, Scope
from threadloom.engine.content.content_store import Packed
from threadloom.engine.content.deltas import DELTA_SHARE, blocks_column
from threadloom.engine.format import idkeys, keys, refkeys
from threadloom.engine.format.codec import delta, delta_compressor
from threadloom.engine.format.tables import (
    CHECKPOINT_BODY,
    CHECKPOINT_ROWS,
    DOCUMENT_FIELDS,
    INSERT_CHECKPOINT,
    INSERT_KEY,
    INSERT_VALUE,
    INSERT_WRITE,
    REPLACE_WRITE,
    VALS,
    WRITE_KEY,
    WRITE_ROWS,
)
from threadloom.engine.sql import fetchall, ids
from threadloom.engine.threads import threadfacts, threadindex
from threadloom.errors import CheckpointConflictError, ProtocolError
from threadloom.protocol import WRITES, Known, Put, configurable, raw_value, read_entries

#: Plans of at most this many values skip the query for already stored ones.
SMALL_PLAN = 32


class Writer:
    """Writes the checkpoints and pending writes of one scope.

    Args:
        scope: the scope.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

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
        config = root_namespace(config)
        conf = config["configurable"]
        if not isinstance(metadata, Mapping):
            raise ProtocolError(f"metadata must be a mapping, got {type(metadata).__name__}")
        return self.scope.retrying(
            lambda: self._put(
                config,
                checkpoint,
                metadata,
                conf["thread_id"],
                conf["checkpoint_ns"],
                conf.get("checkpoint_id"),
            ),
            "put",
        )

    def _put(
        self,
        config: Mapping[str, Any],
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        thread_id: str,
        ns: str,
        parent_id: str | None,
    ) -> dict[str, Any]:
        scope = self.scope
        content = scope.content
        planned = scope.planned()  # before anything is recalled from memory
        known = self._recall(thread_id, ns, parent_id, metadata)
        plan = scope.planner.plan_checkpoint(config, checkpoint, metadata, known)
        values = plan.puts[:-1]
        document = plan.puts[-1]
        stored = self._existing(thread_id, values)
        fresh = [p for p in values if p.data["ref"] not in stored]
        # (ref, body) of each new value: packed, framed as a delta, then cached.
        bodies = [(str(p.data["ref"]), value_body(p.data)) for p in fresh]
        packs = content.pack_many(
            [*(body for _, body in bodies), {k: document.data[k] for k in CHECKPOINT_BODY}]
        )
        bases = chunk_deltas(scope, thread_id, bodies, packs)
        encoded = [(p.data["ref"], packed) for p, packed in zip(fresh, packs, strict=False)]
        head = packs[-1]
        listed = _keys(plan.metadata, document.data["metadata"])
        now = time.time()
        with scope.file.write() as conn:
            thread, seq, untitled = scope.reserve(
                conn, thread_id, len(encoded) + 1, now, packs, planned
            )
            inserted = self.insert_values(conn, thread, thread_id, encoded, seq, now)
            rows = fetchall(
                conn,
                INSERT_CHECKPOINT + " RETURNING id",
                (
                    thread,
                    ns,
                    document.data["checkpoint_id"],
                    parent_id,
                    2,
                    seq + len(encoded),
                    head.body,
                    scope.seal(
                        CHECKPOINT_ROWS,
                        head.digest,
                        thread_id,
                        ns,
                        document.data["checkpoint_id"],
                        parent_id,
                        2,
                        int(listed is not None),
                    ),
                    now,
                    len(head.keys),
                    int(listed is not None),
                ),
            )
            if not rows:
                data = document.data
                same_checkpoint(scope, conn, thread, data, {k: data[k] for k in CHECKPOINT_BODY})
                scope.unheld(conn, thread, [head])
            else:
                content.link(conn, [head], now)
                if listed:
                    row = rows[0][0]
                    conn.executemany(INSERT_KEY, [(row, key, value) for key, value in listed])
                if ns == "":
                    self._index(
                        conn, thread, config, checkpoint, document.data["checkpoint_id"], untitled
                    )
            due = content.note_inline(conn, packs)
        if due:
            content.train()
        scope.touch(thread_id, thread)
        scope.cache.put_many(thread, bodies)
        remember_bases(scope, bases, inserted)  # stored whole: later versions may be deltas
        scope.memory.remember(
            (thread_id, ns, document.data["checkpoint_id"]),
            plan.known_refs(known),
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
        config = root_namespace(config)
        plan = self.scope.planner.plan_writes(config, writes, task_id, task_path or "")
        if not plan.puts:
            return
        thread_id: str = config["configurable"]["thread_id"]
        parts = [p for p in plan.puts if p.collection != WRITES]
        documents = [p for p in plan.puts if p.collection == WRITES]
        self.scope.retrying(lambda: self._put_writes(thread_id, parts, documents), "put_writes")

    def _put_writes(self, thread_id: str, parts: Sequence[Put], documents: Sequence[Put]) -> None:
        scope = self.scope
        content = scope.content
        planned = scope.planned()  # before the parts found stored are left out
        stored = self._existing(thread_id, parts, always=True)
        fresh = [p for p in parts if p.data["ref"] not in stored]
        everything = content.pack_many(
            [
                *(value_body(p.data) for p in fresh),
                *({"value": p.data["value"]} for p in documents),
            ]
        )
        encoded = [(p.data["ref"], packed) for p, packed in zip(fresh, everything, strict=False)]
        rows = list(zip(documents, everything[len(fresh) :], strict=True))
        now = time.time()
        with scope.file.write() as conn:
            thread, seq, _ = scope.reserve(
                conn, thread_id, len(encoded) + len(rows), now, everything, planned
            )
            self.insert_values(conn, thread, thread_id, encoded, seq, now)
            seq += len(encoded)
            for offset, (put, packed) in enumerate(rows):
                data = put.data
                task_id = data["task_id"]
                sealed = (
                    data["checkpoint_ns"],
                    data["checkpoint_id"],
                    task_id,
                    data["index"],
                    data["task_path"],
                    data["channel"],
                    2,
                )
                key = (thread, data["checkpoint_ns"], data["checkpoint_id"], idkeys.key(task_id))
                args = (
                    *key,
                    data["index"],
                    data["task_path"],
                    data["channel"],
                    2,
                    seq + offset,
                    packed.body,
                    scope.seal(WRITE_ROWS, packed.digest, thread_id, *sealed),
                    now,
                    len(packed.keys),
                )
                if put.if_version == 0:
                    conn.execute(INSERT_WRITE, args)
                    changed = conn.changes()
                    if not changed:
                        scope.unheld(conn, thread, [packed])
                else:
                    where = (*key, data["index"])
                    threadindex.shrink(
                        conn,
                        thread,
                        threadfacts.row_bytes(conn, content, "writes", WRITE_KEY, where),
                    )
                    content.unlink_rows(conn, "writes", WRITE_KEY, where)
                    fetchall(conn, REPLACE_WRITE, args)
                    changed = 1
                if packed.keys and changed:
                    content.link(conn, [packed], now)
            due = content.note_inline(conn, everything)
        scope.touch(thread_id, thread)
        if due:
            content.train()

    def insert_values(
        self,
        conn: apsw.Connection,
        thread: int,
        thread_id: str,
        encoded: Sequence[tuple[str, Packed]],
        seq: int,
        now: float,
    ) -> set[str]:
        """Insert value rows (insert-only), counting the blocks of the chunked ones.
        Returns the refs of the inline rows it inserted (not found stored)."""
        scope = self.scope

        def row(i: int, ref: str, packed: Packed, blocks: int) -> tuple[Any, ...]:
            seal = scope.seal(VALS, packed.digest, thread_id, ref)
            return (thread, refkeys.key(ref), seq + i, packed.body, seal, now, blocks)

        inline = [
            row(i, ref, packed, blocks_column(packed.body, 0))
            for i, (ref, packed) in enumerate(encoded)
            if not packed.keys
        ]
        stored: list[Packed] = []
        inserted: set[str] = set()
        if inline:
            returned = conn.executemany(INSERT_VALUE + " RETURNING ref_key", inline)
            inserted = {refkeys.text(r[0]) for r in returned}
            if len(inserted) < len(inline):
                stored += [p for ref, p in encoded if not p.keys and ref not in inserted]
        chunked: list[Packed] = []
        for i, (ref, packed) in enumerate(encoded):
            if packed.keys:
                # One at a time: a row already stored must not count its blocks twice.
                conn.execute(INSERT_VALUE, row(i, ref, packed, len(packed.keys)))
                (chunked if conn.changes() else stored).append(packed)
        if chunked:
            # The blocks of every row inserted, counted at once: one lookup, new blocks
            # written back to back (a 20 MiB result's 80 parts fill 4 MiB extents).
            self.scope.content.link(conn, chunked, now)
        # `reserve` counted these rows' bytes; the thread held them already.
        scope.unheld(conn, thread, stored)
        return inserted

    def _existing(self, thread_id: str, puts: Sequence[Put], *, always: bool = False) -> set[str]:
        """Return which planned values the thread already stores (one query).

        A plan made with warm memory holds only new values, so small plans skip the
        query unless `always`: INSERT ... ON CONFLICT DO NOTHING leaves stored values
        untouched either way; the query only saves compressing them again.
        """
        if not puts or (not always and len(puts) <= SMALL_PLAN):
            return set()
        with self.scope.file.read() as conn:
            thread = self.scope.thread(conn, thread_id)
            if thread is None:
                return set()
            rows = fetchall(
                conn,
                "SELECT ref_key FROM vals WHERE thread = ? AND ref_key IN carray(?)",
                (thread, ids(refkeys.keys(p.data["ref"] for p in puts))),
            )
        return {refkeys.text(r[0]) for r in rows}

    def _recall(
        self, thread_id: str, ns: str, parent_id: str | None, metadata: Mapping[str, Any]
    ) -> Known:
        parents = metadata.get("parents")
        ancestors = list(parents.items()) if isinstance(parents, Mapping) else []
        parent = (ns, parent_id) if parent_id else None
        known = self.scope.memory.recall(thread_id, parent, ancestors)
        if parent_id is None or known.entries:
            return known
        entries = self._parent_entries(thread_id, ns, parent_id)
        if not entries:
            return known
        return Known(known.refs, entries)

    def _parent_entries(
        self, thread_id: str, ns: str, parent_id: str
    ) -> dict[str, tuple[Any, dict[str, Any]]]:
        """Read the parent's channel entries from its row (after a restart)."""
        scope = self.scope
        with scope.file.read() as conn:
            rows = fetchall(
                conn,
                f"SELECT c.body, {CHECKPOINT_ROWS.unsealed('c')} FROM checkpoints c "
                "JOIN threads t ON c.thread = t.id JOIN scopes s ON s.id = t.scope "
                "WHERE t.scope = ? AND t.thread_id = ? AND c.checkpoint_ns = ? AND "
                "c.checkpoint_id = ? AND c.schema = 2",
                (scope.id, thread_id, ns, parent_id),
            )
            if not rows:
                return {}
            stored = scope.content.unpack(conn, rows[0][0], rows[0][1], f"checkpoint {parent_id}")
        if "parts" in stored["checkpoint"]:
            return {}
        parent = scope.planner.loads(raw_value(stored["checkpoint"], {}))
        return read_entries(stored["channels"], parent.get("channel_versions") or {})

    def _index(
        self,
        conn: apsw.Connection,
        thread: int,
        config: Mapping[str, Any],
        checkpoint: Mapping[str, Any],
        checkpoint_id: str,
        untitled: bool,
    ) -> None:
        """Keep the thread index of a root checkpoint just inserted (threadindex.py); a
        title is looked for only while the thread has none."""
        scope = self.scope
        values = checkpoint.get("channel_values") or {}
        messages = values.get(scope.messages_channel) if isinstance(values, Mapping) else None
        threadindex.note_checkpoint(
            conn,
            thread,
            checkpoint_id,
            len(messages) if isinstance(messages, (list, tuple)) else 0,
            threadindex.derived_title(messages) if untitled and scope.keeps_text("title") else None,
            threadindex.owner_of(config["configurable"], scope.owner_keys),
        )


def same_checkpoint(
    scope: Scope, conn: apsw.Connection, thread: int, data: Mapping[str, Any], body: dict[str, Any]
) -> None:
    """Accept a re-put of a stored checkpoint only when it is identical (create-only).

    Raises:
        CheckpointConflictError: the stored checkpoint differs.
    """
    rows = fetchall(
        conn,
        f"SELECT c.parent_id, c.schema, c.body, {CHECKPOINT_ROWS.unsealed('c')} "
        "FROM checkpoints c JOIN threads t ON c.thread = t.id JOIN scopes s ON s.id = t.scope "
        "WHERE c.thread = ? AND c.checkpoint_ns = ? AND c.checkpoint_id = ?",
        (thread, data["checkpoint_ns"], data["checkpoint_id"]),
    )
    parent_id, schema, stored_body, digest = rows[0]
    stored = scope.content.unpack(conn, stored_body, digest, f"checkpoint {data['checkpoint_id']}")
    if parent_id != data.get("parent_id") or schema != data["_schema"] or stored != body:
        raise CheckpointConflictError(
            f"checkpoint {data['checkpoint_id']!r} of thread {data['thread_id']!r} is already "
            "stored with different content; checkpoint ids are create-only, use a new id"
        )


def root_namespace(config: Mapping[str, Any]) -> Mapping[str, Any]:
    """Validate `config`; an absent or None `checkpoint_ns` means the root namespace `""`."""
    conf = configurable(config)
    if conf.get("checkpoint_ns") is not None:
        return config
    return {**config, "configurable": {**conf, "checkpoint_ns": ""}}


def chunk_deltas(
    scope: Scope,
    thread_id: str,
    values: Sequence[tuple[str, Mapping[str, Any]]],
    packs: list[Packed],
) -> dict[tuple[str, str], tuple[str, bytes]]:
    """Store new chunk versions as deltas of the version `scope` last stored whole
    (`deltas.py`), where that takes at most `DELTA_SHARE` of the whole body: replaces
    those of `packs` (`packs[i]` is `values[i]`'s: ref and body). Returns the chunks
    stored whole, to remember as bases once committed (`remember_bases`): (thread id,
    first element ref) -> (ref, msgpack)."""
    whole: dict[tuple[str, str], tuple[str, bytes]] = {}
    known = scope.chunk_bases
    for i, (ref, body) in enumerate(values):
        elements = body.get("elements")
        packed = packs[i]
        if not ref.startswith("c-") or not elements or packed.keys:
            continue
        key = (thread_id, str(elements[0][0]))
        raw = ormsgpack.packb(body)
        base = known.get(key)
        if base is not None and base[0] != ref:
            framed = _delta(scope, thread_id, raw, base)
            if len(framed) <= DELTA_SHARE * len(packed.body):
                packs[i] = Packed(framed, packed.digest, inline=packed.inline)
                continue
        whole[key] = (ref, raw)
    return whole


def _delta(scope: Scope, thread_id: str, raw: bytes, base: tuple[str, bytes]) -> bytes:
    """`codec.delta` of `raw` against `base` with the compressor kept for that base, made
    and kept when there is none. A compressor serves one caller at a time: while another
    thread holds its lock, this one frames with a compressor of its own."""
    key = (thread_id, base[0])
    kept = scope.delta_compressors.get(key)
    if kept is not None and kept.base == base[1]:
        if not kept.lock.acquire(blocking=False):
            return delta(raw, base[0], base[1])
        try:
            return delta(raw, base[0], base[1], kept.compressor)
        finally:
            kept.lock.release()
    made = KeptCompressor(delta_compressor(base[1]), base[1])
    framed = delta(raw, base[0], base[1], made.compressor)
    scope.delta_compressors.put(key, made)  # weighed once used: zstd sizes it then
    return framed


def remember_bases(
    scope: Scope, bases: Mapping[tuple[str, str], tuple[str, bytes]], inserted: set[str]
) -> None:
    """After the commit: the chunks `chunk_deltas` left whole and the write inserted are
    the bases later versions of their lists may be deltas of."""
    for key, (ref, raw) in bases.items():
        if ref in inserted:
            old = scope.chunk_bases.get(key)
            if old is not None and old[0] != ref:
                scope.delta_compressors.pop((key[0], old[0]))  # its list moved on
            scope.chunk_bases.put(key, (ref, raw))


def value_body(data: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a value document: its fields without those that live in columns."""
    fields = DOCUMENT_FIELDS["vals"]
    return {k: v for k, v in data.items() if k not in fields}


def _keys(
    metadata: Mapping[str, Any] | None, stored: Mapping[str, Any]
) -> list[tuple[str, Any]] | None:
    """The metadata key rows of a checkpoint, or None when its metadata is not plain text."""
    if metadata is None or stored.get("kind") not in keys.PLAIN_KINDS:
        return None
    return keys.rows_of(metadata)
