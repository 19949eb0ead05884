"""The exact re-rank of a search's candidates in float32, read from the file (engine layer).

A search (`scan.py`'s exact scan, `vector_probe.py`'s lists) bounds each candidate vector's
exact score from its codes; `rerank` scores the candidates' items exactly (their float32
vectors read by item from `store_vectors`), best bound first, widening fourfold until the
`want`-th best exact score is above every bound not read: so its top is the exact one
whenever every bound is at least its vector's exact score.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from threadloom import core
from threadloom.core.similarity import Metric
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import CorruptionError

__all__ = ["Bounded", "rerank", "rescore", "scored", "vector_matrix"]

_INF: Final = float("inf")
#: A vector id's list is `id >> _LIST_BITS` (vectors.LIST_BITS).
_LIST_BITS: Final = 32


@dataclass
class Bounded:
    """Candidates of a search: per vector its item and an upper bound of its exact score
    (or the score itself). `lists`: the lists whose vectors may score an item (None: all)."""

    items: array[int]
    bounds: array[float]
    lists: frozenset[int] | None = None
    ranked: Collection[int] = ()


def rerank(
    conn: apsw.Connection,
    found: Bounded,
    query: bytes,
    want: int,
    accept: Callable[[Sequence[int]], Collection[int]] | None,
    decided: dict[int, bool],
    metric: Metric,
    scored: dict[int, float] | None = None,
    first: int = 0,
) -> list[tuple[int, float]]:
    """The exact top `want` accepted `(item, score)` of `found`, best first (score, then
    item), items in `found.ranked` aside; an item scores by its best vector (in
    `found.lists`). Candidates are scored exactly (their items' float32 vectors read by
    item) best bound first, widening fourfold until the `want`-th exact score is above
    every bound not read. `accept` sees each item at most once (`decided` remembers).
    `scored`: exact scores of items already read (all accepted, none in `found.ranked`);
    `first`: candidates to read at first when known (else 4 per wanted item, 64 at least)."""
    bounds, items = found.bounds, found.items
    total = len(bounds)
    best: dict[int, float] = dict(scored or {})
    done = 0
    k = min(total, max(first, want) if first else max(4 * want, 64))
    while True:
        order = core.vector_top(bounds, None, k + 1)
        fresh = [i for i in order[done:k] if items[i] not in found.ranked]
        if accept is not None:
            fresh = _accepted(items, fresh, accept, decided)
        rescore(conn, items, fresh, query, metric, found.lists, best)
        done = k
        ranked = sorted(best.items(), key=_rank)[:want]
        if k >= total:
            return ranked
        if len(ranked) >= want and bounds[order[k]] < ranked[-1][1]:
            return ranked
        k = min(total, 4 * k)


def _accepted(
    items: array[int],
    entries: list[int],
    accept: Callable[[Sequence[int]], Collection[int]],
    decided: dict[int, bool],
) -> list[int]:
    asked = list(dict.fromkeys(items[i] for i in entries if items[i] not in decided))
    if asked:
        passed = accept(asked)
        passing = passed if isinstance(passed, (set, frozenset, dict)) else set(passed)
        for item in asked:
            decided[item] = item in passing
    return [i for i in entries if decided[items[i]]]


def rescore(
    conn: apsw.Connection,
    items: array[int],
    entries: list[int],
    query: bytes,
    metric: Metric,
    lists: frozenset[int] | None,
    best: dict[int, float],
) -> None:
    """Score exactly every vector of the entries' items not scored yet (read by item:
    a training moves vectors to other ids without changing them or their codes)."""
    wanted = sorted({items[i] for i in entries} - best.keys())
    if not wanted:
        return
    rows = fetchall(
        conn,
        "SELECT id, item, vector FROM store_vectors WHERE item IN carray(?)",
        (ids(wanted),),
    )
    if lists is not None:
        rows = [row for row in rows if row[0] >> _LIST_BITS in lists]
    if not rows:
        return
    dims = len(query) // 4
    scores = core.vector_scores(query, vector_matrix(rows, dims), dims, metric)
    for row, score in zip(rows, scores, strict=True):
        item = row[1]
        if score > best.get(item, -_INF):
            best[item] = score


def scored(
    rows: Iterable[tuple[Any, ...]], query: bytes, dims: int, metric: Metric
) -> tuple[array[int], array[float]]:
    """The items of `rows` (item, vector) and each vector's exact score against `query`."""
    listed = list(rows)
    items = array("q", [row[0] for row in listed])
    return items, core.vector_scores(query, vector_matrix(listed, dims), dims, metric)


def vector_matrix(rows: Sequence[tuple[Any, ...]], dims: int) -> bytes:
    """The vectors of `rows` (id, item, vector, or item, vector) as one float32 matrix."""
    matrix = b"".join(row[-1] for row in rows)
    if len(matrix) != 4 * dims * len(rows):
        bad = sorted({row[-2] for row in rows if len(row[-1]) != 4 * dims})
        raise CorruptionError(
            f"the vectors of items {bad[:5]} are not {dims} float32; run `threadloom "
            "verify`, and put those items again"
        )
    return matrix


def _rank(entry: tuple[int, float]) -> tuple[float, int]:
    return (-entry[1], entry[0])
