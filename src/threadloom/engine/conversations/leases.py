"""Run leases: at most one holder per thread, across threads and processes on the file.

Engine layer (docs/FORMAT.md, format 6). A lease is a row of `leases` keyed by scope and
thread id, taken in one write transaction: the file's write lock orders every taker, so
two can never both see the thread free. A taker meeting a live lease is refused at once
(`ThreadBusyError`: no waiting, no queue). A lease ends when its holder releases it, when
it runs out (`expires_at`, unless renewed), or, on the same host, as soon as its holder's
process is gone (a SIGKILLed run frees its thread without waiting for the expiry).

Clocks: expiry compares Unix times of the processes on the file; on one machine that is
one clock. "The same host" is the host name and the pid namespace, so a container with
pids of its own never frees another's lease by pid. A pid reused by an unrelated
process reads as alive, so such a lease only waits for its expiry.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable
from typing import Final, Protocol

import apsw

from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.sql import fetchall
from threadloom.engine.threads import utc
from threadloom.engine.threads.running import HELD_COLUMNS, HOST, Held, alive, live
from threadloom.errors import InvalidArgumentError, LeaseLostError, ThreadBusyError

__all__ = ["MAX_TTL", "Held", "Leases"]

#: Longest lease one take or renewal grants (a day): a holder that needs longer renews.
MAX_TTL: Final = 86_400.0


class Scoped(Protocol):
    """What leases need of a scope: its row id, and a way to make it."""

    @property
    def id(self) -> int | None: ...

    def ensure_id(self, conn: apsw.Connection) -> int: ...


class Leases:
    """The leases of one scope of a file.

    Args:
        file: the open file (writable to take leases).
        scope: the scope (its row is made by the first lease if no write made it yet).
    """

    def __init__(self, file: File, scope: Scoped) -> None:
        self.file = file
        self._scope = scope

    @property
    def scope(self) -> int:
        """The scope's row id (-1, matching no lease, before the scope's first write)."""
        found = self._scope.id
        return found if found is not None else -1

    def acquire(self, thread_id: str, ttl: float) -> Held:
        """Take the thread's lease for `ttl` seconds.

        Raises:
            ThreadBusyError: another holder's lease is live.
            ReadOnlyError: the file is open read-only.
        """
        _check(thread_id, ttl)
        token = uuid.uuid4().hex
        with self.file.write() as conn:
            self._scope.ensure_id(conn)
            self.file.ensure(conn, features.LEASES)
            now = time.time()
            self.refuse_if_held(conn, thread_id, "refuse this request (HTTP 409)")
            conn.execute(
                "INSERT INTO leases(scope, thread_id, holder, host, pid, acquired_at, expires_at) "
                "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT(scope, thread_id) DO UPDATE SET "
                "holder = excluded.holder, host = excluded.host, pid = excluded.pid, "
                "acquired_at = excluded.acquired_at, expires_at = excluded.expires_at",
                (self.scope, thread_id, token, HOST, os.getpid(), now, now + ttl),
            )
        return Held(thread_id, token, HOST, os.getpid(), now, now + ttl)

    def refuse_if_held(self, conn: apsw.Connection, thread_id: str, advice: str) -> None:
        """Raise ThreadBusyError when a live run holds the thread's lease.

        Raises:
            ThreadBusyError: naming the holder; the message ends with `advice` (what the
                caller should do) and "or retry once that run ends".
        """
        found = self._find(conn, thread_id)
        now = time.time()
        if found is not None and found.expires_at > now and alive(found):
            raise ThreadBusyError(
                f"thread {thread_id!r} is busy: a run (pid {found.pid} on {found.host}) "
                f"holds its lease for {found.expires_at - now:.1f} s more; {advice} "
                "or retry once that run ends",
                thread_id=thread_id,
                host=found.host,
                pid=found.pid,
                expires_at=utc(found.expires_at),
            )

    def renew(self, held: Held, ttl: float) -> Held:
        """Extend a lease this holder still holds by `ttl` seconds from now.

        Raises:
            LeaseLostError: the lease ran out and another run took the thread (or it was
                released).
        """
        _check(held.thread_id, ttl)
        with self.file.write() as conn:
            now = time.time()
            conn.execute(
                "UPDATE leases SET expires_at = ? WHERE scope = ? AND thread_id = ? AND holder = ?",
                (now + ttl, self.scope, held.thread_id, held.holder),
            )
            if not conn.changes():
                raise LeaseLostError(
                    f"the lease on thread {held.thread_id!r} was lost (it ran out and another "
                    "run took the thread, or it was released); stop this run's writes"
                )
        return Held(held.thread_id, held.holder, held.host, held.pid, held.acquired_at, now + ttl)

    def release(self, held: Held) -> bool:
        """Give a lease back; False when it was no longer this holder's."""
        with self.file.write() as conn:
            conn.execute(
                "DELETE FROM leases WHERE scope = ? AND thread_id = ? AND holder = ?",
                (self.scope, held.thread_id, held.holder),
            )
            return conn.changes() > 0

    def holder(self, thread_id: str) -> Held | None:
        """The live lease on a thread, or None."""
        with self.file.read() as conn:
            found = self._find(conn, thread_id)
        if found is None or found.expires_at <= time.time() or not alive(found):
            return None
        return found

    def live(self, conn: apsw.Connection, thread_ids: Iterable[str]) -> set[str]:
        """Those of `thread_ids` a live run holds the lease of, read in the caller's
        transaction (not run out, and the holder's process not gone)."""
        return live(conn, self.scope, thread_ids)

    def _find(self, conn: apsw.Connection, thread_id: str) -> Held | None:
        rows = fetchall(
            conn,
            f"SELECT {HELD_COLUMNS} FROM leases WHERE scope = ? AND thread_id = ?",
            (self.scope, thread_id),
        )
        return Held(*rows[0]) if rows else None


def _check(thread_id: str, ttl: float) -> None:
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidArgumentError("thread_id must be a non-empty str")
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl <= MAX_TTL:
        raise InvalidArgumentError(f"ttl must be seconds, more than 0 and at most {MAX_TTL:.0f}")
