"""Deleting, copying, pruning and collecting the threads of a scope.

Engine layer. Invariants: nothing disappears except through these operations; each
runs in one write transaction that also unlinks the blocks of the rows it deletes,
bumps the GC epoch when values go, and never collects a value younger than the
grace period (SPEC §6).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, cast

import apsw

from threadloom.engine.checkpoints.reader import chain_of
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.content import deltas
from threadloom.engine.format import refkeys
from threadloom.engine.format.tables import (
    BODY_TABLES,
    CHECKPOINT_ROWS,
    OWNERS,
    SELECT_CHECKPOINT,
    TASK_ID,
    VALS,
    WRITE_ROWS,
    BodyTable,
    CheckpointRow,
)
from threadloom.engine.sql import fetch, fetchall, ids

#: Tables a thread's rows live in, in the order a deletion empties them.
_THREAD_TABLES = ("writes", "checkpoints", "vals")


class Maintenance:
    """Deletes, copies, prunes and collects the threads of one scope.

    Args:
        scope: the scope.
        values: its value resolution.
    """

    def __init__(self, scope: Scope, values: Values) -> None:
        self.scope = scope
        self.values = values

    def delete_thread(self, thread_id: str) -> None:
        """Delete every document of `thread_id` in this scope."""
        scope = self.scope
        scope.memory.forget(thread_id)
        with scope.file.write() as conn:
            thread = scope.thread(conn, thread_id)
            if thread is None:
                return
            self.delete_rows(conn, thread)
            scope.bump_epoch(conn)
            scope.content.sweep(conn, scope.grace)
        scope.forget_thread(thread_id, thread)

    def delete_rows(
        self, conn: apsw.Connection, thread: int, released: set[bytes] | None = None
    ) -> dict[str, int]:
        """Delete a thread's rows and its index row (inside the caller's write); return
        how many rows of each table went. The caller bumps the epoch and sweeps (the
        block keys the rows listed are added to `released`)."""
        content = self.scope.content
        conn.execute(
            "DELETE FROM checkpoint_keys WHERE checkpoint IN "
            "(SELECT id FROM checkpoints WHERE thread = ?)",
            (thread,),
        )
        gone: dict[str, int] = {}
        for table in _THREAD_TABLES:
            content.unlink_rows(conn, table, "thread = ?", (thread,), released)
            conn.execute(f"DELETE FROM {table} WHERE thread = ?", (thread,))
            gone[table] = conn.changes()
        conn.execute("DELETE FROM threads WHERE id = ?", (thread,))
        return gone

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints (and their writes) whose metadata `run_id` is in `run_ids`.

        Checkpoints with metadata keys are found through the run index; older or
        encrypted ones by decoding their metadata.
        """
        wanted = set(run_ids)
        if not wanted:
            return
        scope = self.scope
        with scope.file.write() as conn:
            doomed: dict[int, list[tuple[int, str, str]]] = {}
            for rid, thread, ns, cid in conn.execute(
                "SELECT c.id, c.thread, c.checkpoint_ns, c.checkpoint_id FROM checkpoint_keys k "
                "JOIN checkpoints c ON c.id = k.checkpoint JOIN threads t ON c.thread = t.id "
                "WHERE k.key = 'run_id' AND k.value IN carray(?) AND t.scope = ?",
                (ids(sorted(r for r in wanted if isinstance(r, str))), scope.id),
            ):
                doomed.setdefault(thread, []).append((rid, ns, cid))
            for row in fetch(
                conn,
                CheckpointRow,
                SELECT_CHECKPOINT + " WHERE t.scope = ? AND c.keyed = 0",
                (scope.id,),
            ):
                stored = scope.content.unpack(
                    conn, row.body, scope.body_digest(row), f"checkpoint {row.checkpoint_id}"
                )
                metadata = self.values.metadata(conn, row.thread, stored["metadata"])
                if metadata.get("run_id") in wanted:
                    doomed.setdefault(row.thread, []).append(
                        (row.id, row.checkpoint_ns, row.checkpoint_id)
                    )
            for thread, items in doomed.items():
                self._delete_checkpoints(conn, thread, items)
                self.collect(conn, thread)
                scope.memory.forget(scope.thread_name(conn, thread))

    def copy_thread(self, source: str, target: str) -> None:
        """Copy every document of thread `source` into thread `target` (same scope)."""
        scope = self.scope
        now = time.time()
        with scope.file.write() as conn:
            origin = scope.thread(conn, source)
            if origin is None:
                return
            copy = scope.ensure_thread(conn, target, now)
            # The seq moves even when the target was ahead: readers detect new rows by it.
            conn.execute(
                "UPDATE threads SET seq = max(seq, (SELECT seq FROM threads WHERE id = ?1)) + 1 "
                "WHERE id = ?2",
                (origin, copy),
            )
            # The copies share the originals' blocks: count the chunked rows the target
            # does not hold yet (the others are skipped by ON CONFLICT DO NOTHING).
            for table, described in BODY_TABLES.items():
                if table not in _THREAD_TABLES:
                    continue
                same = " AND ".join(f"d.{column} = s.{column}" for column in described.identity)
                shared = fetchall(
                    conn,
                    f"SELECT s.body FROM {table} s WHERE s.thread = ?1 AND s.blocks > 0 AND "
                    f"NOT EXISTS (SELECT 1 FROM {table} d WHERE d.thread = ?2 AND {same})",
                    (origin, copy),
                )
                scope.content.relink(conn, [r[0] for r in shared])
            # Each copy is sealed for the target thread (`?4`, `?5`: the scope; `?6`, `?7`:
            # the source and target thread ids); the bodies are copied as they are.
            moved = (origin, copy, now, scope.namespace, scope.agent_id, source, target)
            conn.execute(
                "INSERT INTO vals(thread, ref_key, seq, body, digest, created_at, blocks) "
                f"SELECT ?2, ref_key, seq, body, {_rebound(VALS)}, ?3, blocks FROM vals x "
                "WHERE thread = ?1 ON CONFLICT DO NOTHING",
                moved,
            )
            # A copied delta whose base the target held already as a delta of its own.
            deltas.settle(conn, scope.content.raw_many, copy, source=origin)
            conn.execute(
                "INSERT INTO checkpoints(thread, checkpoint_ns, checkpoint_id, parent_id, schema, "
                "seq, body, digest, created_at, blocks, keyed) SELECT ?2, checkpoint_ns, "
                f"checkpoint_id, parent_id, schema, seq, body, {_rebound(CHECKPOINT_ROWS)}, ?3, "
                "blocks, keyed FROM checkpoints x WHERE thread = ?1 ON CONFLICT DO NOTHING",
                moved,
            )
            conn.execute(
                "INSERT INTO checkpoint_keys(checkpoint, key, value) SELECT d.id, k.key, k.value "
                "FROM checkpoints s JOIN checkpoint_keys k ON k.checkpoint = s.id "
                "JOIN checkpoints d ON d.thread = ?2 AND d.checkpoint_ns = s.checkpoint_ns "
                "AND d.checkpoint_id = s.checkpoint_id WHERE s.thread = ?1 "
                "ON CONFLICT DO NOTHING",
                (origin, copy),
            )
            conn.execute(
                "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_key, idx, "
                "task_path, channel, schema, seq, body, digest, created_at, blocks) "
                "SELECT ?2, checkpoint_ns, "
                "checkpoint_id, task_key, idx, task_path, channel, schema, seq, body, "
                f"{_rebound(WRITE_ROWS)}, ?3, blocks FROM writes x WHERE thread = ?1 "
                "ON CONFLICT DO NOTHING",
                moved,
            )
            # The copy is the same conversation: what the application set comes along
            # (where the target has nothing of its own), the counts are its rows'.
            conn.execute(
                "UPDATE threads SET owner = coalesce(threads.owner, o.owner), "
                "title = CASE WHEN threads.titled = 0 THEN coalesce(o.title, threads.title) "
                "ELSE threads.title END, titled = max(threads.titled, o.titled), "
                "summary = coalesce(threads.summary, o.summary), "
                "tags = coalesce(threads.tags, o.tags) FROM (SELECT owner, title, titled, "
                "summary, tags FROM threads WHERE id = ?1) o WHERE threads.id = ?2",
                (origin, copy),
            )
            scope.reindex(conn, copy)

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
        scope = self.scope
        for thread_id in thread_ids:
            if strategy == "delete":
                self.delete_thread(thread_id)
                continue
            scope.memory.forget(thread_id)
            with scope.file.write() as conn:
                thread = scope.thread(conn, thread_id)
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
                self.collect(conn, thread)

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
            metadata = self.values.metadata(conn, thread, body["metadata"])
            counters = metadata.get("counters_since_delta_snapshot") or {}
            needed = set(counters) - body["channels"].keys()
            if not needed:
                continue
            for ancestor in chain_of(conn, thread, ns, head):
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
            f"SELECT x.body, {CHECKPOINT_ROWS.unsealed('x')} FROM checkpoints x{OWNERS} "
            "WHERE x.thread = ? AND x.checkpoint_ns = ? AND x.checkpoint_id = ?",
            (thread, ns, checkpoint_id),
        )
        if not rows:
            return None
        return cast(
            "dict[str, Any]",
            self.scope.content.unpack(conn, rows[0][0], rows[0][1], f"checkpoint {checkpoint_id}"),
        )

    def _delete_checkpoints(
        self, conn: apsw.Connection, thread: int, items: Sequence[tuple[int, str, str]]
    ) -> None:
        content = self.scope.content
        where = "thread = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
        for rid, ns, cid in items:
            content.unlink_rows(conn, "writes", where, (thread, ns, cid))
            content.unlink_rows(conn, "checkpoints", "id = ?", (rid,))
            conn.execute(f"DELETE FROM writes WHERE {where}", (thread, ns, cid))
            conn.execute("DELETE FROM checkpoint_keys WHERE checkpoint = ?", (rid,))
            conn.execute("DELETE FROM checkpoints WHERE id = ?", (rid,))

    def collect(self, conn: apsw.Connection, thread: int) -> int:
        """Delete the thread's values no document references, older than the grace period.

        Runs inside the caller's write transaction. Returns how many were deleted.
        """
        scope = self.scope
        items = [
            (body, digest, f"checkpoint {cid}")
            for cid, body, digest in conn.execute(
                f"SELECT x.checkpoint_id, x.body, {CHECKPOINT_ROWS.unsealed('x')} "
                f"FROM checkpoints x{OWNERS} WHERE x.thread = ?",
                (thread,),
            )
        ]
        items.extend(
            (body, digest, f"pending write {tid}")
            for tid, body, digest in conn.execute(
                f"SELECT {TASK_ID}, x.body, {WRITE_ROWS.unsealed('x')} FROM writes x{OWNERS} "
                "WHERE x.thread = ?",
                (thread,),
            )
        )
        roots: list[dict[str, Any]] = scope.content.unpack_many(conn, items)
        live = self.values.reachable(conn, thread, roots).keys()
        cutoff = time.time() - scope.grace
        stored = fetchall(
            conn, "SELECT ref_key FROM vals WHERE thread = ? AND created_at < ?", (thread, cutoff)
        )
        doomed = [ref for ref in refkeys.texts(row[0] for row in stored) if ref not in live]
        if doomed:
            where = "thread = ? AND ref_key IN carray(?)"
            deltas.settle(conn, scope.content.raw_many, thread, doomed)
            gone = (thread, ids(refkeys.keys(doomed)))
            scope.content.unlink_rows(conn, "vals", where, gone)
            conn.execute(f"DELETE FROM vals WHERE {where}", gone)
            scope.cache.drop(thread, doomed)
            scope.bump_epoch(conn)
        scope.content.sweep(conn, scope.grace)
        scope.reindex(conn, thread)
        return len(doomed)


def _rebound(table: BodyTable) -> str:
    """The digest of a copied row of `table` (aliased `x`) for `copy_thread`'s parameters."""
    return table.rebound("x", "?4, ?5", "?6", "?7")
