"""Reading checkpoints: the latest or a named one, a keyset-paged history, delta history.

Engine layer. A checkpoint row never changes once written (create-only), so its decoded
document and the values it reaches are kept in a small LRU keyed by the row's identity
and digest; only its pending writes are read every time. `list` reads one page at a
time, sized by what is left of `limit`, and decides metadata filters in SQL
(`keys.py`) wherever the rows allow.
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import apsw

from threadloom.core import collector
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.checkpoints.values import Values, reached
from threadloom.engine.format import heads, keys
from threadloom.engine.format.tables import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FROM,
    CHECKPOINT_ROWS,
    OWNERS,
    SELECT_CHECKPOINT,
    SELECT_PENDING,
    TASK_ID,
    WRITE_ROWS,
    CheckpointRow,
    PendingRow,
)
from threadloom.engine.sql import fetch, fetchall, ids
from threadloom.errors import CorruptionError, MissingDocumentsError
from threadloom.protocol import (
    Planner,
    Restored,
    configurable,
    read_entries,
    references,
    restore,
)
from threadloom.protocol.restore import RawChannel, RawList, channel_values, raw_channels

#: Most checkpoints `list` loads per page (the first page holds one, or `limit`).
PAGE = 64
_ORDER = " ORDER BY c.checkpoint_id DESC, t.thread_id, c.checkpoint_ns"
_AFTER = (
    " AND (c.checkpoint_id < ? OR (c.checkpoint_id = ? AND (t.thread_id > ? OR "
    "(t.thread_id = ? AND c.checkpoint_ns > ?))))"
)


class Loaded(NamedTuple):
    """A checkpoint read from the file: its tuple and its logical document."""

    tuple: Restored
    data: dict[str, Any]


class Reader:
    """Reads the checkpoints of one scope.

    Args:
        scope: the scope.
        values: its value resolution.
    """

    def __init__(self, scope: Scope, values: Values) -> None:
        self.scope = scope
        self.values = values

    def get(self, config: Mapping[str, Any]) -> Restored | None:
        """Return the checkpoint `config` names, or the latest of its thread and namespace."""
        conf = configurable(config)
        ns = conf.get("checkpoint_ns") or ""
        checkpoint_id = conf.get("checkpoint_id") or None
        thread_id = conf["thread_id"]
        # The latest read also fetches its namespace's head, to check it found it.
        columns = CHECKPOINT_COLUMNS + ("" if checkpoint_id else ", " + heads.HEAD_COLUMN)
        sql = (
            f"SELECT {columns}{CHECKPOINT_FROM} WHERE t.scope = ? AND t.thread_id = ? "
            "AND c.checkpoint_ns = ?"
        )
        args: list[Any] = [self.scope.id, thread_id, ns]
        if checkpoint_id:
            sql += " AND c.checkpoint_id = ?"
            args.append(checkpoint_id)
        sql += " ORDER BY c.checkpoint_id DESC LIMIT 1"

        def get(conn: apsw.Connection) -> Restored | None:
            found = fetchall(conn, sql, args)
            if not found:
                heads.check_absent(conn, self.scope.id, thread_id, ns, checkpoint_id)
                self.scope.check_threads(conn)
                return None
            if checkpoint_id:
                row = CheckpointRow(*found[0])
            else:
                row = CheckpointRow(*found[0][:-1])
                heads.check_latest(thread_id, ns, row.checkpoint_id, found[0][-1])
            return self.load(conn, [row])[0].tuple

        # Every row read here is immutable or append-only, so the statements need no
        # shared snapshot; a thread deleted between them surfaces as missing values,
        # and the read is then repeated in one transaction to answer consistently.
        try:
            with self.scope.file.connection() as conn:
                return get(conn)
        except (MissingDocumentsError, CorruptionError):
            with self.scope.file.read() as conn:
                return get(conn)

    def list(
        self,
        config: Mapping[str, Any] | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        limit: int | None = None,
        undecoded: bool = False,
    ) -> Iterator[Restored]:
        """Yield checkpoints newest first, across threads and namespaces unless `config` narrows.

        Keyset-paged: each page is one read transaction that loads only what it yields;
        no transaction stays open while the caller holds the iterator. `undecoded` leaves
        schema-2 channel values as their stored payloads (`protocol.restore.Undecoded`).
        """
        if limit is not None and limit <= 0:
            return
        where = " WHERE t.scope = ?"
        args: builtins.list[Any] = [self.scope.id]
        conf = (config or {}).get("configurable") or {}
        if conf.get("thread_id") is not None:
            where += " AND t.thread_id = ?"
            args.append(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            where += " AND c.checkpoint_ns = ?"
            args.append(conf["checkpoint_ns"])
        if conf.get("checkpoint_id"):
            where += " AND c.checkpoint_id = ?"
            args.append(conf["checkpoint_id"])
        before_id = ((before or {}).get("configurable") or {}).get("checkpoint_id")
        if before_id:
            where += " AND c.checkpoint_id < ?"
            args.append(before_id)
        wanted = dict(filter or {})
        decided = keys.condition(wanted) if wanted else None
        if wanted and decided is not None:
            where += f" AND (c.keyed = 0 OR ({decided[0]}))"
            args.extend(decided[1])
        remaining = limit
        size = min(limit, PAGE) if limit is not None else 1
        cursor: tuple[str, str, str] | None = None
        while True:
            sql = SELECT_CHECKPOINT + where + (_AFTER if cursor else "") + _ORDER + " LIMIT ?"
            bound = [*args, *(_after(cursor) if cursor else ()), size]
            with self.scope.file.read() as conn:
                rows = fetch(conn, CheckpointRow, sql, bound)
                read = len(rows)
                if rows:
                    last = rows[-1]
                    cursor = (last.checkpoint_id, last.thread_id, last.checkpoint_ns)
                if wanted:
                    rows = [r for r in rows if self._matches(conn, r, wanted, decided)]
                loaded = self.load(conn, rows, remember=False, undecoded=undecoded) if rows else []
                if read < size:
                    # Complete: check, in the same snapshot, that no checkpoint of what
                    # it covered was hidden (before yielding the last page).
                    heads.check_listed(
                        conn, self.scope.id, conf.get("thread_id"), conf.get("checkpoint_ns")
                    )
                    self.scope.check_threads(conn)
            for item in loaded:
                if wanted and not all(item.tuple.metadata.get(k) == v for k, v in wanted.items()):
                    # SQL matched on a key row the metadata does not hold: damage.
                    raise CorruptionError(
                        f"checkpoint {item.data['checkpoint_id']} of thread "
                        f"{item.data['thread_id']!r} matched filter {wanted!r} by its metadata "
                        "key rows, but its metadata differs; the file is damaged (run "
                        "`threadloom verify`) - restore it from a backup"
                    )
                yield item.tuple
                if remaining is not None:
                    remaining -= 1
                    if remaining <= 0:
                        return
            if read < size:
                return
            size = min(size * 2, PAGE)
            if remaining is not None:
                size = min(size, remaining)

    def _matches(
        self,
        conn: apsw.Connection,
        row: CheckpointRow,
        wanted: Mapping[str, Any],
        decided: tuple[str, builtins.list[Any]] | None,
    ) -> bool:
        if decided is not None and row.keyed:
            return True  # SQL decided
        stored = self.scope.content.unpack(
            conn, row.body, self.scope.body_digest(row), f"checkpoint {row.checkpoint_id}"
        )
        metadata = self.values.metadata(conn, row.thread, stored["metadata"])
        return all(metadata.get(k) == v for k, v in wanted.items())

    def load(
        self,
        conn: apsw.Connection,
        rows: Sequence[CheckpointRow],
        *,
        remember: bool = True,
        undecoded: bool = False,
    ) -> builtins.list[Loaded]:
        """Load checkpoint rows with their writes and values in a few set-based queries.

        Args:
            remember: tell the writer's memory what each checkpoint references (a put on
                it then skips stored values). `get` does; a listing does not: walking
                every checkpoint's values for that cost as much as its own work on long
                threads, and a put after a listing reads its parent's row instead.
            undecoded: leave channel values undecoded (`restore`'s `undecoded`).
        """
        scope = self.scope
        docs: list[dict[str, Any]] = []
        closures: list[tuple[Mapping[str, Any], Mapping[str, RawChannel]] | None] = []
        if remember:
            for row in rows:
                scope.touch(row.thread_id, row.thread)
        for row in rows:
            hit = scope.closures.get(_closure_key(row))
            docs.append(hit[0] if hit else self.document(conn, row))
            closures.append(hit[1] if hit else None)
        writes: dict[int, list[dict[str, Any]]] = {row.id: [] for row in rows}
        found = fetch(conn, PendingRow, SELECT_PENDING, (ids(writes),))
        # A write row read before with the same columns and stored (sealed) digest holds
        # the body verified then: only new rows are unsealed, decompressed and checked.
        keys = [_pending_key(r) for r in found]
        known = scope.pending.get_many(keys)
        new = [i for i, key in enumerate(keys) if key not in known]
        if new:
            decoded = scope.content.unpack_many(
                conn,
                [
                    (r.body, scope.body_digest(r), f"pending write {r.task_id}/{r.idx}")
                    for r in (found[i] for i in new)
                ],
            )
            fresh = [(keys[i], data) for i, data in zip(new, decoded, strict=True)]
            scope.pending.put_many(fresh, replace=False)
            known.update(fresh)
        for pending, key in zip(found, keys, strict=True):
            data = dict(known[key])  # the cached document stays as decoded
            data.update(
                task_id=pending.task_id,
                index=pending.idx,
                task_path=pending.task_path,
                channel=pending.channel,
            )
            writes[pending.owner].append(data)
        stored: dict[int, list[bytes]] = {row.id: [] for row in rows}
        for pending in found:
            stored[pending.owner].append(bytes(pending.digest))
        heads.check_pending(rows, stored)
        misses = [i for i, closure in enumerate(closures) if closure is None]
        for i in misses:
            # A checkpoint just put (get_tuple at the start of the next turn): its lists
            # are the ones the planner last encoded, no value document to fetch.
            planned = _planned(scope.planner, docs[i])
            if planned is not None:
                closures[i] = ({}, planned)
                scope.closures.put(_closure_key(rows[i]), (docs[i], closures[i]))
        misses = [i for i in misses if closures[i] is None]
        # The values of every checkpoint of a thread resolved together (`misses`); the
        # cache keeps of them only what each checkpoint's tuple needs besides its
        # channels, whose raw payloads it keeps (`_own`).
        whole: dict[int, Mapping[str, Any]] = {}
        if misses:
            resolved = self.values.resolve(
                conn, [rows[i] for i in misses], [docs[i] for i in misses]
            )
            chunks: dict[int, dict[str, list[tuple[str, bytes]]]] = {}
            for i in misses:
                thread = rows[i].thread
                fetched: Mapping[str, Any] = resolved[thread]
                raw: Mapping[str, RawChannel] = (
                    raw_channels(docs[i]["channels"], fetched, chunks.setdefault(thread, {}))
                    if docs[i]["_schema"] == 2
                    else {}
                )
                whole[i] = fetched
                closures[i] = (_own(docs[i], fetched), raw)
                scope.closures.put(_closure_key(rows[i]), (docs[i], closures[i]))
        loaded = []
        # Decoding builds many objects that all stay alive: with the cyclic collector on,
        # its young generations fill again and again and full collections walk the
        # whole process (half of a long listing, bench/README.md). One pause per page.
        elements = sum(
            len(channel.items)
            for closure in closures
            if closure is not None
            for channel in closure[1].values()
            if isinstance(channel, RawList)
        )
        with collector.paused(elements):
            for i, (row, doc, closure) in enumerate(zip(rows, docs, closures, strict=True)):
                mine = writes[row.id]
                fetched, raw = closure or ({}, {})
                if any(references(w) for w in mine):
                    fetched = {**fetched, **self.values.reachable(conn, row.thread, mine)}
                result = restore(
                    doc,
                    mine,
                    fetched,
                    scope.planner.loads,
                    sort_key=writes_sort_key,
                    raw=raw if doc["_schema"] == 2 else None,
                    undecoded=undecoded,
                    elements=scope.planner.decoded.reader(row.thread_id),
                )
                identity = (row.thread_id, row.checkpoint_ns, row.checkpoint_id)
                if remember and doc["_schema"] == 2 and identity not in scope.memory:
                    # What the checkpoint reaches through its channels too: resolved above,
                    # or again (cache first) when its closure came from the cache.
                    every = whole.get(i)
                    if every is None:
                        every = self.values.reachable(conn, row.thread, [doc])
                    every = {**every, **fetched}
                    referenced: set[str] = set()
                    for item in [doc, *mine]:
                        reached(item, every, referenced)
                    scope.memory.remember(
                        identity,
                        referenced,
                        read_entries(
                            doc["channels"], result.checkpoint.get("channel_versions") or {}
                        ),
                    )
                loaded.append(Loaded(result, doc))
        return loaded

    def document(self, conn: apsw.Connection, row: CheckpointRow) -> dict[str, Any]:
        """The logical checkpoint document of a row."""
        data: dict[str, Any] = self.scope.content.unpack(
            conn,
            row.body,
            self.scope.body_digest(row),
            f"checkpoint {row.checkpoint_id} of thread {row.thread_id!r}",
        )
        data.update(
            agent_id=self.scope.agent_id,
            thread_id=row.thread_id,
            checkpoint_ns=row.checkpoint_ns,
            _schema=row.schema,
            checkpoint_id=row.checkpoint_id,
            parent_id=row.parent_id,
        )
        return data

    # -- delta history ---------------------------------------------------------------------

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
        scope = self.scope
        chunks = scope.planner.decoded.reader(conf["thread_id"])
        with scope.file.read() as conn:
            thread = scope.thread(conn, conf["thread_id"])
            chain = chain_of(conn, thread, ns, conf.get("checkpoint_id")) if thread else []
            for start in range(0, len(chain), PAGE):
                if not remaining or thread is None:
                    break
                page = chain[start : start + PAGE]
                bodies = {
                    cid: scope.content.unpack(conn, body, digest, f"checkpoint {cid}")
                    for cid, body, digest in conn.execute(
                        f"SELECT x.checkpoint_id, x.body, {CHECKPOINT_ROWS.unsealed('x')} "
                        f"FROM checkpoints x{OWNERS} WHERE x.thread = ? AND x.checkpoint_ns = ? "
                        "AND x.checkpoint_id IN carray(?) AND x.schema = 2",
                        (thread, ns, ids(page)),
                    )
                }
                writes = self._channel_writes(conn, thread, ns, page, remaining)
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
                        fetched = self.values.reachable(conn, thread, [{"channels": here}])
                        seeds.update(channel_values(here, fetched, scope.planner.loads, chunks))
                        remaining -= here.keys()
        result: dict[str, dict[str, Any]] = {}
        for channel in channels:
            ordered = [w for group in reversed(collected[channel]) for w in group]
            entry: dict[str, Any] = {"writes": ordered}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            result[channel] = entry
        return result

    def _channel_writes(
        self, conn: apsw.Connection, thread: int, ns: str, page: Sequence[str], wanted: set[str]
    ) -> dict[str, builtins.list[tuple[str, str, Any]]]:
        """The writes of `page` to `wanted` channels, per checkpoint, in LangGraph's order."""
        found: dict[str, list[tuple[tuple[str, str, int], str, dict[str, Any]]]] = {}
        for cid, task_id, idx, task_path, channel, body, digest in conn.execute(
            f"SELECT x.checkpoint_id, {TASK_ID}, x.idx, x.task_path, x.channel, x.body, "
            f"{WRITE_ROWS.unsealed('x')} FROM writes x{OWNERS} WHERE x.thread = ? AND "
            "x.checkpoint_ns = ? AND x.checkpoint_id IN carray(?) AND x.channel IN carray(?)",
            (thread, ns, ids(page), ids(sorted(wanted))),
        ):
            data = self.scope.content.unpack(conn, body, digest, f"pending write {task_id}/{idx}")
            found.setdefault(cid, []).append(((task_path, task_id, idx), channel, data))
        result: dict[str, list[tuple[str, str, Any]]] = {}
        for cid, items in found.items():
            items.sort(key=lambda item: item[0])
            result[cid] = [
                (key[1], channel, self.values.loads(conn, thread, data["value"]))
                for key, channel, data in items
            ]
        return result


def chain_of(
    conn: apsw.Connection, thread: int, ns: str, checkpoint_id: str | None
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


def writes_sort_key(write: Mapping[str, Any]) -> tuple[str, str, int]:
    """LangGraph's `writes_sort_key`: (task_path, task_id, idx)."""
    return (write.get("task_path") or "", write["task_id"], write["index"])


def _after(cursor: tuple[str, str, str]) -> tuple[str, ...]:
    cid, thread_id, ns = cursor
    return (cid, cid, thread_id, thread_id, ns)


def _own(doc: Mapping[str, Any], fetched: Mapping[str, Any]) -> dict[str, Any]:
    """The fetched value documents a checkpoint's tuple needs besides its channels' raw
    payloads: those its `checkpoint` and `metadata` entries reach (usually none: both
    are inline). A closure keeps only these, not the values of every checkpoint read
    with it, so its cost is its own."""
    needed: set[str] = set()
    reached({"checkpoint": doc.get("checkpoint"), "metadata": doc.get("metadata")}, fetched, needed)
    return {ref: fetched[ref] for ref in needed}


def _planned(planner: Planner, doc: Mapping[str, Any]) -> dict[str, RawChannel] | None:
    """The raw channels of a schema-2 checkpoint from `planner`'s memory alone: when its
    checkpoint, metadata and channel values are inline or lists the planner last encoded
    (`Planner.planned_list`); else None (the values are resolved from the file)."""
    if doc["_schema"] != 2 or not _inline(doc["checkpoint"]) or not _inline(doc["metadata"]):
        return None
    raw: dict[str, RawChannel] = {}
    for channel, entry in doc["channels"].items():
        value = entry.get("value")
        if value is not None:
            if not _inline(value):
                return None
            raw[channel] = (value["kind"], bytes(value["payload"]))
            continue
        found = planner.planned_list(doc["thread_id"], doc["checkpoint_ns"], channel, entry["blob"])
        if found is None:
            return None
        raw[channel] = found
    return raw


def _inline(stored: Mapping[str, Any]) -> bool:
    return "payload" in stored


def _pending_key(row: PendingRow) -> tuple[Any, ...]:
    """Identity of a pending-write row's content: every column but the body, and its
    stored (sealed) digest, so a row changed in any way misses and is checked again."""
    return (*row[:-2], bytes(row.digest))


def _closure_key(row: CheckpointRow) -> tuple[Any, ...]:
    """Identity of a checkpoint row's content: its columns and stored (sealed) digest, so
    a row changed in any way misses and is decoded and checked again."""
    return (
        row.thread,
        row.thread_id,
        row.checkpoint_ns,
        row.checkpoint_id,
        row.parent_id,
        row.schema,
        row.keyed,
        bytes(row.digest),
    )
