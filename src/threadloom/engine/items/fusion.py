"""Hybrid ranking: the vector ranking and the full-text (BM25) ranking fused in one.

Engine layer, no I/O. Each ranking is a list of item ids, best first. An item's fused
score is its reciprocal rank fusion (Cormack, Clarke and Büttcher, SIGIR 2009) over the
two rankings, normalized so that first in both scores 1.0:

    rrf = (sum over the rankings holding the item of 1 / (K + rank)) / (2 / (K + 1))

with `rank` counted from 1. It is in (0, 1]: an item first in one ranking and absent from
the other scores 0.5, and it falls slowly with rank (K = 60: the 10th place is worth 0.87
of the first), so an item fairly high in both rankings beats one that tops only one.

Rank fusion alone cannot promise that an exact code (`ERR-4711`, an id) finds its item:
with an embedder that does not carry the code, items sharing one common token of the
query (`err`) and ranked well by the vectors outscore it. So an item whose text holds
the whole query as a phrase (its tokens adjacent, in order) while at most `EXACT_AT_MOST`
items under the prefix and filter do, is an exact hit and scores 1 + rrf: exact hits come
first, in fused order. A phrase many items hold (a common word) is no code: fusion alone
ranks them. Ties are ordered by item id, newest first.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Final

#: RRF's rank constant: 60, the value of the original paper, which found it robust across
#: collections. With two rankings it sets how fast a place's worth falls: at 60 a top-10
#: place in both rankings beats first place in one, so agreement wins over one strong
#: signal (a smaller K lets one ranking's first places dominate).
K: Final = 60
#: A query phrase held by at most this many items is an exact hit in each of them.
EXACT_AT_MOST: Final = 10
#: Each ranking is read to this depth at least (more when a page reaches further).
DEPTH: Final = 64


def depth(want: int) -> int:
    """How deep each ranking is read for a page ending at `want`: `DEPTH`, or the next
    power of two above (pages within one tier fuse the same lists, so they neither
    repeat nor skip an item)."""
    found = DEPTH
    while found < want:
        found *= 2
    return found


def fuse(
    rankings: Sequence[Sequence[int]], exact: Collection[int] = (), k: int = K, of: int = 2
) -> list[tuple[int, float]]:
    """(item id, score) best first: reciprocal rank fusion of `rankings` (each best
    first), normalized to 1.0 for first in all `of` rankings a search fuses, plus 1.0 for
    `exact` hits. A ranking the search could not read (no vector index, a query without
    words) is absent and adds nothing, so the scores keep their meaning: first in the
    one ranking there is scores 0.5."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    top = of / (k + 1)
    fused = {item: score / top for item, score in scores.items()}
    for item in exact:
        fused[item] = 1.0 + fused.get(item, 0.0)
    return sorted(fused.items(), key=lambda pair: (-pair[1], -pair[0]))
