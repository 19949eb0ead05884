"""Scored vectors a search gathered, ranked one item per entry (engine layer, no SQL).

`VectorIndex.search` gathers the vectors of the lists it probes into one `Candidates`
per tier and asks it for the best accepted items; ties rank by item, then reading order.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable, Collection, Sequence

from threadloom import core


class Candidates:
    """Scored vectors gathered by a search: their items and scores, in reading order."""

    def __init__(self) -> None:
        self.items: array[int] = array("q")
        self.scores: array[float] = array("d")

    def add(self, scored: tuple[array[int], array[float]]) -> None:
        self.items.extend(scored[0])
        self.scores.extend(scored[1])

    def best(
        self,
        want: int,
        accept: Callable[[Sequence[int]], Collection[int]] | None,
        decided: dict[int, bool],
        ranked: Collection[int] = (),
    ) -> list[tuple[int, float]]:
        """The best `want` accepted items not in `ranked` (an item's first, best, vector
        ranks it).

        Vectors are ranked by (score desc, item, reading order); `accept` sees each batch of
        new items in that order, batches growing fourfold, and `decided` remembers its
        answers across calls.
        """
        items, scores = self.items, self.scores
        total = len(scores)
        k = min(total, max(2 * want, 64))
        found: list[tuple[int, float]] = []
        seen: set[int] = set(ranked)
        walked = 0
        while True:
            order = core.vector_top(scores, items, k)
            batch = []
            for index in order[walked:]:
                item = items[index]
                if item not in seen:
                    seen.add(item)
                    batch.append((item, scores[index]))
            walked = len(order)
            if accept is not None:
                fresh = [item for item, _ in batch if item not in decided]
                if fresh:
                    passed = accept(fresh)
                    passing = passed if isinstance(passed, (set, frozenset, dict)) else set(passed)
                    for item in fresh:
                        decided[item] = item in passing
                batch = [entry for entry in batch if decided[entry[0]]]
            found.extend(batch)
            if len(found) >= want or k >= total:
                return found[:want]
            k = min(total, 4 * k)
