"""Telling whether anything was committed to a file since the last look (serve)."""

from __future__ import annotations

import apsw

from threadloom.engine.file import File
from threadloom.engine.sql import fetchall
from threadloom.errors import EngineError


class Changes:
    """Tells in O(1) whether anything was committed to a file since the last look (serve).

    `PRAGMA data_version` on a connection of its own that never writes nor holds a
    transaction: SQLite changes the value whenever another connection (of this process,
    through the pool, or of another process) commits. Close it before the file.
    """

    def __init__(self, file: File) -> None:
        # Its own connection, outside the pool: the value is per connection, and a pooled
        # one would not see the commits made through it.
        self._file = file
        self._conn: apsw.Connection | None = file.own_connection()

    def version(self) -> int:
        """The file's data version as this watcher sees it (changes on every commit)."""
        if self._conn is None:
            raise EngineError("the change watcher is closed")
        if not self._file.sees_commits(self._conn):
            # Opened immutable (a file this process may not write), it sees no commit:
            # a writer appeared, so watch through a connection that reads its WAL.
            self._file.retire(self._conn)
            self._conn = self._file.own_connection()
            return -1  # differs from every value before: the reopen may have missed one
        return int(fetchall(self._conn, "PRAGMA data_version")[0][0])

    def close(self) -> None:
        if self._conn is not None:
            self._file.retire(self._conn)
            self._conn = None
