"""Retention: keep the last checkpoints of each thread, delete idle threads, collect
what that orphans (docs/retention.md).

Engine layer. Per thread, one write transaction (in a dry run a read transaction that
decides the same and changes nothing):

1. a thread whose last write (the thread index's `updated_at`) is older than `max_age`
   and than the grace is deleted whole, unless a live run holds its lease
   (`Leases.live`: a lease whose holder's process is gone does not count);
2. otherwise the checkpoints kept are decided: SPEC §6.1 (`protocol.kept_checkpoints`:
   the `keep_last` newest root checkpoints, the subgraph checkpoints linked to them
   through `metadata.parents[""]`, the newest of unlinked namespaces), plus the
   ancestors a kept checkpoint's DeltaChannels are rebuilt from; the others go with
   their pending writes and metadata keys;
3. the thread's values no remaining row reaches go in the same transaction when they
   were stored before `min(now - min_age, time.time() - grace)` (`liveness.py`), and
   with them the blocks no row lists any more (`BlockStore.sweep(released=)`); the
   thread index loses the bytes the deleted rows took.

`now` moves `min_age` and `max_age` only: the grace is always measured on the real
clock, so a run with a clock ahead never collects a value written a moment ago.

Invariants: a kept checkpoint reads back exactly as before (its values, pending writes
and DeltaChannel history stay); no value younger than the scope's grace is collected;
the head of every namespace is kept, so the index's message count, title and owner
hold; a prune does not touch `updated_at` (it is not activity).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import apsw

from threadloom.engine.checkpoints.liveness import Liveness
from threadloom.engine.checkpoints.maintenance import Maintenance
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.content.drops import Drops
from threadloom.engine.conversations.leases import Leases
from threadloom.engine.format.keys import PLAIN_KINDS
from threadloom.engine.format.tables import BodyTable
from threadloom.engine.sql import fetchall, ids
from threadloom.engine.threads.threadindex import utc
from threadloom.errors import CorruptionError, MissingDocumentsError
from threadloom.protocol import Retained, kept_checkpoints, plain, raw_value, root_parent

log = logging.getLogger("threadloom.engine.conversations.retention")

#: Most threads a report lists under `pruned` and `expired_threads` (as naas's job).
LISTED = 200
#: Written by LangGraph into the metadata of a checkpoint whose DeltaChannels changed
#: since their last snapshot.
DELTA_COUNTERS = "counters_since_delta_snapshot"

#: `progress(done, total)`, called after each thread.
Progress = Callable[[int, int], None]


@dataclass
class ThreadPruned:
    """What retention deleted (or would delete) from one thread it kept: naas's
    per-thread `RetentionReport` (SPEC §6.2: `thread_id`, `keep_last`, `applied`, then
    the counts), plus `bytes`."""

    thread_id: str
    keep_last: int | None = None
    applied: bool = False
    kept: int = 0
    checkpoints: int = 0
    writes: int = 0
    values: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass
class ThreadExpired:
    """A thread deleted whole (or that would be) because it was idle past `max_age`."""

    thread_id: str
    #: Its last write, a timezone-aware UTC datetime.
    updated_at: datetime
    checkpoints: int = 0
    writes: int = 0
    values: int = 0
    bytes: int = 0

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (`updated_at` as ISO-8601 UTC)."""
        return {**self.__dict__, "updated_at": self.updated_at.isoformat()}


@dataclass
class RetentionReport:
    """What one retention run deleted, or in a dry run would delete (docs/cli.md, prune).

    Attributes:
        applied: False for a dry run.
        namespace, agent_id: the scope.
        keep_last, min_age, max_age: the policy applied.
        threads: threads considered.
        kept: checkpoints kept (in the threads not expired).
        checkpoints, writes, values: rows deleted, expired threads included.
        bytes: what the deleted rows took, as the thread index counts them.
        blocks: content blocks deleted: those no row lists any more after the
            deletions (freed in the same transaction), and those other deletions
            released whose grace ended (swept with them).
        waiting: values nothing references that were kept because they are younger
            than `min_age` (or the grace): a later run collects them.
        expired: the threads deleted whole.
        pruned: the threads kept that lost rows.
        damaged: threads left alone because a body failed its check (run verify).
        unreadable: threads some of whose checkpoint metadata could not be read
            (encrypted, and the run has no key or another serializer): retention kept
            what it could not decide (whole ancestries; subgraph checkpoints as
            unlinked). Run it with the serializer that wrote them.
    """

    applied: bool
    namespace: str
    agent_id: str
    keep_last: int | None
    min_age: float
    max_age: float | None
    threads: int = 0
    kept: int = 0
    checkpoints: int = 0
    writes: int = 0
    values: int = 0
    bytes: int = 0
    blocks: int = 0
    waiting: int = 0
    expired: list[ThreadExpired] = field(default_factory=list)
    pruned: list[ThreadPruned] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The report as `threadloom prune --json` prints it (naas's prune-memory shape,
        with `bytes`, `blocks`, `waiting`, `max_age`, `expired_threads`, `damaged` and
        `unreadable`)."""
        return {
            "mode": "applied" if self.applied else "dry-run",
            "target": {"namespace": self.namespace, "agent_id": self.agent_id},
            "keep_last": self.keep_last,
            "min_age": self.min_age,
            "max_age": self.max_age,
            "threads": self.threads,
            "kept": self.kept,
            "checkpoints": self.checkpoints,
            "writes": self.writes,
            "values": self.values,
            "bytes": self.bytes,
            "blocks": self.blocks,
            "waiting": self.waiting,
            "expired_threads": [e.as_json() for e in self.expired[:LISTED]],
            "expired_omitted": max(0, len(self.expired) - LISTED),
            "pruned": [p.as_json() for p in self.pruned[:LISTED]],
            "pruned_omitted": max(0, len(self.pruned) - LISTED),
            "damaged": list(self.damaged),
            "unreadable": list(self.unreadable),
        }


class _Row(NamedTuple):
    id: int
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    schema: int
    keyed: int


class _Thread(NamedTuple):
    id: int
    thread_id: str
    updated_at: float
    bytes: int


@dataclass
class _Simulated:
    """What a dry run's earlier threads would have changed, so that its `blocks` is the
    applied run's: the block references their deletions drop, and the released blocks
    their sweeps delete."""

    released: Counter[bytes] = field(default_factory=Counter)
    swept: set[bytes] = field(default_factory=set)


class Retainer:
    """Runs retention over the threads of one scope (the saver's `Retention` mixin and
    the CLI's `prune` reach it through `CheckpointStore.retain`).

    Args:
        scope: the scope.
        maintenance: its maintenance (whole-thread deletion).
        leases: its run leases (a thread a live run holds is not idle).
    """

    def __init__(self, scope: Scope, maintenance: Maintenance, leases: Leases) -> None:
        self.scope = scope
        self.maintenance = maintenance
        self.leases = leases

    def run(
        self,
        *,
        keep_last: int | None,
        max_age: float | None,
        min_age: float,
        threads: Sequence[str] | None = None,
        apply: bool = True,
        now: float | None = None,
        progress: Progress | None = None,
    ) -> RetentionReport:
        """Apply a retention policy (checked by the caller) to the scope's threads, or to
        `threads`; see the module docstring. One transaction per thread."""
        scope = self.scope
        moment = time.time() if now is None else now
        report = RetentionReport(
            apply, scope.namespace, scope.agent_id, keep_last, min_age, max_age
        )
        todo = self._threads(threads)
        # The grace is measured on the real clock, whatever `now` says: no value younger
        # than it may go (a client may be about to reference it), and a thread's last
        # write is at least as recent as its newest value.
        safe = time.time() - scope.grace
        cutoff = min(moment - min_age, safe)
        idle = None if max_age is None else min(moment - max_age, safe)
        gone: set[int] = set()
        simulated = _Simulated()
        try:
            for done, (row, thread_id) in enumerate(todo, 1):
                expired = len(report.expired)
                changed = False
                try:
                    with scope.file.write() if apply else scope.file.read() as conn:
                        changed = self._one(conn, report, simulated, row, keep_last, idle, cutoff)
                except (CorruptionError, MissingDocumentsError) as exc:
                    log.warning(
                        "%s: retention left thread %r alone: %s", scope.file.path, thread_id, exc
                    )
                    report.damaged.append(thread_id)
                    if report.unreadable[-1:] == [thread_id]:  # left alone: damaged only
                        report.unreadable.pop()
                if apply and changed:
                    # The values deleted were dropped from the cache in the transaction.
                    scope.forget_thread(thread_id)
                    if len(report.expired) > expired:
                        gone.add(row)
                if progress is not None:
                    progress(done, len(todo))
        finally:
            if gone:  # one pass over the cache for every thread deleted whole
                scope.cache.drop_threads(gone)
        if report.unreadable:
            log.warning(
                "%s: retention could not read the checkpoint metadata of %d threads (%s) and "
                "kept their whole history; run it with the serializer that wrote them "
                "(saver.apply_retention on a saver with the key)",
                scope.file.path,
                len(report.unreadable),
                ", ".join(repr(t) for t in report.unreadable[:3])
                + (", ..." if len(report.unreadable) > 3 else ""),
            )
        return report

    def _threads(self, wanted: Sequence[str] | None) -> list[tuple[int, str]]:
        if self.scope.id is None:
            return []
        with self.scope.file.read() as conn:
            rows = fetchall(
                conn,
                "SELECT id, thread_id FROM threads WHERE scope = ? ORDER BY thread_id",
                (self.scope.id,),
            )
        if wanted is None:
            return [(int(r), str(t)) for r, t in rows]
        named = set(wanted)
        return [(int(r), str(t)) for r, t in rows if t in named]

    def _one(
        self,
        conn: apsw.Connection,
        report: RetentionReport,
        simulated: _Simulated,
        row: int,
        keep_last: int | None,
        idle: float | None,
        cutoff: float,
    ) -> bool:
        """Decide (and apply) one thread; True when it lost rows."""
        found = fetchall(
            conn, "SELECT id, thread_id, updated_at, bytes FROM threads WHERE id = ?", (row,)
        )
        if not found:  # deleted since the list was read
            return False
        thread = _Thread(*found[0])
        report.threads += 1
        if (
            idle is not None
            and thread.updated_at < idle
            and not self.leases.live(conn, [thread.thread_id])
        ):
            self._expire(conn, report, simulated, thread)
            return True
        if keep_last is None:
            return False
        scope = self.scope

        def unseal(table: BodyTable, digest: bytes, *columns: str | int | None) -> bytes:
            return scope.seal(table, bytes(digest), thread.thread_id, *columns)

        live = Liveness(conn, scope.content, thread.id, unseal)
        metadata = _Metadata(scope, live)
        rows, bodies = self._decide(conn, live, metadata, thread.id, keep_last)
        if metadata.unreadable:
            report.unreadable.append(thread.thread_id)
        doomed = [r for r in rows if r.id not in bodies]
        kept = [r.id for r in rows if r.id in bodies]
        report.kept += len(kept)
        live.mark(bodies.values())
        pairs = {(r.checkpoint_ns, r.checkpoint_id) for r in doomed}
        live.later(lambda: [body for _, body in live.writes(pairs)])
        gone_values, young = live.unreferenced(cutoff)
        report.waiting += young
        if not doomed and not gone_values:
            return False
        outcome = ThreadPruned(thread.thread_id, keep_last, report.applied, kept=len(kept))
        drops = Drops(conn, self.scope.content)
        if doomed:
            doomed_ids = ids([r.id for r in doomed])
            # The checkpoints go first: the trigger of each pending write deleted after
            # its checkpoint then updates no row (docs/FORMAT.md, format 4 censuses).
            outcome.checkpoints = drops.add("checkpoints", "id IN carray(?)", (doomed_ids,))
            outcome.writes = drops.add(
                "writes",
                "thread = ?1 AND (checkpoint_ns, checkpoint_id) IN "
                "(SELECT checkpoint_ns, checkpoint_id FROM checkpoints WHERE id IN carray(?2))",
                (thread.id, doomed_ids),
                delete=(
                    "DELETE FROM writes WHERE thread = ? AND checkpoint_ns = ? "
                    "AND checkpoint_id = ?",
                    [(thread.id, r.checkpoint_ns, r.checkpoint_id) for r in doomed],
                ),
            )
        if gone_values:
            outcome.values = drops.add_values(thread.id, gone_values)
        outcome.bytes = drops.bytes
        report.pruned.append(outcome)
        report.checkpoints += outcome.checkpoints
        report.writes += outcome.writes
        report.values += outcome.values
        report.bytes += outcome.bytes
        if report.applied:
            if doomed:
                conn.execute(
                    "DELETE FROM checkpoint_keys WHERE checkpoint IN carray(?)",
                    (ids([r.id for r in doomed]),),
                )
            drops.apply()
            conn.execute(
                "UPDATE threads SET bytes = bytes - ? WHERE id = ?", (outcome.bytes, thread.id)
            )
            if gone_values:
                self.scope.cache.drop(thread.id, gone_values)
                self.scope.bump_epoch(conn)
            report.blocks += self.scope.content.sweep(conn, self.scope.grace, drops.released)
        else:
            report.blocks += self._would_sweep(conn, drops, simulated)
        return True

    def _would_sweep(self, conn: apsw.Connection, drops: Drops, simulated: _Simulated) -> int:
        """The blocks an applied run's sweep would delete after `drops` (a dry run): those
        only these rows list (after what earlier threads would release), and the
        released ones past their grace that no earlier thread's sweep took."""
        freed = drops.freed(simulated.released)
        simulated.released.update(drops.listed)
        old = set(self.scope.content.sweepable(conn, self.scope.grace)) - simulated.swept
        simulated.swept |= old
        return freed + len(old)

    def _expire(
        self,
        conn: apsw.Connection,
        report: RetentionReport,
        simulated: _Simulated,
        thread: _Thread,
    ) -> None:
        expired = ThreadExpired(thread.thread_id, utc(thread.updated_at), bytes=thread.bytes)
        drops = Drops(conn, self.scope.content)
        expired.writes = drops.add("writes", "thread = ?", (thread.id,))
        expired.checkpoints = drops.add("checkpoints", "thread = ?", (thread.id,))
        expired.values = drops.add("vals", "thread = ?", (thread.id,))
        if report.applied:
            released: set[bytes] = set()
            self.maintenance.delete_rows(conn, thread.id, released)
            self.scope.bump_epoch(conn)
            report.blocks += self.scope.content.sweep(conn, self.scope.grace, released)
        else:
            report.blocks += self._would_sweep(conn, drops, simulated)
        report.expired.append(expired)
        report.checkpoints += expired.checkpoints
        report.writes += expired.writes
        report.values += expired.values
        report.bytes += expired.bytes

    # -- which checkpoints stay ------------------------------------------------------------

    def _decide(
        self,
        conn: apsw.Connection,
        live: Liveness,
        read: _Metadata,
        thread: int,
        keep_last: int,
    ) -> tuple[list[_Row], dict[int, Mapping[str, Any]]]:
        """The thread's checkpoint rows, and the decoded bodies of those kept (by row id)."""
        rows = [
            _Row(*r)
            for r in fetchall(
                conn,
                "SELECT id, checkpoint_ns, checkpoint_id, parent_id, schema, keyed "
                "FROM checkpoints WHERE thread = ?",
                (thread,),
            )
        ]
        bodies: dict[int, Mapping[str, Any]] = {}
        children = [r.id for r in rows if r.checkpoint_ns != ""]
        if children:
            for key, body in live.checkpoints(" AND x.id IN carray(?)", (ids(children),)):
                bodies[key[0]] = body
        retained = []
        for r in rows:
            parent = None
            if r.checkpoint_ns != "":
                metadata = read(bodies[r.id])
                parent = root_parent(metadata) if metadata is not None else None
            retained.append(Retained(r.checkpoint_ns, r.checkpoint_id, parent))
        pairs = kept_checkpoints(retained, keep_last)
        kept = {r.id for r in rows if (r.checkpoint_ns, r.checkpoint_id) in pairs}
        missing = [r for r in kept if r not in bodies]
        if missing:
            for key, body in live.checkpoints(" AND x.id IN carray(?)", (ids(missing),)):
                bodies[key[0]] = body
        kept |= _Ancestors(read, conn, live, rows, bodies).of(kept)
        for r in rows:
            if r.id not in kept:
                bodies.pop(r.id, None)
            elif r.id not in bodies:
                bodies[r.id] = live.checkpoints(" AND x.id = ?", (r.id,))[0][1]
        return rows, bodies


class _Metadata:
    """The checkpoints' metadata of one thread, read for its retention decision;
    `unreadable` once one could not be read."""

    def __init__(self, scope: Scope, live: Liveness) -> None:
        self.scope = scope
        self.live = live
        self.unreadable = False

    def __call__(self, body: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """A checkpoint's metadata, read class-free when it is plain text, with the
        scope's serializer otherwise; None when it cannot be read (encrypted, no key)."""
        stored = body.get("metadata")
        if not isinstance(stored, Mapping):
            return None
        try:
            parts = list(stored.get("parts") or ())
            kind, payload = raw_value(stored, self.live.values(parts) if parts else {})
            if kind in PLAIN_KINDS:
                value = plain(kind, payload)
            elif self.scope.serialization is not None:
                value = self.scope.planner.loads((kind, payload))
            else:
                self.unreadable = True
                return None
        except Exception:  # unreadable metadata: the caller keeps what it cannot decide
            self.unreadable = True
            return None
        return value if isinstance(value, Mapping) else None


class _Ancestors:
    """The ancestors kept checkpoints' DeltaChannels are rebuilt from.

    A DeltaChannel changed since its last snapshot is named in the checkpoint's
    `counters_since_delta_snapshot` metadata and absent from its channels; its history
    runs back to the nearest ancestor holding its value, and every checkpoint on the
    way (with its pending writes) stays. A kept checkpoint whose metadata cannot be
    read keeps its whole ancestry.
    """

    def __init__(
        self,
        metadata: _Metadata,
        conn: apsw.Connection,
        live: Liveness,
        rows: Sequence[_Row],
        bodies: dict[int, Mapping[str, Any]],
    ) -> None:
        self.metadata = metadata
        self.live = live
        self.rows = {r.id: r for r in rows}
        self.by_key = {(r.checkpoint_ns, r.checkpoint_id): r for r in rows}
        self.bodies = bodies
        self.conn = conn
        #: Channels some walk was looking for when it reached a checkpoint (None: all).
        self.searched: dict[int, set[str] | None] = {}

    def of(self, kept: set[int]) -> set[int]:
        keyed = [k for k in kept if self.rows[k].keyed]
        counted = (
            {
                int(r[0])
                for r in fetchall(
                    self.conn,
                    "SELECT checkpoint FROM checkpoint_keys "
                    "WHERE key = ? AND checkpoint IN carray(?)",
                    (DELTA_COUNTERS, ids(keyed)),
                )
            }
            if keyed
            else set()
        )
        added: set[int] = set()
        for k in sorted(kept, reverse=True):  # newest first: later walks stop sooner
            row = self.rows[k]
            if row.schema != 2 or (row.keyed and k not in counted):
                continue
            needed = self._needed(self.bodies[k])
            if needed is None or needed:
                self._walk(row, needed, added)
        return added

    def _needed(self, body: Mapping[str, Any]) -> set[str] | None:
        metadata = self.metadata(body)
        if metadata is None:
            return None
        counters = metadata.get(DELTA_COUNTERS) or {}
        if not isinstance(counters, Mapping):
            return None
        return set(counters) - set(body.get("channels") or {})

    def _walk(self, row: _Row, needed: set[str] | None, added: set[int]) -> None:
        while needed is None or needed:
            if row.parent_id is None:
                return
            parent = self.by_key.get((row.checkpoint_ns, row.parent_id))
            if parent is None:
                return
            seen = self.searched.get(parent.id, set())
            if seen is None or (needed is not None and needed <= seen):
                return  # a walk looking for these channels went on from here already
            self.searched[parent.id] = None if needed is None else seen | needed
            added.add(parent.id)
            body = self.bodies.get(parent.id)
            if body is None:
                body = self.live.checkpoints(" AND x.id = ?", (parent.id,))[0][1]
                self.bodies[parent.id] = body
            if needed is not None:
                if parent.schema != 2:
                    return  # a schema-1 checkpoint holds every channel's value
                needed = needed - set(body.get("channels") or {})
            row = parent
