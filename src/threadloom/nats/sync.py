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
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any
from urllib.parse import urlsplit

from threadloom.engine import CheckpointStore
from threadloom.engine.checkpoints import Synced, SyncState
from threadloom.errors import CheckpointConflictError, EngineError, InvalidArgumentError
from threadloom.nats._syncmoves import ThreadMoves, ThreadSync, peer_identity
from threadloom.nats.auth import Credentials
from threadloom.nats.client import DocumentClient
from threadloom.nats.transfer import prepare
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

Progress = Callable[[int, int], None]
#: Threads whose state is recorded in one transaction.
RECORD_EVERY = 64
PREFERENCES = ("local", "remote")


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
    run = ThreadMoves(store, client, remote_agent, peer, apply)
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
    for count, thread_id in enumerate(names):
        if progress is not None:
            progress(count, len(names))
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
        progress(len(names), len(names))
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

    async def main() -> SyncReport:
        # Connected first: a service that cannot be reached leaves no new file behind.
        async with await DocumentClient.connect(
            url, remote_namespace or namespace, credentials
        ) as client:
            file = File.open(path, readonly=not apply)
            try:
                return await sync_threads(
                    CheckpointStore(file, namespace=namespace, agent_id=agent_id),
                    client,
                    peer=name,
                    threads=threads,
                    agent_id=remote_agent_id,
                    apply=apply,
                    full=full,
                    prefer=prefer,
                    progress=progress,
                )
            finally:
                file.close()

    return asyncio.run(main())


def default_peer(url: str) -> str:
    """A peer's default name: its broker's host and port (`127.0.0.1:4222`)."""
    parsed = urlsplit(url)
    return parsed.netloc.rpartition("@")[2] or url
