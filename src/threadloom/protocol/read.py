"""Read planning for remote stores (SPEC §5.4): references, batches, level-by-level resolution.

No I/O: `Resolution` says which refs to fetch next and takes back what was
found; the caller (NATS client, tests) performs the fetches. Batches stay
within READ_BUDGET by the protocol's fixed estimates and within MAX_IN_VALUES refs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from threadloom.errors import MissingDocumentsError
from threadloom.protocol.constants import (
    CHUNK_BYTES,
    DOCUMENT_OVERHEAD,
    MAX_IN_VALUES,
    PART_SIZE,
    READ_BUDGET,
    STORED_BYTES,
)
from threadloom.protocol.refs import collection_of

_STORED_FIELDS = ("checkpoint", "metadata", "value")


class Batch(NamedTuple):
    """One `find(collection, ref in refs)` request."""

    collection: str
    refs: list[str]


def references(data: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Return `(ref, estimated bytes)` for every document `data` references directly."""
    found: list[tuple[str, int]] = []
    for field in _STORED_FIELDS:
        stored = data.get(field)
        if stored is not None and "parts" in stored:
            found.extend((ref, STORED_BYTES) for ref in stored["parts"])
    channels = data.get("channels")
    if channels:
        found.extend(
            (entry["blob"], STORED_BYTES) for entry in channels.values() if "blob" in entry
        )
    chunks = data.get("chunks")
    if chunks:
        found.extend((ref, CHUNK_BYTES) for ref in chunks)
    elements = data.get("elements")
    if elements:
        found.extend((ref, min(size, PART_SIZE) + DOCUMENT_OVERHEAD) for ref, size in elements)
    return found


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
