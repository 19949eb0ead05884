"""A remote reader's read planning (SPEC §5.4), for the tests: batches and levels.

The released reader resolves what a checkpoint references level by level, in `find`
batches cut within READ_BUDGET by the protocol's fixed estimates and within MAX_IN_VALUES
refs. threadloom reads its own file and never plans these batches, so this lives with the
tests: `DictStore.resolve` reads the vectors' stores with it (the batches must equal
`reads.jsonl`'s), and the property and differential tests hold it to the released planner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from threadloom.errors import MissingDocumentsError
from threadloom.protocol import references
from threadloom.protocol.constants import MAX_IN_VALUES, READ_BUDGET
from threadloom.protocol.refs import collection_of


class Batch(NamedTuple):
    """One `find(collection, ref in refs)` request."""

    collection: str
    refs: list[str]


def batches(refs: Iterable[tuple[str, int]]) -> list[Batch]:
    """Group refs by collection (first appearance) and cut them within the read budget."""
    estimates: dict[str, int] = {}
    for ref, estimate in refs:
        estimates[ref] = estimate
    grouped: dict[str, list[str]] = {}
    for ref in estimates:
        grouped.setdefault(collection_of(ref), []).append(ref)
    result: list[Batch] = []
    for collection, members in grouped.items():
        current: list[str] = []
        total = 0
        for ref in members:
            estimate = estimates[ref]
            if current and (total + estimate > READ_BUDGET or len(current) >= MAX_IN_VALUES):
                result.append(Batch(collection, current))
                current, total = [], 0
            current.append(ref)
            total += estimate
        if current:
            result.append(Batch(collection, current))
    return result


class Resolution:
    """Level-by-level resolution of everything some root documents reference.

    Usage: while `resolution.pending`: fetch each batch of `resolution.level()`,
    pass every found document's data to `receive`, then call `advance()`.

    Args:
        roots: data of the root documents (a checkpoint and its pending writes).
    """

    def __init__(self, roots: Iterable[Mapping[str, Any]]) -> None:
        self.fetched: dict[str, Mapping[str, Any]] = {}
        self._wanted: list[tuple[str, int]] = []
        for root in roots:
            self._wanted.extend(references(root))
        self._level: list[Batch] = batches(self._wanted)
        self._found: list[Mapping[str, Any]] = []

    @property
    def pending(self) -> bool:
        """True while a level remains to fetch."""
        return bool(self._level)

    def level(self) -> list[Batch]:
        """Return the batches of the current level."""
        return self._level

    def receive(self, documents: Iterable[Mapping[str, Any]]) -> None:
        """Record documents found for the current level (value documents with a `ref`)."""
        for data in documents:
            self.fetched[data["ref"]] = data
            self._found.append(data)

    def advance(self) -> None:
        """Close the current level; the next one holds what the found documents reference.

        The next level lists references in the order documents were received,
        as the released reader does; the document service returns a `find`
        without `order_by` by document id ascending, so stores should too.

        Raises:
            MissingDocumentsError: a ref of this level was not received.
        """
        level = [ref for batch in self._level for ref in batch.refs]
        missing = [ref for ref in level if ref not in self.fetched]
        if missing:
            raise MissingDocumentsError(missing)
        following: list[tuple[str, int]] = []
        for data in self._found:
            following.extend(item for item in references(data) if item[0] not in self.fetched)
        self._found = []
        self._level = batches(following)
