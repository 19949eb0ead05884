"""The way out: a threadloom file's threads (and Store items) into LangGraph's
PostgresSaver (and PostgresStore) tables, so an application can move to PostgreSQL.

Adapter layer; `threadloom.migrate(FILE, URL, to="postgres")` and `threadloom migrate
FILE --to postgres` call `migrate_out`. The file is read through a read-only `Saver`'s
reader (every namespace, list channels undecoded: `Reader.list(undecoded=True)`) with
the task path and index of each pending write (`write_places`, which a listing leaves
out); the target (`postgres_target.py`) is written with LangGraph's own classes and
statements, one transaction per thread. The semantics are those of `migrate` in
(`copier.py`), the report its shape:

- a checkpoint is `present` when the target holds its id, else `missing`; applied, the
  missing ones are written oldest first as PostgresSaver's `put` would have written them
  (`postgres_rows.py`: its parent, metadata, the values it keeps in the JSON, blobs for
  the channels it changed), and pending writes where the target lacks their key
  (checkpoint, task, index), with their task path;
- a checkpoint id the target holds with another parent, time, channel versions or
  metadata is a conflict: the thread is not written at all, and the run exits 1;
- a thread whose target `diverged` (the file and the database both went on from a
  common past) is reported and left alone unless `include_diverged`; one only the
  database went on with is not diverged (its copied history is present).

One deliberate difference: integer channel versions (threadloom's own) are written as
PostgresSaver's string versions, with the same counters (`postgres_rows.py` says why).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from threadloom.engine.format import Found, identify
from threadloom.errors import MigrationError, NotOurFileError
from threadloom.langgraph.migration.postgres_rows import (
    BlobRow,
    CheckpointRow,
    conflict,
    rows_of,
)
from threadloom.langgraph.migration.postgres_target import PostgresTarget, WriteRow, check_url
from threadloom.langgraph.migration.report import MigrationReport, StoreReport, ThreadReport
from threadloom.langgraph.migration.sources.postgres import ENV
from threadloom.langgraph.tuples import checkpoint_tuple
from threadloom.protocol.lineage import diverged

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple
    from langgraph.checkpoint.serde.base import SerializerProtocol

    from threadloom.engine.checkpoints import WritePlace
    from threadloom.langgraph.saver import Saver

Progress = Callable[[int, int], None]
#: Store items read (and written) per page, one transaction each.
STORE_PAGE = 500


def migrate_out(
    source: str | os.PathLike[str] | Saver,
    url: str | None,
    *,
    threads: Sequence[str] | None = None,
    apply: bool = False,
    namespace: str | None = None,
    agent_id: str | None = None,
    include_diverged: bool = False,
    serde: SerializerProtocol | None = None,
    store: bool = False,
    progress: Progress | None = None,
    refuse_unknown: bool = False,
) -> MigrationReport:
    """Copy a threadloom file's threads into a PostgresSaver database (see the module).

    Args:
        source: the threadloom file, or an open `Saver`.
        url: the database (`postgresql://...`; None: `$POSTGRES_URL`).
        threads: the thread ids (default: every thread of the file's scope).
        apply: write (creating the tables with `setup()`); otherwise a dry run.
        namespace, agent_id: the file's scope to read (default: the engine's).
        include_diverged: also write threads whose target diverged.
        serde: the serializer of the file's values and of the target's blobs.
        store: also copy the file's Store items into the database's PostgresStore.
        progress: called with (threads done, threads to do) after each thread.
        refuse_unknown: a thread of `threads` the file lacks is an error, raised before
            anything is written; otherwise it is listed in `not_found`.

    Raises:
        MigrationError: the URL is missing or not PostgreSQL's, the file is missing or
            not a threadloom file, the database cannot be reached or the drivers are
            missing (nothing written), or the database failed mid-run.
    """
    from threadloom.langgraph.saver import Saver
    from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

    if isinstance(threads, (str, bytes)):
        raise MigrationError(f"threads must be a list of ids, not one string: [{threads!r}]")
    url = url or os.environ.get(ENV)
    if not url:
        raise MigrationError(f"no PostgreSQL URL to migrate to; give --target-url URL or set {ENV}")
    check_url(url)
    owned = not isinstance(source, Saver)
    if isinstance(source, Saver):
        saver = source
    else:
        path = os.fspath(source)
        _check_file(path)
        saver = Saver(
            path,
            namespace=namespace or DEFAULT_NAMESPACE,
            agent_id=agent_id or DEFAULT_AGENT_ID,
            serde=serde,
            readonly=True,
        )
    try:
        held = saver.checkpoints.scope.thread_ids()
        names = list(threads) if threads is not None else held
        unknown = sorted(set(names) - set(held))
        if refuse_unknown and unknown:
            _refuse(saver, unknown)
        # The target serializes as the file's saver does (an open Saver's own serde).
        target = PostgresTarget(url, serde=serde if serde is not None else saver.serde)
        try:
            return _run(
                saver,
                target,
                [t for t in names if t not in unknown],
                unknown,
                apply=apply,
                include_diverged=include_diverged,
                store=store,
                progress=progress,
            )
        finally:
            target.close()
    finally:
        if owned:
            saver.close()


def _check_file(path: str) -> None:
    if not os.path.exists(path):
        raise MigrationError(f"no such file: {path!r}; give the threadloom file to migrate out of")
    try:
        identity = identify(path)
    except NotOurFileError as exc:
        raise MigrationError(str(exc)) from None
    except Exception as exc:  # a directory, permissions
        raise MigrationError(str(exc)) from None
    if identity.found is not Found.THREADLOOM:
        raise MigrationError(
            f"{path!r} is {identity.description}, not a threadloom file; give the "
            "threadloom file to migrate out of (--to reads a threadloom file)"
        )


def _refuse(saver: Saver, unknown: Sequence[str]) -> None:
    shown = ", ".join(repr(t) for t in unknown[:10]) + (", ..." if len(unknown) > 10 else "")
    raise MigrationError(
        f"not in {saver.file.path}: {shown}; give --thread one of the file's threads "
        f"(threadloom threads {saver.file.path}), or leave --thread out to migrate every thread"
    )


def _run(
    saver: Saver,
    target: PostgresTarget,
    wanted: Sequence[str],
    unknown: Sequence[str],
    *,
    apply: bool,
    include_diverged: bool,
    store: bool,
    progress: Progress | None,
) -> MigrationReport:
    report = MigrationReport(
        "applied" if apply else "dry-run",
        {
            "kind": "threadloom",
            "path": str(saver.file.path),
            "namespace": saver.namespace,
            "agent_id": saver.agent_id,
        },
        target.describe(),
    )
    if apply:
        target.setup()
    exporter = Exporter(saver, target, apply=apply, include_diverged=include_diverged)
    # A thread is read and its rows built while the one before is written (another
    # connection, a thread of its own: the driver waits on the server without the GIL).
    # Each thread is counted once its transaction committed; an exception waits for the
    # write under way, so what was written stays whole.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="threadloom-pg") as pool:
        previous: tuple[int, ThreadReport, Future[None] | None] | None = None
        for done, thread_id in enumerate(wanted, start=1):
            entry, rows = exporter.prepare(thread_id)
            if previous is not None:
                _finish(report, previous, len(wanted), progress)
            job = pool.submit(target.write, thread_id, *rows) if rows is not None else None
            previous = (done, entry, job)
        if previous is not None:
            _finish(report, previous, len(wanted), progress)
    for missing in unknown:
        report.not_found.add(missing)
    if store:
        report.store = copy_store_out(saver, target, apply=apply)
    return report


def _finish(
    report: MigrationReport,
    written: tuple[int, ThreadReport, Future[None] | None],
    total: int,
    progress: Progress | None,
) -> None:
    """Wait for a thread's write (raising its error), then count it."""
    done, entry, job = written
    if job is not None:
        job.result()
    report.add(entry)
    if progress is not None:
        progress(done, total)


#: What `Exporter.prepare` gives `PostgresTarget.write`: blob, checkpoint and write rows.
Rows = tuple[list[BlobRow], list[CheckpointRow], list[tuple[Any, ...]]]


class Exporter:
    """Copies threads of `saver` into `target` (only counting them unless `apply`)."""

    def __init__(
        self, saver: Saver, target: PostgresTarget, *, apply: bool, include_diverged: bool
    ) -> None:
        self.saver = saver
        self.target = target
        self.apply = apply
        self.include_diverged = include_diverged

    def prepare(self, thread_id: str) -> tuple[ThreadReport, Rows | None]:
        """Count one thread; when applying, build the rows the target lacks (None: nothing
        to write). The report counts them as copied: `PostgresTarget.write` writes them."""
        entry = ThreadReport(thread_id)
        # Channel values undecoded: a list channel's elements go to the blob as stored.
        found = [
            checkpoint_tuple(restored)
            for restored in self.saver.checkpoints.reader.list(
                {"configurable": {"thread_id": thread_id}}, undecoded=True
            )
        ]
        items = found[::-1]  # oldest first: a parent before its children
        held = self.target.checkpoints(thread_id)
        ours = [_ident(item) for item in items]
        entry.checkpoints = len(items)
        entry.writes = sum(len(item.pending_writes or ()) for item in items)
        entry.present = sum(1 for d in ours if (d["checkpoint_ns"], d["checkpoint_id"]) in held)
        entry.missing = entry.checkpoints - entry.present
        theirs = [
            {"checkpoint_ns": ns, "checkpoint_id": cid, "parent_id": h.parent_id}
            for (ns, cid), h in held.items()
        ]
        entry.diverged = diverged(ours, theirs)
        for item in items:
            ident = _ident(item)
            there = held.get((ident["checkpoint_ns"], ident["checkpoint_id"]))
            differs = conflict(item, there) if there is not None else ""
            if differs:
                entry.conflict = (
                    f"{thread_id}: checkpoint {ident['checkpoint_id']} is in the target with "
                    f"another {differs}; the thread was not written"
                )
                return entry, None
        if entry.diverged and not self.include_diverged:
            entry.skipped = self.apply
            return entry, None
        if not self.apply:
            return entry, None
        loads = self.saver.checkpoints.scope.planner.loads
        rows = rows_of(thread_id, items, held, self.target.saver.serde, loads)
        writes = [self.target.write_row(w) for w in self._writes(thread_id, items)]
        entry.copied = len(rows.checkpoints)
        entry.writes_copied = len(writes)
        if not rows.checkpoints and not writes:
            return entry, None
        return entry, (rows.blobs, rows.checkpoints, writes)

    def _writes(self, thread_id: str, items: Sequence[CheckpointTuple]) -> list[WriteRow]:
        """The pending writes the target lacks, each with its stored task path and index."""
        places: dict[tuple[str, str], list[WritePlace]] = {}
        for place in self.saver.checkpoints.view.write_places(thread_id):
            places.setdefault((place.checkpoint_ns, place.checkpoint_id), []).append(place)
        written = self.target.write_keys(thread_id)
        rows: list[WriteRow] = []
        for item in items:
            pending = item.pending_writes or []
            if not pending:
                continue
            ident = _ident(item)
            ns, checkpoint_id = ident["checkpoint_ns"], ident["checkpoint_id"]
            here = places.get((ns, checkpoint_id), [])
            if [(p.task_id, p.channel) for p in here] != [(w[0], w[1]) for w in pending]:
                raise MigrationError(
                    f"the pending writes of checkpoint {checkpoint_id} of thread {thread_id!r} "
                    "changed while they were read; run the migration again (stop the "
                    "application writing the file first)"
                )
            for place, (_, channel, value) in zip(here, pending, strict=True):
                if (ns, checkpoint_id, place.task_id, place.idx) in written:
                    continue
                rows.append(
                    (thread_id, ns, checkpoint_id, place.task_id, place.task_path, place.idx,
                     channel, value)
                )  # fmt: skip
        return rows


def _ident(item: CheckpointTuple) -> dict[str, Any]:
    conf = item.config["configurable"]
    return {"checkpoint_ns": conf["checkpoint_ns"], "checkpoint_id": conf["checkpoint_id"]}


def copy_store_out(saver: Saver, target: PostgresTarget, *, apply: bool) -> StoreReport:
    """Copy every live item of the file's Store into the target's PostgresStore, create-only
    (an item whose key the target holds is `present` and left alone)."""
    from threadloom.langgraph.store import Store

    report = StoreReport({"kind": "threadloom", "path": str(saver.file.path)})
    target.open_store(apply)
    items = Store(saver.file.path, readonly=True)
    try:
        namespaces: set[tuple[str, ...]] = set()
        offset = 0
        while True:
            page = items.search((), limit=STORE_PAGE, offset=offset, refresh_ttl=False)
            namespaces.update(tuple(i.namespace) for i in page)
            report.items += len(page)
            lacking = [i for i, hit in zip(page, target.held_items(page), strict=True) if not hit]
            report.present += len(page) - len(lacking)
            report.missing += len(lacking)
            if apply:
                report.copied += target.put_items(lacking)
            if len(page) < STORE_PAGE:
                break
            offset += len(page)
        report.namespaces = len(namespaces)
    finally:
        items.close()
    return report
