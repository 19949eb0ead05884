"""Threads to and from the shared engine's document service: export and import.

Export puts a scope's documents in protocol order with create-only semantics: values
are kept when present (`if_version=0`, a conflict is "already there"), a checkpoint
already present must be identical (else the thread is reported in `conflicts`). The
values a put introduces go first and its checkpoint or pending write last, so the
target never holds a checkpoint whose documents are missing, an interrupted export
resumes where it stopped, and a rerun copies nothing. A dry run (the default) reads
the target and reports, per thread, which checkpoints are present or missing and
whether the thread `diverged`: the target's head is not one of ours and our head is
not on its lineage (SPEC §8.1). Diverged threads are not written unless asked.

Import is the reverse, into the local file, one transaction per thread, reading the
target in pages within the read budget. Both can re-key documents to another agent id
(the key is `sha256([agent_id, ...])`, SPEC §3.3).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from threadloom.documents import ThreadReport
from threadloom.engine import CheckpointStore
from threadloom.errors import (
    CheckpointConflictError,
    CollectionNotFoundError,
    DocumentServiceError,
    VersionConflictError,
)
from threadloom.nats.client import DocumentClient
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES
from threadloom.protocol.constants import READ_BUDGET
from threadloom.protocol.lineage import VALUES as _VALUES
from threadloom.protocol.lineage import diverged
from threadloom.protocol.lineage import put_order as _put_order
from threadloom.protocol.refs import key_of

T = TypeVar("T")

#: Collections the savers ensure, with their declared indexed string fields (SPEC §1.2).
COLLECTIONS: dict[str, tuple[str, ...]] = {
    CHECKPOINTS: ("agent_id", "thread_id", "checkpoint_ns", "checkpoint_id"),
    WRITES: ("agent_id", "thread_id", "checkpoint_ns", "checkpoint_id"),
    BLOBS: ("agent_id", "thread_id", "ref"),
    ITEMS: ("agent_id", "thread_id", "ref"),
    PARTS: ("agent_id", "thread_id", "ref"),
}
#: Puts in flight at once (documents of one group never depend on each other).
CONCURRENCY = 4

Progress = Callable[[int, int], None]
Document = tuple[str, dict[str, Any]]


@dataclass
class Report:
    """The JSON report of `threadloom export` / `threadloom import`."""

    mode: str
    source: dict[str, Any]
    target: dict[str, Any]
    threads: list[ThreadReport] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out = {
            "mode": self.mode,
            "source": self.source,
            "target": self.target,
            "threads": len(self.threads),
        }
        for name in ("checkpoints", "writes", "values", "present", "missing", "copied"):
            out[name] = sum(getattr(t, name) for t in self.threads)
        out["documents_copied"] = sum(t.documents_copied for t in self.threads)
        out["diverged"] = [t.thread_id for t in self.threads if t.diverged]
        out["skipped"] = [t.thread_id for t in self.threads if t.skipped]
        out["conflicts"] = [c for t in self.threads for c in t.conflicts]
        out["per_thread"] = [asdict(t) for t in self.threads]
        return out


def rekey(documents: Iterable[Document], agent_id: str) -> list[Document]:
    """The documents with `agent_id` in place of theirs (their keys follow)."""
    return [(c, {**d, "agent_id": agent_id}) for c, d in documents]


async def prepare(client: DocumentClient) -> None:
    """Ensure the LangGraph collections exist on the target, as the savers' setup() does."""
    for name, fields in COLLECTIONS.items():
        await _again_if_busy(lambda: client.ensure_collection(name, fields))  # noqa: B023


async def fetch_thread(
    client: DocumentClient, agent_id: str, thread_id: str, collections: Iterable[str]
) -> list[Document]:
    """Every document of a thread in `collections`, page by page within the read budget."""
    found: list[Document] = []
    where = [("agent_id", "eq", agent_id), ("thread_id", "eq", thread_id)]
    for collection in collections:
        try:
            async for item in client.find(collection, where, max_bytes=READ_BUDGET):
                found.append((collection, item.data))
        except CollectionNotFoundError:  # a target the savers never set up holds nothing
            continue
    return found


async def target_threads(
    client: DocumentClient, agent_id: str, collection: str = CHECKPOINTS
) -> list[str]:
    """The thread ids that hold checkpoints of `agent_id` on the target (in `collection`:
    schema 2 by default)."""
    threads: set[str] = set()
    try:
        async for item in client.find(
            collection, [("agent_id", "eq", agent_id)], max_bytes=READ_BUDGET
        ):
            threads.add(item.data["thread_id"])
    except CollectionNotFoundError:
        return []
    return sorted(threads)


# -- export -------------------------------------------------------------------------------


async def export_threads(
    store: CheckpointStore,
    client: DocumentClient,
    *,
    threads: Sequence[str] | None = None,
    agent_id: str | None = None,
    apply: bool = False,
    include_diverged: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Export threads of `store` to the document service `client` is bound to.

    Args:
        threads: the thread ids (default: every thread of the scope).
        agent_id: the target agent id (default: the store's); documents are re-keyed.
        apply: write (default: a dry run that only reads the target).
        include_diverged: also write threads whose target has diverged.
        progress: called with (documents done, documents to do) while writing.
    """
    target_agent = agent_id or store.agent_id
    report = Report(
        "applied" if apply else "dry-run",
        {"namespace": store.namespace, "agent_id": store.agent_id, "file": store.file.path},
        {"namespace": client.namespace, "agent_id": target_agent, "schema": 2},
    )
    names = list(threads) if threads is not None else store.scope.thread_ids()
    if apply:
        await prepare(client)
    plans: list[tuple[ThreadReport, list[list[Document]], dict[str, Mapping[str, Any]]]] = []
    for thread_id in names:
        docs = [(c, d) for c, _, d in store.view.documents(thread_id)]
        if target_agent != store.agent_id:
            docs = rekey(docs, target_agent)
        entry = ThreadReport(thread_id)
        report.threads.append(entry)
        anchors = await fetch_thread(client, target_agent, thread_id, [CHECKPOINTS, WRITES])
        _tally(entry, docs, [d for c, d in anchors if c == CHECKPOINTS])
        if entry.diverged and not include_diverged:
            entry.skipped = apply
            continue
        plans.append((entry, _groups(docs), {key_of(c, d): d for c, d in anchors}))
    if apply:
        total = sum(len(g) for _, groups, _ in plans for g in groups)
        done = 0
        for entry, groups, written in plans:
            done += await _put_thread(client, entry, groups, written, progress, done, total)
    return report


def _tally(
    entry: ThreadReport, moving: Sequence[Document], there: Sequence[Mapping[str, Any]]
) -> None:
    """Count a thread's documents to move and the checkpoints the other side holds."""
    ours = [d for c, d in moving if c == CHECKPOINTS]
    entry.checkpoints = len(ours)
    entry.writes = sum(1 for c, _ in moving if c == WRITES)
    entry.values = sum(1 for c, _ in moving if c in _VALUES)
    present = {key_of(CHECKPOINTS, d) for d in there}
    entry.present = sum(1 for d in ours if key_of(CHECKPOINTS, d) in present)
    entry.missing = entry.checkpoints - entry.present
    entry.diverged = diverged(ours, there)


def _groups(docs: Sequence[Document]) -> list[list[Document]]:
    """Cut documents in put order into groups: the values a put introduced, then its anchor
    (the checkpoint or pending write that references them)."""
    groups: list[list[Document]] = []
    pending: list[Document] = []
    for collection, data in docs:
        pending.append((collection, data))
        if collection not in _VALUES:
            groups.append(pending)
            pending = []
    if pending:
        groups.append(pending)
    return groups


async def _put_thread(
    client: DocumentClient,
    entry: ThreadReport,
    groups: Sequence[Sequence[Document]],
    written: Mapping[str, Mapping[str, Any]],
    progress: Progress | None,
    done: int,
    total: int,
) -> int:
    """Put what the target lacks of one thread; return how many documents were looked at.

    First every value of the groups whose anchor is missing (a put introduces only values
    the thread did not hold, so they are most likely missing too), many in flight; then
    the anchors in put order, CONCURRENCY at a time. Every anchor is put after all its
    values, so an interruption never leaves a checkpoint without its documents (at most
    one window of anchors lands out of order; a rerun completes it).
    """
    values: dict[str, Document] = {}
    anchors: list[Document] = []
    seen = 0
    for group in groups:
        seen += len(group)
        collection, last = group[-1]
        if collection not in _VALUES and key_of(collection, last) in written:
            continue  # present: it was put after its values, so they are there too
        for doc in group:
            if doc[0] in _VALUES:
                values.setdefault(key_of(*doc), doc)
            else:
                anchors.append(doc)
    limit = asyncio.Semaphore(2 * CONCURRENCY)

    async def put_value(collection: str, data: Mapping[str, Any]) -> None:
        async with limit:
            if await _create(client, collection, data):
                entry.documents_copied += 1

    await asyncio.gather(*(put_value(c, d) for c, d in values.values()))
    if progress is not None:
        progress(done + len(values), total)
    for start in range(0, len(anchors), CONCURRENCY):
        window = anchors[start : start + CONCURRENCY]
        await asyncio.gather(*(_put_anchor(client, entry, c, d) for c, d in window))
        if progress is not None:
            progress(done + len(values) + start + len(window), total)
    if progress is not None:
        progress(done + seen, total)
    return seen


async def _put_anchor(
    client: DocumentClient, entry: ThreadReport, collection: str, anchor: Mapping[str, Any]
) -> None:
    if await _create(client, collection, anchor):
        entry.documents_copied += 1
        if collection == CHECKPOINTS:
            entry.copied += 1
    elif collection == CHECKPOINTS:
        stored = await client.get(CHECKPOINTS, key_of(CHECKPOINTS, anchor))
        if stored.data != dict(anchor):
            entry.conflicts.append(
                f"{entry.thread_id}: checkpoint {anchor['checkpoint_id']} differs on the target"
            )


#: Tries of a write the service failed with `STORAGE_ERROR`: its backend was busy or
#: locked (naas's SQLite backend gives up on its lock after 5 s, which many puts in flight
#: under load reach), a transient failure. The waits between tries double from
#: STORAGE_WAIT (6.2 s in all).
STORAGE_TRIES = 6
STORAGE_WAIT = 0.2


async def _again_if_busy(write: Callable[[], Awaitable[T]]) -> T:
    """`write()`, tried again while the service answers `STORAGE_ERROR`. Only for writes
    a replay cannot double: naas says a failed write's outcome may be unknown, and the
    writes here are create-only puts (a first try that did commit turns the replay into a
    version conflict) or collection set-ups that accept an existing collection."""
    for attempt in range(STORAGE_TRIES - 1):
        try:
            return await write()
        except DocumentServiceError as exc:
            if exc.code != "STORAGE_ERROR":
                raise
            await asyncio.sleep(STORAGE_WAIT * 2**attempt)
    return await write()


async def _create(client: DocumentClient, collection: str, data: Mapping[str, Any]) -> bool:
    """Create-only put; False when the document was already there (`_again_if_busy`)."""
    try:
        await _again_if_busy(
            lambda: client.put(collection, key_of(collection, data), data, if_version=0)
        )
    except VersionConflictError:
        return False
    return True


# -- import -------------------------------------------------------------------------------


async def import_threads(
    store: CheckpointStore,
    client: DocumentClient,
    *,
    threads: Sequence[str] | None = None,
    agent_id: str | None = None,
    apply: bool = False,
    include_diverged: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Import threads of the document service into `store` (the reverse of export).

    Args:
        threads: the thread ids (default: every thread of the source agent id).
        agent_id: the source agent id on the service (default: the store's); documents
            are re-keyed to the store's agent id.
    """
    source_agent = agent_id or store.agent_id
    report = Report(
        "applied" if apply else "dry-run",
        {"namespace": client.namespace, "agent_id": source_agent, "schema": 2},
        {"namespace": store.namespace, "agent_id": store.agent_id, "file": store.file.path},
    )
    names = list(threads) if threads is not None else await target_threads(client, source_agent)
    for done, thread_id in enumerate(names, start=1):
        entry = ThreadReport(thread_id)
        report.threads.append(entry)
        theirs = await fetch_thread(
            client, source_agent, thread_id, [*_VALUES, CHECKPOINTS, WRITES]
        )
        if source_agent != store.agent_id:
            theirs = rekey(theirs, store.agent_id)
        local = [found.data for found in store.view.find(CHECKPOINTS, thread_id=thread_id)]
        _tally(entry, theirs, local)
        if entry.diverged and not include_diverged:
            entry.skipped = apply
            continue
        if apply:
            try:
                counted = store.view.import_documents(_put_order(theirs))
            except CheckpointConflictError as conflict:  # the thread's transaction rolled back
                entry.conflicts.append(f"{thread_id}: {conflict}")
            else:
                entry.documents_copied = counted.stored
                entry.copied = entry.missing
                if counted.stored:
                    # Dated by the checkpoints' own times, not the import's.
                    store.restamp([thread_id])
        if progress is not None:
            progress(done, len(names))
    return report
