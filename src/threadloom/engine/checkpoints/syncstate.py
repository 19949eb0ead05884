"""Where `threadloom sync` left off with each peer: the `sync_peers` and `sync_threads`
tables (FORMAT.md, "Format 8", "Sync state").

Engine layer, one scope. A thread is unchanged here since its last sync when its row id
and `seq` are the ones recorded (`threads.seq` grows with every row stored in the
thread, and row ids are never reused); the peer's side is followed by a high-water mark
of checkpoint ids. Nothing is written until a sync applies.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import NamedTuple

from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.format import features
from threadloom.engine.sql import fetchall, ids


class Synced(NamedTuple):
    """A thread as it was when last synced with a peer."""

    thread_id: str
    thread: int
    seq: int
    head: str | None
    diverged: bool


class LocalThread(NamedTuple):
    """A thread of the scope now: its row id, `seq` and root head (None: no root
    checkpoint)."""

    thread_id: str
    thread: int
    seq: int
    head: str | None


class SyncState:
    """The sync state of one scope with its peers.

    Args:
        scope: the scope.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def high_water(self, peer: str) -> str | None:
        """The highest checkpoint id `peer` held after the last sync (None: never synced)."""
        if self.scope.id is None:
            return None
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT high_water FROM sync_peers WHERE scope = ? AND peer = ?",
                (self.scope.id, peer),
            )
        return str(rows[0][0]) if rows else None

    def threads(self, peer: str) -> dict[str, Synced]:
        """Every thread synced with `peer`, by thread id."""
        if self.scope.id is None:
            return {}
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT thread_id, thread, seq, head, diverged FROM sync_threads "
                "WHERE scope = ? AND peer = ?",
                (self.scope.id, peer),
            )
        return {
            str(t): Synced(str(t), int(row), int(seq), head, bool(d))
            for t, row, seq, head, d in rows
        }

    def local(self, thread_ids: Iterable[str] | None = None) -> dict[str, LocalThread]:
        """The scope's threads now (or those of `thread_ids` it holds), from the thread
        rows and the root heads (`heads`), no body read."""
        if self.scope.id is None:
            return {}
        sql = (
            "SELECT t.thread_id, t.id, t.seq, (SELECT max(c.checkpoint_id) FROM checkpoints c "
            "WHERE c.thread = t.id AND c.checkpoint_ns = '') FROM threads t WHERE t.scope = ?"
        )
        with self.scope.file.read() as conn:
            if thread_ids is None:
                rows = fetchall(conn, sql, (self.scope.id,))
            else:
                rows = fetchall(
                    conn,
                    sql + " AND t.thread_id IN carray(?)",
                    (self.scope.id, ids(list(thread_ids))),
                )
        return {str(t): LocalThread(str(t), int(row), int(seq), head) for t, row, seq, head in rows}

    def record(self, peer: str, threads: Iterable[Synced]) -> None:
        """Record threads as synced with `peer` (one transaction)."""
        synced = list(threads)
        if not synced:
            return
        with self.scope.file.write() as conn:
            scope = self.scope.ensure_id(conn)
            self.scope.file.ensure(conn, features.SYNC)
            conn.executemany(
                "INSERT INTO sync_threads(scope, peer, thread_id, thread, seq, head, diverged) "
                "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(scope, peer, thread_id) DO UPDATE SET "
                "thread = excluded.thread, seq = excluded.seq, head = excluded.head, "
                "diverged = excluded.diverged",
                [
                    (scope, peer, s.thread_id, s.thread, s.seq, s.head, int(s.diverged))
                    for s in synced
                ],
            )

    def record_peer(self, peer: str, high_water: str) -> None:
        """Record the highest checkpoint id `peer` holds after this sync."""
        with self.scope.file.write() as conn:
            scope = self.scope.ensure_id(conn)
            self.scope.file.ensure(conn, features.SYNC)
            conn.execute(
                "INSERT INTO sync_peers(scope, peer, high_water, synced_at) VALUES(?, ?, ?, ?) "
                "ON CONFLICT(scope, peer) DO UPDATE SET high_water = "
                "max(high_water, excluded.high_water), synced_at = excluded.synced_at",
                (scope, peer, high_water, time.time()),
            )

    def forget(self, peer: str, thread_id: str) -> None:
        """Forget a thread's sync with `peer` (the next sync compares it whole)."""
        with self.scope.file.write() as conn:
            conn.execute(
                "DELETE FROM sync_threads WHERE scope = ? AND peer = ? AND thread_id = ?",
                (self.scope.id, peer, thread_id),
            )
