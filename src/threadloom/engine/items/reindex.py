"""Refilling the index entries of stored items: their text and their vectors.

Engine layer. An item's value and times stay as they are; only what indexes it changes:
its `store_text` row and `text_terms`, and its vectors. Used by `Store.reembed` (items written
without embeddings, as `threadloom migrate --store` writes them, or with another
embedder) and by the text fill of items that older versions wrote with vectors and no
text entry (`TEXT_FILLED`). Items are visited in id order, a page per transaction, so a
run that stops is resumed by running it again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from threadloom.engine.format.text import digest as text_digest
from threadloom.engine.format.text import holds as text_held
from threadloom.engine.items import vector_codes
from threadloom.engine.items.reads import ITEM_COLUMNS
from threadloom.engine.items.records import Stored, prefix_clause
from threadloom.engine.items.rows import Items
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import InvalidArgumentError

#: The `meta` key set once the items written with vectors and no text entry (by 0.8 and
#: earlier, whose stores with an index kept no text) have been given one.
TEXT_FILLED: Final = "store_text_filled"

#: The `meta` keys of the vector index (engine/items/vectors.py).
VECTOR_SETTINGS: Final = (
    "vector_dims",
    "vector_metric",
    "vector_trained",
    "vector_generation",
    "vector_moving",  # a training in progress (vector_training.py) stops at its next step
)

_FROM: Final = " FROM store_items x JOIN store_namespaces n ON n.id = x.ns"
#: An item indexed (it has a text entry, even an empty one) and without a vector: one put
#: with `index=False` has neither, and is left alone.
_UNEMBEDDED: Final = (
    "x.text_terms IS NOT NULL AND NOT EXISTS (SELECT 1 FROM store_vectors v WHERE v.item = x.id)"
)
#: An item whose indexed text has words and that has no vector: what a vector search
#: misses (after a re-embedding, an item whose fields hold no text has `text_terms` 0).
_MISSED: Final = (
    "x.text_terms > 0 AND NOT EXISTS (SELECT 1 FROM store_vectors v WHERE v.item = x.id)"
)
_EMBEDDED_NO_TEXT: Final = (
    "x.text_terms IS NULL AND EXISTS (SELECT 1 FROM store_vectors v WHERE v.item = x.id)"
)


@dataclass
class Entry:
    """New index entries of one stored item.

    Attributes:
        item: the item as read (its id and `updated_at` say which version they index).
        texts: its indexed text, or None to leave its text entry as it is.
        vectors: (field path, embedding) per indexed field, or None to leave them.
        keys: the embedding cache key of each of `vectors` (None: not cached).
    """

    item: Stored
    texts: list[str] | None
    vectors: list[tuple[str, Sequence[float]]] | None
    keys: list[bytes] | None = None


class Reindex:
    """The index entries of one file's stored items, refilled."""

    def __init__(self, items: Items) -> None:
        self.items = items

    def page(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        *,
        after: int,
        limit: int,
        every: bool,
    ) -> list[Stored]:
        """The next `limit` items under `prefix` with an id above `after`, by id: those
        indexed without a vector, or (`every`) all of them."""
        clause, args = prefix_clause(prefix)
        wanted = clause if every else f"{clause} AND {_UNEMBEDDED}"
        rows = fetchall(
            conn,
            f"SELECT {ITEM_COLUMNS}{_FROM} WHERE x.id > ? AND {wanted} ORDER BY x.id LIMIT ?",
            [after, *args, limit],
        )
        return self.items.decode(conn, rows)

    def textless_page(self, conn: apsw.Connection, *, after: int, limit: int) -> list[Stored]:
        """The next `limit` items with vectors and no text entry, by id."""
        rows = fetchall(
            conn,
            f"SELECT {ITEM_COLUMNS}{_FROM} WHERE x.id > ? AND {_EMBEDDED_NO_TEXT} "
            "ORDER BY x.id LIMIT ?",
            [after, limit],
        )
        return self.items.decode(conn, rows)

    def counts(self, conn: apsw.Connection, prefix: Sequence[str]) -> tuple[int, int]:
        """(items under `prefix`, those of them indexed without a vector)."""
        clause, args = prefix_clause(prefix)
        row = fetchall(
            conn,
            f"SELECT count(*), coalesce(sum({_UNEMBEDDED}), 0){_FROM} WHERE {clause}",
            args,
        )[0]
        return int(row[0]), int(row[1])

    def unembedded(self, conn: apsw.Connection, prefix: Sequence[str], live_at: int | None) -> int:
        """How many items under `prefix` have indexed words and no vector (live ones,
        with `live_at`): what a vector search cannot return."""
        clause, args = prefix_clause(prefix)
        sql = f"SELECT count(*){_FROM} WHERE {clause} AND {_MISSED}"
        bound: list[Any] = list(args)
        if live_at is not None:
            sql += " AND (x.expires_at IS NULL OR x.expires_at > ?)"
            bound.append(live_at)
        return int(fetchall(conn, sql, bound)[0][0])

    def text_filled(self, conn: apsw.Connection) -> bool:
        """The one-time text fill (`TEXT_FILLED`) has run on this file."""
        return bool(fetchall(conn, "SELECT 1 FROM meta WHERE key = ?", (TEXT_FILLED,)))

    def mark_text_filled(self, conn: apsw.Connection) -> None:
        """Record that the text fill ran (in the caller's write transaction)."""
        conn.execute(
            "INSERT INTO meta(key, value) VALUES(?, '1') ON CONFLICT(key) DO NOTHING",
            (TEXT_FILLED,),
        )

    def apply(self, conn: apsw.Connection, entries: Sequence[Entry]) -> int:
        """Write the entries in the caller's write transaction; an item replaced or deleted
        since it was read is skipped (its own put indexed it). Return how many were written."""
        if not entries:
            return 0
        wanted = [e.item.id for e in entries]
        rows = fetchall(
            conn,
            "SELECT id, updated_at, text_digest, text_terms FROM store_items WHERE id IN carray(?)",
            (ids(wanted),),
        )
        updated = {int(r[0]): int(r[1]) for r in rows}
        # Each item's text_terms and text_digest (`text.holds`: does its entry hold a text).
        held = {int(r[0]): (r[3], r[2]) for r in rows}
        kept = [e for e in entries if updated.get(e.item.id) == e.item.updated_at]
        # Each entry's text as the index holds it, and its digest (None: no text entry,
        # never skipped: deleting it is how an item loses its text).
        joined = {e.item.id: "\n".join(e.texts) for e in kept if e.texts is not None}
        digests = {e.item.id: text_digest(joined[e.item.id]) if e.texts else None for e in kept}
        texts = [
            e
            for e in kept
            if e.texts is not None
            and not (
                (found := digests[e.item.id]) is not None and text_held(*held[e.item.id], found)
            )
        ]
        if texts:
            conn.executemany(
                "DELETE FROM store_text WHERE rowid = ?", [(e.item.id,) for e in texts]
            )
            conn.executemany(
                "INSERT INTO store_text(rowid, text) VALUES(?, ?)",
                [(e.item.id, joined[e.item.id]) for e in texts if e.texts],
            )
            conn.executemany(
                "UPDATE store_items SET text_terms = ?, text_digest = ? WHERE id = ?",
                [
                    (
                        self.items.text_terms(joined[e.item.id]),
                        digests[e.item.id],
                        e.item.id,
                    )
                    for e in texts
                ],
            )
        vectored = [e for e in kept if e.vectors is not None]
        if vectored:
            if self.items.vectors is None:
                raise InvalidArgumentError("vectors given to a store without a vector index")
            self.items.index_vectors(
                conn, [(e.item.id, e.vectors or []) for e in vectored], [e.keys for e in vectored]
            )
        return len(kept)

    def vector_count(self, conn: apsw.Connection) -> int:
        """How many vectors the file holds."""
        return int(fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0])

    def drop_vectors(self, conn: apsw.Connection) -> int:
        """Delete every vector, the trained lists and the index's settings (in the caller's
        write transaction), so vectors of other dims or another metric can be written;
        return how many vectors went."""
        gone = self.vector_count(conn)
        conn.execute("DELETE FROM store_vectors")
        vector_codes.clear(conn)
        conn.execute("DELETE FROM store_embedded")
        conn.execute("DELETE FROM store_lists WHERE id != 0")
        conn.execute("DELETE FROM meta WHERE key IN carray(?)", (ids(list(VECTOR_SETTINGS)),))
        return gone
