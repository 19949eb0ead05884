"""Value resolution: the value documents a checkpoint or a write reaches, level by level.

Engine layer. One query per thread and level (blobs, chunks, elements, parts), cache
first; every body is blake3-checked when decoded (`store.py`). A referenced value that
is not stored raises MissingDocumentsError naming it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import apsw

from threadloom.engine.checkpoints.scope import Scope
from threadloom.engine.format.tables import CheckpointRow, value_rows
from threadloom.errors import MissingDocumentsError
from threadloom.protocol import raw_value, references


class Values:
    """Reads the value documents of one scope.

    Args:
        scope: the scope whose threads' values are read.
    """

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def values(self, conn: apsw.Connection, thread: int, refs: Iterable[str]) -> dict[str, Any]:
        """Return the decoded value bodies of `refs` that exist (cache first, then one query)."""
        wanted = refs if isinstance(refs, (set, frozenset, list, tuple)) else list(refs)
        cache = self.scope.cache
        found = cache.get_many(thread, wanted)
        missing = [ref for ref in wanted if ref not in found]
        if not missing:
            return found
        rows = value_rows(conn, thread, missing)
        decoded = self.scope.content.unpack_many(
            conn, [(body, digest, f"value {ref}") for ref, body, digest in rows], thread
        )
        loaded = [(row[0], data) for row, data in zip(rows, decoded, strict=True)]
        cache.put_many(thread, loaded)
        found.update(loaded)
        return found

    def reachable(
        self, conn: apsw.Connection, thread: int, roots: Iterable[Mapping[str, Any]]
    ) -> dict[str, Any]:
        """Return every value document reachable from `roots`, level by level.

        Raises:
            MissingDocumentsError: a referenced value is not stored.
        """
        have: dict[str, Any] = {}
        level = {ref for root in roots for ref, _ in references(root)}
        while level:
            found = self.values(conn, thread, level)
            missing = level - found.keys()
            if missing:
                raise MissingDocumentsError(sorted(missing))
            have.update(found)
            level = {ref for data in found.values() for ref in children(data)} - have.keys()
        return have

    def resolve(
        self,
        conn: apsw.Connection,
        rows: Sequence[CheckpointRow],
        docs: Sequence[Mapping[str, Any]],
    ) -> dict[int, dict[str, Any]]:
        """Fetch every value the documents reference: one query per thread and level."""
        roots: dict[int, list[Mapping[str, Any]]] = {}
        for row, doc in zip(rows, docs, strict=True):
            roots.setdefault(row.thread, []).append(doc)
        return {thread: self.reachable(conn, thread, found) for thread, found in roots.items()}

    def metadata(
        self, conn: apsw.Connection, thread: int, stored: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Decode a checkpoint's stored metadata value (joining its parts if split)."""
        fetched = self.reachable(conn, thread, [{"metadata": stored}])
        loaded: dict[str, Any] = self.scope.planner.loads(raw_value(stored, fetched))
        return loaded

    def loads(self, conn: apsw.Connection, thread: int, stored: Mapping[str, Any]) -> Any:
        """Decode one stored value (a channel value or a write's), fetching its parts."""
        fetched = self.reachable(conn, thread, [{"value": stored}])
        return self.scope.planner.loads(raw_value(stored, fetched))


def children(data: Mapping[str, Any]) -> Iterable[str]:
    """The refs a value document points to (`references` without the estimates)."""
    value = data.get("value")
    if value is not None:  # a value blob, an element or a pending write
        return value.get("parts") or ()
    elements = data.get("elements")
    if elements is not None:
        return [ref for ref, _ in elements]
    return data.get("chunks") or ()


def reached(data: Mapping[str, Any], fetched: Mapping[str, Any], into: set[str]) -> None:
    """Add to `into` every ref of `fetched` that `data` reaches."""
    for ref, _ in references(data):
        if ref not in into and ref in fetched:
            into.add(ref)
            reached(fetched[ref], fetched, into)
