"""Conversations as records on the savers: the thread index, transcript tails, run leases,
erasure (the mixin `Conversations`, and what its methods return).

Adapter layer. The engine keeps and reads the records (`engine/threads/threadindex.py`,
`engine/conversations/transcript.py`, `engine/conversations/leases.py`,
`engine/conversations/erasure.py`); this module turns
them into LangChain messages with the saver's serializer, and into plain JSON-ready
dicts for HTTP endpoints (`protocol.plain`, which never imports a class).
"""

from __future__ import annotations

import asyncio
import builtins
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, overload

from threadloom.core.lazy import lazy_exports
from threadloom.engine.threads import UNSET, ThreadInfo, utc
from threadloom.errors import InvalidArgumentError, LeaseLostError, ThreadloomError
from threadloom.protocol.plain import message, text

if TYPE_CHECKING:
    from threadloom.engine import CheckpointStore
    from threadloom.engine.conversations import Erased, Held, Leases, Tail

__all__ = ["OWNER", "Conversations", "Erased", "Lease", "ThreadInfo", "Transcript"]


# The engine's conversations room loads when first used (a tail, a lease, an erasure),
# not with every saver: a process that only checkpoints does not hold it.
__getattr__ = lazy_exports(__name__, {"Erased": ("threadloom.engine.conversations", "Erased")})


class _Owner:
    """The owner's label in a Store namespace prefix given to `erase`."""

    def __repr__(self) -> str:
        return "OWNER"


#: Stands for the owner's (encoded) label in `erase(owner, store=[(tenant, "user", OWNER)])`.
OWNER: Any = _Owner()


@dataclass(frozen=True)
class Transcript(Sequence[Any]):
    """A page of a thread's messages, oldest first: a sequence of LangChain messages.

    Attributes:
        thread_id: the thread.
        checkpoint_id: the checkpoint the messages were read from (None: no checkpoint).
        total: how many messages the list holds.
        start: the position of the first message of the page in the list.
        messages: the page's messages, as the saver's serializer loads them.
    """

    thread_id: str
    checkpoint_id: str | None
    total: int
    start: int
    messages: list[Any]
    #: What the page was read from: its plain (JSON) form is made from it when asked.
    _tail: Tail | None = field(repr=False, compare=False, default=None)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> builtins.list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        return self.messages[index]

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.messages)

    @property
    def older(self) -> int | None:
        """Pass as `before=` to read the page before this one; None at the first message."""
        return self.start if self.start > 0 else None

    def as_json(self) -> dict[str, Any]:
        """The page as plain JSON-ready data, read without importing any class: each
        message as `protocol.plain.message` gives it (type, id, name, content, tool calls),
        with its `index` in the list. Made when asked, not with every page."""
        from threadloom.engine.conversations import plain_elements, transcript_json

        shown = (
            [
                found
                if found is not None and message(found) is not None
                else _loaded_form(item, found)
                for found, item in zip(plain_elements(self._tail), self.messages, strict=True)
            ]
            if self._tail is not None
            else []
        )
        return transcript_json(self.thread_id, self.checkpoint_id, self.total, self.start, shown)


class Lease:
    """The one run allowed on a thread (`Saver.lease`): a context manager, sync or async.

    Taken on entry (`ThreadBusyError` at once when another holder's lease is live) and
    given back on exit. While held, a background thread renews it every third of its
    `ttl`, so a long run keeps it and a crashed one loses it within `ttl`. If a renewal
    finds the lease lost (the process stalled past `ttl` and another run took the
    thread), `lost` becomes True and leaving the block raises `LeaseLostError`.
    """

    def __init__(self, leases: Leases, thread_id: str, ttl: float, renew: bool) -> None:
        self._leases = leases
        self.thread_id = thread_id
        self.ttl = ttl
        self._renews = renew
        self.held: Held | None = None
        self.lost = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    @property
    def expires_at(self) -> datetime | None:
        """When the lease runs out unless renewed, a UTC datetime (None when not held)."""
        return utc(self.held.expires_at) if self.held is not None else None

    def acquire(self) -> Lease:
        """Take the lease (see the class); returns self."""
        if self.held is not None:
            raise InvalidArgumentError("this lease is already held; release it first")
        self.held = self._leases.acquire(self.thread_id, self.ttl)
        self.lost = False
        if self._renews:
            self._stop = threading.Event()
            # The renewer holds the lease weakly: a lease dropped without release stops
            # being renewed (and runs out), instead of living as long as the process.
            self._renewer = threading.Thread(
                target=_renew_loop,
                args=(weakref.ref(self), self._stop, self.ttl / 3),
                name=f"threadloom-lease-{self.thread_id}",
                daemon=True,
            )
            self._renewer.start()
        return self

    def renew(self) -> None:
        """Extend the lease by `ttl` from now.

        Raises:
            LeaseLostError: another run took the thread meanwhile.
        """
        if self.held is None:
            raise InvalidArgumentError("the lease is not held; acquire it first")
        try:
            self.held = self._leases.renew(self.held, self.ttl)
        except LeaseLostError:
            self.lost = True
            raise

    def release(self) -> None:
        """Give the lease back (idempotent)."""
        self._stop.set()
        renewer, self._renewer = self._renewer, None
        if renewer is not None and renewer is not threading.current_thread():
            renewer.join()
        held, self.held = self.held, None
        if held is None or self._leases.file.closed:
            return  # a lease of a closed file runs out by itself
        if not self._leases.release(held):
            self.lost = True

    def __del__(self) -> None:
        self._stop.set()

    def __enter__(self) -> Lease:
        return self.acquire()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.release()
        if self.lost and kind is None:
            raise LeaseLostError(
                f"the lease on thread {self.thread_id!r} was lost while the run held it "
                "(it ran out and another run took the thread); its writes may have raced"
            )

    async def __aenter__(self) -> Lease:
        taking = asyncio.ensure_future(asyncio.to_thread(self.acquire))
        try:
            return await asyncio.shield(taking)
        except asyncio.CancelledError:
            # The request went away while the lease was being taken; the take finishes
            # in its worker thread anyway: give the lease back once it has.
            taking.add_done_callback(self._undo)
            raise

    def _undo(self, taking: asyncio.Future[Lease]) -> None:
        if not taking.cancelled() and taking.exception() is None:
            threading.Thread(target=self.release, daemon=True).start()

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.__exit__, kind, error, trace)


class Conversations:
    """The conversation API of `Saver` and `AsyncSaver` (mixed into both)."""

    checkpoints: CheckpointStore

    # -- the thread index ------------------------------------------------------------------

    def threads(
        self,
        *,
        owner: str | None = None,
        limit: int = 20,
        before: str | None = None,
        order: str = "updated",
        status: str | None = None,
    ) -> builtins.list[ThreadInfo]:
        """A page of this scope's threads, most recent first (`order`: "updated", the last
        write, or "created"), optionally only `owner`'s, or only those of one `status`
        ("idle", "interrupted", "running", "error": see `ThreadInfo.status`). Pass the
        last thread's `cursor` as `before` for the next page. Reads the index only: time
        proportional to the page.
        """
        return self.checkpoints.threads(
            owner=owner, limit=limit, before=before, order=order, status=status
        )

    def thread(self, thread_id: str) -> ThreadInfo | None:
        """The index row of one thread, or None."""
        return self.checkpoints.thread(thread_id)

    def set_thread(
        self,
        thread_id: str,
        *,
        title: Any = UNSET,
        summary: Any = UNSET,
        tags: Any = UNSET,
        owner: Any = UNSET,
    ) -> ThreadInfo:
        """Set what the application knows of a thread (created in the index if new); None
        clears a field (a cleared title is taken from the first human message again)."""
        return self.checkpoints.set_thread(
            thread_id, title=title, summary=summary, tags=tags, owner=owner
        )

    async def athreads(
        self,
        *,
        owner: str | None = None,
        limit: int = 20,
        before: str | None = None,
        order: str = "updated",
        status: str | None = None,
    ) -> builtins.list[ThreadInfo]:
        """Async `threads`, run on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.threads(
                owner=owner, limit=limit, before=before, order=order, status=status
            )
        )

    async def athread(self, thread_id: str) -> ThreadInfo | None:
        """Async `thread`, run on a worker thread."""
        return await asyncio.to_thread(self.thread, thread_id)

    async def aset_thread(self, thread_id: str, **fields: Any) -> ThreadInfo:
        """Async `set_thread`, run on a worker thread."""
        return await asyncio.to_thread(lambda: self.set_thread(thread_id, **fields))

    # -- transcripts -----------------------------------------------------------------------

    def messages(
        self,
        thread_id: str,
        *,
        limit: int = 20,
        before: int | str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
    ) -> Transcript:
        """The last `limit` messages of a thread's newest root checkpoint (or of
        `checkpoint_id`), oldest first, reading only the tail of the list: the cost grows
        with `limit`, not with the conversation.

        Args:
            before: a message id or a position (`Transcript.older`): the page ends just
                before it.
            channel: the list channel (default: the saver's `messages_channel`).
        """
        loads = _Loads(self.checkpoints.scope.planner.loads)
        tail = self.checkpoints.tail(
            thread_id,
            limit=limit,
            before=before,
            checkpoint_id=checkpoint_id,
            channel=channel,
            decode=loads,
            identify=_message_id,
        )
        return _transcript(loads, thread_id, tail)

    async def amessages(
        self,
        thread_id: str,
        *,
        limit: int = 20,
        before: int | str | None = None,
        checkpoint_id: str | None = None,
        channel: str | None = None,
    ) -> Transcript:
        """Async `messages`, run on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.messages(
                thread_id, limit=limit, before=before, checkpoint_id=checkpoint_id, channel=channel
            )
        )

    # -- leases ----------------------------------------------------------------------------

    def lease(self, thread_id: str, *, ttl: float = 60.0, renew: bool = True) -> Lease:
        """The one run allowed on `thread_id`, across threads and processes on the file:
        `with saver.lease(tid):` (or `async with`). See `Lease`."""
        return Lease(self.checkpoints.leases, thread_id, ttl, renew)

    def run(
        self,
        graph: Any,
        input: Any,
        config: Any,
        *,
        ttl: float = 60.0,
        renew: bool = True,
        **kwargs: Any,
    ) -> Any:
        """`graph.invoke(input, config, **kwargs)` under the lease of the config's thread:
        `ThreadBusyError` at once when another run holds it."""
        with self.lease(_thread_of(config), ttl=ttl, renew=renew):
            return graph.invoke(input, config, **kwargs)

    async def arun(
        self,
        graph: Any,
        input: Any,
        config: Any,
        *,
        ttl: float = 60.0,
        renew: bool = True,
        **kwargs: Any,
    ) -> Any:
        """`await graph.ainvoke(...)` under the lease of the config's thread (see `run`)."""
        async with self.lease(_thread_of(config), ttl=ttl, renew=renew):
            return await graph.ainvoke(input, config, **kwargs)

    # -- erasure ---------------------------------------------------------------------------

    def erase(
        self,
        owner: str,
        *,
        store: Sequence[Sequence[Any]] | None = None,
        apply: bool = True,
        force: bool = False,
    ) -> Erased:
        """Remove every thread of `owner` in this scope (checkpoints, writes, values no
        longer referenced, index rows, leases) and the owner's Store items, in one
        transaction; report what went (`apply=False`: what would go, nothing changed).

        Args:
            store: the Store namespace prefixes that are the owner's, as tuples of
                labels where `OWNER` stands for the owner's label (encoded as
                `OwnerStore` encodes it). Default: `[(OWNER,)]`, the root of
                `OwnerStore(store, owner)`; `()` leaves the Store alone. A tenant-first
                layout names its own: `[(tenant, "user", OWNER)]`.
            force: erase threads a live run holds the lease of (else `ThreadBusyError`
                and nothing changes: the run would write the thread again).
        """
        from threadloom.protocol.labels import encode_label

        label = encode_label(owner) if isinstance(owner, str) and owner else owner
        prefixes = [
            prefix  # one string, not a tuple of labels: the engine says so
            if isinstance(prefix, str)
            else tuple(label if part is OWNER else part for part in prefix)
            for prefix in ([(OWNER,)] if store is None else store)
        ]
        return self.checkpoints.erase(owner, prefixes, apply=apply, force=force)

    async def aerase(
        self,
        owner: str,
        *,
        store: Sequence[Sequence[Any]] | None = None,
        apply: bool = True,
        force: bool = False,
    ) -> Erased:
        """Async `erase`, run on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.erase(owner, store=store, apply=apply, force=force)
        )

    # -- the index's facts again ---------------------------------------------------------

    def reindex(self, thread_ids: Sequence[str] | None = None) -> int:
        """Read the index facts of threads (default: every thread of the scope) again from
        their rows, with this saver's `owner_keys` and `messages_channel` (after opening
        a file indexed with other settings); return how many were read."""
        return self.checkpoints.reindex(thread_ids)


def _renew_loop(lease: weakref.ref[Lease], stop: threading.Event, every: float) -> None:
    """Renew a lease every `every` seconds until it is released, lost, dropped or its file
    closes."""
    while not stop.wait(every):
        held = lease()
        if held is None or held._leases.file.closed:
            return
        try:
            held.renew()
        except LeaseLostError:
            return
        except ThreadloomError:  # a busy file: the next tick tries again
            pass
        del held


def _thread_of(config: Any) -> str:
    try:
        thread_id = config["configurable"]["thread_id"]
    except (KeyError, TypeError):
        raise InvalidArgumentError(
            "config must hold configurable.thread_id: the lease is the thread's"
        ) from None
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidArgumentError("configurable.thread_id must be a non-empty str")
    return thread_id


def _message_id(message: Any) -> str | None:
    """The id of a loaded message (a LangChain message, or a dict with an `id`)."""
    found = message.get("id") if isinstance(message, dict) else getattr(message, "id", None)
    return found if isinstance(found, str) else None


class _Loads:
    """The serializer's `loads` for one page, remembering each element it read: the tail
    decodes elements to find a `before` message id, and the page's elements among them
    are then not decoded a second time."""

    def __init__(self, loads: Callable[[Any], Any]) -> None:
        self._loads = loads
        self._read: dict[int, tuple[Any, Any]] = {}  # id(typed) -> (typed, its value)

    def __call__(self, typed: Any) -> Any:
        value = self._loads(typed)
        self._read[id(typed)] = (typed, value)  # holding `typed` keeps its id unique
        return value

    def once(self, typed: Any) -> Any:
        """The value of `typed`: the one read before for this very element, else read now."""
        found = self._read.get(id(typed))
        return found[1] if found is not None and found[0] is typed else self._loads(typed)


def _transcript(loads: _Loads, thread_id: str, tail: Tail) -> Transcript:
    if tail.elements is not None:
        items = [loads.once(typed) for typed in tail.elements]
    else:
        items = list(tail.values or [])
    return Transcript(thread_id, tail.checkpoint_id, tail.total, tail.start, items, tail)


def _loaded_form(item: Any, found: Any) -> Any:
    """The plain form of an element that `found` (the class-free reading) does not show as
    a message: a loaded message's type, id, name and text when the class-free reader could
    not read it (an encrypting serializer), else `found` itself."""
    kind = getattr(item, "type", None)
    unread = found is None or (isinstance(found, dict) and "$unreadable" in found)
    if not unread or not isinstance(kind, str):
        return found
    return {
        "type": kind,
        "id": _message_id(item),
        "name": getattr(item, "name", None),
        "content": text(getattr(item, "content", "")),
    }
