"""LangGraph checkpoint savers on the embedded engine: `Saver` and `AsyncSaver`.

Both classes offer the sync and the async API families (as InMemorySaver does).
Async methods run engine calls on a worker thread and never block the event loop.

The serializer is the saver's `serde` at every call: assigning another one (as
`with_allowlist` does on its clone) gives the saver a scope of its own wired to it, on
the same file; a clone never closes the file of the saver it was copied from.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import os
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import (
    SerializerCompat,
    SerializerProtocol,
    maybe_add_typed_methods,
)

from threadloom.core.lru import Budget as MemoryBudget
from threadloom.engine import CheckpointStore, File
from threadloom.engine.threads import MESSAGES, OWNER_KEYS
from threadloom.errors import InvalidArgumentError
from threadloom.langgraph.conversations import Conversations
from threadloom.langgraph.retention import Retention
from threadloom.langgraph.tuples import checkpoint_tuple, serialization
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE, next_version

_DONE = object()


class _SaverBase(Conversations, Retention, BaseCheckpointSaver[Any]):
    """Shared implementation of Saver and AsyncSaver.

    Args:
        path: the SQLite file (created if missing).
        namespace: document namespace (default: the shared engine's).
        agent_id: agent id of every document (default: the engine's `engine.v1`).
        serde: LangGraph serializer; with `EncryptedSerializer` every stored value,
            pending write and the metadata are encrypted, and the thread index keeps no
            text of the conversation (no title from the first message; `set_thread`
            refuses a title, summary or tags) unless `plaintext` allows the field.
            Ids, times, sizes and counts stay in the clear, as do the Store's items
            (the Store does not encrypt): docs/conversations.md, "Encryption".
            Assigning `saver.serde` later takes effect for every later put and read.
        synchronous: SQLite `synchronous` level, `NORMAL` (default) or `FULL`.
        readonly: open the file without writing anything (no migration; puts raise
            `ReadOnlyError`); None (default) opens read-only only where the file or its
            folder is not writable.
        memory_budget: the bytes this saver's caches may hold. None (default): they draw
            on the process's one budget (`threadloom.memory_budget()`, 32 MiB unless
            THREADLOOM_MEMORY_BUDGET says otherwise), shared by every saver, store and
            server of the process; a `MemoryBudget`: that one, shared by every saver
            given it; an int: a budget of this saver's own.
        owner_keys: the `configurable` keys a new thread's owner is taken from, first
            present wins (default `user_id`, then `langgraph_auth_user_id`).
        messages_channel: the list channel whose length the thread index counts, whose
            first human message titles a thread, and that `messages()` reads.
        plaintext: the thread index fields (`"title"`, `"summary"`, `"tags"`) an
            encrypting `serde` may leave in the clear, for `threadloom threads` and the
            viewer to show (default none).

    Every saver (and every other threadloom object) on one path in a process shares one
    open file: one connection pool, one write lock, one content store.

    Attributes:
        file: the open file (`engine.File`).
        checkpoints: the engine's checkpoints of this saver's scope
            (`engine.CheckpointStore`); the methods here call its parts directly.

    `":memory:"` as the path gives the saver a private in-memory database, shared by its
    connections and gone when it closes (a `Store(":memory:")` is another database).

    Raises:
        InvalidArgumentError: a bad argument (checked before the file is created).
        NotOurFileError: the path holds another application's file (left untouched).
        FormatError: the file was written by a newer threadloom.
    """

    #: Metadata keys no checkpoint stores, from the config or the caller (a subclass
    #: names them: the Agent Server's per-request keys, `threadloom.langgraph_server`).
    dropped_metadata: frozenset[str] = frozenset()

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        namespace: str = DEFAULT_NAMESPACE,
        agent_id: str = DEFAULT_AGENT_ID,
        serde: SerializerProtocol | None = None,
        synchronous: str = "NORMAL",
        readonly: bool | None = None,
        memory_budget: int | MemoryBudget | None = None,
        owner_keys: Sequence[str] = OWNER_KEYS,
        messages_channel: str = MESSAGES,
        plaintext: Sequence[str] = (),
    ) -> None:
        super().__init__(serde=serde)
        if isinstance(owner_keys, str) or not all(isinstance(k, str) for k in owner_keys):
            raise InvalidArgumentError("owner_keys must be a list of configurable keys")
        if not isinstance(messages_channel, str) or not messages_channel:
            raise InvalidArgumentError("messages_channel must be a channel name")
        for name, given in (("namespace", namespace), ("agent_id", agent_id)):
            if not isinstance(given, str) or not given or "\0" in given:
                raise InvalidArgumentError(
                    f"{name} must be a non-empty string without NUL, not {given!r}; "
                    f"leave it out for the default"
                )
        self._budget = _budget(memory_budget)
        self.file = File.open(path, readonly=readonly, synchronous=synchronous)
        self._closed = False
        #: id() of the saver that opened the file and of the one whose scope
        #: `checkpoints` is: a copy (`with_allowlist`) closes neither.
        self._file_owner = self._scope_owner = id(self)
        try:
            self.checkpoints = self._scope(
                namespace, agent_id, tuple(owner_keys), messages_channel, plaintext
            )
        except BaseException:
            self.close()
            raise

    def _scope(
        self,
        namespace: str,
        agent_id: str,
        owner_keys: tuple[str, ...],
        messages_channel: str,
        plaintext: Sequence[str],
    ) -> CheckpointStore:
        return CheckpointStore(
            self.file,
            namespace=namespace,
            agent_id=agent_id,
            serialization=serialization(self.serde, dropped_metadata=self.dropped_metadata),
            budget=self._budget,
            owner_keys=owner_keys,
            messages_channel=messages_channel,
            plaintext=plaintext,
        )

    @property
    def serde(self) -> SerializerProtocol:
        """The serializer of every put and read; assign one to change it from then on."""
        found: SerializerProtocol | None = self.__dict__.get("_serde")
        # Before the first assignment (BaseCheckpointSaver.__init__ reads it): the default.
        return found if found is not None else vars(BaseCheckpointSaver)["serde"]

    @serde.setter
    def serde(self, value: SerializerProtocol) -> None:
        # BaseCheckpointSaver.__init__ hands over what it wrapped: check what is inside.
        given = value.serde if isinstance(value, SerializerCompat) else value
        if not any(
            all(callable(getattr(given, m, None)) for m in pair)
            for pair in (("dumps_typed", "loads_typed"), ("dumps", "loads"))
        ):
            raise InvalidArgumentError(
                "serde must be a LangGraph serializer (with dumps_typed and loads_typed, "
                f"such as JsonPlusSerializer()), not {type(given).__name__}"
            )
        value = maybe_add_typed_methods(value)
        if value is self.__dict__.get("_serde"):
            return
        self._serde = value
        old: CheckpointStore | None = self.__dict__.get("checkpoints")
        if old is None:  # still in __init__
            return
        scope = old.scope
        fresh = self._scope(
            scope.namespace,
            scope.agent_id,
            scope.owner_keys,
            scope.messages_channel,
            tuple(scope.plaintext),
        )
        fresh.grace = old.grace
        self.checkpoints = fresh
        if self._scope_owner == id(self):
            old.close()
        self._scope_owner = id(self)

    def setup(self) -> None:
        """Nothing to do, as LangGraph's `SqliteSaver.setup()` asks: the file is created and
        migrated when the saver opens it."""

    async def asetup(self) -> None:
        """Nothing to do (see `setup`)."""

    @property
    def namespace(self) -> str:
        """The document namespace of this saver's scope."""
        return self.checkpoints.namespace

    @property
    def agent_id(self) -> str:
        """The agent id of this saver's scope."""
        return self.checkpoints.agent_id

    @property
    def readonly(self) -> bool:
        """True when this saver's file is open read-only."""
        return self.file.readonly

    def close(self) -> None:
        """Give back this saver's use of the file (the last user closes it; idempotent)."""
        if self._closed:
            return
        self._closed = True
        checkpoints = self.__dict__.get("checkpoints")
        if self._file_owner != id(self):
            # A copy (`with_allowlist`): the file is the original's to close.
            if checkpoints is not None and self._scope_owner == id(self):
                checkpoints.close()
            return
        self.stop_retention(5)
        if checkpoints is not None:
            checkpoints.close()
        self.file.close()

    # -- sync ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint `config` names, or the latest of its thread."""
        found = self.checkpoints.reader.get(config)
        return checkpoint_tuple(found) if found is not None else None

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """List checkpoints newest first, filtered by metadata equality."""
        for found in self.checkpoints.reader.list(
            config, filter=filter, before=before, limit=limit
        ):
            yield checkpoint_tuple(found)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; only the values it introduces are written."""
        return self.checkpoints.writer.put(config, checkpoint, metadata)  # type: ignore[return-value]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store pending writes of a task (first write wins; special writes replace)."""
        self.checkpoints.writer.put_writes(config, writes, task_id, task_path)

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint, write and value of a thread."""
        self.checkpoints.maintenance.delete_thread(thread_id)

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints written by the given runs (metadata `run_id`)."""
        self.checkpoints.maintenance.delete_for_runs(_ids(run_ids, "run_ids"))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread's checkpoints, writes and values to another thread id."""
        self.checkpoints.maintenance.copy_thread(source_thread_id, target_thread_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Prune threads (`keep_latest`, DeltaChannel-safe, or `delete`)."""
        self.checkpoints.maintenance.prune(_ids(thread_ids, "thread_ids"), strategy)

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Walk the parent chain from storage for DeltaChannel reconstruction."""
        return self.checkpoints.reader.delta_history(config, channels)  # type: ignore[return-value]

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        """Return the next channel version as the shared engine does (SPEC §5.5)."""
        return next_version(current)

    def documents(
        self, thread_id: str | None = None
    ) -> builtins.list[tuple[str, str, dict[str, Any]]]:
        """Return the logical documents of one thread (or all), in put order."""
        return list(self.checkpoints.view.documents(thread_id))

    # -- async ---------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Async `get_tuple`, run on a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Async `list`, each step run on a worker thread."""
        iterator = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            item = await asyncio.to_thread(next, iterator, _DONE)
            if item is _DONE:
                return
            yield cast(CheckpointTuple, item)  # anything but the _DONE sentinel is a tuple

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Async `put`, run on a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Async `put_writes`, run on a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """Async `delete_thread`, run on a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Async `delete_for_runs`, run on a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Async `copy_thread`, run on a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Async `prune`, run on a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Async `get_delta_channel_history`, run on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )

    async def adocuments(
        self, thread_id: str | None = None
    ) -> builtins.list[tuple[str, str, dict[str, Any]]]:
        """Async `documents`, run on a worker thread."""
        return await asyncio.to_thread(self.documents, thread_id)


def _ids(values: Sequence[str], name: str) -> list[str]:
    if isinstance(values, (str, bytes)):
        raise InvalidArgumentError(
            f"{name} must be a list of ids, not one string: pass [{values!r}]"
        )
    return list(values)


def _budget(given: int | MemoryBudget | None) -> MemoryBudget | None:
    if given is None or isinstance(given, MemoryBudget):
        return given
    if isinstance(given, bool) or not isinstance(given, int):
        raise InvalidArgumentError(
            f"memory_budget must be a number of bytes or a MemoryBudget, not {given!r}"
        )
    return MemoryBudget(given)


class Saver(_SaverBase):
    """A LangGraph checkpoint saver storing schema-2 documents in one SQLite file."""

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(cls, path: str, **kwargs: Any) -> Iterator[Saver]:
        """Open `path` for the duration of a `with` block."""
        saver = cls(path, **kwargs)
        try:
            yield saver
        finally:
            saver.close()


class AsyncSaver(_SaverBase):
    """The async-first twin of Saver (same file format, same engine)."""

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(cls, path: str, **kwargs: Any) -> AsyncIterator[AsyncSaver]:
        """Open `path` for the duration of an `async with` block."""
        saver = await asyncio.to_thread(lambda: cls(path, **kwargs))
        try:
            yield saver
        finally:
            await asyncio.to_thread(saver.close)
