"""Which threads a run is going on in: the live leases of a scope (format 6 `leases`).

Engine layer, read-only. The thread index shows a thread 'running' while a live lease
holds it; `engine.conversations.leases` takes, renews and releases the leases and decides
liveness here, so the two never disagree. A lease is live until it runs out
(`expires_at`) or, on the same host, until its holder's process is gone (a SIGKILLed run
frees its thread at once). "The same host" is the host name and the pid namespace, so a
container with pids of its own never frees another's lease by pid; a pid reused by an
unrelated process reads as alive, so such a lease only waits for its expiry.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterable
from dataclasses import dataclass

import apsw

from threadloom.engine.sql import fetchall, ids


def _host() -> str:
    """This machine as leases name it: the host name and, where the kernel says, the pid
    namespace (containers sharing a host name and a volume have pids of their own)."""
    try:
        namespace = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return socket.gethostname()
    return f"{socket.gethostname()}/pid:{namespace}"


HOST = _host()


@dataclass(frozen=True)
class Held:
    """A lease as the file holds it (times are Unix times)."""

    thread_id: str
    holder: str
    host: str
    pid: int
    acquired_at: float
    expires_at: float


#: The columns of `leases` a `Held` is made of, in its order.
HELD_COLUMNS = "thread_id, holder, host, pid, acquired_at, expires_at"


def live(conn: apsw.Connection, scope: int, thread_ids: Iterable[str] | None = None) -> set[str]:
    """The thread ids of the scope a live run holds the lease of (of `thread_ids`, or of
    every thread when None), read in the caller's transaction."""
    now = time.time()
    if thread_ids is None:
        rows = fetchall(
            conn,
            f"SELECT {HELD_COLUMNS} FROM leases WHERE scope = ? AND expires_at > ?",
            (scope, now),
        )
    else:
        wanted = list(thread_ids)
        if not wanted:
            return set()
        rows = fetchall(
            conn,
            f"SELECT {HELD_COLUMNS} FROM leases "
            "WHERE scope = ? AND thread_id IN carray(?) AND expires_at > ?",
            (scope, ids(wanted), now),
        )
    return {held.thread_id for held in (Held(*row) for row in rows) if alive(held)}


def alive(held: Held) -> bool:
    """False only when the holder ran on this host and its process is gone."""
    if held.host != HOST or held.pid == os.getpid():
        return True
    try:
        os.kill(held.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return not _zombie(held.pid)


def _zombie(pid: int) -> bool:
    """True for a process that exited and waits for its parent to collect it (Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            return stat.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False
