"""The checkpoints of one scope: the writer, reader, document view and maintenance together.

Engine layer. `CheckpointStore` only wires the parts (each in its own module) over one
`Scope`; the adapters, `serve` and the CLI hold one per scope.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from threadloom.core.lru import Budget
from threadloom.engine.checkpoints.cache import DEFAULT_CAPACITY
from threadloom.engine.checkpoints.maintenance import Maintenance
from threadloom.engine.checkpoints.reader import Reader
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.checkpoints.view import (
    CheckpointHead,
    Documents,
    ImportCount,
    StoredDocument,
)
from threadloom.engine.checkpoints.writer import Writer
from threadloom.engine.conversations.erasure import Erased, erase
from threadloom.engine.conversations.history import Histories, History, Interrupt
from threadloom.engine.conversations.leases import Leases
from threadloom.engine.conversations.retention import Progress, Retainer, RetentionReport
from threadloom.engine.conversations.transcript import Tail, Transcripts
from threadloom.engine.file import File
from threadloom.engine.threads import threadindex
from threadloom.engine.threads.threadindex import UNSET, ThreadInfo
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import Restored, Serialization

__all__ = ["CheckpointHead", "CheckpointStore", "ImportCount", "StoredDocument"]


class CheckpointStore:
    """The checkpoints of one scope (namespace + agent id) in a threadloom file.

    Args:
        file: the open file.
        namespace: document namespace of the scope.
        agent_id: agent id of the scope (prefix of every document key).
        serialization: the serializer (from the adapter); None opens the scope for its
            documents only (serve, export, import).
        cache_bytes: size of the decoded-value cache (0 disables it).
        budget: the byte budget every cache of the scope draws on (default: the
            process's, `core.lru.process_budget()`).
        owner_keys, messages_channel: what the thread index reads (see `Scope`).
    """

    def __init__(
        self,
        file: File,
        *,
        namespace: str,
        agent_id: str,
        serialization: Serialization | None = None,
        cache_bytes: int = DEFAULT_CAPACITY,
        budget: Budget | None = None,
        owner_keys: Sequence[str] = threadindex.OWNER_KEYS,
        messages_channel: str = threadindex.MESSAGES,
    ) -> None:
        self.scope = Scope(
            file,
            namespace=namespace,
            agent_id=agent_id,
            serialization=serialization,
            cache_bytes=cache_bytes,
            budget=budget,
            owner_keys=owner_keys,
            messages_channel=messages_channel,
        )
        values = Values(self.scope)
        self.writer = Writer(self.scope)
        self.reader = Reader(self.scope, values)
        self.view = Documents(self.scope)
        self.maintenance = Maintenance(self.scope, values)
        self.leases = Leases(file, self.scope.id if self.scope.id is not None else -1)
        self.retention = Retainer(self.scope, self.maintenance, self.leases)
        self.transcripts = Transcripts(self.reader, values)
        self.histories = Histories(self.reader, values)

    def close(self) -> None:
        """Let go of what the scope's caches hold (the file stays open for its other users)."""
        self.scope.release()

    @property
    def db(self) -> File:
        """The file this scope lives in."""
        return self.scope.file

    @property
    def namespace(self) -> str:
        """The document namespace of the scope."""
        return self.scope.namespace

    @property
    def agent_id(self) -> str:
        """The agent id of the scope."""
        return self.scope.agent_id

    @property
    def grace(self) -> float:
        """Seconds a value document is safe from collection after it is written."""
        return self.scope.grace

    @grace.setter
    def grace(self, seconds: float) -> None:
        self.scope.grace = seconds

    # -- the checkpoint saver's operations -------------------------------------------------

    def put(
        self, config: Mapping[str, Any], checkpoint: Mapping[str, Any], metadata: Mapping[str, Any]
    ) -> dict[str, Any]:
        """See `Writer.put`."""
        return self.writer.put(config, checkpoint, metadata)

    def put_writes(
        self,
        config: Mapping[str, Any],
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """See `Writer.put_writes`."""
        self.writer.put_writes(config, writes, task_id, task_path)

    def get(self, config: Mapping[str, Any]) -> Restored | None:
        """See `Reader.get`."""
        return self.reader.get(config)

    def list(
        self,
        config: Mapping[str, Any] | None,
        *,
        filter: Mapping[str, Any] | None = None,
        before: Mapping[str, Any] | None = None,
        limit: int | None = None,
    ) -> Iterator[Restored]:
        """See `Reader.list`."""
        return self.reader.list(config, filter=filter, before=before, limit=limit)

    def delta_history(
        self, config: Mapping[str, Any], channels: Sequence[str]
    ) -> dict[str, dict[str, Any]]:
        """See `Reader.delta_history`."""
        return self.reader.delta_history(config, channels)

    def thread_ids(self) -> builtins.list[str]:
        """See `Scope.thread_ids`."""
        return self.scope.thread_ids()

    def delete_thread(self, thread_id: str) -> None:
        """See `Maintenance.delete_thread`."""
        self.maintenance.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """See `Maintenance.delete_for_runs`."""
        self.maintenance.delete_for_runs(run_ids)

    def copy_thread(self, source: str, target: str) -> None:
        """See `Maintenance.copy_thread`."""
        self.maintenance.copy_thread(source, target)

    def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        """See `Maintenance.prune`."""
        self.maintenance.prune(thread_ids, strategy)

    def retain(
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
        """See `Retention.run`."""
        return self.retention.run(
            keep_last=keep_last,
            max_age=max_age,
            min_age=min_age,
            threads=threads,
            apply=apply,
            now=now,
            progress=progress,
        )

    # -- conversations -----------------------------------------------------------------------

    def threads(
        self,
        *,
        owner: str | None = None,
        limit: int = 20,
        before: str | None = None,
        order: str = "updated",
    ) -> builtins.list[ThreadInfo]:
        """See `threadindex.page`."""
        if self.scope.id is None:
            return []
        with self.db.read() as conn:
            return threadindex.page(
                conn, self.scope.id, owner=owner, limit=limit, before=before, order=order
            )

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """See `threadindex.one`."""
        if self.scope.id is None:
            return None
        with self.db.read() as conn:
            return threadindex.one(conn, self.scope.id, thread_id)

    def set_thread(self, thread_id: str, **fields: Any) -> ThreadInfo:
        """See `threadindex.set_fields` (the thread is created in the index if new)."""
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidArgumentError("thread_id must be a non-empty str")
        unknown = fields.keys() - {"title", "summary", "tags", "owner"}
        if unknown:
            raise InvalidArgumentError(
                f"set_thread sets title, summary, tags, owner; not {sorted(unknown)}"
            )
        given = {k: v for k, v in fields.items() if v is not UNSET}
        with self.db.write() as conn:
            thread = self.scope.ensure_thread(conn, thread_id, time.time())
            threadindex.set_fields(
                conn,
                thread,
                name=given.get("title", UNSET),
                summary=given.get("summary", UNSET),
                tags=given.get("tags", UNSET),
                owner=given.get("owner", UNSET),
            )
            if "title" in given and given["title"] is None:
                self.scope.reindex(conn, thread, recount=False)
            assert self.scope.id is not None
            found = threadindex.one(conn, self.scope.id, thread_id)
        assert found is not None
        return found

    def reindex(self, thread_ids: Sequence[str] | None = None) -> int:
        """Read the index facts of threads (default: all of the scope) again from their
        rows, with this scope's owner keys and messages channel; return how many."""
        with self.db.write() as conn:
            rows = [
                (thread_id, self.scope.thread(conn, thread_id))
                for thread_id in (thread_ids if thread_ids is not None else self.thread_ids())
            ]
            for _, thread in rows:
                if thread is not None:
                    self.scope.reindex(conn, thread)
        return sum(1 for _, thread in rows if thread is not None)

    def tail(self, thread_id: str, **options: Any) -> Tail:
        """See `Transcripts.tail`."""
        if self.scope.id is None:
            return Tail(None, 0, 0, [])
        return self.transcripts.tail(thread_id, **options)

    def history(
        self,
        thread_id: str,
        *,
        ns: str | None = None,
        limit: int = 20,
        before: str | None = None,
    ) -> History:
        """See `Histories.history`."""
        return self.histories.history(thread_id, ns=ns, limit=limit, before=before)

    def interrupts(self, thread_id: str, checkpoint_id: str) -> builtins.list[Interrupt]:
        """See `Histories.interrupts`."""
        return self.histories.interrupts(thread_id, checkpoint_id)

    def erase(
        self,
        owner: str,
        prefixes: Sequence[Sequence[str]],
        *,
        apply: bool = True,
        force: bool = False,
    ) -> Erased:
        """See `erasure.erase`."""
        return erase(self.scope, self.maintenance, owner, prefixes, apply=apply, force=force)

    # -- the document view -----------------------------------------------------------------

    def documents(self, thread_id: str | None = None) -> Iterator[tuple[str, str, dict[str, Any]]]:
        """See `Documents.documents`."""
        return self.view.documents(thread_id)

    def find_documents(self, collection: str, **fields: Any) -> builtins.list[StoredDocument]:
        """See `Documents.find`."""
        return self.view.find(collection, **fields)

    def heads(self, thread_id: str) -> builtins.list[CheckpointHead]:
        """See `Documents.heads`."""
        return self.view.heads(thread_id)

    def write_keys(self, thread_id: str) -> set[tuple[str, str, str, int]]:
        """See `Documents.write_keys`."""
        return self.view.write_keys(thread_id)

    def keys(self, thread_id: str | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        """See `Documents.keys`."""
        return self.view.keys(thread_id)

    def delete_document(self, collection: str, fields: Mapping[str, Any]) -> bool:
        """See `Documents.delete`."""
        return self.view.delete(collection, fields)

    def replace_write(self, data: Mapping[str, Any]) -> int:
        """See `Documents.replace_write`."""
        return self.view.replace_write(data)

    def import_documents(self, documents: Iterable[tuple[str, Mapping[str, Any]]]) -> ImportCount:
        """See `Documents.import_documents`."""
        return self.view.import_documents(documents)
