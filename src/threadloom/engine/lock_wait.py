"""How a connection waits for another's lock: SQLite's busy handler, in Python.

Engine layer. SQLite's own handler (`set_busy_timeout`) sleeps in C, where Ctrl-C
cannot reach, and says nothing while it waits. This one retries for `BUSY_TIMEOUT_MS`,
sleeping in Python, and says once, after `WAIT_NOTICE` seconds, that it waits (logger
`threadloom.engine.wait`: the library never prints, the CLI shows it on stderr).
"""

from __future__ import annotations

import logging
import time

import apsw

from threadloom.errors import BusyError

__all__ = ["BUSY_TIMEOUT_MS", "WAIT_NOTICE", "Waiting", "switch_to_wal"]

#: Milliseconds a connection waits for another's lock before it gives up (SQLITE_BUSY).
BUSY_TIMEOUT_MS = 30_000
#: Seconds of waiting for a lock after which the wait is reported.
WAIT_NOTICE = 1.0
#: Seconds between two tries for a lock: short at first, as SQLite's own handler.
_PAUSES = (0.001, 0.002, 0.005, 0.01, 0.015, 0.02, 0.025, 0.025, 0.025, 0.05, 0.05, 0.1)

wait_log = logging.getLogger("threadloom.engine.wait")


class Waiting:
    """SQLite's busy handler of a connection: retries for `BUSY_TIMEOUT_MS`, sleeping in
    Python (so Ctrl-C interrupts the wait), and says once, after `WAIT_NOTICE` seconds,
    that it waits (logger `threadloom.engine.wait`, which the CLI prints)."""

    __slots__ = ("path", "started", "told")

    def __init__(self, path: str) -> None:
        self.path = path
        self.started = 0.0
        self.told = False

    def __call__(self, tries: int) -> bool:
        now = time.monotonic()
        if tries == 0:
            self.started, self.told = now, False
        waited = now - self.started
        if waited >= BUSY_TIMEOUT_MS / 1000:
            return False
        if waited >= WAIT_NOTICE and not self.told:
            self.told = True
            wait_log.info(
                "waiting for another writer on %s (up to %d s; Ctrl-C to stop)...",
                self.path,
                BUSY_TIMEOUT_MS // 1000,
            )
        time.sleep(_PAUSES[min(tries, len(_PAUSES) - 1)])
        return True


def switch_to_wal(conn: apsw.Connection, path: str) -> None:
    """Put the file `conn` reads in WAL mode (persistent: once per file). Switching needs
    a lock the busy handler does not wait for, so a file several processes create at
    once is retried here, for about as long as the busy timeout allows."""
    for attempt in range(200):
        try:
            if conn.execute("PRAGMA main.journal_mode").fetchall()[0][0] != "wal":
                conn.execute("PRAGMA main.journal_mode=WAL")
            return
        except apsw.BusyError:
            time.sleep(min(0.001 * (attempt + 1), 0.05))
    raise BusyError(
        f"{path!r} stayed locked while switching it to WAL; retry when the other "
        "processes are done creating it"
    )
