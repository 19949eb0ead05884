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
more codes than its thread's buffer (vector_codes.BATCH, 1 MiB, reused); a tier's coded
lists are read in one statement and bounded by one native call per buffer filled.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Final

import apsw

from threadloom import core
from threadloom.engine.items import vector_codes
from threadloom.engine.items.scan import Bounded, rerank

if TYPE_CHECKING:
    from threadloom.engine.items.vectors import VectorIndex

__all__ = ["probe"]

#: A vector id's list is `id >> _LIST_BITS` (vectors.LIST_BITS).
_LIST_BITS: Final = 32


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
        vector_codes.read_bounds(
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
                scored = index._scored(
                    blob,
                    conn.execute(
                        "SELECT item, vector FROM store_vectors WHERE id >= ? AND id < ?",
                        (low, low + (1 << _LIST_BITS)),
                    ),
                )
                items.extend(scored[0])
                bounds.extend(scored[1])
        probed += step
        candidates = Bounded(items, bounds, frozenset(tier), ranked)
        added = rerank(conn, candidates, blob, want - len(found), accept, decided, index.metric)
        found.extend(added)
        ranked.update(item for item, _ in added)
        if len(found) >= want or probed >= len(order):
            return found[:want]
        step = probed
