"""Which value documents of a thread its remaining rows still reach (engine layer).

Read-only, inside the caller's transaction; scope-free (the seals are checked against
the owners joined in SQL), so retention and `compact` share it. Value documents are
read level by level, one query per level: list blobs and value blobs (chunks or
parts), chunks (elements), elements (parts). An element whose chunk records a payload
of at most `PART_SIZE` bytes holds it inline (SPEC §4.3), so it is marked live without
being decoded. Pending writes reference nothing but the parts of a split value, so they
are decoded only when they may matter (`later`). When a sweep would delete a part, every
element taken on its chunk's word and every such write is decoded first, so a document
whose recorded size lies cannot lose its parts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import apsw

from threadloom.engine.content.blocks import BlockStore
from threadloom.engine.format.refkeys import keys, text
from threadloom.engine.format.tables import (
    CHECKPOINT_ROWS,
    OWNERS,
    TASK_ID,
    VALS,
    WRITE_ROWS,
    value_rows,
)
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import CorruptionError
from threadloom.protocol import references
from threadloom.protocol.constants import PART_SIZE

#: A checkpoint or pending-write row: its key columns and its decoded body.
Decoded = tuple[tuple[Any, ...], Mapping[str, Any]]


#: `unseal(table, stored digest, *sealed columns)`: the body digest a row of the thread
#: must decode to (`Scope.seal` with the thread id bound).
Unseal = Callable[..., bytes]


class Liveness:
    """The live values of one thread, marked from the rows given as roots.

    Args:
        conn: a connection inside a transaction.
        content: the file's content store.
        thread: the thread's row id.
        unseal: the thread's scope removes the identity from stored digests in Python
            (its part of every identity is encoded once: the hot path of a prune);
            without it the rows are joined to their owners and unsealed in SQL.
    """

    def __init__(
        self,
        conn: apsw.Connection,
        content: BlockStore,
        thread: int,
        unseal: Unseal | None = None,
    ) -> None:
        self.conn = conn
        self.content = content
        self.thread = thread
        self.unseal = unseal
        self.live: set[str] = set()
        #: Elements marked live without being decoded (their chunk says: no parts).
        self._unread: set[str] = set()
        #: Roots that reference parts only, decoded when a part would go (`later`).
        self._later: list[Callable[[], Iterable[Mapping[str, Any]]]] = []

    # -- the rows --------------------------------------------------------------------------

    def checkpoints(self, where: str = "", args: Sequence[Any] = ()) -> list[Decoded]:
        """Decode the thread's checkpoint rows (`where` narrows, on alias `x`): each as
        `((id, checkpoint_ns, checkpoint_id, parent_id, schema, keyed), body)`."""
        columns = "x.id, x.checkpoint_ns, x.checkpoint_id, x.parent_id, x.schema, x.keyed, x.body"
        if self.unseal is None:
            sql = f"SELECT {columns}, {CHECKPOINT_ROWS.unsealed('x')} FROM checkpoints x{OWNERS}"
        else:
            sql = f"SELECT {columns}, x.digest FROM checkpoints x"
        rows = fetchall(self.conn, f"{sql} WHERE x.thread = ?{where}", (self.thread, *args))
        if self.unseal is not None:
            unseal = self.unseal
            rows = [(*r[:7], unseal(CHECKPOINT_ROWS, r[7], *r[1:6])) for r in rows]
        bodies = self.content.unpack_many(
            self.conn, [(r[6], r[7], f"checkpoint {r[2]}") for r in rows]
        )
        return [(tuple(r[:6]), body) for r, body in zip(rows, bodies, strict=True)]

    def writes(self, skip: Iterable[tuple[str, str]] = ()) -> list[Decoded]:
        """Decode the thread's pending writes, except those of the checkpoints `skip`
        names (`(checkpoint_ns, checkpoint_id)`): each as `((ns, id, task, idx), body)`."""
        doomed = set(skip)
        columns = f"x.checkpoint_ns, x.checkpoint_id, {TASK_ID}, x.idx, x.body"
        if self.unseal is None:
            sql = f"SELECT {columns}, {WRITE_ROWS.unsealed('x')} FROM writes x{OWNERS}"
        else:
            sql = f"SELECT {columns}, x.digest, x.task_path, x.channel, x.schema FROM writes x"
        rows = [
            r
            for r in fetchall(self.conn, f"{sql} WHERE x.thread = ?", (self.thread,))
            if (r[0], r[1]) not in doomed
        ]
        if self.unseal is not None:
            unseal = self.unseal
            rows = [(*r[:5], unseal(WRITE_ROWS, r[5], *r[:4], *r[6:9])) for r in rows]
        bodies = self.content.unpack_many(
            self.conn, [(r[4], r[5], f"pending write {r[2]}/{r[3]}") for r in rows]
        )
        return [(tuple(r[:4]), body) for r, body in zip(rows, bodies, strict=True)]

    # -- marking ---------------------------------------------------------------------------

    def mark(self, roots: Iterable[Mapping[str, Any]]) -> None:
        """Mark every value document the root bodies reach (a checkpoint's channels,
        split checkpoint or metadata fields, a write's split value)."""
        self._walk(_texts(ref for root in roots for ref, _ in references(root)))

    def later(self, roots: Callable[[], Iterable[Mapping[str, Any]]]) -> None:
        """Roots that can reference nothing but parts (pending writes): decoded and
        marked only when a part would otherwise be collected."""
        self._later.append(roots)

    def _walk(self, level: set[str]) -> None:
        while level:
            level -= self.live
            self.live |= level
            wanted = [ref for ref in level if not ref.startswith("p-")]
            level = set()
            for data in self.values(wanted).values():
                level |= _texts(self._children(data))

    def _children(self, data: Mapping[str, Any]) -> list[Any]:
        value = data.get("value")
        if value is not None:  # a value blob or an element: split values list parts
            return list(value.get("parts") or ())
        elements = data.get("elements")
        if elements is not None:  # a chunk: elements, read only when they may be split
            found: list[Any] = []
            inline: list[Any] = []
            for ref, size in elements:
                (inline if isinstance(size, int) and size <= PART_SIZE else found).append(ref)
            for ref in _texts(inline) - self.live:
                self.live.add(ref)
                self._unread.add(ref)
            return found
        return list(data.get("chunks") or ())

    def values(self, refs: Sequence[str]) -> dict[str, Any]:
        """The decoded value documents of `refs` the thread stores (seals checked)."""
        if not refs:
            return {}
        if self.unseal is None:
            rows = value_rows(self.conn, self.thread, refs)
        else:
            unseal = self.unseal
            rows = []
            for k, body, digest in fetchall(
                self.conn,
                "SELECT x.ref_key, x.body, x.digest FROM vals x "
                "WHERE x.thread = ? AND x.ref_key IN carray(?)",
                (self.thread, ids(keys(refs))),
            ):
                ref = text(k)
                rows.append((ref, body, unseal(VALS, digest, ref)))
        decoded = self.content.unpack_many(
            self.conn, [(body, digest, f"value {ref}") for ref, body, digest in rows], self.thread
        )
        return {row[0]: data for row, data in zip(rows, decoded, strict=True)}

    # -- what may go -----------------------------------------------------------------------

    def unreferenced(self, cutoff: float) -> tuple[list[str], int]:
        """The thread's values nothing marked reaches: `(older than cutoff, younger)`.

        Returns:
            The refs stored before `cutoff` (collectable), and how many younger ones
            are kept for a later collection (the grace, or the policy's `min_age`).
        """
        for _ in range(2):
            old: list[str] = []
            young = 0
            for stored, created_at in fetchall(
                self.conn, "SELECT ref_key, created_at FROM vals WHERE thread = ?", (self.thread,)
            ):
                ref = text(stored)
                if ref in self.live:
                    continue
                if created_at < cutoff:
                    old.append(ref)
                else:
                    young += 1
            if not (self._unread or self._later) or not any(r.startswith("p-") for r in old):
                return old, young
            # A part would go: read what was taken on trust (elements on their chunk's
            # word, pending writes), in case one of them is split (its parts are live).
            unread, self._unread = sorted(self._unread), set()
            later, self._later = self._later, []
            for data in self.values(unread).values():
                self._walk(set(self._children(data)))
            for roots in later:
                self.mark(roots())
        return old, young


def _texts(refs: Iterable[Any]) -> set[str]:
    """The refs a stored document names, as a set; a damaged document can name something
    that is not text (a number, a list), which no stored value answers to.

    Raises:
        CorruptionError: a ref that is not text (the caller leaves the thread alone).
    """
    found: set[str] = set()
    for ref in refs:
        if type(ref) is not str:
            raise CorruptionError(
                f"a stored document of the thread names a reference that is not text "
                f"({ref!r:.60}); run `threadloom verify` to see which, and restore the "
                "thread from a backup"
            )
        found.add(ref)
    return found
