"""The embedding cache: which stored vector already holds the embedding of a text.

Engine layer (format 8, `store_embedded`). A text is keyed by blake3 of the embedder's
identity and the text (`key`); a key names the (item, field) whose vector was written for
it, with a digest of that vector, so a row whose vector has since been replaced, moved
away or deleted by another path is never used: `vectors` returns only vectors that are
the ones written for that key. The cache keeps no vector of its own (no second copy of
the index) and no text: a row is written with its vector (`remember`), goes when its item
does (a trigger) or when the item's vectors are written again, so it holds at most one
row per stored vector, and an erased item's text hashes go with the item.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterable, Sequence
from typing import Final

import apsw
import blake3

from threadloom.core.similarity import floats
from threadloom.engine.sql import fetchall, ids

#: Bytes of a key and of a vector digest.
KEY_BYTES: Final = 16
DIGEST_BYTES: Final = 8


def key(identity: str, text: str) -> bytes:
    """The cache key of `text` embedded by the embedder named `identity`."""
    hasher = blake3.blake3(b"threadloom embedding\x00")
    name = identity.encode("utf-8", "surrogatepass")
    hasher.update(len(name).to_bytes(8, "little"))
    hasher.update(name)
    hasher.update(text.encode("utf-8", "surrogatepass"))
    return hasher.digest(length=KEY_BYTES)


def vectors(conn: apsw.Connection, keys: Iterable[bytes]) -> dict[bytes, array[float]]:
    """The stored vectors of the `keys` the cache holds (others are left out), as float32
    arrays: a write packs them again by a copy of their bytes (`vector_values.pack_many`)
    and a put of the same text into the same field never reads them."""
    wanted = list(dict.fromkeys(keys))
    if not wanted:
        return {}
    rows = fetchall(
        conn,
        "SELECT e.key, e.vector_digest, v.vector FROM store_embedded e "
        "JOIN store_vectors v ON v.item = e.item AND v.field = e.field "
        "WHERE e.key IN carray(?)",
        (ids(wanted),),
    )
    found: dict[bytes, array[float]] = {}
    for cached, digest, blob in rows:
        blob = bytes(blob)
        if blake3.blake3(blob).digest(length=DIGEST_BYTES) != bytes(digest):
            continue  # the field's vector was replaced by a path that did not say so
        found[bytes(cached)] = floats(blob, max(len(blob) // 4, 1))
    return found


def unchanged(
    conn: apsw.Connection, wanted: Sequence[tuple[int, Sequence[tuple[str, bytes]]]]
) -> set[int]:
    """The items of `wanted` (item, [(field, key), ...]) whose stored vectors are exactly
    the ones written for those keys, field for field: a put of the same texts by the same
    embedder, whose vectors need not be written again."""
    asked = {item: set(fields) for item, fields in wanted if fields}
    if not asked:
        return set()
    items = ids(list(asked))
    held: dict[int, set[tuple[str, bytes]]] = {}
    # With each row, how many vectors its item has (an item without a cache row has no
    # row here, and is not unchanged anyway): one statement.
    rows = fetchall(
        conn,
        "SELECT e.item, e.field, e.key, e.vector_digest, v.vector, "
        "(SELECT count(*) FROM store_vectors c WHERE c.item = e.item) FROM store_embedded e "
        "JOIN store_vectors v ON v.item = e.item AND v.field = e.field "
        "WHERE e.item IN carray(?)",
        (items,),
    )
    counts: dict[int, int] = {}
    for item, field, cached, digest, blob, count in rows:
        counts[int(item)] = int(count)
        if blake3.blake3(bytes(blob)).digest(length=DIGEST_BYTES) == bytes(digest):
            held.setdefault(int(item), set()).add((str(field), bytes(cached)))
    return {
        item
        for item, count in counts.items()
        if held.get(item) == asked[item] and count == len(asked[item])
    }


def remember(
    conn: apsw.Connection,
    written: Sequence[tuple[int, Sequence[tuple[str, bytes, bytes]]]],
    fresh: Collection[int] = (),
) -> None:
    """Record, in the caller's write transaction, the vectors just written for items:
    (item, [(field, key, vector as stored), ...]); each item's earlier rows go first
    (`fresh`: items this transaction inserted, which have none)."""
    if not written:
        return
    doomed = [(item,) for item, _ in written if item not in fresh]
    if doomed:
        conn.executemany("DELETE FROM store_embedded WHERE item = ?", doomed)
    conn.executemany(
        "INSERT OR REPLACE INTO store_embedded(key, item, field, vector_digest) VALUES(?, ?, ?, ?)",
        [
            (cached, item, field, blake3.blake3(blob).digest(length=DIGEST_BYTES))
            for item, fields in written
            for field, cached, blob in fields
        ],
    )


def forget(conn: apsw.Connection, items: Sequence[int] | None = None) -> int:
    """Delete the cache rows of `items` (None: every row); return how many went."""
    if items is None:
        return len(fetchall(conn, "DELETE FROM store_embedded RETURNING 1"))
    rows = fetchall(
        conn, "DELETE FROM store_embedded WHERE item IN carray(?) RETURNING 1", (ids(items),)
    )
    return len(rows)
