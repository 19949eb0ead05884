"""Blocks and inline bodies: how every row's `body` is packed, counted and read (format 2).

Every row of `vals`, `checkpoints` and `writes` keeps its logical identity and the blake3
digest of its msgpack; only its `body` is physical:

- a body of `CHUNK_FROM` bytes or more is cut by content-defined chunking into blocks,
  stored once per file in `blocks` under their blake3 key and shared by every row, thread
  and document that holds the same bytes; the row keeps the list of keys;
- a smaller body is compressed inline, with the zstd dictionary the file trained from its
  own bodies once there was enough of them (the body names the dictionary it used).

Invariants:
- `blocks.refs` counts the occurrences of a key in the rows' block lists. Linking and
  unlinking happen in the transaction that inserts or deletes the rows; a block whose count
  reaches zero is kept `grace` seconds (SPEC §6), then swept inside a write transaction;
- a block is never rewritten; a key is the blake3 of the bytes, checked on every read;
- dictionaries are retired only by a retraining, which re-encodes every row that used them
  and bumps `meta.gc_epoch` in the same transaction, so writers holding the old one re-plan.
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import apsw
import ormsgpack

from threadloom import core
from threadloom.engine.content import deltas
from threadloom.engine.content._framing import Framing, Framings
from threadloom.engine.format.codec import (
    BLOCK_LIST,
    BLOCKS,
    RAW,
    Dictionary,
    block_key,
    block_keys,
    check,
    digest,
    frame,
    frame_block,
    unframe,
    unframe_block,
)
from threadloom.engine.format.tables import BodyTable
from threadloom.engine.sql import Transactions, fetchall
from threadloom.errors import CorruptionError, MissingDocumentsError

#: Bodies (msgpack bytes) at least this long are stored as shared blocks.
CHUNK_FROM: Final = 4096
#: A body listing more block keys than this keeps them in a block of their own (mode 4).
LIST_INLINE: Final = 16
#: Content-defined chunking sizes of the blocks (min, average, max).
BLOCK_SIZES: Final = (1024, 4096, 16384)
#: Size of a trained dictionary: an eighth of its samples, up to this...
DICT_SIZE: Final = 16 * 1024
#: ...or a sixteenth of them up to this, when that is larger (from 256 KiB of samples
#: on). On a migrated SqliteSaver file of 1,000 chat threads, the last automatic
#: training (about 0.5 MiB of samples) made a 32 KiB dictionary instead of 16: the file
#: 0.67 MB (1.7%) smaller, the migration as fast (bench/README.md, "Format 12"). A 64 KiB
#: one from the same samples framed worse than 32 KiB.
LARGE_DICT_SIZE: Final = 64 * 1024


def dictionary_size(sampled: int) -> int:
    """Bytes of the dictionary a training makes from `sampled` bytes of samples."""
    return max(min(DICT_SIZE, max(sampled // 8, 256)), min(LARGE_DICT_SIZE, sampled // 16))


#: Inline bytes written before the first dictionary is trained; each retraining doubles it.
FIRST_TRAINING: Final = 64 * 1024
#: No automatic retraining once the file holds this many inline bytes: each training
#: re-encodes every inline body, and past 1 MiB of samples a dictionary gains little
#: (`ContentStore.train(force=True)`, `threadloom compact`, still retrain).
LAST_TRAINING: Final = 1024 * 1024
#: Inline bytes a process writes before it adds them to `meta.inline_bytes`.
_COUNT_STEP: Final = 8 * 1024
#: New blocks are written back to back into extents of about this size: a row per block
#: would leave part of a page empty behind every block of a few KiB that does not
#: compress (one ~3 KiB row per 4 KiB page); a large row fills its overflow pages.
EXTENT_SIZE: Final = 4 * 1024 * 1024
#: Most sample bytes a training reads.
SAMPLE_BYTES: Final = 4 * 1024 * 1024


def _ids(values: Iterable[int]) -> Any:
    return apsw.carray(array("q", values))


def bump_gc_epoch(conn: apsw.Connection) -> int:
    """Record, inside the changing transaction, a change that makes what writers remember
    wrong (values deleted, a dictionary retired): `meta.gc_epoch` moves by one (from 0
    when the file has none). Return the new epoch. A writer that sees another epoch than
    it remembered plans again (scope.py, `check_epoch`)."""
    return int(
        fetchall(
            conn,
            "INSERT INTO meta(key, value) VALUES('gc_epoch', 1) "
            "ON CONFLICT(key) DO UPDATE SET value = value + 1 RETURNING value",
        )[0][0]
    )


@dataclass
class Packed:
    """One body, encoded for storage.

    Attributes:
        body: what the row's `body` column holds.
        digest: blake3 of the msgpack (the row's `digest` column).
        keys: the block keys of a chunked body, in order (empty when inline).
        pieces: key -> the block's bytes (chunked bodies only).
        framed: key -> the framed block, for blocks the file did not hold when packed.
        dictionary: id of the dictionary an inline body used, or None.
        inline: msgpack bytes kept inline (0 when chunked).
        size: the bytes of its blocks, counted per occurrence (chunked bodies only).
        offered: the blocks this body's `prepare` compressed, offered to other writers
            of the process for as long as the body is held (`BlockStore.prepare`).
    """

    body: bytes
    digest: bytes
    keys: tuple[bytes, ...] = ()
    pieces: dict[bytes, memoryview] = field(default_factory=dict)
    framed: dict[bytes, bytes] = field(default_factory=dict)
    dictionary: int | None = None
    inline: int = 0
    size: int = 0
    offered: Framing | None = None


class BlockStore:
    """Packing, reference counting and reading of the bodies of one file.

    Args:
        file: the open file (format 2 or later).
        tables: the file's body-table registry (`tables.BODY_TABLES`): every table whose
            rows hold bodies; retraining, `verify` and `stats` cover exactly these.
    """

    def __init__(self, file: Transactions, tables: dict[str, BodyTable]) -> None:
        self.file = file
        self.tables = tables
        self._dicts: dict[int, Dictionary] = {}
        self._lock = threading.Lock()
        #: The blocks `prepare` calls of this process compress, shared (`_framing.py`).
        self.framings = Framings()
        self.current: Dictionary | None = None
        #: `meta.gc_epoch` when the current dictionary was read.
        self.epoch = -1
        self._next_training = FIRST_TRAINING
        self._uncounted = 0
        self._due = False
        with file.read() as conn:
            self.reload(conn)

    # -- state -----------------------------------------------------------------------------

    def reload(self, conn: apsw.Connection) -> None:
        """Read the current dictionary and training threshold (after another process wrote)."""
        meta = dict(conn.execute("SELECT key, value FROM meta"))
        ident = meta.get("dict_current")
        self.current = self.dictionary(conn, int(ident)) if ident is not None else None
        self._next_training = int(meta.get("dict_next", FIRST_TRAINING))
        # Already due (a file upgraded from format 1): the next write trains.
        self._due = 0 < self._next_training <= int(meta.get("inline_bytes", 0))
        self.epoch = int(meta.get("gc_epoch", 0))

    def dictionary(self, conn: apsw.Connection, ident: int) -> Dictionary:
        """Return dictionary `ident` (loaded once; dictionaries never change).

        Raises:
            MissingDocumentsError: outside a transaction, it may have been retired since
                the row naming it was read: the caller reads again in one transaction.
            CorruptionError: inside a transaction, the file does not hold it.
        """
        found = self._dicts.get(ident)
        if found is not None:
            return found
        rows = fetchall(conn, "SELECT data FROM dicts WHERE id = ?", (ident,))
        if not rows:
            if not conn.in_transaction:
                raise MissingDocumentsError([f"dictionary {ident}"])
            raise CorruptionError(
                f"a body names zstd dictionary {ident}, which the file does not hold; "
                "restore the file from a backup"
            )
        made = Dictionary(ident, bytes(rows[0][0]))
        with self._lock:
            return self._dicts.setdefault(ident, made)

    # -- writing ---------------------------------------------------------------------------

    def pack(self, value: Any) -> Packed:
        """Encode one msgpack-able value (maps, lists, str, bytes, ints, None)."""
        return self.pack_raw(ormsgpack.packb(value))

    def pack_raw(self, raw: bytes, checked: bytes | None = None) -> Packed:
        """Encode one body given as msgpack bytes (`checked`: their digest, when the
        caller has just checked it)."""
        if checked is None:
            checked = digest(raw)
        if len(raw) < CHUNK_FROM:
            dictionary = self.current
            body = frame(raw, dictionary)
            used = dictionary.ident if dictionary is not None and body[0] != RAW else None
            return Packed(body, checked, dictionary=used, inline=len(raw))
        view = memoryview(raw)
        # One call cuts the body and hashes every block (the C core: no call per block).
        cuts, keys = core.cdc_blocks(view, *BLOCK_SIZES)
        slices = [view[start:end] for start, end in zip([0, *cuts[:-1]], cuts, strict=True)]
        pieces = dict(zip(keys, slices, strict=True))  # equal keys: equal bytes
        listed = b"".join(keys)
        if len(keys) <= LIST_INLINE:
            return Packed(bytes((BLOCKS,)) + listed, checked, tuple(keys), pieces, size=len(raw))
        list_key = block_key(listed)
        pieces.setdefault(list_key, memoryview(listed))
        body = bytes((BLOCK_LIST,)) + list_key
        size = len(raw) + len(listed)
        return Packed(body, checked, (*keys, list_key), pieces, size=size)

    def pack_many(self, values: Iterable[Any]) -> list[Packed]:
        """Encode values; compress only the blocks the file does not hold yet (one query)."""
        packs = [self.pack(value) for value in values]
        self.prepare(packs)
        return packs

    def prepare(self, packs: Sequence[Packed], conn: apsw.Connection | None = None) -> None:
        """Frame the blocks of `packs` that the file lacks (the others are only counted)."""
        keys = {key for packed in packs for key in packed.pieces}
        if not keys:
            return
        if conn is None:
            with self.file.read() as reader:
                stored = self._present(reader, keys)
        else:
            stored = self._present(conn, keys)
        # Each missing block is framed once, even when several bodies hold it.
        missing: dict[bytes, memoryview] = {}
        for packed in packs:
            for key, piece in packed.pieces.items():
                if key not in stored:
                    missing.setdefault(key, piece)
        framed, offered = self.framings.frame(missing)
        for packed in packs:
            packed.offered = offered
            for key in packed.pieces:
                if key in framed:
                    packed.framed[key] = framed[key]

    @staticmethod
    def _present(conn: apsw.Connection, keys: Iterable[bytes]) -> set[bytes]:
        rows = fetchall(
            conn, "SELECT key FROM blocks WHERE key IN carray(?)", (apsw.carray(tuple(keys)),)
        )
        return {bytes(r[0]) for r in rows}

    def link(self, conn: apsw.Connection, packs: Iterable[Packed], now: float) -> None:
        """Count the block references of rows just inserted (inside their transaction)."""
        counts: Counter[bytes] = Counter()
        pieces: dict[bytes, memoryview] = {}
        framed: dict[bytes, bytes] = {}
        for packed in packs:
            counts.update(packed.keys)
            pieces.update(packed.pieces)
            framed.update(packed.framed)
        if not counts:
            return
        known = [key for key in counts if key not in framed]
        if known:
            before = conn.total_changes()
            conn.executemany(
                "UPDATE blocks SET refs = refs + ?, released = NULL WHERE key = ?",
                [(counts[key], key) for key in known],
            )
            if conn.total_changes() - before != len(known):
                # Swept since `prepare` looked (its count had reached zero and its grace
                # ended): store it again from the bytes at hand.
                present = self._present(conn, known)
                for key in known:
                    if key not in present:
                        framed[key] = frame_block(pieces[key])
        fresh = [key for key in counts if key in framed]
        if not fresh:
            return
        # Another process may have stored some of them since `prepare` looked.
        raced = self._present(conn, fresh)
        if raced:
            conn.executemany(
                "UPDATE blocks SET refs = refs + ?, released = NULL WHERE key = ?",
                [(counts[key], key) for key in raced],
            )
            fresh = [key for key in fresh if key not in raced]
        self._store(
            conn, [(key, counts[key], len(pieces[key]), framed[key], None) for key in fresh], now
        )

    def _store(
        self,
        conn: apsw.Connection,
        blocks: Sequence[tuple[bytes, int, int, bytes, float | None]],
        now: float,
    ) -> None:
        """Write new blocks `(key, refs, size, framed, released)` back to back into extents."""
        start = 0
        while start < len(blocks):
            group: list[tuple[bytes, int, int, bytes, float | None]] = []
            length = 0
            while start < len(blocks) and (not group or length < EXTENT_SIZE):
                group.append(blocks[start])
                length += len(blocks[start][3])
                start += 1
            extent = int(
                fetchall(
                    conn,
                    "INSERT INTO extents(body, live, created_at) VALUES(?, ?, ?) RETURNING id",
                    (b"".join(item[3] for item in group), len(group), now),
                )[0][0]
            )
            rows = []
            offset = 0
            for key, refs, size, framed, released in group:
                rows.append((key, refs, size, extent, offset, len(framed), now, released))
                offset += len(framed)
            conn.executemany(
                "INSERT INTO blocks(key, refs, size, extent, offset, length, created_at, released) "
                "VALUES(?, ?, ?, ?, ?, ?, ?, ?)",
                rows,
            )

    def referenced(self, conn: apsw.Connection, body: bytes) -> list[bytes]:
        """Every block key a stored body counts a reference to (none for inline bodies)."""
        if not body or body[0] not in (BLOCKS, BLOCK_LIST):
            return []
        if body[0] == BLOCKS:
            return block_keys(bytes(body))
        list_key = bytes(body[1:])
        listed = self._blocks(conn, {list_key}, {list_key: "a block list"})[list_key]
        return [*block_keys(listed, 0), list_key]

    def relink(self, conn: apsw.Connection, bodies: Iterable[bytes]) -> None:
        """Count the references of rows copied from stored rows (their blocks are held)."""
        counts: Counter[bytes] = Counter()
        for body in bodies:
            counts.update(self.referenced(conn, bytes(body)))
        if counts:
            conn.executemany(
                "UPDATE blocks SET refs = refs + ?, released = NULL WHERE key = ?",
                [(count, key) for key, count in counts.items()],
            )

    def unlink(
        self,
        conn: apsw.Connection,
        bodies: Iterable[bytes],
        now: float,
        released: set[bytes] | None = None,
    ) -> None:
        """Drop the block references of rows about to be deleted or replaced (the keys
        are added to `released`, for a `sweep` of what this transaction released)."""
        counts: Counter[bytes] = Counter()
        for body in bodies:
            counts.update(self.referenced(conn, bytes(body)))
        if released is not None:
            released.update(counts)
        self.release(conn, counts, now)

    def release(self, conn: apsw.Connection, counts: Counter[bytes], now: float) -> None:
        """Drop `counts[key]` references of each block (a block reaching zero is
        `released` at `now`)."""
        if counts:
            conn.executemany(
                "UPDATE blocks SET released = CASE WHEN refs - ?1 <= 0 THEN ?2 ELSE released END, "
                "refs = refs - ?1 WHERE key = ?3",
                [(count, now, key) for key, count in counts.items()],
            )

    def unlink_rows(
        self,
        conn: apsw.Connection,
        table: str,
        where: str,
        args: Sequence[Any],
        released: set[bytes] | None = None,
    ) -> None:
        """`unlink` the chunked rows of `table` matching `where` (before deleting them)."""
        rows = fetchall(conn, f"SELECT body FROM {table} WHERE blocks > 0 AND {where}", args)
        if rows:
            self.unlink(conn, (r[0] for r in rows), time.time(), released)

    def sweep(self, conn: apsw.Connection, grace: float, released: Iterable[bytes] = ()) -> int:
        """Delete blocks nothing references whose grace ended, and the extents left
        without a block; return how many blocks.

        `released`: keys this transaction itself unlinked (`unlink(..., released=)`);
        those of them that nothing references any more go now, whatever their grace.
        The grace covers a reader that read a row outside a transaction and reads its
        blocks in its next statement; a block this transaction released was listed
        only by rows it deletes, and such a reader finds the row gone and reads again
        in one transaction (`Reader.get`), so it needs no grace.
        """
        cutoff = time.time() - grace
        keys = tuple(released)
        if keys:
            gone = fetchall(
                conn,
                "DELETE FROM blocks WHERE refs <= 0 AND (released < ? OR key IN carray(?)) "
                "RETURNING extent",
                (cutoff, apsw.carray(keys)),
            )
        else:
            gone = fetchall(
                conn,
                "DELETE FROM blocks WHERE refs <= 0 AND released < ? RETURNING extent",
                (cutoff,),
            )
        if gone:
            per = Counter(int(r[0]) for r in gone)
            conn.executemany(
                "UPDATE extents SET live = live - ? WHERE id = ?",
                [(count, extent) for extent, count in per.items()],
            )
            conn.execute("DELETE FROM extents WHERE id IN carray(?) AND live <= 0", (_ids(per),))
        return len(gone)

    def sweepable(self, conn: apsw.Connection, grace: float) -> list[bytes]:
        """The keys of the blocks nothing references whose grace ended: what `sweep`
        would delete besides the keys it is given (a dry run counts them)."""
        return [
            bytes(r[0])
            for r in fetchall(
                conn,
                "SELECT key FROM blocks WHERE refs <= 0 AND released < ?",
                (time.time() - grace,),
            )
        ]

    def note_inline(self, conn: apsw.Connection, packs: Iterable[Packed]) -> bool:
        """Count inline bytes written (inside the write); True when a training is due.

        The count is approximate on purpose: it only times the trainings. This process
        adds to `meta.inline_bytes` once per `_COUNT_STEP` bytes, not on every put.
        """
        if not self._next_training:
            return False
        written = sum(packed.inline for packed in packs)
        with self._lock:
            self._uncounted += written
            if self._uncounted < _COUNT_STEP and not self._due:
                return False
            written, self._uncounted, self._due = self._uncounted, 0, False
        rows = fetchall(
            conn,
            "UPDATE meta SET value = value + ? WHERE key = 'inline_bytes' RETURNING value",
            (written,),
        )
        return bool(rows) and int(rows[0][0]) >= self._next_training

    # -- reading ---------------------------------------------------------------------------

    def unpack(
        self,
        conn: apsw.Connection,
        body: bytes,
        expected: bytes,
        name: str,
        threads: int | Sequence[int] | None = None,
    ) -> Any:
        """Decode one stored body, checking its digest (and each block's key)."""
        return self.unpack_many(conn, [(body, expected, name)], threads)[0]

    def unpack_many(
        self,
        conn: apsw.Connection,
        items: Sequence[tuple[bytes, bytes, str]],
        threads: int | Sequence[int] | None = None,
    ) -> list[Any]:
        """Decode stored bodies; the blocks of all of them come in one query."""
        return [ormsgpack.unpackb(raw) for raw in self.raw_many(conn, items, threads)]

    def raw_many(
        self,
        conn: apsw.Connection,
        items: Sequence[tuple[bytes, bytes, str]],
        threads: int | Sequence[int] | None = None,
    ) -> list[bytes]:
        """Return the msgpack of stored bodies, checked against their digests.

        `threads`: for value rows, the thread row id of them all or of each item; a
        delta body (`deltas.py`) is read with its base, a row of the same thread.
        """
        wanted: set[bytes] = set()
        lists: dict[int, list[bytes]] = {}
        listed = {
            i: bytes(body[1:]) for i, (body, _, _) in enumerate(items) if body[0] == BLOCK_LIST
        }
        if listed:
            names = {key: items[i][2] for i, key in listed.items()}
            found = self._blocks(conn, set(listed.values()), names)
        for i, (body, _, name) in enumerate(items):
            if not body or body[0] not in (BLOCKS, BLOCK_LIST):
                continue
            try:
                if body[0] == BLOCKS:
                    lists[i] = block_keys(bytes(body))
                else:
                    lists[i] = block_keys(found[listed[i]], 0)
            except ValueError as exc:
                raise CorruptionError(
                    f"{name} is damaged ({exc}); restore the file from a backup"
                ) from None
            wanted.update(lists[i])
        blocks = self._blocks(conn, wanted, {k: items[i][2] for i, ks in lists.items() for k in ks})
        undone: dict[int, bytes] = {}
        deltas.decode_all(conn, self.raw_many, items, threads, undone)
        out: list[bytes] = []
        for i, (body, expected, name) in enumerate(items):
            if i in lists:
                raw = b"".join(blocks[key] for key in lists[i])
            elif i in undone:
                raw = undone[i]
            else:
                raw = unframe(body, lambda ident: self.dictionary(conn, ident), name)
            check(raw, expected, name)
            out.append(raw)
        return out

    def _blocks(
        self, conn: apsw.Connection, keys: set[bytes], names: dict[bytes, str]
    ) -> dict[bytes, bytes]:
        if not keys:
            return {}
        where: dict[int, list[tuple[int, int, bytes]]] = {}
        for key, extent, offset, length in conn.execute(
            "SELECT key, extent, offset, length FROM blocks WHERE key IN carray(?)",
            (apsw.carray(tuple(keys)),),
        ):
            where.setdefault(extent, []).append((offset, length, bytes(key)))
        found: dict[bytes, bytes] = {}
        for extent, items in where.items():
            items.sort()
            try:
                blob = conn.blob_open("main", "extents", "body", extent, False)
            except apsw.SQLError:
                some = items[0][2]
                raise CorruptionError(
                    f"block {some.hex()[:16]} of {names[some]} is in extent {extent}, which the "
                    "file does not hold; restore the file from a backup"
                ) from None
            with blob:
                size = blob.length()
                # Most of the extent wanted: one read, then slices; else a read per block.
                whole = blob.read() if 2 * sum(n for _, n, _ in items) >= size else None
                for offset, length, key in items:
                    if offset + length > size:
                        raise CorruptionError(
                            f"block {key.hex()[:16]} of {names[key]} lies outside its extent; "
                            "restore the file from a backup"
                        )
                    if whole is not None:
                        framed = whole[offset : offset + length]
                    else:
                        blob.seek(offset)
                        framed = blob.read(length)
                    found[key] = unframe_block(framed, key, names[key])
        missing = keys - found.keys()
        if missing:
            some = sorted(missing)[0]
            if not conn.in_transaction:
                # The row naming it may have been deleted (and its grace may have ended)
                # since it was read: the caller reads again in one transaction.
                raise MissingDocumentsError([f"block {some.hex()}"])
            raise CorruptionError(
                f"{names[some]} names block {some.hex()[:16]}, which the file does not hold "
                f"({len(missing)} missing); restore the file from a backup"
            )
        return found


def held(packs: Iterable[Packed]) -> int:
    """The bytes rows of these bodies take (the `bytes` of the index)."""
    return sum(packed.size if packed.keys else len(packed.body) for packed in packs)
