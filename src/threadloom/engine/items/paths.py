"""The filter index's field paths (`store_paths`): numbered once, remembered per process,
and swept when an erasure leaves them unused (engine layer).

A path's text is the keys from the top of a value (`fieldkeys.py`), so it can hold what a
user wrote (an e-mail address used as a key). A path no filter row uses any more is
deleted by `sweep` (the erasure does, so an erased owner's keys leave the file), which
moves the file's `paths_epoch`; a process whose remembered numbers belong to an older
epoch forgets them at its next write, before it uses one (writes hold the file's write
lock, so the epoch read inside one is the latest).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

import apsw

from threadloom.engine.sql import fetchall, ids

#: The `meta` key counting the sweeps that deleted paths.
EPOCH_KEY = "paths_epoch"


class FieldPaths:
    """Field path numbers of one Store's process-wide memory."""

    def __init__(self) -> None:
        #: Numbers read from committed rows of epoch `_epoch`.
        self._ids: dict[str, int] = {}
        self._epoch: int | None = None
        self._local = threading.local()

    def begin(self) -> None:
        """Start remembering the numbers this thread's write transaction reads."""
        self._local.fresh = {}
        self._local.checked = False

    def committed(self) -> None:
        """The write transaction `begin` started committed: keep its numbers."""
        fresh: dict[str, int] | None = getattr(self._local, "fresh", None)
        self._local.fresh = None
        if fresh:
            self._ids.update(fresh)

    def numbers(self, conn: apsw.Connection, paths: Iterable[str]) -> dict[str, int]:
        """The numbers of `paths` (inside a write transaction), numbering the new ones.

        A number read or made in this transaction is remembered only once it commits
        (`committed`): a rolled-back number is given to the next new path.
        """
        fresh: dict[str, int] | None = getattr(self._local, "fresh", None)
        if fresh is None or not getattr(self._local, "checked", False):
            self._check_epoch(conn)
            self._local.checked = fresh is not None
        out: dict[str, int] = {}
        for path in paths:
            found = self._ids.get(path)
            if found is None and fresh is not None:
                found = fresh.get(path)
            if found is None:
                rows = fetchall(
                    conn,
                    "INSERT INTO store_paths(path) VALUES(?) ON CONFLICT(path) DO UPDATE "
                    "SET path = excluded.path RETURNING id",
                    (path,),
                )
                found = int(rows[0][0])
                if fresh is not None:
                    fresh[path] = found
            out[path] = found
        return out

    def _check_epoch(self, conn: apsw.Connection) -> None:
        rows = fetchall(conn, "SELECT value FROM meta WHERE key = ?", (EPOCH_KEY,))
        self._saw(int(rows[0][0]) if rows else 0)

    def saw_epoch(self, epoch: int) -> None:
        """The file's paths epoch, as the write transaction `begin` started read it (so
        `numbers` need not read it again)."""
        self._saw(epoch)
        self._local.checked = getattr(self._local, "fresh", None) is not None

    def _saw(self, epoch: int) -> None:
        if epoch != self._epoch:
            self._ids.clear()
            self._epoch = epoch


def sweep(conn: apsw.Connection) -> int:
    """Delete the paths no filter row uses (inside a write transaction); return how many.
    Moves the file's paths epoch when any went, so no process reuses their numbers."""
    gone = fetchall(
        conn,
        "DELETE FROM store_paths WHERE NOT EXISTS "
        "(SELECT 1 FROM store_fields f WHERE f.path = store_paths.id) RETURNING id",
    )
    if gone:
        conn.execute(
            "INSERT INTO meta(key, value) VALUES(?, 1) "
            "ON CONFLICT(key) DO UPDATE SET value = value + 1",
            (EPOCH_KEY,),
        )
    return len(gone)


def unused_without(conn: apsw.Connection, items: list[int]) -> int:
    """How many paths `sweep` would delete once `items` are gone (a dry run's count)."""
    rows = fetchall(
        conn,
        "SELECT count(*) FROM store_paths p WHERE NOT EXISTS (SELECT 1 FROM store_fields f "
        "WHERE f.path = p.id AND f.item NOT IN carray(?))",
        (ids(items) if items else ids([-1]),),
    )
    return int(rows[0][0])
