"""The Store's searches: the ranking a query asks for, and full-text search.

Adapter layer, beside `store.py` (a mixin of its Store and AsyncStore). A search with a
query ranks it as its mode says (store_ops.MODES): by "vector" (the embedding's
similarity, the default: what LangGraph's stores do), "text" (the token-set cosine of
its words, as `search_text`) or "hybrid" (both fused, engine/items/fusion.py); without
an index config a "vector" query ranks nothing (every item newest first, as LangGraph's
stores do). docs/store.md says what `item.score` is in each mode.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from typing import Any, cast

from langgraph.store.base import SearchItem, SearchOp, TTLConfig

from threadloom.engine import File
from threadloom.engine.items import Items, Recall, Reindex, Stored, now_us
from threadloom.errors import InvalidArgumentError, UnembeddedItemsWarning
from threadloom.langgraph.store_index import Indexing
from threadloom.langgraph.store_ops import (
    Prepared,
    RankedSearchOp,
    as_search_item,
    check_labels,
    search_mode,
)

log = logging.getLogger("threadloom.langgraph.store")


class Searching:
    """Searches of a Store (the attributes below are the Store's)."""

    file: File
    items: Items
    recall: Recall
    indexing: Indexing
    embeddings: Any
    text: bool
    ttl_config: TTLConfig | None
    #: A vector search warned of items without vectors (once per store).
    _warned: bool

    def search(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        mode: str | None = None,
    ) -> list[SearchItem]:
        """`BaseStore.search`; `mode` ranks a query by "vector" (the embedding's
        similarity), "text" (its words, as `search_text`) or "hybrid" (both, fused; the
        scores docs/store.md says), instead of the index config's `search_mode`."""
        if mode is None:
            # BaseStore's (Searching comes before it in a Store's classes).
            found = cast(Any, super()).search(
                namespace_prefix,
                query=query,
                filter=filter,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl,
            )
            return cast(list[SearchItem], found)
        op = self._ranked_op(namespace_prefix, query, filter, limit, offset, refresh_ttl, mode)
        return cast(list[SearchItem], cast(Any, self).batch([op])[0])

    async def asearch(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        *,
        query: str | None = None,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
        refresh_ttl: bool | None = None,
        mode: str | None = None,
    ) -> list[SearchItem]:
        """`search` as a coroutine."""
        if mode is None:
            # BaseStore's, or AsyncBatchedBaseStore's (which batches concurrent calls).
            found = await cast(Any, super()).asearch(
                namespace_prefix,
                query=query,
                filter=filter,
                limit=limit,
                offset=offset,
                refresh_ttl=refresh_ttl,
            )
            return cast(list[SearchItem], found)
        op = self._ranked_op(namespace_prefix, query, filter, limit, offset, refresh_ttl, mode)
        return cast(list[SearchItem], (await cast(Any, self).abatch([op]))[0])

    def _search(
        self, conn: Any, op: SearchOp, prepared: Prepared, live_at: int | None
    ) -> list[Stored]:
        prefix, limit, offset = op.namespace_prefix, op.limit, op.offset
        if limit < 0 or offset < 0:
            raise InvalidArgumentError(f"limit and offset are >= 0, not {limit} and {offset}")
        mode = search_mode(op, self.indexing.mode)
        if op.query and mode != "vector":
            self._need_text()
            if mode == "text":
                return self.recall.text(conn, prefix, op.query, op.filter, limit, offset, live_at)
            vector = prepared.queries.get(op.query) if self.embeddings is not None else None
            return self.recall.hybrid(
                conn, prefix, op.query, vector, op.filter, limit, offset, live_at
            )
        if op.query and self.embeddings is not None:
            vector = prepared.queries[op.query]
            found = self.recall.vector(conn, prefix, vector, op.filter, limit, offset, live_at)
            if len(found) < limit and not self._warned:
                self._warn_unembedded(conn, prefix, live_at)
            return found
        # Without embeddings the query ranks nothing, as in LangGraph's stores: every item
        # under the prefix passing the filter, newest first (`search_text` ranks by words).
        return self.recall.listing(conn, prefix, op.filter, limit, offset, live_at)

    def _need_text(self) -> None:
        if not self.text:
            raise InvalidArgumentError(
                "this store was opened with text=False, so it keeps no full-text index; "
                "open it without text=False (new items are indexed from then on)"
            )

    def _ranked_op(
        self,
        namespace_prefix: tuple[str, ...],
        query: str | None,
        filter: dict[str, Any] | None,
        limit: int,
        offset: int,
        refresh_ttl: bool | None,
        mode: str,
    ) -> RankedSearchOp:
        """The op of `search(..., mode=)`."""
        check_labels(namespace_prefix, full=False)
        if refresh_ttl is None:
            refresh_ttl = (self.ttl_config or {}).get("refresh_on_read", True)
        return RankedSearchOp(
            namespace_prefix, filter, limit, offset, query, refresh_ttl, mode=mode
        )

    def _warn_unembedded(self, conn: Any, prefix: tuple[str, ...], live_at: int | None) -> None:
        """Warn once per store when a vector search cannot see items without vectors."""
        lacking = Reindex(self.items).unembedded(conn, prefix, live_at)
        if not lacking:
            return
        self._warned = True
        where = ".".join(prefix) or "the store"
        message = (
            f"{self.file.path}: {lacking} items under {where} have no vector, so vector "
            "search never returns them (written without embeddings, e.g. by `threadloom "
            "migrate --store`); embed them with store.reembed() or `threadloom reembed FILE "
            "--embed MODULE:NAME --dims N --apply`"
        )
        log.warning("%s", message)
        warnings.warn(message, UnembeddedItemsWarning, stacklevel=2)

    def search_text(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        query: str,
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        """Full-text search over the items' indexed fields, with or without embeddings;
        scores as docs/store.md says: the token-set cosine, 1.0 for the same words."""
        self._need_text()
        check_labels(namespace_prefix, full=False)
        live_at = now_us() if self.ttl_config and self.ttl_config.get("omit_expired") else None
        with self.file.read() as conn:
            found = self.recall.text(conn, namespace_prefix, query, filter, limit, offset, live_at)
        return [as_search_item(s) for s in found]

    async def asearch_text(
        self,
        namespace_prefix: tuple[str, ...],
        /,
        query: str,
        *,
        filter: dict[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[SearchItem]:
        """`search_text` on a worker thread."""
        return await asyncio.to_thread(
            self.search_text, namespace_prefix, query, filter=filter, limit=limit, offset=offset
        )
