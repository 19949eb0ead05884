"""How well the trained lists find neighbours: recall@10 on held-out vectors (engine layer).

A training (`VectorIndex.maintain`) takes vectors left out of its k-means sample as
queries (`held_out`) and, while it moves every vector to its list, gathers each query's
true top 10 items (its own item aside) with their lists (`Gauge.add`): no extra pass over
the file. A search probing `p` lists finds exactly the true neighbours whose list is among
the `p` lists whose centroids score best against the query (a neighbour among the probed
vectors is in their top 10), so `Gauge.measure` counts those. The figure, kept in `meta`
(`vector_recall`), is what a search by the lists should be expected to find; below FLOOR
the probes are doubled until it is reached (`vector_probes`), and when no probe count up to
half of the lists reaches it the search is the exact scan instead.

Fewer probes (`Gauge.fewer`): the default probes halved while the recall of the halving,
on the same held-out queries, is at least FLOOR with 95% confidence (the lower Wilson
bound of hits out of neighbours, so QUERIES x AT neighbours must all but hold it: a
sample's luck does not lower the probes). Kept as `vector_fewer_probes` and the recall
measured at that count, `vector_fewer_recall`; a search uses it only while the default's
recall holds the floor too.
"""

from __future__ import annotations

import math
import random
from array import array
from collections.abc import Callable, Sequence
from typing import Final

import apsw

from threadloom import core
from threadloom.core.similarity import Metric
from threadloom.engine.sql import fetchall, ids

__all__ = ["AT", "FLOOR", "QUERIES", "Gauge", "choose", "held_out", "queries"]

#: The recall the lists must reach on held-out queries, or be probed wider.
FLOOR: Final = 0.95
#: Held-out queries per training (enough neighbours that a recall of 0.98 holds FLOOR
#: with 95% confidence: `fewer`).
QUERIES: Final = 64
#: The normal quantile of the confidence `fewer` asks of a recall (95%, one-sided 97.5%).
_Z: Final = 1.96
#: The recall is recall@AT.
AT: Final = 10
#: Best vectors kept per query while gathering (enough for AT items, a few fields each).
_KEPT: Final = 8 * AT
#: A vector's list is its id >> _LIST_BITS (vectors.LIST_BITS).
_LIST_BITS: Final = 32


def held_out(
    conn: apsw.Connection, rng: random.Random, sampled: list[int]
) -> list[tuple[int, bytes]]:
    """Up to QUERIES (item, vector) of vectors outside the training sample `sampled` (ids),
    or of any vectors when the sample took nearly all (small indexes)."""
    every = [row[0] for row in fetchall(conn, "SELECT id FROM store_vectors")]
    return queries(conn, choose(every, rng, sampled))


def choose(every: list[int], rng: random.Random, sampled: list[int]) -> list[int]:
    """`held_out`'s choice of vector ids among `every`."""
    taken = set(sampled)
    pool = [vector_id for vector_id in every if vector_id not in taken]
    if len(pool) < QUERIES:
        pool = every
    return sorted(rng.sample(pool, min(QUERIES, len(pool))))


def queries(conn: apsw.Connection, chosen: list[int]) -> list[tuple[int, bytes]]:
    """The (item, vector) of the vectors `chosen` (ids) that are still there."""
    if not chosen:
        return []
    rows = fetchall(
        conn, "SELECT item, vector FROM store_vectors WHERE id IN carray(?)", (ids(chosen),)
    )
    return [(int(item), bytes(vector)) for item, vector in rows]


class Gauge:
    """The true neighbours of held-out queries, gathered batch by batch, and the recall
    of probing the lists for them."""

    def __init__(self, dims: int, metric: Metric, queries: list[tuple[int, bytes]]) -> None:
        self.dims = dims
        self.metric: Metric = metric
        self.queries = queries
        #: Per query: the best vectors so far as (scores, items, vector ids).
        self._best = [(array("d"), array("q"), array("q")) for _ in queries]

    def add(self, rows: Sequence[tuple[int, int, str, bytes]]) -> None:
        """Score a batch of (vector id, item, field, vector) against every query."""
        if not rows:
            return
        matrix = b"".join(row[3] for row in rows)
        batch_items = array("q", (row[1] for row in rows))
        batch_ids = array("q", (row[0] for row in rows))
        for (_, query), (scores, items, vector_ids) in zip(self.queries, self._best, strict=True):
            scores.extend(core.vector_scores(query, matrix, self.dims, self.metric))
            items.extend(batch_items)
            vector_ids.extend(batch_ids)
            if len(scores) > 4 * _KEPT:
                keep = core.vector_top(scores, items, _KEPT)
                scores[:] = array("d", (scores[i] for i in keep))
                items[:] = array("q", (items[i] for i in keep))
                vector_ids[:] = array("q", (vector_ids[i] for i in keep))

    def measure(self, centroids: bytes, list_ids: list[int], probes: int) -> tuple[float, int]:
        """(recall@AT of `probes` lists, the probes reaching FLOOR: 0 when `probes` do or
        when no doubling up to half of the lists does). 1.0 without queries."""
        recall = self._recall(centroids, list_ids)
        first = recall(probes)[0]
        if first >= FLOOR:
            return first, 0
        wider = 2 * probes
        while 2 * wider <= len(list_ids):
            if recall(wider)[0] >= FLOOR:
                return first, wider
            wider *= 2
        return first, 0

    def fewer(self, centroids: bytes, list_ids: list[int], probes: int) -> tuple[int, float]:
        """(the fewest of `probes` halved whose recall@AT holds FLOOR with 95% confidence,
        that recall), or (0, 0.0) when `probes` halved once does not (or no queries)."""
        recall = self._recall(centroids, list_ids)
        found = (0, 0.0)
        fewer = probes // 2
        while fewer >= 1:
            figure, hits, total = recall(fewer)
            if not total or _lower(hits, total) < FLOOR:
                break
            found = (fewer, figure)
            fewer //= 2
        return found

    def _recall(
        self, centroids: bytes, list_ids: list[int]
    ) -> Callable[[int], tuple[float, int, int]]:
        """A function of the probes: (recall@AT, hits, neighbours) over the queries."""
        ranks = []  # per query: the probe rank of each true neighbour's list
        for (own, query), (scores, items, vector_ids) in zip(self.queries, self._best, strict=True):
            closeness = core.vector_scores(query, centroids, self.dims, self.metric)
            rank = {
                list_ids[i]: position
                for position, i in enumerate(core.vector_top(closeness, None, len(list_ids)))
            }
            found: dict[int, int] = {}
            for i in core.vector_top(scores, items, len(scores)):
                if items[i] != own and items[i] not in found:
                    found[items[i]] = rank.get(vector_ids[i] >> _LIST_BITS, 0)
                    if len(found) == AT:
                        break
            ranks.append(list(found.values()))
        total = sum(map(len, ranks))

        def recall(probed: int) -> tuple[float, int, int]:
            hits = sum(1 for each in ranks for position in each if position < probed)
            return (hits / total if total else 1.0), hits, total

        return recall


def _lower(hits: int, total: int) -> float:
    """The lower Wilson score bound of a proportion `hits / total` at confidence _Z."""
    p, z2 = hits / total, _Z * _Z
    centre = p + z2 / (2 * total)
    spread = _Z * math.sqrt(p * (1 - p) / total + z2 / (4 * total * total))
    return (centre - spread) / (1 + z2 / total)
