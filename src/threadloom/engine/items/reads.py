"""Reading the Store's items: a row's columns (`ItemRow`), its body unsealed, checked and
decoded (`ItemReads.decode`), one item by namespace and key (`ItemReads.get`), and the
namespaces holding items (engine layer; `rows.py`'s `Items` writes, and reads with these).

An item's value is JSON text packed by the content store and sealed to its namespace and
key (`tables.STORE_ITEMS`): every read unseals the row's digest with the name and key it
was read by and checks the body against it, so a row moved to another key, or a body or
digest changed, is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import apsw

from threadloom.engine.format import seal
from threadloom.engine.format.codec import BLOCK_LIST, BLOCKS, check, unframe
from threadloom.engine.format.tables import STORE_ITEMS
from threadloom.engine.items.records import Stored, namespace_name, prefix_clause
from threadloom.engine.sql import fetchall

if TYPE_CHECKING:
    from threadloom.engine.file import File

_CHUNKED: Final = (bytes((BLOCKS,)), bytes((BLOCK_LIST,)))
#: `json.loads` of a str without its argument checks (the decoder it uses).
_json: Final = json.JSONDecoder().decode
#: How many identity digests (and namespace prefixes) `ItemReads` keeps (~100 bytes each).
IDENTITIES: Final = 4096


class ItemRow(NamedTuple):
    """A row of ITEM_COLUMNS: a `Stored` item as read, before its body is decoded.

    A search that ranks selects its score after these columns. The digest is read as
    stored (sealed): `Items.decode` unseals it with the row's name and key.
    """

    id: int
    name: str
    key: str
    body: bytes
    digest: bytes
    created_at: int
    updated_at: int
    expires_at: int | None
    ttl: float | None


#: The SQL of each `ItemRow` field (x = store_items; `{name}`: the namespace's name).
_SOURCES: Final = {
    "id": "x.id",
    "name": "{name}",
    "key": "x.key",
    "body": "x.body",
    "digest": "x.digest",
    "created_at": "x.created_at",
    "updated_at": "x.updated_at",
    "expires_at": "x.expires_at",
    "ttl": "x.ttl",
}
_COLUMNS: Final = ", ".join(_SOURCES[name] for name in ItemRow._fields)
ITEM_COLUMNS: Final = _COLUMNS.format(name="n.name")
# Where each field sits in a row of ITEM_COLUMNS. `decode` reads rows by these names
# rather than building an `ItemRow` per row: it is the hot read path, and other modules'
# queries (searches, verify) hand it plain rows with columns of their own after these.
_ID: Final = ItemRow._fields.index("id")
_NAME: Final = ItemRow._fields.index("name")
_KEY: Final = ItemRow._fields.index("key")
_BODY: Final = ItemRow._fields.index("body")
_DIGEST: Final = ItemRow._fields.index("digest")
_CREATED: Final = ItemRow._fields.index("created_at")
_UPDATED: Final = ItemRow._fields.index("updated_at")
_EXPIRES: Final = ItemRow._fields.index("expires_at")
_TTL: Final = ItemRow._fields.index("ttl")
#: The score a ranking search selects after the ITEM_COLUMNS.
_SCORE: Final = len(ItemRow._fields)
#: An item of one namespace named by `?1` (a subquery: SQLite plans it faster than a join).
_IN_NAMESPACE: Final = (
    f"SELECT {_COLUMNS.format(name='?1')} FROM store_items x "
    "WHERE x.ns = (SELECT id FROM store_namespaces WHERE name = ?1) AND x.key = ?2"
)
#: `_IN_NAMESPACE` unless the item expired by `?3`.
_LIVE_IN_NAMESPACE: Final = _IN_NAMESPACE + " AND (x.expires_at IS NULL OR x.expires_at > ?3)"


def _stored(row: Sequence[Any], value: dict[str, Any]) -> Stored:
    """The item of a row of ITEM_COLUMNS (and an optional score) with its decoded value."""
    expires, ttl = row[_EXPIRES], row[_TTL]
    return Stored(
        int(row[_ID]),
        tuple(str(row[_NAME]).split(".")),
        str(row[_KEY]),
        value,
        int(row[_CREATED]),
        int(row[_UPDATED]),
        None if expires is None else int(expires),
        None if ttl is None else float(ttl),
        None if len(row) <= _SCORE or row[_SCORE] is None else float(row[_SCORE]),
    )


class ItemReads:
    """The reads of `Items` (its base): the identity digests it keeps, and decoding."""

    def __init__(self, file: File) -> None:
        self.file = file
        #: Identity digests of recently read items (the seal's half that never changes).
        self._identities: dict[tuple[str, str], bytes] = {}
        self._prefixes: dict[str, str] = {}

    def _prefix(self, name: str) -> str:
        """The seal's encoding of the identity parts a namespace's items share."""
        start = self._prefixes.get(name)
        if start is None:
            if len(self._prefixes) >= IDENTITIES:
                self._prefixes.clear()
            start = self._prefixes[name] = seal.prefix(STORE_ITEMS.name, name, "")
        return start

    def _unsealed(self, row: Sequence[Any]) -> bytes:
        """The body digest a row's seal leaves for its own name and key (b"" if damaged)."""
        digest, name, key = row[_DIGEST], row[_NAME], row[_KEY]
        if not isinstance(digest, bytes) or not isinstance(name, str) or not isinstance(key, str):
            return b""
        bound = self._identities.get((name, key))
        if bound is None:
            if len(self._identities) >= IDENTITIES:
                self._identities.clear()
            bound = seal.identity_after(self._prefix(name), key)
            self._identities[(name, key)] = bound
        return seal.xor(digest, bound) if len(digest) == len(bound) else b""

    def decode(self, conn: apsw.Connection, rows: Sequence[Sequence[Any]]) -> list[Stored]:
        """Items from rows of ITEM_COLUMNS (`ItemRow`s, or plain rows of those columns and
        an optional score after them), each body checked."""
        if not rows:
            return []
        if len(rows) == 1 and rows[0][_BODY][:1] not in _CHUNKED:
            return [self._inline(conn, rows[0])]
        checks = [(r[_BODY], self._unsealed(r), f"store item {r[_NAME]}/{r[_KEY]}") for r in rows]
        raws = self.file.content.raw_many(conn, checks)
        return [
            _stored(row, _json(bytes(raw).decode("utf-8", "surrogatepass")))
            for row, raw in zip(rows, raws, strict=True)
        ]

    def _inline(self, conn: apsw.Connection, row: Sequence[Any]) -> Stored:
        """The item of a row whose body is inline (not in blocks), its body checked: the
        common get, decoded without the batch machinery."""
        name = f"store item {row[_NAME]}/{row[_KEY]}"
        raw = unframe(row[_BODY], partial(self.file.content.dictionary, conn), name)
        check(raw, self._unsealed(row), name)
        return _stored(row, _json(raw.decode("utf-8", "surrogatepass")))

    def get(
        self, conn: apsw.Connection, namespace: Sequence[str], key: str, live_at: int | None
    ) -> Stored | None:
        """One item, or None; `live_at`: omit it if it expired by then."""
        if live_at is None:
            rows = conn.execute(_IN_NAMESPACE, (namespace_name(namespace), key)).fetchall()
        else:
            bound = (namespace_name(namespace), key, live_at)
            rows = conn.execute(_LIVE_IN_NAMESPACE, bound).fetchall()
        if not rows:
            return None
        row: Sequence[Any] = rows[0]
        if row[_BODY][:1] in _CHUNKED:
            return self.decode(conn, [row])[0]
        return self._inline(conn, row)

    def namespaces(
        self,
        conn: apsw.Connection,
        prefix: Sequence[str],
        live_at: int | None,
    ) -> list[tuple[str, ...]]:
        """The namespaces under `prefix` that hold items (live ones, with `live_at`)."""
        clause, args = prefix_clause(prefix)
        sql = f"SELECT n.name FROM store_namespaces n WHERE {clause}"
        bound: list[Any] = list(args)
        if live_at is not None:
            sql += (
                " AND EXISTS (SELECT 1 FROM store_items x WHERE x.ns = n.id AND "
                "(x.expires_at IS NULL OR x.expires_at > ?))"
            )
            bound.append(live_at)
        return [tuple(str(r[0]).split(".")) for r in fetchall(conn, sql, bound)]
