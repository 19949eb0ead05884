"""The moves of `threadloom sync` for one thread: pull, push, and what a divergence does.

NATS layer, private to `threadloom.nats.sync` (its module docstring says why each move is
made as it is). Pulls fetch the values the file lacks level by level and verify them
against their refs before one import transaction; pushes put what the peer lacks with
export's own steps (`transfer`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from threadloom.documents import ThreadReport
from threadloom.engine import CheckpointStore
from threadloom.engine.checkpoints import Synced, SyncState
from threadloom.errors import CheckpointConflictError, CollectionNotFoundError
from threadloom.nats.client import DocumentClient
from threadloom.nats.transfer import Document, _groups, _put_thread, fetch_thread, rekey
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES
from threadloom.protocol.constants import MAX_IN_VALUES, READ_BUDGET
from threadloom.protocol.digests import problems
from threadloom.protocol.lineage import VALUES, diverged, put_order
from threadloom.protocol.read import references
from threadloom.protocol.refs import collection_of, key_of


@dataclass
class ThreadSync:
    """What syncing one thread found and did (`per_thread` of the report)."""

    thread_id: str
    #: Checkpoints to push / pull (dry run) or pushed / pulled (applied).
    pushed: int = 0
    pulled: int = 0
    documents_pushed: int = 0
    documents_pulled: int = 0
    #: Checkpoints of the thread's changes the other side held already.
    present: int = 0
    diverged: bool = False
    skipped: bool = False
    #: The thread holding the peer's history of a diverged thread, or the file's own
    #: before `prefer remote` replaced it.
    copy: str | None = None
    resolved: str | None = None
    conflicts: list[str] = field(default_factory=list)


def id_at(nanoseconds: int) -> str:
    """The lowest uuid6 checkpoint id (LangGraph's) of a moment, in nanoseconds since the
    epoch: ids written later sort after it."""
    stamp = nanoseconds // 100 + 0x01B21DD213814000  # 100 ns steps since 1582-10-15
    high, low = (stamp >> 12) & 0xFFFFFFFFFFFF, stamp & 0x0FFF
    return f"{high >> 16:08x}-{high & 0xFFFF:04x}-6{low:03x}-8000-000000000000"


def peer_identity(peer: str, namespace: str, agent_id: str) -> str:
    """The key of a peer's sync state: its name, the namespace and agent id synced."""
    return f"{peer}|{namespace}|{agent_id}"


class Done:
    """A synced thread's new state and the highest checkpoint id the peer now holds of it."""

    def __init__(self, synced: Synced | None, high: str, split: bool = False) -> None:
        self.synced = synced
        self.high = high
        self.split = split


class ThreadMoves:
    """One sync's moves, thread by thread."""

    def __init__(
        self,
        store: CheckpointStore,
        client: DocumentClient,
        remote_agent: str,
        peer: str,
        apply: bool,
    ) -> None:
        self.store = store
        self.view = store.view
        self.client = client
        self.agent = remote_agent
        self.peer = peer
        self.apply = apply
        #: The lowest checkpoint id of the sync's start (uuid6 ids order by time).
        self.started = id_at(time.time_ns())
        self.state = SyncState(store.scope)

    async def remote_checkpoints(
        self, mark: str | None, threads: Sequence[str] | None
    ) -> dict[str, list[dict[str, Any]]]:
        """The peer's checkpoints above `mark` (all without one), by thread: newest first,
        the order the savers read in (which `threadloom serve` pages from its columns)."""
        found: dict[str, list[dict[str, Any]]] = {}
        where: list[tuple[str, str, Any]] = [("agent_id", "eq", self.agent)]
        if mark is not None:
            where.append(("checkpoint_id", "gt", mark))
        if threads is not None and len(threads) == 1:
            where.append(("thread_id", "eq", threads[0]))
        try:
            async for item in self.client.find(
                CHECKPOINTS, where, order_by=("checkpoint_id", "desc"), max_bytes=READ_BUDGET
            ):
                found.setdefault(item.data["thread_id"], []).append(item.data)
        except CollectionNotFoundError:
            return {}
        return found

    async def thread(
        self,
        entry: ThreadSync,
        base: Synced | None,
        new: Sequence[dict[str, Any]],
        *,
        complete: bool = False,
    ) -> Done:
        """Sync one thread from `base` (None: compare it whole) given the peer's new
        checkpoints of it (`new`, those above the mark; `complete`: all it holds)."""
        thread_id = entry.thread_id
        before = self.state.local([thread_id]).get(thread_id)
        found = self.view.heads(thread_id)
        heads = [h._asdict() for h in found]
        if base is None:
            if complete:
                anchors = [(CHECKPOINTS, d) for d in new]
                anchors += await fetch_thread(self.client, self.agent, thread_id, [WRITES])
            else:
                anchors = await fetch_thread(
                    self.client, self.agent, thread_id, [CHECKPOINTS, WRITES]
                )
            their_checkpoints = [d for c, d in anchors if c == CHECKPOINTS]
            split = diverged(heads, their_checkpoints)
            # The thread's documents are read only when the peer lacks one of its
            # checkpoints or pending writes (compared by their key columns).
            held = {_anchor_key(c, d) for c, d in anchors}
            mine: set[tuple[Any, ...]] = {
                (CHECKPOINTS, h.checkpoint_ns, h.checkpoint_id) for h in found if h.schema == 2
            }
            mine |= {(WRITES, *key) for key in self.view.write_keys(thread_id)}
            ours = self._local(thread_id, None) if mine - held else []
        else:
            ours = self._local(thread_id, base.seq)
            their_checkpoints = list(new)
            anchors = [(CHECKPOINTS, d) for d in new]
            if new:
                anchors += await self._writes_since(thread_id, base.head)
            split = _both_moved(ours, heads, their_checkpoints)
        if split:
            entry.diverged = True
            if self.apply:
                entry.copy = await self._copy_peer_thread(thread_id)
            row = self.state.local([thread_id]).get(thread_id)
            synced = None
            if row is not None:
                head = base.head if base is not None else None
                synced = Synced(thread_id, row.thread, row.seq, head, True)
            high = max([d["checkpoint_id"] for d in their_checkpoints] or [""])
            return Done(synced, high, split=True)
        pulled = await self._pull(entry, anchors, heads)
        await self._push(entry, ours, anchors)
        row = self.state.local([thread_id]).get(thread_id)
        if (
            row is not None
            and before is not None
            and (row.thread, row.seq) != (before.thread, before.seq + pulled)
        ):
            # Written here meanwhile, maybe after it was read: the next sync reads the
            # thread from where this one started.
            row = before
        # Checkpoints put now count up to the sync's start only: one written here during
        # the sync must not raise the mark past what a writer of the peer puts meanwhile.
        high = max(
            [d["checkpoint_id"] for d in their_checkpoints]
            + [min(d["checkpoint_id"], self.started) for c, d in ours if c == CHECKPOINTS]
            or [""]
        )
        synced = None if row is None else Synced(thread_id, row.thread, row.seq, row.head, False)
        return Done(synced, high)

    # -- pulling ---------------------------------------------------------------------------

    async def _pull(
        self, entry: ThreadSync, anchors: Sequence[Document], heads: Sequence[Mapping[str, Any]]
    ) -> int:
        """Store the peer's checkpoints and pending writes of a thread the file lacks, with
        the values they reference that it lacks, verified, in one transaction; return how
        many documents the transaction was given (what it moved the thread's `seq` by)."""
        thread_id = entry.thread_id
        have = {(h["checkpoint_ns"], h["checkpoint_id"]) for h in heads}
        writes = self.view.write_keys(thread_id)
        missing: list[Document] = []
        for collection, data in anchors:
            if collection == CHECKPOINTS:
                if (data["checkpoint_ns"], data["checkpoint_id"]) in have:
                    entry.present += 1
                    continue
                entry.pulled += 1
            else:
                key = (data["checkpoint_ns"], data["checkpoint_id"], data["task_id"], data["index"])
                if key in writes:
                    continue
            missing.append((collection, data))
        if not missing or not self.apply:
            return 0
        documents = missing + await self._values_lacking(thread_id, missing)
        wrong = problems((c, key_of(c, d), d) for c, d in documents)
        if wrong:
            entry.conflicts.append(f"{thread_id}: the peer's documents do not verify: {wrong[0]}")
            entry.pulled = 0
            return 0
        if self.agent != self.store.agent_id:
            documents = rekey(documents, self.store.agent_id)
        counted = self.view.import_documents(put_order(documents))
        entry.documents_pulled = counted.stored
        if counted.stored:
            self.store.restamp([thread_id])
        return len(documents)

    async def _values_lacking(self, thread_id: str, anchors: Sequence[Document]) -> list[Document]:
        """The values `anchors` reference, directly or through other values, that the file's
        thread lacks, fetched from the peer level by level."""
        fetched: list[Document] = []
        seen: set[str] = set()
        frontier = {ref for _, data in anchors for ref, _ in references(data)}
        while frontier:
            wanted = frontier - seen - self.view.present_refs(thread_id, frontier)
            seen |= frontier
            level = await self._fetch_values(thread_id, sorted(wanted))
            lost = wanted - {d["ref"] for _, d in level}
            if lost:
                raise CheckpointConflictError(
                    f"the peer lacks {len(lost)} value(s) its documents reference "
                    f"(e.g. {min(lost)}); nothing of the thread was pulled"
                )
            fetched.extend(level)
            frontier = {ref for _, data in level for ref, _ in references(data)}
        return fetched

    async def _fetch_values(self, thread_id: str, refs: Sequence[str]) -> list[Document]:
        by_collection: dict[str, list[str]] = {}
        for ref in refs:
            by_collection.setdefault(collection_of(ref), []).append(ref)
        found: list[Document] = []
        for collection, some in by_collection.items():
            for start in range(0, len(some), MAX_IN_VALUES):
                where = self._thread_where(thread_id) + [
                    ("ref", "in", some[start : start + MAX_IN_VALUES])
                ]
                async for item in self.client.find(collection, where, max_bytes=READ_BUDGET):
                    found.append((collection, item.data))
        return found

    async def _writes_since(self, thread_id: str, head: str | None) -> list[Document]:
        """The peer's pending writes of a thread on its last shared head or later."""
        where = self._thread_where(thread_id)
        if head is not None:
            where.append(("checkpoint_id", "gte", head))
        try:
            return [
                (WRITES, item.data)
                async for item in self.client.find(WRITES, where, max_bytes=READ_BUDGET)
            ]
        except CollectionNotFoundError:
            return []

    def _thread_where(self, thread_id: str) -> list[tuple[str, str, Any]]:
        return [("agent_id", "eq", self.agent), ("thread_id", "eq", thread_id)]

    # -- pushing ---------------------------------------------------------------------------

    def _local(self, thread_id: str, since: int | None) -> list[Document]:
        """The file's documents of a thread stored after `since` (all without), keyed for
        the peer's agent id."""
        docs: list[Document] = [
            (c, d) for c, _, d in self.view.documents(thread_id, since=since) if c in _SCHEMA_2
        ]
        return rekey(docs, self.agent) if self.agent != self.store.agent_id else docs

    async def _push(
        self, entry: ThreadSync, ours: Sequence[Document], theirs: Sequence[Document]
    ) -> None:
        """Put the thread's documents the peer lacks: values first, then their anchors."""
        if not ours:
            return
        held = {key_of(c, d) for c, d in theirs}
        anchors = [(c, d) for c, d in ours if c not in VALUES and key_of(c, d) not in held]
        entry.pushed = sum(1 for c, _ in anchors if c == CHECKPOINTS)
        entry.present += sum(1 for c, d in ours if c == CHECKPOINTS and key_of(c, d) in held)
        if not anchors:
            return
        there = await self._values_held(entry.thread_id, [d for c, d in ours if c in VALUES])
        kept = [(c, d) for c, d in ours if not (c in VALUES and d["ref"] in there)]
        if not self.apply:
            entry.documents_pushed = sum(
                1 for c, d in kept if c in VALUES or key_of(c, d) not in held
            )
            return
        moved = ThreadReport(entry.thread_id)
        written: dict[str, Mapping[str, Any]] = {key_of(c, d): d for c, d in theirs}
        await _put_thread(self.client, moved, _groups(kept), written, None, 0, 0)
        entry.documents_pushed = moved.documents_copied
        entry.conflicts.extend(moved.conflicts)

    async def _values_held(self, thread_id: str, values: Sequence[Mapping[str, Any]]) -> set[str]:
        """Which of the thread's values the peer holds: one `count` per batch of refs, and
        a `find` only for a batch it holds some of."""
        held: set[str] = set()
        by_collection: dict[str, list[str]] = {}
        for data in values:
            by_collection.setdefault(collection_of(data["ref"]), []).append(data["ref"])
        for collection, refs in by_collection.items():
            for start in range(0, len(refs), MAX_IN_VALUES):
                batch = refs[start : start + MAX_IN_VALUES]
                where = self._thread_where(thread_id) + [("ref", "in", batch)]
                try:
                    count = await self.client.count(collection, where)
                except CollectionNotFoundError:
                    break
                if count == len(set(batch)):
                    held.update(batch)
                elif count:
                    async for item in self.client.find(collection, where, max_bytes=READ_BUDGET):
                        held.add(item.data["ref"])
        return held

    # -- divergence ------------------------------------------------------------------------

    async def _copy_peer_thread(self, thread_id: str) -> str:
        """Copy the peer's whole thread into the file as `<thread>@<peer>`; its name."""
        name = f"{thread_id}@{self.peer}"
        found = await fetch_thread(
            self.client, self.agent, thread_id, [*VALUES, CHECKPOINTS, WRITES]
        )
        wrong = problems((c, key_of(c, d), d) for c, d in found)
        if wrong:
            raise CheckpointConflictError(f"the peer's documents do not verify: {wrong[0]}")
        copied = [(c, {**d, "agent_id": self.store.agent_id, "thread_id": name}) for c, d in found]
        self.view.import_documents(put_order(copied))
        self.store.restamp([name])
        return name

    async def resolve(self, entry: ThreadSync, prefer: str) -> None:
        """Make one side's thread the other's, keeping the losing history in the file."""
        thread_id = entry.thread_id
        entry.resolved = prefer
        if prefer == "remote":
            entry.copy = f"{thread_id}@local"
            self.store.maintenance.copy_thread(thread_id, entry.copy)
            self.store.maintenance.delete_thread(thread_id)
        else:
            if self.store.thread(f"{thread_id}@{self.peer}") is None:
                entry.copy = await self._copy_peer_thread(thread_id)
            anchors = await fetch_thread(self.client, self.agent, thread_id, [CHECKPOINTS, WRITES])
            for collection, data in anchors:
                await self.client.delete(collection, key_of(collection, data))
        self.state.forget(peer_identity(self.peer, self.client.namespace, self.agent), thread_id)


_SCHEMA_2 = frozenset({CHECKPOINTS, WRITES, BLOBS, ITEMS, PARTS})


def _anchor_key(collection: str, data: Mapping[str, Any]) -> tuple[Any, ...]:
    """A checkpoint's or pending write's identifying fields within its thread."""
    if collection == CHECKPOINTS:
        return (CHECKPOINTS, data["checkpoint_ns"], data["checkpoint_id"])
    return (WRITES, data["checkpoint_ns"], data["checkpoint_id"], data["task_id"], data["index"])


def _both_moved(
    ours: Iterable[Document],
    heads: Sequence[Mapping[str, Any]],
    theirs: Sequence[Mapping[str, Any]],
) -> bool:
    """Whether both sides hold root checkpoints of a thread the other lacks, written since
    the last sync (`ours` the file's documents since then, `theirs` the peer's
    checkpoints above the mark)."""
    mine_now = {h["checkpoint_id"] for h in heads if h["checkpoint_ns"] == ""}
    their_ids = {d["checkpoint_id"] for d in theirs if d["checkpoint_ns"] == ""}
    our_new = {d["checkpoint_id"] for c, d in ours if c == CHECKPOINTS and d["checkpoint_ns"] == ""}
    return bool(our_new - their_ids) and bool(their_ids - mine_now)
