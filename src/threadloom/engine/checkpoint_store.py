"""The checkpoints of one scope: the writer, reader, document view and maintenance together.

Engine layer. `CheckpointStore` wires the parts (each in its own module) over one `Scope`
and hands them out as attributes; the adapters, `serve` and the CLI hold one per scope
and call the parts themselves (`store.writer.put`, `store.view.find`, ...): one hop from
an adapter to the engine, not two. Its own methods are only those that do work no single
part does (a read or write transaction across the scope and the thread index, a scope
that does not exist yet, erasure over the scope and its maintenance).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import cached_property
from typing import TYPE_CHECKING, Any

from threadloom.core.lru import Budget
from threadloom.engine.checkpoints.cache import DEFAULT_CAPACITY
from threadloom.engine.checkpoints.reader import Reader
from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.checkpoints.writer import Writer
from threadloom.engine.file import File
from threadloom.engine.threads import threadindex
from threadloom.engine.threads.threadindex import UNSET, ThreadInfo
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import Serialization

if TYPE_CHECKING:
    from threadloom.engine.checkpoints.intake import ImportCount
    from threadloom.engine.checkpoints.maintenance import Maintenance
    from threadloom.engine.checkpoints.view import CheckpointHead, Documents, StoredDocument
    from threadloom.engine.conversations.erasure import Erased
    from threadloom.engine.conversations.history import Histories
    from threadloom.engine.conversations.leases import Leases
    from threadloom.engine.conversations.retention import Retainer
    from threadloom.engine.conversations.transcript import Tail, Transcripts

__all__ = ["CheckpointHead", "CheckpointStore", "ImportCount", "StoredDocument"]

#: The names this module exports from parts a Saver's put and get never use, loaded on
#: first use (PEP 562) so a process that only checkpoints does not hold their code.
_LAZY = {
    "CheckpointHead": "threadloom.engine.checkpoints.view",
    "StoredDocument": "threadloom.engine.checkpoints.view",
    "ImportCount": "threadloom.engine.checkpoints.intake",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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

    Attributes:
        scope: the scope (its id, caches, grace, thread ids and rows).
        writer: puts checkpoints and pending writes (`Writer`).
        reader: gets and lists checkpoints, DeltaChannel history (`Reader`).
        view: the scope as logical documents (`Documents`).
        maintenance: deletes, copies and prunes threads (`Maintenance`).
        leases: the run leases of the scope's threads (`Leases`).
        retention: applies a retention policy (`Retainer`).
        transcripts: reads the tail of a thread's messages (`Transcripts`; see `tail`).
        histories: a thread's checkpoint history and interrupts (`Histories`).
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
        plaintext: Sequence[str] = (),
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
            plaintext=plaintext,
        )
        self._values = values = Values(self.scope)
        self.writer = Writer(self.scope)
        self.reader = Reader(self.scope, values)

    # The parts a Saver's put, get and list never use are made, and their modules
    # imported, on first use: a process that only checkpoints does not hold their code
    # (peak RSS, bench/README.md "Peak RSS and the delta read"). They keep no state of
    # their own, so two threads racing to make one would be harmless.

    @cached_property
    def view(self) -> Documents:
        from threadloom.engine.checkpoints.view import Documents

        return Documents(self.scope)

    @cached_property
    def maintenance(self) -> Maintenance:
        from threadloom.engine.checkpoints.maintenance import Maintenance

        return Maintenance(self.scope, self._values)

    @cached_property
    def leases(self) -> Leases:
        from threadloom.engine.conversations.leases import Leases

        return Leases(self.file, self.scope)

    @cached_property
    def retention(self) -> Retainer:
        from threadloom.engine.conversations.retention import Retainer

        return Retainer(self.scope, self.maintenance, self.leases)

    @cached_property
    def transcripts(self) -> Transcripts:
        from threadloom.engine.conversations.transcript import Transcripts

        return Transcripts(self.reader, self._values)

    @cached_property
    def histories(self) -> Histories:
        from threadloom.engine.conversations.history import Histories

        return Histories(self.reader, self._values)

    def close(self) -> None:
        """Let go of what the scope's caches hold (the file stays open for its other users)."""
        self.scope.release()

    @property
    def file(self) -> File:
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

    # -- work of its own across the parts ----------------------------------------------------

    def threads(
        self,
        *,
        owner: str | None = None,
        limit: int = 20,
        before: str | None = None,
        order: str = "updated",
        status: str | None = None,
    ) -> list[ThreadInfo]:
        """A page of the scope's threads from the index (`threadindex.page`); none when the
        scope was never written."""
        if self.scope.id is None:
            return []
        with self.file.read() as conn:
            return threadindex.page(
                conn,
                self.scope.id,
                owner=owner,
                limit=limit,
                before=before,
                order=order,
                status=status,
            )

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The index row of one thread (`threadindex.one`), or None."""
        if self.scope.id is None:
            return None
        with self.file.read() as conn:
            return threadindex.one(conn, self.scope.id, thread_id)

    def set_thread(self, thread_id: str, **fields: Any) -> ThreadInfo:
        """Set a thread's title, summary, tags or owner (`threadindex.set_fields`), creating
        it in the index if new; a cleared title is read from the thread's rows again.

        Raises:
            InvalidArgumentError: an empty thread id or a field not among those four.
        """
        if not isinstance(thread_id, str) or not thread_id:
            raise InvalidArgumentError("thread_id must be a non-empty str")
        unknown = fields.keys() - {"title", "summary", "tags", "owner"}
        if unknown:
            raise InvalidArgumentError(
                f"set_thread sets title, summary, tags, owner; not {sorted(unknown)}"
            )
        given = {k: v for k, v in fields.items() if v is not UNSET}
        for name in ("title", "summary", "tags"):
            if given.get(name) not in (None, [], ()) and not self.scope.keeps_text(name):
                raise InvalidArgumentError(
                    f"this saver's serializer encrypts, and a thread's {name} would be "
                    "stored in the clear in the thread index (which `threadloom threads` "
                    f"and the viewer read without the key); pass plaintext=[{name!r}] to "
                    "the saver to allow it, or keep the text in the graph's state"
                )
        with self.file.write() as conn:
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
        with self.file.write() as conn:
            rows = [
                (thread_id, self.scope.thread(conn, thread_id))
                for thread_id in (thread_ids if thread_ids is not None else self.scope.thread_ids())
            ]
            for _, thread in rows:
                if thread is not None:
                    self.scope.reindex(conn, thread)
        return sum(1 for _, thread in rows if thread is not None)

    def restamp(self, thread_ids: Sequence[str]) -> int:
        """Give threads copied from elsewhere (migrated, imported) the creation and last
        activity times of their checkpoints (`ts`, oldest and newest) instead of the
        copy's, in one transaction; return how many threads were set."""
        done = 0
        with self.file.write() as conn:
            for thread_id in thread_ids:
                thread = self.scope.thread(conn, thread_id) if self.scope.id is not None else None
                if thread is not None and self.scope.restamp(conn, thread):
                    done += 1
        return done

    def tail(self, thread_id: str, **options: Any) -> Tail:
        """The tail of a thread's messages (`Transcripts.tail`, same options); an empty
        page when the scope was never written."""
        if self.scope.id is None:
            from threadloom.engine.conversations.transcript import Tail

            return Tail(None, 0, 0, [])
        return self.transcripts.tail(thread_id, **options)

    def erase(
        self,
        owner: str,
        prefixes: Sequence[Sequence[str]],
        *,
        apply: bool = True,
        force: bool = False,
    ) -> Erased:
        """Remove `owner`'s threads of the scope and the Store items under `prefixes`
        (`erasure.erase`, over this scope and its maintenance)."""
        from threadloom.engine.conversations.erasure import erase

        return erase(self.scope, self.maintenance, owner, prefixes, apply=apply, force=force)
