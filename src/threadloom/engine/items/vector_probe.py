"""A search by the vector index's lists: probe the nearest, re-rank in float32 (engine layer).

Lists are probed in tiers (`VectorIndex.search`): the lists nearest the query first, then
as many again, and so on, while fewer than `want` items are accepted. In a tier, a coded
list (vector_codes.py) gives every vector's score bound from its int8 code chunks, read
in a few rows; a list not coded yet gives its vectors' exact scores from their float32
rows. The tier's best bounds are then scored exactly from their items' float32 vectors
(`scan.rerank`), widening until no bound left can beat the `want`-th exact score: each
tier ranks exactly as a float32 scan of its lists would, reading a few hundred vectors
instead of every one.

Memory: a tier holds an item id and a bound per vector of its lists (16 bytes), never
more codes than its thread's buffer (BATCH, 1 MiB, reused); a tier's coded
lists are read in one statement and bounded by one native call per buffer filled.
"""

from __future__ import annotations

import threading
from array import array
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Final

import apsw

from threadloom import core
from threadloom.core.similarity import Metric
from threadloom.engine.items import vector_codes
from threadloom.engine.items.rerank import scored
from threadloom.engine.items.scan import Bounded, rerank
from threadloom.engine.sql import ids
from threadloom.errors import CorruptionError

if TYPE_CHECKING:
    from threadloom.engine.items.vectors import VectorIndex

__all__ = ["BATCH", "probe"]

#: A vector id's list is `id >> _LIST_BITS` (vectors.LIST_BITS).
_LIST_BITS: Final = 32
#: Bytes of code chunks a search bounds per native call (its thread's buffer holds them:
#: about 9 full chunks at 384 dims).
BATCH: Final = 1 << 20


def probe(
    index: VectorIndex,
    conn: apsw.Connection,
    blob: bytes,
    want: int,
    accept: Callable[[Sequence[int]], Collection[int]] | None,
    probes: int,
    *,
    codes: bool = True,
) -> list[tuple[int, float]]:
    """`VectorIndex.search` by the lists alone, `probes` of them first (the query packed);
    `codes` False reads every probed vector's float32 row (the benchmark's baseline)."""
    lists = index._lists(conn)
    order = [0]
    if lists.ids:
        closeness = core.vector_scores(blob, lists.centroids, index.dims, index.metric)
        order += [lists.ids[i] for i in core.vector_top(closeness, None, len(lists.ids))]
    first = vector_codes.coded_from(conn) if codes else None
    query = core.vector_quantize(blob, index.dims)
    step = 1 + probes
    decided: dict[int, bool] = {}
    found: list[tuple[int, float]] = []
    ranked: set[int] = set()
    probed = 0
    while True:
        tier = order[probed : probed + step]
        items, bounds = array("q"), array("d")
        _read_bounds(
            conn,
            [list_id for list_id in tier if vector_codes.coded(first, list_id)],
            query,
            index.dims,
            index.metric,
            items,
            bounds,
        )
        for list_id in tier:
            if not vector_codes.coded(first, list_id):
                low = list_id << _LIST_BITS
                rows = conn.execute(
                    "SELECT item, vector FROM store_vectors WHERE id >= ? AND id < ?",
                    (low, low + (1 << _LIST_BITS)),
                )
                listed, scores = scored(rows, blob, index.dims, index.metric)
                items.extend(listed)
                bounds.extend(scores)
        probed += step
        candidates = Bounded(items, bounds, frozenset(tier), ranked)
        added = rerank(conn, candidates, blob, want - len(found), accept, decided, index.metric)
        found.extend(added)
        ranked.update(item for item, _ in added)
        if len(found) >= want or probed >= len(order):
            return found[:want]
        step = probed


def _read_bounds(
    conn: apsw.Connection,
    list_ids: Sequence[int],
    query: tuple[bytes, array[float]],
    dims: int,
    metric: Metric,
    items: array[int],
    bounds: array[float],
) -> None:
    """Append to `items` and `bounds` the item and score bound (`core.vector_bounds`) of
    every vector of the coded lists `list_ids` against `query` (its codes and params).

    The chunk bodies are read by incremental blob I/O into one reused buffer per thread
    (BATCH bytes: no bytes object per chunk, one copy out of SQLite's pages) and bounded
    by one `core.vector_chunk_bounds` call per buffer filled."""
    if not list_ids:
        return
    size = vector_codes.FIXED + dims
    buffer = _buffer()
    limit = min(BATCH, len(buffer))
    counts = array("Q")
    filled = 0
    blob: apsw.Blob | None = None
    try:
        for key, count in conn.execute(
            # CROSS JOIN: each list's range of the b-tree, in the lists' order.
            "SELECT c.id, c.count FROM carray(?) l CROSS JOIN store_codes c "
            "ON c.id >= l.value << 32 AND c.id < (l.value + 1) << 32",
            (ids(list_ids),),
        ):
            if blob is None:
                blob = conn.blob_open("main", "store_codes", "body", key, False)
            else:
                blob.reopen(key)
            length = blob.length()
            if count < 1 or length != size * count:
                raise CorruptionError(
                    f"vector list {key >> _LIST_BITS} has a code chunk that does not hold "
                    f"{count} vectors of {dims} codes; run `threadloom verify`, then "
                    "`threadloom compact` to rebuild it"
                )
            if filled + length > limit:
                _bound_chunks(buffer, filled, counts, query, dims, metric, items, bounds)
                counts, filled = array("Q"), 0
            if length > limit:  # a chunk above BATCH (thousands of dims): alone
                alone = array("Q", [count])
                _bound_chunks(
                    bytearray(blob.read()), length, alone, query, dims, metric, items, bounds
                )
                continue
            blob.readinto(buffer, filled, length)
            counts.append(count)
            filled += length
    finally:
        if blob is not None:
            blob.close()
    _bound_chunks(buffer, filled, counts, query, dims, metric, items, bounds)


def _bound_chunks(
    buffer: bytearray,
    filled: int,
    counts: array[int],
    query: tuple[bytes, array[float]],
    dims: int,
    metric: Metric,
    items: array[int],
    bounds: array[float],
) -> None:
    if not counts:
        return
    with memoryview(buffer) as view, view[:filled] as chunks:
        found = core.vector_chunk_bounds(query[0], query[1], chunks, counts, dims, metric)
    items.extend(found[0])
    bounds.extend(found[1])


_local = threading.local()


def _buffer() -> bytearray:
    """This thread's buffer of code chunks (allocated once: a fresh one would be paged in
    on every search)."""
    buffer: bytearray | None = getattr(_local, "buffer", None)
    if buffer is None:
        buffer = _local.buffer = bytearray(BATCH)
    return buffer
