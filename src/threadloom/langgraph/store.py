"""`Store` and `AsyncStore`: LangGraph BaseStores in the threadloom file (docs/store.md).

Adapter layer: LangGraph's ops and types in, the engine's items and searches
(`engine/items/rows.py`, `engine/items/recall.py`) out. Embeddings are computed before
the write transaction opens (`embed_documents` for items' texts the file's embedding
cache does not hold, store_embed.py; `embed_query` for queries);
every op of a batch then runs in one SQLite transaction. Reads of a batch see the file as it was
before the batch's puts (as LangGraph's stores order them), and the last put of a key wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from typing import Any

from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchOp,
    TTLConfig,
)
from langgraph.store.base.batch import AsyncBatchedBaseStore

from threadloom.core import collector
from threadloom.engine import MEMORY, File
from threadloom.engine.items import (
    BackgroundTraining,
    Items,
    Recall,
    VectorIndex,
    now_us,
    page_size_for,
    time_us,
)
from threadloom.errors import (
    NoEventLoopError,
)
from threadloom.langgraph.reembed import Reembedded, fill_text, reembed
from threadloom.langgraph.store_index import Indexing
from threadloom.langgraph.store_ops import (
    Prepared,
    as_item,
    as_search_item,
    check_get,
    check_labels,
    check_ttl_config,
    namespace_matches,
)
from threadloom.langgraph.store_search import Searching
from threadloom.langgraph.store_ttl import AsyncSweeping, Sweeping

log = logging.getLogger(__name__)


def checked_settings(
    index: IndexConfig | None, ttl: TTLConfig | None, text: bool | None
) -> Indexing:
    """A Store's settings checked before any file is touched; its `Indexing`.

    Raises:
        InvalidArgumentError: a setting the Store would refuse or could not honour.
    """
    check_ttl_config(ttl)
    return Indexing(index, text)


def page_size_of(index: IndexConfig | None) -> int | None:
    """The page size of a file a Store with `index` creates: sized for its vector rows
    (`page_size_for`); None (SQLite's) without an index, or with a `dims` the Store's
    configuration refuses."""
    dims = index.get("dims") if isinstance(index, dict) else None
    if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
        return None
    return page_size_for(dims)


class _StoreBase(Searching):
    """The engine side shared by Store and AsyncStore."""

    supports_ttl: bool = True

    def _setup(
        self,
        path: str | os.PathLike[str],
        index: IndexConfig | None,
        ttl: TTLConfig | None,
        readonly: bool | None,
        text: bool | None = None,
        indexing: Indexing | None = None,
    ) -> None:
        # The settings are checked before the file is opened: refused ones create nothing
        # (`indexing`: checked already, by `AsyncStore.from_conn_string`).
        if indexing is None:
            indexing = checked_settings(index, ttl, text)
        self.file = File.open(path, readonly=readonly, page_size=page_size_of(index))
        try:
            vectors = self._configure(indexing, ttl)
        except BaseException:
            self.file.close()  # a Store that does not open holds no share of the file
            raise
        self.items = Items(self.file, vectors)
        self.recall = Recall(self.items)
        #: The vector lists' trainings, on a thread of their own (docs/store.md).
        self.training = None if vectors is None else BackgroundTraining(vectors, self.file)
        #: A vector search warned of items without vectors (once per store).
        self._warned = False
        try:
            filled = fill_text(self)
        except BaseException:
            self.file.close()
            raise
        if filled:
            log.info("%s: gave %d store items their text entry", self.file.path, filled)

    def _configure(self, indexing: Indexing, ttl: TTLConfig | None) -> VectorIndex | None:
        """Take the checked settings (and check the file's index against them); the vector
        index."""
        self.indexing = indexing
        #: Items' indexed text goes to the full-text index (default: yes).
        self.text = self.indexing.text
        self.ttl_config = ttl
        self.index_config = self.indexing.config
        self.embeddings: Any = self.indexing.embeddings
        vectors = self.indexing.vectors
        if vectors is not None:
            with self.file.read() as conn:
                vectors.check_config(conn)
        return vectors

    def _prepare(self, ops: Iterable[Op]) -> Prepared:
        listed = ops if isinstance(ops, Sequence) else list(ops)
        with collector.paused(len(listed)):
            return self.indexing.prepare(listed)

    def _embed(self, prepared: Prepared) -> None:
        """Embed a batch's texts the file's cache does not hold (each distinct one once)."""
        if prepared.embed and self.indexing.embedder is not None:
            found = self.indexing.embedder.embed(self.file, prepared.embed)
            with collector.paused(len(prepared.ops)):
                self.indexing.attach(prepared, *found)

    async def _aembed(self, prepared: Prepared) -> None:
        if prepared.embed and self.indexing.embedder is not None:
            found = await self.indexing.embedder.aembed(self.file, prepared.embed)
            with collector.paused(len(prepared.ops)):
                self.indexing.attach(prepared, *found)

    # -- running a batch (one transaction) -------------------------------------------------

    def _run(self, prepared: Prepared) -> list[Result]:
        if len(prepared.ops) == 1 and isinstance(prepared.ops[0], GetOp):
            op = prepared.ops[0]
            return [self._get(op.namespace, op.key, op.refresh_ttl)]
        # The batch's many short-lived containers would set off collections over and
        # over (core/collector.py); the embedder ran before, with the collector on.
        with collector.paused(len(prepared.ops)):
            return self._run_batch(prepared)

    def _run_batch(self, prepared: Prepared) -> list[Result]:
        now = now_us()
        live_at = now if self.ttl_config and self.ttl_config.get("omit_expired") else None
        refresh: list[int] = []
        results: list[Result] = []
        writing = bool(prepared.writes)
        retrain = False
        transaction = self.file.write(self.items.reads) if writing else self.file.read()
        with transaction as conn:
            for op in prepared.ops:
                if isinstance(op, PutOp):
                    results.append(None)
                    continue
                results.append(self._read(conn, op, prepared, live_at, refresh))
            if writing:
                if refresh:
                    self.items.refresh(conn, refresh, now)
                    refresh = []
                self.items.write(conn, prepared.writes, now)
                vectors = self.items.vectors
                retrain = vectors is not None and vectors.work_due(conn)
        if writing:
            self.items.committed()
        if refresh and not self.file.readonly:
            with self.file.write() as conn:
                self.items.refresh(conn, refresh, now)
        self.items.after_write()
        if writing and retrain:
            self._retrain()
        return results

    def _retrain(self) -> None:
        """Retrain the vector lists (when the index grew or shrank enough) on a thread of
        its own: the batch is committed, and writers and readers go on meanwhile (the
        training holds the write lock only for short steps: vector_training.py)."""
        if self.training is not None and not self.file.readonly:
            self.training.start()

    def import_items(self, items: Sequence[Item]) -> int:
        """Store items with their own times, each only where its key is not stored yet.

        What `threadloom migrate --store` writes with: every item keeps its namespace, key,
        value, `created_at` and `updated_at`, and is text-indexed and embedded with this
        store's index config as a put would be (no TTL). A key already stored is left as it
        is (create-only), so a repeated import writes nothing. One transaction for all.

        Returns:
            How many items were written.
        """
        listed = list(items)
        prepared = self._prepare(PutOp(tuple(it.namespace), it.key, it.value) for it in listed)
        self._embed(prepared)
        for write, item in zip(prepared.writes, listed, strict=True):
            write.created_at = time_us(item.created_at)
            write.updated_at = time_us(item.updated_at)
            write.create_only = True
        with collector.paused(len(listed)), self.file.write() as conn:
            written = self.items.write(conn, prepared.writes, now_us())
            vectors = self.items.vectors
            retrain = vectors is not None and vectors.work_due(conn)
        self.items.committed()
        with collector.paused(len(listed)):
            self.items.after_write()
        if retrain:
            self._retrain()
        return written

    def _get(self, namespace: tuple[str, ...], key: str, refresh_ttl: bool) -> Item | None:
        """One checked get: one statement, atomic by itself (no BEGIN/COMMIT round
        trips); an item with a TTL has it restarted when `refresh_ttl`."""
        live_at = None
        if self.ttl_config and self.ttl_config.get("omit_expired"):
            live_at = now_us()
        with self.file.connection(self.items.reads) as conn:
            stored = self.items.get(conn, namespace, key, live_at)
        if stored is None:
            return None
        if refresh_ttl and stored.ttl is not None and not self.file.readonly:
            with self.file.write() as conn:
                self.items.refresh(conn, [stored.id], now_us())
        return as_item(stored)

    def _read(
        self,
        conn: Any,
        op: Op,
        prepared: Prepared,
        live_at: int | None,
        refresh: list[int],
    ) -> Result:
        if isinstance(op, GetOp):
            stored = self.items.get(conn, op.namespace, op.key, live_at)
            if stored is None:
                return None
            if op.refresh_ttl and stored.ttl is not None:
                refresh.append(stored.id)
            return as_item(stored)
        if isinstance(op, SearchOp):
            found = self._search(conn, op, prepared, live_at)
            if op.refresh_ttl:
                refresh.extend(s.id for s in found if s.ttl is not None)
            return [as_search_item(s) for s in found]
        assert isinstance(op, ListNamespacesOp)
        return self._namespaces(conn, op, live_at)

    def _namespaces(
        self, conn: Any, op: ListNamespacesOp, live_at: int | None
    ) -> list[tuple[str, ...]]:
        conditions = list(op.match_conditions or ())
        fixed: list[str] = []
        for condition in conditions:
            if condition.match_type == "prefix":
                for label in condition.path:
                    if label == "*":
                        break
                    fixed.append(label)
                break
        found = [
            ns
            for ns in self.items.namespaces(conn, fixed, live_at)
            if all(namespace_matches(c, ns) for c in conditions)
        ]
        if op.max_depth is not None:
            found = sorted({ns[: op.max_depth] for ns in found})
        else:
            found = sorted(found)
        return found[op.offset : op.offset + op.limit]

    def reembed(
        self,
        namespace_prefix: tuple[str, ...] = (),
        /,
        *,
        every: bool = False,
        apply: bool = True,
    ) -> Reembedded:
        """Embed the items under `namespace_prefix` that have no vector (`every`: all of
        them, e.g. after changing the embedder) with this store's index config, and
        refresh their text entries; values and times are left as they are.

        Items are embedded a page at a time outside any transaction, each page written in
        one; a run that stops is finished by running it again. `apply=False` counts
        what would be embedded and changes nothing. For an embedder of other dims or
        another metric, use `threadloom.langgraph.reembed.reembed_file` (or `threadloom
        reembed --all`), which replaces the file's vectors.

        Raises:
            InvalidArgumentError: the store has no index config.
        """
        return reembed(self, namespace_prefix, every=every, apply=apply)

    async def areembed(
        self,
        namespace_prefix: tuple[str, ...] = (),
        /,
        *,
        every: bool = False,
        apply: bool = True,
    ) -> Reembedded:
        """`reembed` on a worker thread."""
        return await asyncio.to_thread(self.reembed, namespace_prefix, every=every, apply=apply)

    async def _abatch(self, ops: Iterable[Op]) -> list[Result]:
        """A batch with the embedder's async methods, the file on a worker thread."""
        prepared = self._prepare(ops)
        await self._aembed(prepared)
        for query in prepared.queries:
            prepared.queries[query] = list(await self.embeddings.aembed_query(query))
        return await asyncio.to_thread(self._run, prepared)

    async def apurge(self, namespace_prefix: tuple[str, ...]) -> int:
        """Delete every item under `namespace_prefix` in one transaction; return how many."""
        return await asyncio.to_thread(self.purge, namespace_prefix)

    # -- maintenance -----------------------------------------------------------------------

    def purge(self, namespace_prefix: tuple[str, ...]) -> int:
        """Delete every item under `namespace_prefix` in one transaction; return how many."""
        check_labels(namespace_prefix, full=True)
        return self.items.purge(namespace_prefix)

    def _stop_sweeping(self) -> None:
        raise NotImplementedError  # Sweeping or AsyncSweeping

    async def asetup(self) -> None:
        """Nothing to do (see `setup`)."""

    def close(self) -> None:
        """Stop the sweeper and a running training (resumed by the next one), and let go
        of the file (others on it keep it open)."""
        self._stop_sweeping()
        training = getattr(self, "training", None)  # None too when the Store did not open
        if training is not None:
            training.stop()
        self.file.close()

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Store(Sweeping, _StoreBase, BaseStore):
    """A LangGraph `BaseStore` in a threadloom file (the same file the savers use).

    Args:
        path: the file (created if missing; shared with every saver and store on it);
            `":memory:"` for a private in-memory database that lives as long as the store.
        index: LangGraph's `IndexConfig` (`dims`, `embed`, `fields`, or SqliteStore's
            `text_fields`) plus `distance_type`
            ("cosine" (default), "l2" or "inner_product"), to embed items for `search(query=)`.
            Without it, `search(query=)` ignores the query, as LangGraph's stores do
            (every item under the prefix passing the filter, newest first).
        ttl: LangGraph's `TTLConfig` (`default_ttl` and `sweep_interval_minutes` in
            minutes, `refresh_on_read`, `omit_expired`).
        readonly: open without writing (None: decided by the file's permissions).
        text: keep items' indexed text in the full-text index, which `search_text` (and
            the viewer) search by words, with or without `index` (None: yes; False: no).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        readonly: bool | None = None,
        text: bool | None = None,
    ) -> None:
        self._setup(path, index, ttl, readonly, text)
        self._init_sweeping()

    @classmethod
    @contextlib.contextmanager
    def from_conn_string(
        cls,
        path: str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        readonly: bool | None = None,
        text: bool | None = None,
    ) -> Iterator[Store]:
        """A Store on `path` (or `":memory:"`), closed when the block ends."""
        store = cls(path, index=index, ttl=ttl, readonly=readonly, text=text)
        try:
            yield store
        finally:
            store.close()

    def setup(self) -> None:
        """Nothing to do, as LangGraph's `SqliteStore.setup()` asks: the file is created and
        migrated when the store opens it."""

    def get(
        self,
        namespace: tuple[str, ...],
        key: str,
        *,
        refresh_ttl: bool | None = None,
    ) -> Item | None:
        """`BaseStore.get`, without a batch around the one statement it runs."""
        if refresh_ttl is None:
            ttl = self.ttl_config
            refresh_ttl = ttl.get("refresh_on_read", True) if ttl else True
        key = str(key)
        check_get(namespace, key)  # `validate` of the GetOp, without making the op
        return self._get(namespace, key, bool(refresh_ttl))

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prepared = self._prepare(ops)
        self._embed(prepared)
        for query in prepared.queries:
            prepared.queries[query] = list(self.embeddings.embed_query(query))
        return self._run(prepared)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._abatch(ops)


class AsyncStore(AsyncSweeping, _StoreBase, AsyncBatchedBaseStore):
    """`Store` for asyncio apps: concurrent calls are batched (AsyncBatchedBaseStore),
    embeddings are awaited, and the file is used on a worker thread, never on the loop.
    As AsyncSqliteStore's, `setup`, `sweep_ttl` and the sweeper's methods are coroutines.

    Construct it inside a running event loop (`async with AsyncStore.from_conn_string(…)`);
    outside one it raises `NoEventLoopError` before opening anything.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        readonly: bool | None = None,
        text: bool | None = None,
    ) -> None:
        self._open(path, index, ttl, readonly, text, None)

    def _open(
        self,
        path: str | os.PathLike[str],
        index: IndexConfig | None,
        ttl: TTLConfig | None,
        readonly: bool | None,
        text: bool | None,
        indexing: Indexing | None,
    ) -> None:
        """`__init__`, with the settings' `Indexing` when they were checked already."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._task = None  # AsyncBatchedBaseStore.__del__ reads it
            raise NoEventLoopError(
                "AsyncStore needs a running event loop; create it inside async code "
                "(`async with AsyncStore.from_conn_string(path) as store:`), or use Store"
            ) from None
        AsyncBatchedBaseStore.__init__(self)
        self._setup(path, index, ttl, readonly, text, indexing)
        self._init_sweeping()

    @classmethod
    @contextlib.asynccontextmanager
    async def from_conn_string(
        cls,
        path: str | os.PathLike[str],
        *,
        index: IndexConfig | None = None,
        ttl: TTLConfig | None = None,
        readonly: bool | None = None,
        text: bool | None = None,
    ) -> AsyncIterator[AsyncStore]:
        """An AsyncStore on `path` (or `":memory:"`), closed when the block ends."""
        # A file is opened (and migrated) on a worker thread; the store then shares it.
        # (":memory:" is private to each open, and new: nothing to migrate.)
        file = None
        indexing = checked_settings(index, ttl, text)  # refused settings create no file
        if str(path) != MEMORY:
            file = await asyncio.to_thread(
                File.open, path, readonly=readonly, page_size=page_size_of(index)
            )
        try:
            if cls.__init__ is AsyncStore.__init__:
                # The store takes the settings checked above (not built again).
                store = cls.__new__(cls)
                store._open(path, index, ttl, readonly, text, indexing)
            else:  # a subclass's own __init__ runs (it builds the settings again)
                store = cls(path, index=index, ttl=ttl, readonly=readonly, text=text)
        finally:
            if file is not None:
                file.close()
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper(5)
            await asyncio.to_thread(store.close)

    async def setup(self) -> None:
        """Nothing to do, as LangGraph's `AsyncSqliteStore.setup()` asks: the file is
        created and migrated when the store opens it."""

    async def __aenter__(self) -> AsyncStore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop_ttl_sweeper(5)
        await asyncio.to_thread(self.close)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        return await self._abatch(ops)
