"""Dictionary training and repacking of the content store (engine layer).

A retraining re-encodes every inline body with the new dictionary (moving large ones
to blocks) and bumps `meta.gc_epoch` in the same transaction, so that writers holding
the retired dictionary plan and pack again.
"""

from __future__ import annotations

import functools
import time
from collections import Counter
from typing import Final

import apsw
import zstandard

from threadloom.engine.content import deltas
from threadloom.engine.content.blocks import (
    FIRST_TRAINING,
    LAST_TRAINING,
    SAMPLE_BYTES,
    BlockStore,
    Packed,
    _ids,
    bump_gc_epoch,
    dictionary_size,
    held,
)
from threadloom.engine.format.codec import (
    Dictionary,
    check,
    digest,
    frame,
    frame_block,
    unframe,
)
from threadloom.engine.sql import fetchall
from threadloom.errors import CorruptionError

#: zstd's fastCover trainer with fixed parameters (segment size `k`, d-mer size `d`, a
#: frequency table of 2**`f` counters) instead of its default search over `k` and `d`:
#: on a file's chat bodies that search took 5x the time and peaked 10 MiB higher (a
#: 2**20 table per candidate), for dictionaries that compressed no better
#: (bench/README.md, "200 threads x 5 turns").
TRAINER: Final = {"k": 1024, "d": 8, "f": 16}


def _train(size: int, samples: list[bytes | bytearray | memoryview]) -> bytes | None:
    """A dictionary of `size` bytes trained from `samples`, or None when zstd cannot make
    one (too few samples). The fixed parameters first (a segment is at most the
    dictionary), zstd's own search when they fail, so a file trains whenever it did."""
    for params in ({**TRAINER, "k": min(TRAINER["k"], size)}, {}):
        try:
            return zstandard.train_dictionary(size, samples, level=3, **params).as_bytes()
        except (zstandard.ZstdError, ValueError):
            continue
    return None


class Training(BlockStore):
    """The dictionary training and extent repacking of a content store."""

    def train(self, *, force: bool = False) -> int | None:
        """Train a dictionary from the file's inline bodies and re-encode every one with it.

        Runs when the inline bytes written reach the next threshold (thresholds double from
        `FIRST_TRAINING` to `LAST_TRAINING`), or always with `force`. Also moves inline
        bodies of `CHUNK_FROM` bytes or more (files of format 1) to blocks. One write
        transaction; it bumps `meta.gc_epoch` so that writers holding the old dictionary
        plan again.

        Returns:
            The new dictionary's id, or None when no training was due or there were too
            few samples (the threshold then doubles).
        """
        with self.file.write() as conn:
            meta = dict(conn.execute("SELECT key, value FROM meta"))
            written = int(meta.get("inline_bytes", 0))
            due = int(meta.get("dict_next", FIRST_TRAINING))
            if not force and (not due or written < due):
                self.reload(conn)
                return None
            later = 0 if written * 2 > LAST_TRAINING else max(written * 2, FIRST_TRAINING)
            samples = self._samples(conn, written)
            size = dictionary_size(sum(map(len, samples)))
            data = _train(size, samples)
            if data is None:
                self._set_meta(conn, dict_next=later)
                self._next_training = later
                return None
            now = time.time()
            ident = int(
                fetchall(
                    conn,
                    "INSERT INTO dicts(data, digest, samples, created_at) VALUES(?, ?, ?, ?) "
                    "RETURNING id",
                    (data, digest(data), len(samples), now),
                )[0][0]
            )
            fresh = Dictionary(ident, data)
            self._dicts[ident] = fresh
            self.current = fresh
            self._reencode(conn, now)
            conn.execute("DELETE FROM dicts WHERE id != ?", (ident,))
            with self._lock:
                # The retired ones (and their pooled zstd contexts) go too; a reader of an
                # older snapshot that still meets one loads it again from that snapshot.
                self._dicts = {ident: fresh}
            self._set_meta(conn, dict_current=ident, dict_next=later)
            self._next_training = later
            self.epoch = bump_gc_epoch(conn)
            return ident

    @staticmethod
    def _set_meta(conn: apsw.Connection, **values: int) -> None:
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES(?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    def _samples(self, conn: apsw.Connection, written: int) -> list[bytes | bytearray | memoryview]:
        """About SAMPLE_BYTES of inline bodies' msgpack, spread evenly over the file."""
        stride = written // SAMPLE_BYTES + 1
        samples: list[bytes | bytearray | memoryview] = []
        for table in self.tables:
            for i, (body,) in enumerate(conn.execute(f"SELECT body FROM {table} WHERE blocks = 0")):
                if i % stride == 0:
                    samples.append(unframe(body, lambda n: self.dictionary(conn, n), table))
        return samples

    def _reencode(self, conn: apsw.Connection, now: float) -> None:
        """Encode every inline body again with the current dictionary (or as blocks).

        The rows are deleted and inserted again in id order rather than updated in place:
        bodies shrink, and rows updated in place would leave every page part empty. Rows
        others depend on (`BodyTable.dependents`) are updated in place. Deltas the new
        dictionary beats are stored whole first (`deltas.outgrown`).
        """
        if "vals" in self.tables:
            current = self.current
            deltas.outgrown(conn, self.raw_many, lambda raw: frame(raw, current))
        for table, described in self.tables.items():
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]
            at_body, at_blocks = (columns.index(c) for c in ("body", "blocks"))
            # Key order (rowid for checkpoints, the primary key for the others), so the
            # rows go back densely.
            rows = fetchall(
                conn,
                f"SELECT x.*, {described.unsealed('x')} FROM {table} x{described.owners} "
                "WHERE x.blocks = 0",
            )
            chunked: list[Packed] = []
            again = []
            # What each thread's rows take changes with their bodies (the thread index's
            # `bytes`, engine/threads/threadindex.py).
            grown: Counter[int] = Counter()
            at_thread = columns.index("thread") if described.threaded else -1
            dictionaries = functools.partial(self.dictionary, conn)
            for *row, expected in rows:
                try:
                    raw = unframe(row[at_body], dictionaries, table)
                    check(raw, expected, table)
                except CorruptionError:
                    # Named only for the error: naming every row cost as much as its check.
                    name = described.name_row(dict(zip(columns, row, strict=True)))
                    raw = unframe(row[at_body], dictionaries, name)
                    check(raw, expected, name)
                packed = self.pack_raw(raw, bytes(expected))
                if packed.keys:
                    chunked.append(packed)
                changed = list(row)
                changed[at_body], changed[at_blocks] = packed.body, len(packed.keys)
                again.append(changed)
                if at_thread >= 0:
                    grown[row[at_thread]] += held([packed]) - len(row[at_body])
            self.prepare(chunked, conn)
            self.link(conn, chunked, now)
            conn.executemany(
                "UPDATE threads SET bytes = bytes + ? WHERE id = ?",
                [(change, thread) for thread, change in grown.items() if change],
            )
            if described.dependents:
                conn.executemany(
                    f"UPDATE {table} SET body = ?, blocks = ? WHERE rowid = ?",
                    [(r[at_body], r[at_blocks], r[columns.index("id")]) for r in again],
                )
                continue
            conn.execute(f"DELETE FROM {table} WHERE blocks = 0")
            marks = ", ".join("?" * len(columns))
            conn.executemany(f"INSERT INTO {table} VALUES({marks})", again)

    def _repack(self, conn: apsw.Connection, now: float) -> int:
        """Copy the live blocks of extents that are mostly dead into new extents."""
        sparse = fetchall(
            conn,
            "SELECT e.id FROM extents e JOIN blocks b ON b.extent = e.id GROUP BY e.id "
            "HAVING 4 * total(b.length) < 3 * length(e.body)",
        )
        if not sparse:
            return 0
        ids = [int(r[0]) for r in sparse]
        rows = fetchall(
            conn,
            "SELECT key, refs, size, released FROM blocks WHERE extent IN carray(?) "
            "ORDER BY extent, offset",
            (_ids(ids),),
        )
        keys = {bytes(r[0]) for r in rows}
        raw = self._blocks(conn, keys, dict.fromkeys(keys, "a block being repacked"))
        conn.execute("DELETE FROM blocks WHERE extent IN carray(?)", (_ids(ids),))
        conn.execute("DELETE FROM extents WHERE id IN carray(?)", (_ids(ids),))
        self._store(
            conn,
            [
                (bytes(k), refs, size, frame_block(raw[bytes(k)]), released)
                for k, refs, size, released in rows
            ],
            now,
        )
        return len(ids)
