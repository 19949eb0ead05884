"""The Store's items: namespaces, bodies, the filter index, TTLs (docs/FORMAT.md, format 5).

Engine layer: all of the Store's SQL but its searches (`engine/items/recall.py`). An item's
value is JSON text, packed by the content store like every body and sealed to its
namespace and key (`tables.STORE_ITEMS`). Writes run in one transaction per batch and
keep the filter index (`fieldkeys.fields`), the text index and the vectors in step with
the bodies; deleting an item deletes its index rows (foreign keys and triggers), so no
search can meet a stale vector or token. Times are integer microseconds since the epoch.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import apsw

from threadloom.engine.content.blocks import Packed
from threadloom.engine.file import File
from threadloom.engine.format import features, seal
from threadloom.engine.format.text import TOKENIZER
from threadloom.engine.format.text import digest as text_digest
from threadloom.engine.format.text import holds as text_held
from threadloom.engine.items import fieldkeys, vector_codes
from threadloom.engine.items.embedded import remember, unchanged
from threadloom.engine.items.jsontext import encode_value
from threadloom.engine.items.paths import EPOCH_KEY as PATHS_EPOCH
from threadloom.engine.items.paths import FieldPaths
from threadloom.engine.items.reads import ItemReads, ItemRow
from threadloom.engine.items.records import (
    MINUTE,
    Write,
    namespace_name,
    now_us,
    prefix_clause,
)
from threadloom.engine.sql import fetch, fetchall, ids, insert_values
from threadloom.errors import CorruptionError
from threadloom.protocol.constants import RETENTION_GRACE_SECONDS

if TYPE_CHECKING:
    from threadloom.engine.items.vectors import VectorIndex

_NAMED: Final = " JOIN store_namespaces n ON n.id = x.ns"


class OldRow(NamedTuple):
    """An item about to be replaced or deleted (`_OLD`); `digest` is as stored (sealed)."""

    id: int
    name: str
    key: str
    body: bytes
    digest: bytes
    blocks: int
    created_at: int
    partial: int
    terms: int | None
    text_digest: bytes | None


#: The columns of an `OldRow`; `?1` is its namespace's name.
_OLD: Final = (
    "SELECT x.id, ?1, x.key, x.body, x.digest, x.blocks, x.created_at, x.partial, x.text_terms, "
    "x.text_digest"
)
_OLD_WHERE: Final = (
    " FROM store_items x WHERE x.ns = (SELECT id FROM store_namespaces WHERE name = ?1) "
    "AND x.key = ?2"
)
#: Namespace `?1`'s id and NULLs (if it holds items), then its `_OLD` rows of keys `?2`.
_PRESENT: Final = (
    "SELECT id, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL "
    "FROM store_namespaces WHERE name = ?1 "
    f"UNION ALL {_OLD.replace('SELECT', 'SELECT x.ns,', 1)}"
    + _OLD_WHERE.replace("x.key = ?2", "x.key IN carray(?2)")
)
_OLD_NAMED: Final = _OLD.replace("?1", "n.name") + " FROM store_items x" + _NAMED
#: The features the Store's statements read (no schema check once seen: `features.Copies`).
READS: Final = features.needed(features.STORE)
#: The content store's and the field paths' epochs, read once by a write.
_EPOCHS: Final = "SELECT key, value FROM meta WHERE key IN ('gc_epoch', ?)"


class _Columns(NamedTuple):
    """A put's row columns besides its body, and its filter index rows (`Items._columns`)."""

    digest: bytes
    expires: int | None
    #: The filter index rows ([] for a value the item holds already: its rows stay).
    fields: list[tuple[str, bytes]]
    partial: int
    terms: int | None
    #: The text entry to write (None: none, or the item holds this text already).
    text: str | None
    text_digest: bytes | None
    #: The item replaced holds this value already (its filter rows and `partial` stay).
    same: bool

    @property
    def text_kept(self) -> bool:
        """The item holds this text entry already (a put of the same text)."""
        return self.text is None and self.text_digest is not None


class Items(ItemReads):
    """The Store's items on one file.

    Args:
        file: the open file (format 5 or later).
        vectors: the vector index, or None when the store embeds nothing.
    """

    def __init__(self, file: File, vectors: VectorIndex | None = None) -> None:
        super().__init__(file)
        self.vectors = vectors
        #: The features the Store's statements read (`File.connection(needs)`).
        self.reads = READS
        self._tokenizer: Any = None
        #: A write made a dictionary training due (`after_write` runs it).
        self._train_due = False
        #: Field path numbers (`paths.py`).
        self.paths = FieldPaths()

    # -- text ------------------------------------------------------------------------------

    def tokens(self, text: str) -> list[str]:
        """The text index's tokens of `text` (lower case, without diacritics)."""
        if self._tokenizer is None:
            # A private in-memory connection: the tokenizer lives as long as it does.
            self._tokenizer = apsw.Connection(":memory:").fts5_tokenizer(
                TOKENIZER[0], list(TOKENIZER[1])
            )
        found = self._tokenizer(
            text.encode("utf-8", "surrogatepass"),
            apsw.FTS5_TOKENIZE_DOCUMENT,
            None,
            include_offsets=False,
        )
        return [t[0] for t in found]

    def text_terms(self, text: str) -> int:
        """How many distinct tokens the text index holds for `text` (`text_terms`)."""
        return len(set(self.tokens(text)))

    # -- writing ---------------------------------------------------------------------------

    def write(self, conn: apsw.Connection, writes: Sequence[Write], now: int) -> int:
        """Apply puts and deletes inside the caller's write transaction (last one per key
        wins); the caller calls `committed()` once that transaction commits. Return how
        many puts were written (a create-only put of a stored key is not)."""
        self.begin()
        last: dict[tuple[tuple[str, ...], str], Write] = {}
        for w in writes:
            last[(tuple(w.namespace), w.key)] = w
        if not last:
            return 0
        self.file.ensure(conn, features.STORE)
        content = self.file.content
        epochs: dict[str, Any] = dict(fetchall(conn, _EPOCHS, (PATHS_EPOCH,)))
        if content.epoch != int(epochs.get("gc_epoch", 0)):
            content.reload(conn)
        self.paths.saw_epoch(int(epochs.get(PATHS_EPOCH, 0)))
        puts = [w for w in last.values() if w.value is not None]
        # Namespace ids read by this transaction (`_present` reads them with the rows).
        known: dict[str, int] = {}
        present = self._present(conn, puts, known)
        puts = [
            w
            for w in puts
            if not (w.create_only and (namespace_name(w.namespace), w.key) in present)
        ]
        raws = [encode_value(w.value, checked=w.checked) for w in puts if w.value is not None]
        packs = [content.pack_raw(raw) for raw in raws]
        content.prepare(packs, conn)
        if any(w.value is None for w in last.values()):
            known.clear()  # a delete below may remove a namespace (its last item)
        for w in last.values():
            if w.value is None:
                named = (namespace_name(w.namespace), w.key)
                self._drop(conn, fetch(conn, OldRow, _OLD + _OLD_WHERE, named), now)
        olds = [present.get((namespace_name(w.namespace), w.key)) for w in puts]
        columns = [
            self._columns(w, packed, now, old)
            for w, packed, old in zip(puts, packs, olds, strict=True)
        ]
        made = self._insert(
            conn,
            [
                (w, len(raw), packed, cols)
                for w, raw, packed, cols, old in zip(puts, raws, packs, columns, olds, strict=True)
                if old is None
            ],
            now,
            known,
        )
        kept = self._replace(
            conn,
            [
                (w, len(raw), packed, cols, old)
                for w, raw, packed, cols, old in zip(puts, raws, packs, columns, olds, strict=True)
                if old is not None
            ],
            now,
        )
        at = iter(made)
        items = [next(at) if old is None else int(old.id) for old in olds]
        fields: list[tuple[str, bytes, int]] = []
        texts: list[tuple[int, str]] = []
        for cols, item in zip(columns, items, strict=True):
            if cols.text is not None:
                texts.append((item, cols.text))
            if item not in kept:
                fields.extend((path, found, item) for path, found in cols.fields)
        content.link(conn, packs, now / 1e6)
        paths = self.paths.numbers(conn, list(dict.fromkeys(path for path, _, _ in fields)))
        # The batch's filter rows in key order, few statements (FTS5 gained nothing so).
        insert_values(
            conn,
            "INSERT OR IGNORE INTO store_fields(path, value, item)",
            sorted([(paths[path], found, item) for path, found, item in fields]),
        )
        conn.executemany("INSERT INTO store_text(rowid, text) VALUES(?, ?)", texts)
        self.index_vectors(
            conn,
            [(item, w.vectors or []) for item, w in zip(items, puts, strict=True)],
            [w.keys for w in puts],
            set(made),
        )
        if content.note_inline(conn, packs):
            self._train_due = True
        return len(puts)

    def index_vectors(
        self,
        conn: apsw.Connection,
        entries: Sequence[tuple[int, Sequence[tuple[str, Sequence[float]]]]],
        keys: Sequence[list[bytes] | None],
        fresh: Collection[int] = (),
    ) -> None:
        """Make each item's vectors exactly the given ones and record their embedding
        cache keys (`keys[i]` for `entries[i]`, None: none), in the caller's write. An
        item put again with the same texts and embedder keeps the vectors it has.
        `fresh`: items this transaction inserted (they hold no vectors yet)."""
        if self.vectors is None:
            return
        same = unchanged(
            conn,
            [
                (item, [(f, k) for (f, _), k in zip(vectors, known, strict=True)])
                for (item, vectors), known in zip(entries, keys, strict=True)
                if known is not None and len(known) == len(vectors) and item not in fresh
            ],
        )
        if same:
            kept = [(e, k) for e, k in zip(entries, keys, strict=True) if e[0] not in same]
            entries, keys = [e for e, _ in kept], [k for _, k in kept]
        blobs = self.vectors.replace_many(conn, entries, fresh)
        written = []
        at = 0
        for (item, vectors), known in zip(entries, keys, strict=True):
            mine = blobs[at : at + len(vectors)]
            at += len(vectors)
            # Keys only where the embedder has an identity (`known` None: none recorded).
            fields = [f for f, _ in vectors]
            written.append((item, list(zip(fields, known or (), mine, strict=False))))
        remember(conn, written, fresh)

    def after_write(self) -> None:
        """Retrain the content dictionary when a write made it due (outside the write)."""
        if self._train_due:
            self._train_due = False
            self.file.content.train()

    def _namespace(
        self, conn: apsw.Connection, namespace: Sequence[str], known: dict[str, int]
    ) -> int:
        """The namespace's row id, made if needed (`known`: ids this transaction read)."""
        name = namespace_name(namespace)
        if (found := known.get(name)) is not None:
            return found
        rows = fetchall(conn, "SELECT id FROM store_namespaces WHERE name = ?", (name,))
        if not rows:
            made = "INSERT INTO store_namespaces(name, depth) VALUES(?, ?) RETURNING id"
            rows = fetchall(conn, made, (name, len(namespace)))
        known[name] = found = int(rows[0][0])
        return found

    def _present(
        self, conn: apsw.Connection, puts: Sequence[Write], known: dict[str, int]
    ) -> dict[tuple[str, str], OldRow]:
        """The stored rows of the items `puts` replace, by (namespace name, key): one query
        per namespace of the batch, which also puts the namespace's id in `known` (a UNION:
        a LEFT JOIN from the namespace's row was 4x slower)."""
        keys: dict[str, list[str]] = {}
        for w in puts:
            keys.setdefault(namespace_name(w.namespace), []).append(w.key)
        found: dict[tuple[str, str], OldRow] = {}
        for name, wanted in keys.items():
            for ns, *row in conn.execute(_PRESENT, (name, ids(wanted))):
                known[name] = int(ns)
                if row[0] is not None:
                    found[(name, str(row[2]))] = OldRow._make(row)
        return found

    def _columns(self, w: Write, packed: Packed, now: int, old: OldRow | None) -> _Columns:
        """What a put's row and index rows hold besides its body (`old`: the row it
        replaces, whose filter rows stay when the value is the same, and whose text
        entry stays when the text is)."""
        name = namespace_name(w.namespace)
        digest = seal.xor(packed.digest, seal.identity_after(self._prefix(name), w.key))
        expires = None if w.ttl is None else now + math.ceil(w.ttl * MINUTE)
        same = old is not None and bytes(old.digest) == digest
        if same and old is not None:
            rows: list[tuple[str, bytes]] = []
            partial = int(old.partial)
        else:
            rows, complete = fieldkeys.fields(w.value or {})
            partial = int(not complete)
        if w.texts is None:
            return _Columns(digest, expires, rows, partial, None, None, None, same)
        if not w.texts:
            return _Columns(digest, expires, rows, partial, 0, None, None, same)  # no entry
        # The text as the index holds it: a newline separates tokens (unicode61), so its
        # tokens are those of the texts together.
        text = "\n".join(w.texts)
        found = text_digest(text)
        if old is not None and text_held(old.terms, old.text_digest, found):
            return _Columns(digest, expires, rows, partial, old.terms or 0, None, found, same)
        return _Columns(digest, expires, rows, partial, self.text_terms(text), text, found, same)

    def _insert(
        self,
        conn: apsw.Connection,
        fresh: Sequence[tuple[Write, int, Packed, _Columns]],
        now: int,
        known: dict[str, int],
    ) -> list[int]:
        """Insert the rows of new items (value size, body, columns); their row ids, in
        order (by namespace and key: RETURNING promises no order)."""
        if not fresh:
            return []
        rows = [
            (
                self._namespace(conn, w.namespace, known),
                w.key,
                packed.body,
                cols.digest,
                len(packed.keys),
                size,
                now if w.created_at is None else w.created_at,
                now if w.updated_at is None else w.updated_at,
                cols.expires,
                w.ttl,
                cols.partial,
                cols.terms,
                cols.text_digest,
            )
            for w, size, packed, cols in fresh
        ]
        made = insert_values(
            conn,
            "INSERT INTO store_items(ns, key, body, digest, blocks, size, created_at, "
            "updated_at, expires_at, ttl, partial, text_terms, text_digest)",
            rows,
            " RETURNING ns, key, id",
        )
        found = {(ns, key): int(item) for ns, key, item in made}
        return [found[row[0], row[1]] for row in rows]

    def _replace(
        self,
        conn: apsw.Connection,
        again: Sequence[tuple[Write, int, Packed, _Columns, OldRow]],
        now: int,
    ) -> set[int]:
        """Write the rows of items that replace stored ones (value size, body, columns,
        the row replaced), one statement each for the batch (the caller adds the filter
        and text rows and links the bodies' blocks). Return the items whose value is the
        one stored (the same digest under the same seal): their filter rows stay as they
        are, neither deleted nor written again. A text entry stays when the put's text is
        the one it holds (`text_kept`)."""
        if not again:
            return set()
        same = {int(old.id) for _, _, _, cols, old in again if cols.same}
        chunked = [old.body for *_, old in again if old.blocks]
        if chunked:
            self.file.content.unlink(conn, chunked, now / 1e6)
        self._unindex(conn, [old for *_, old in again if int(old.id) not in same])
        conn.executemany(
            "UPDATE store_items SET body = ?, digest = ?, blocks = ?, size = ?, "
            "updated_at = ?, expires_at = ?, ttl = ?, partial = ?, text_terms = ?, "
            "text_digest = ? "
            "WHERE id = ?",
            [
                (
                    packed.body,
                    cols.digest,
                    len(packed.keys),
                    size,
                    max(now, int(old.created_at)) if w.updated_at is None else w.updated_at,
                    cols.expires,
                    w.ttl,
                    cols.partial,
                    cols.terms,
                    cols.text_digest,
                    int(old.id),
                )
                for w, size, packed, cols, old in again
            ],
        )
        replaced = [(int(old.id),) for *_, old in again]
        conn.executemany(
            "DELETE FROM store_text WHERE rowid = ?",
            [(int(old.id),) for *_, cols, old in again if not cols.text_kept],
        )
        if self.vectors is None:
            # A store without embeddings replaced the values: their old vectors would be stale.
            vector_codes.drop_items(conn, [item for (item,) in replaced])
        return same

    def begin(self) -> None:
        """Start remembering the path numbers this thread's write transaction reads."""
        self.paths.begin()

    def committed(self) -> None:
        """The write transaction `begin` started committed: keep its path numbers."""
        self.paths.committed()

    def _unindex(self, conn: apsw.Connection, rows: Sequence[OldRow]) -> None:
        """Delete the filter index rows of items given as `_OLD` rows, found from their
        values (a value that cannot be decoded: by a scan of the index)."""
        doomed: list[tuple[int, bytes, int]] = []
        for row in rows:
            item = int(row.id)
            try:
                (stored,) = self.decode(
                    conn,
                    [ItemRow(row.id, row.name, row.key, row.body, row.digest, 0, 0, None, None)],
                )
            except CorruptionError:
                conn.execute("DELETE FROM store_fields WHERE item = ?", (item,))
                continue
            found, _ = fieldkeys.fields(stored.value)
            paths = self.paths.numbers(conn, [path for path, _ in found])
            doomed.extend((paths[path], key, item) for path, key in found)
        conn.executemany(
            "DELETE FROM store_fields WHERE path = ? AND value = ? AND item = ?", doomed
        )

    def _drop(self, conn: apsw.Connection, rows: Sequence[OldRow], now: int) -> None:
        """Delete items given as `_OLD` rows, with everything that indexes them."""
        if not rows:
            return
        self._unindex(conn, rows)
        chunked = [r.body for r in rows if r.blocks]
        if chunked:
            self.file.content.unlink(conn, chunked, now / 1e6)
        items = [int(r.id) for r in rows]
        vector_codes.drop_items(conn, items)  # with their codes, index configured or not
        conn.execute("DELETE FROM store_items WHERE id IN carray(?)", (ids(items),))
        # Blocks released a grace period ago (by this or earlier deletes) go now.
        self.file.content.sweep(conn, RETENTION_GRACE_SECONDS)

    def purge(self, prefix: Sequence[str]) -> int:
        """Delete every item under `prefix` in one transaction; return how many."""
        self.begin()
        with self.file.write() as conn:
            count = self.purge_in(conn, prefix, now_us())
        self.committed()
        return count

    def purge_in(self, conn: apsw.Connection, prefix: Sequence[str], now: int) -> int:
        """`purge` inside the caller's write transaction."""
        clause, args = prefix_clause(prefix)
        rows = fetch(conn, OldRow, _OLD_NAMED + f" WHERE {clause}", args)
        self._drop(conn, rows, now)
        return len(rows)

    def sweep(self, now: int | None = None) -> int:
        """Delete the items whose TTL ran out; return how many."""
        moment = now_us() if now is None else now
        self.begin()
        with self.file.write() as conn:
            rows = fetch(conn, OldRow, _OLD_NAMED + " WHERE x.expires_at <= ?", (moment,))
            self._drop(conn, rows, moment)
        self.committed()
        return len(rows)

    def refresh(self, conn: apsw.Connection, items: Iterable[int], now: int) -> None:
        """Restart the TTL of items just read (those that have one)."""
        conn.execute(
            "UPDATE store_items SET expires_at = ? + CAST(ceil(ttl * ?) AS INTEGER) "
            "WHERE id IN carray(?) AND ttl IS NOT NULL",
            (now, MINUTE, ids(list(items))),
        )
