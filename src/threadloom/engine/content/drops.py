"""Rows about to be deleted: counted and measured first, then deleted (engine layer).

Retention and `compact` report what they delete (or, in a dry run, would delete) in
the thread index's unit, and release the blocks of those rows in the deleting
transaction; `released` then names the keys for `BlockStore.sweep(released=)`.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import apsw

from threadloom.engine.content import deltas
from threadloom.engine.content.blocks import BlockStore
from threadloom.engine.format import refkeys
from threadloom.engine.sql import fetchall, ids


class Drops:
    """Rows to delete from one thread: counted and measured first, then deleted.

    `bytes` is what the rows take as the thread index counts them (inline bodies at
    their stored length, block-listed ones at the raw size of the blocks they list).
    """

    def __init__(self, conn: apsw.Connection, content: BlockStore) -> None:
        self.conn = conn
        self.content = content
        self.bytes = 0
        self.listed: Counter[bytes] = Counter()
        self.released: set[bytes] = set()
        self._pending: list[tuple[str, list[tuple[Any, ...]]]] = []
        #: Deltas of the value rows about to go, stored whole by `apply` first.
        self._settled: list[deltas.Change] = []

    def add_values(self, thread: int, refs: list[str]) -> int:
        """`add` the value rows `refs` of `thread`. The thread's deltas of them that stay
        are stored whole first (`deltas.plan`, written by `apply`); `bytes` counts what
        they grow by against what goes: what the thread index loses in all."""
        changes = deltas.plan(self.conn, self.content.raw_many, thread, refs)
        self._settled += changes
        self.bytes -= sum(change[3] for change in changes)
        return self.add(
            "vals", "thread = ? AND ref_key IN carray(?)", (thread, ids(refkeys.keys(refs)))
        )

    def add(
        self,
        table: str,
        where: str,
        args: tuple[Any, ...],
        delete: tuple[str, list[tuple[Any, ...]]] | None = None,
    ) -> int:
        """Count and measure the rows of `table` matching `where`; return how many.

        `delete`: the statement and rows (`executemany`) that delete them, when `where`
        cannot (it reads rows an earlier deletion of `apply` removes)."""
        content = self.content
        count = 0
        listed: Counter[bytes] = Counter()
        for body, blocks in self.conn.execute(
            f"SELECT body, blocks FROM {table} WHERE {where}", args
        ):
            count += 1
            if blocks > 0:
                listed.update(content.referenced(self.conn, bytes(body)))
            else:
                self.bytes += len(body)
        if listed:
            sizes: dict[bytes, int] = dict(
                fetchall(
                    self.conn,
                    "SELECT key, size FROM blocks WHERE key IN carray(?)",
                    (ids(list(listed)),),
                )
            )
            self.bytes += sum(sizes.get(key, 0) * n for key, n in listed.items())
            self.listed.update(listed)
        if delete is None:
            delete = (f"DELETE FROM {table} WHERE {where}", [args])
        self._pending.append(delete)
        return count

    def freed(self, earlier: Counter[bytes] | None = None) -> int:
        """How many blocks no row lists once these rows are gone.

        `earlier`: references that deletions not applied yet drop too (a dry run's
        earlier threads: a block two of them list is freed by the second)."""
        if not self.listed:
            return 0
        refs = fetchall(
            self.conn,
            "SELECT key, refs FROM blocks WHERE key IN carray(?)",
            (ids(list(self.listed)),),
        )
        before = earlier if earlier is not None else Counter()
        return sum(
            1 for key, count in refs if count - before[bytes(key)] - self.listed[bytes(key)] <= 0
        )

    def apply(self) -> None:
        """Drop the rows' block references, then delete them (in the order added)."""
        deltas.write(self.conn, self._settled)
        if self.listed:
            self.content.release(self.conn, self.listed, time.time())
            self.released.update(self.listed)
        for sql, rows in self._pending:
            self.conn.executemany(sql, rows)
