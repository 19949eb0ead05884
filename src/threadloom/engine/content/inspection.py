"""Inspection of the content store: statistics, a full verify, every payload (engine layer).

Read-only: one read transaction each; nothing here changes the file.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import apsw

from threadloom.engine.content.blocks import BlockStore
from threadloom.engine.content.deltas import DELTA_ROW
from threadloom.engine.format.codec import BLOCK_LIST, BLOCKS, DELTA, KEY_SIZE, unframe
from threadloom.engine.sql import fetchall
from threadloom.errors import CorruptionError, MissingDocumentsError


@dataclass(frozen=True)
class Stats:
    """What the physical store holds (see `ContentStore.stats`)."""

    blocks: int
    block_bytes: int
    block_stored: int
    block_refs: int
    released: int
    chunked_rows: int
    inline_rows: int
    inline_stored: int
    dictionaries: int
    dictionary: int | None

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class Inspection(BlockStore):
    """Statistics and verification of a content store."""

    def stats(self) -> Stats:
        """Count what the physical store holds (one read transaction)."""
        with self.file.read() as conn:
            blocks, size, refs, released = fetchall(
                conn,
                "SELECT count(*), total(size), total(max(refs, 0)), total(refs <= 0) FROM blocks",
            )[0]
            stored = fetchall(conn, "SELECT total(length(body)) FROM extents")[0][0]
            chunked = inline = inline_stored = 0
            for table in self.tables:
                c, i, s = fetchall(
                    conn,
                    f"SELECT total(blocks > 0), total(blocks <= 0), "
                    f"total(CASE WHEN blocks <= 0 THEN length(body) END) FROM {table}",
                )[0]
                chunked, inline, inline_stored = (
                    chunked + int(c),
                    inline + int(i),
                    inline_stored + int(s),
                )
            dictionaries = fetchall(conn, "SELECT count(*) FROM dicts")[0][0]
        return Stats(
            blocks=int(blocks),
            block_bytes=int(size),
            block_stored=int(stored),
            block_refs=int(refs),
            released=int(released),
            chunked_rows=chunked,
            inline_rows=inline,
            inline_stored=inline_stored,
            dictionaries=int(dictionaries),
            dictionary=self.current.ident if self.current else None,
        )

    def verify(self) -> dict[str, Any]:
        """Check the block store in one read transaction; return a report.

        Checks that every block a row lists exists and that `blocks.refs` equals the
        references the rows hold (a lower count could lose data, a higher one only keeps
        a block too long), and that every extent's `live` matches its blocks. Bodies and
        row seals are checked by `engine/checks/verify.py`, which calls this.

        Returns:
            `{"rows", "blocks", "extents", "problems": [...], "leaks": [...]}`; the store is
            sound when `problems` is empty.
        """
        problems: list[str] = []
        leaks: list[str] = []
        expected: Counter[bytes] = Counter()
        rows = 0
        with self.file.read() as conn:
            stored = {bytes(k): int(r) for k, r in conn.execute("SELECT key, refs FROM blocks")}
            for table, described in self.tables.items():
                columns = self._columns(conn, table)
                names = list(columns)
                for row in conn.execute(f"SELECT * FROM {table}"):
                    rows += 1
                    body = row[columns["body"]]
                    name = described.name_row(dict(zip(names, row, strict=True)))
                    listed = row[columns["blocks"]]
                    chunked = body[:1] in (bytes((BLOCKS,)), bytes((BLOCK_LIST,)))
                    keys = (len(body) - 1) // KEY_SIZE if body[:1] == bytes((BLOCKS,)) else listed
                    delta = body[:1] == bytes((DELTA,))
                    if chunked != (listed > 0) or keys != listed or delta != (listed == DELTA_ROW):
                        problems.append(
                            f"{name}: its blocks column says {listed}, its body lists otherwise"
                        )
                    if chunked:
                        if body[0] == BLOCK_LIST and bytes(body[1:]) not in stored:
                            problems.append(
                                f"{name}: its block list {bytes(body[1:]).hex()[:16]} is missing"
                            )
                            continue
                        try:
                            expected.update(self.referenced(conn, bytes(body)))
                        except (CorruptionError, MissingDocumentsError) as exc:
                            problems.append(f"{name}: {exc}")
                            continue
            for key, count in expected.items():
                have = stored.get(key)
                if have is None:
                    problems.append(f"block {key.hex()[:16]} is listed {count} times but missing")
                elif have < count:
                    problems.append(
                        f"block {key.hex()[:16]} counts {have} references, rows hold {count}"
                    )
                elif have > count:
                    leaks.append(
                        f"block {key.hex()[:16]} counts {have} references, rows hold {count}"
                    )
            for key, have in stored.items():
                if key not in expected and have > 0:
                    leaks.append(
                        f"block {key.hex()[:16]} counts {have} references, no row lists it"
                    )
            extents = 0
            for extent, live, count in conn.execute(
                "SELECT e.id, e.live, count(b.id) FROM extents e LEFT JOIN blocks b "
                "ON b.extent = e.id GROUP BY e.id"
            ):
                extents += 1
                if live != count:
                    problems.append(f"extent {extent} counts {live} live blocks, holds {count}")
            orphans = fetchall(
                conn,
                "SELECT count(*) FROM blocks WHERE extent NOT IN (SELECT id FROM extents)",
            )[0][0]
            if orphans:
                problems.append(f"{orphans} blocks point into extents the file does not hold")
        return {
            "rows": rows,
            "blocks": len(stored),
            "extents": extents,
            "problems": problems,
            "leaks": leaks,
        }

    @staticmethod
    def _columns(conn: apsw.Connection, table: str) -> dict[str, int]:
        return {r[1]: r[0] for r in conn.execute(f"PRAGMA table_info({table})")}

    def payloads(self) -> Iterator[bytes]:
        """Yield every physical payload, decompressed: each inline body's msgpack, each block.

        What the file keeps, once each: a byte string found in k payloads is stored k
        times (the benchmarks count copies of a prompt this way).
        """
        with self.file.read() as conn:
            for table in self.tables:
                for (body,) in conn.execute(f"SELECT body FROM {table} WHERE blocks = 0"):
                    yield unframe(body, lambda i: self.dictionary(conn, i), table)
            keys = [bytes(r[0]) for r in fetchall(conn, "SELECT key FROM blocks")]
            for start in range(0, len(keys), 256):
                batch = set(keys[start : start + 256])
                yield from self._blocks(conn, batch, dict.fromkeys(batch, "a block")).values()
