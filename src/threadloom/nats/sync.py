"""Two-way incremental sync of a scope with a document service: `threadloom sync`.

Per thread, the file pushes the documents the peer lacks and pulls those it lacks,
with export's and import's own steps (`transfer`): create-only puts, values before the
checkpoint or pending write that references them, one import transaction per thread.
Pulled documents are found by their refs (a checkpoint names its values, a list its
chunks, a chunk its elements: `protocol.read.references`), level by level, only those
the file lacks, and each is checked against its ref (`protocol.digests`) before any is
stored. Pushed values are those the peer lacks: asked with one `count` per batch of
refs (a `find` only when some are there).

Incremental: the file keeps a state per peer (`engine.checkpoints.syncstate`): the
threads' `seq` and shared head at the last sync, and the highest checkpoint id the peer
held. A sync looks only at threads whose `seq` moved here and at the peer's checkpoints
above that mark (one `find`), so 10 changed threads of 1,000 cost 10 threads' work.
The state of a thread is recorded once it is synced, the mark at the end of a complete
run: an interrupted sync resumes, and what it already moved is found present.

Divergence: a thread continued on both sides since the last sync is left as each side
has it (each side's head stays where its user left it, which a fork in one thread could
not keep: the protocol reads the newest checkpoint id as the head). The peer's history
is copied into the file as the thread `<thread>@<peer>`, the thread is reported under
`diverged` and skipped by later syncs until `prefer` resolves it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from threadloom.documents import ThreadReport
from threadloom.engine import CheckpointStore
from threadloom.engine.checkpoints import Synced, SyncState
from threadloom.errors import (
    CheckpointConflictError,
    CollectionNotFoundError,
    EngineError,
    InvalidArgumentError,
)
from threadloom.nats.auth import Credentials
from threadloom.nats.client import DocumentClient
from threadloom.nats.transfer import Document, _groups, _put_thread, fetch_thread, prepare, rekey
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    DEFAULT_AGENT_ID,
    DEFAULT_NAMESPACE,
    ITEMS,
    PARTS,
    WRITES,
)
from threadloom.protocol.constants import MAX_IN_VALUES, READ_BUDGET
from threadloom.protocol.digests import problems
from threadloom.protocol.lineage import VALUES, diverged, put_order
from threadloom.protocol.read import references
from threadloom.protocol.refs import collection_of, key_of

Progress = Callable[[int, int], None]
#: Threads whose state is recorded in one transaction.
RECORD_EVERY = 64
PREFERENCES = ("local", "remote")


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


@dataclass
class SyncReport:
    """The report of `threadloom sync` (naas's report shape plus `pushed`, `pulled`)."""

    mode: str
    source: dict[str, Any]
    target: dict[str, Any]
    peer: str
    unchanged: int = 0
    threads: list[ThreadSync] = field(default_factory=list)
    wire: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        entries = self.threads
        pushed = sum(t.pushed for t in entries)
        pulled = sum(t.pulled for t in entries)
        return {
            "mode": self.mode,
            "source": self.source,
            "target": self.target,
            "peer": self.peer,
            "threads": len(entries),
            "unchanged": self.unchanged,
            "checkpoints": pushed + pulled + sum(t.present for t in entries),
            "present": sum(t.present for t in entries),
            "missing": pushed + pulled,
            "copied": (pushed + pulled) if self.mode == "applied" else 0,
            "documents_copied": (
                sum(t.documents_pushed + t.documents_pulled for t in entries)
                if self.mode == "applied"
                else 0
            ),
            "pushed": pushed,
            "pulled": pulled,
            "documents_pushed": sum(t.documents_pushed for t in entries),
            "documents_pulled": sum(t.documents_pulled for t in entries),
            "diverged": [t.thread_id for t in entries if t.diverged],
            "skipped": [t.thread_id for t in entries if t.skipped],
            "copies": [t.copy for t in entries if t.copy],
            "resolved": [t.thread_id for t in entries if t.resolved],
            "conflicts": [c for t in entries for c in t.conflicts],
            "wire": self.wire,
            "per_thread": [asdict(t) for t in entries],
        }


def peer_identity(peer: str, namespace: str, agent_id: str) -> str:
    """The key of a peer's sync state: its name, the namespace and agent id synced."""
    return f"{peer}|{namespace}|{agent_id}"


async def sync_threads(
    store: CheckpointStore,
    client: DocumentClient,
    *,
    peer: str,
    threads: Sequence[str] | None = None,
    agent_id: str | None = None,
    apply: bool = False,
    full: bool = False,
    prefer: str | None = None,
    progress: Progress | None = None,
) -> SyncReport:
    """Sync the scope of `store` with the document service `client` is bound to.

    Args:
        peer: the peer's name: part of its state's key, and of `<thread>@<peer>` copies.
        threads: only these threads (the peer's mark is then not moved).
        agent_id: the agent id on the service (default: the store's); documents are
            re-keyed both ways.
        apply: write both sides and the state (default: a dry run that only reads).
        full: compare every thread, as a first sync does (the state is still recorded).
        prefer: resolve the diverged `threads`: "local" replaces the peer's thread with
            the file's (the peer's history stays in the file as `<thread>@<peer>`),
            "remote" the file's with the peer's (the file's kept as `<thread>@local`).
    """
    if prefer is not None and (prefer not in PREFERENCES or not threads):
        raise InvalidArgumentError("--prefer takes local or remote, and the threads by --thread")
    if "@" in peer or "|" in peer:
        raise InvalidArgumentError(f"the peer name {peer!r} may not hold '@' or '|'")
    remote_agent = agent_id or store.agent_id
    run = _Run(store, client, remote_agent, peer, apply)
    identity = peer_identity(peer, client.namespace, remote_agent)
    report = SyncReport(
        "applied" if apply else "dry-run",
        {"namespace": store.namespace, "agent_id": store.agent_id, "file": store.file.path},
        {"namespace": client.namespace, "agent_id": remote_agent, "schema": 2},
        peer,
    )
    stats = client.connection.stats
    sent, received = int(stats["out_bytes"]), int(stats["in_bytes"])
    state = SyncState(store.scope)
    mark = None if full else state.high_water(identity)
    synced = {} if full else state.threads(identity)
    if apply:
        await prepare(client)
    theirs = await run.remote_checkpoints(mark, threads)
    local = state.local(threads)
    changed = {t for t, now in local.items() if _moved(synced.get(t), now.thread, now.seq)}
    wanted = set(threads) if threads is not None else None
    copies = f"@{peer}"  # the peer's own histories, copied in at a divergence: not sent back
    names = sorted(
        t
        for t in changed | set(theirs) | {t for t, s in synced.items() if s.diverged}
        if (wanted is None or t in wanted) and not t.endswith(copies)
    )
    report.unchanged = len({t for t in local if not t.endswith(copies)} - set(names))
    high = max([mark or "", *(d["checkpoint_id"] for ds in theirs.values() for d in ds)])
    done: list[Synced] = []
    for count, thread_id in enumerate(names, start=1):
        base = synced.get(thread_id)
        now = local.get(thread_id)
        if base is not None and (now is None or base.thread != now.thread):
            base = None  # the thread was deleted (and maybe made again) here since
        entry = ThreadSync(thread_id)
        report.threads.append(entry)
        try:
            if base is not None and base.diverged:
                if prefer is None or not apply:
                    entry.diverged, entry.skipped, entry.resolved = True, prefer is None, prefer
                    continue
                await run.resolve(entry, prefer)
                base = None
            new = theirs.get(thread_id, [])
            complete = mark is None and base is None  # `new` is every checkpoint of the thread
            result = await run.thread(entry, base, new, complete=complete)
            if result.split and prefer is not None:
                entry.resolved = prefer
                if apply:
                    await run.resolve(entry, prefer)
                    entry.diverged = False
                    result = await run.thread(entry, None, [])
        except CheckpointConflictError as conflict:
            entry.conflicts.append(f"{thread_id}: {conflict}")
            continue
        high = max(high, result.high)
        if apply and result.synced is not None:
            done.append(result.synced)
            if len(done) >= RECORD_EVERY:
                state.record(identity, done)
                done = []
        if progress is not None:
            progress(count, len(names))
    if apply:
        state.record(identity, done)
        if threads is None and high and not any(t.conflicts for t in report.threads):
            state.record_peer(identity, high)
    report.wire = {
        "sent": int(stats["out_bytes"]) - sent,
        "received": int(stats["in_bytes"]) - received,
    }
    return report


def _moved(base: Synced | None, thread: int, seq: int) -> bool:
    return base is None or base.thread != thread or base.seq != seq


class _Done:
    """A synced thread's new state and the highest checkpoint id the peer now holds of it."""

    def __init__(self, synced: Synced | None, high: str, split: bool = False) -> None:
        self.synced = synced
        self.high = high
        self.split = split


class _Run:
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
    ) -> _Done:
        """Sync one thread from `base` (None: compare it whole) given the peer's new
        checkpoints of it (`new`, those above the mark; `complete`: all it holds)."""
        thread_id = entry.thread_id
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
            return _Done(synced, high, split=True)
        await self._pull(entry, anchors, heads)
        await self._push(entry, ours, anchors)
        row = self.state.local([thread_id]).get(thread_id)
        high = max(
            [d["checkpoint_id"] for d in their_checkpoints]
            + [d["checkpoint_id"] for c, d in ours if c == CHECKPOINTS]
            or [""]
        )
        synced = None if row is None else Synced(thread_id, row.thread, row.seq, row.head, False)
        return _Done(synced, high)

    # -- pulling ---------------------------------------------------------------------------

    async def _pull(
        self, entry: ThreadSync, anchors: Sequence[Document], heads: Sequence[Mapping[str, Any]]
    ) -> None:
        """Store the peer's checkpoints and pending writes of a thread the file lacks, with
        the values they reference that it lacks, verified, in one transaction."""
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
            return
        documents = missing + await self._values_lacking(thread_id, missing)
        wrong = problems((c, key_of(c, d), d) for c, d in documents)
        if wrong:
            entry.conflicts.append(f"{thread_id}: the peer's documents do not verify: {wrong[0]}")
            entry.pulled = 0
            return
        if self.agent != self.store.agent_id:
            documents = rekey(documents, self.store.agent_id)
        counted = self.view.import_documents(put_order(documents))
        entry.documents_pulled = counted.stored
        if counted.stored:
            self.store.restamp([thread_id])

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


def sync_file(
    path: str,
    url: str,
    credentials: Credentials,
    *,
    namespace: str = DEFAULT_NAMESPACE,
    agent_id: str = DEFAULT_AGENT_ID,
    remote_namespace: str | None = None,
    remote_agent_id: str | None = None,
    peer: str | None = None,
    threads: Sequence[str] | None = None,
    apply: bool = False,
    full: bool = False,
    prefer: str | None = None,
    progress: Progress | None = None,
) -> SyncReport:
    """Sync the scope (`namespace`, `agent_id`) of the threadloom file `path` with the
    document service on the NATS broker `url` (what `threadloom sync` runs).

    A dry run (the default) opens the file read-only and writes nothing anywhere; with
    `apply` the file is created if missing. `peer` names the service (default: the
    URL's host and port); the other arguments are `sync_threads`'.

    Raises:
        EngineError: a dry run of a file that does not exist.
    """
    from threadloom.engine import File

    if not apply and not os.path.isfile(path):
        raise EngineError(
            f"{path!r} does not exist; run with --apply to create it from the service"
        )
    name = peer or default_peer(url)
    file = File.open(path, readonly=not apply)
    try:
        store = CheckpointStore(file, namespace=namespace, agent_id=agent_id)

        async def main() -> SyncReport:
            async with await DocumentClient.connect(
                url, remote_namespace or namespace, credentials
            ) as client:
                return await sync_threads(
                    store,
                    client,
                    peer=name,
                    threads=threads,
                    agent_id=remote_agent_id,
                    apply=apply,
                    full=full,
                    prefer=prefer,
                    progress=progress,
                )

        return asyncio.run(main())
    finally:
        file.close()


def default_peer(url: str) -> str:
    """A peer's default name: its broker's host and port (`127.0.0.1:4222`)."""
    parsed = urlsplit(url)
    return parsed.netloc.rpartition("@")[2] or url
