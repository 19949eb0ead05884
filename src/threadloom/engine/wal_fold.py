"""Checkpoints outside the write lock while background work writes (engine layer).

SQLite checkpoints the WAL in the commit that leaves it at `wal_autocheckpoint` pages
(1,000) or more: that commit copies the frames into the database and syncs both files
while its writer still holds the write lock, and every writer of the process queues
behind it (p50 18 ms, up to 148 ms, in 731 of 3,147 steps of a training at 100k: 50 of
its writers' 52 stalls over 50 ms, bench/README.md). While a long job writes in short
steps (the vector index's training and packing), `Folding.aside()` turns the automatic
checkpoint off on the file's write connections (`prepare`, called by every write
transaction) and a thread of its own checkpoints instead, woken by a commit that added
AUTO pages since its last copy: PASSIVE, without a lock, writers committing meanwhile.

Only a writer that finds every frame copied starts the WAL over, and a checkpoint that
races commits never catches up (measured: 30,000 pages by a training's end). So once the
WAL holds RESTART pages, the thread's last pass (a RESTART checkpoint, after which the
next writer starts the WAL over) runs with the process's writers held off, once per
RESTART pages, not per AUTO. A RESTART that finds frames left copies them and syncs the
WAL and the database (5 ms to 1.1 s each, traced on a busy disk), so it is held only at a
moment with none left: a PASSIVE pass copied every frame and no writer committed since;
else the lock goes at once and another PASSIVE pass outside it tries again (`_restart`).
From FORCE pages it copies what is left under the lock, as before.

The long job's own steps take `step()`, and a pass of the thread (its PASSIVE copies and
the last pass) excludes them: traced at 300k vectors, a training step whose commit or
page spills wrote the WAL while the thread synced it or the database took up to 2.1 s
(the disk busy with the sync), with the writers queued behind it; the writers' own
commits (a few pages) were not slowed so. A pass also leaves the last pass only the
frames the writers committed meanwhile, not a step's hundreds of pages. Between passes
a waiting step goes first, so the job moves on at least one step per pass.

Invariants: the WAL stays bounded, at RESTART to FORCE pages while `aside` is held (no
`journal_size_limit` then, so no writer's commit truncates it) and as before after;
frames a reader still uses wait for it, as ever; a write that begins outside `aside`
checkpoints as SQLite does; the thread stops, after a last checkpoint, when the last
`aside` ends, and belongs to the process that started it (a forked child's writes
checkpoint as usual).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator
from typing import Final

import apsw

from threadloom.engine import lock_wait

__all__ = ["AUTO", "FORCE", "RESTART", "Folding"]

log = logging.getLogger("threadloom.engine")

#: WAL pages from which a checkpoint is due: SQLite's default `wal_autocheckpoint`.
AUTO: Final = 1000
#: WAL pages from which the thread's last pass holds the writers off and starts the WAL
#: over (32 MiB at 4 KiB pages).
RESTART: Final = 8 * AUTO
#: WAL pages from which the last pass copies what is left with the writers held off
#: (two syncs under the lock) rather than wait for a moment with nothing left.
FORCE: Final = 2 * RESTART
#: Tries of one pass at a moment with nothing left to copy (see `Folding._restart`).
_TRIES: Final = 4
#: Seconds the thread waits before trying again when another checkpoint was running.
_RETRY: Final = 0.01
#: PASSIVE passes of one wake-up (fewer once at most _REST pages are left uncopied), so
#: the pass with the writers held off has little left to copy.
_PASSES: Final = 3
_REST: Final = 64
#: Seconds between looks while a step of the long job waits to go before a pass.
_YIELD: Final = 0.001


class Folding:
    """The checkpoints of one file while `aside` is held (see the module docstring).

    Args:
        connect: opens a connection of the file for the thread (closed with `retire`).
        retire: closes it.
        writers: the lock the process's writers queue on (File._writer_lock); an `aside`
            never ends inside a write transaction, whose lock the thread may be waiting for.
        limit: the WAL's `journal_size_limit` outside `aside` (inside, none: a writer
            that starts the WAL over does not truncate it in its commit, 20-40 ms measured).
    """

    def __init__(
        self,
        connect: Callable[[], apsw.Connection],
        retire: Callable[[apsw.Connection], None],
        writers: Callable[[], threading.Lock],
        limit: int,
    ) -> None:
        self._connect = connect
        self._retire = retire
        self._writers = writers
        self._limit = limit
        #: Connections (ids) a write prepared while `aside` was held.
        self._aside: set[int] = set()
        #: The WAL's pages after the last commit seen while `aside` was held, and the
        #: frames the last checkpoint copied.
        self._pages = self._copied = 0
        self._lock = threading.Lock()
        self._users = 0
        self._pid = 0
        #: The thread stopped on an error: commits checkpoint as usual again.
        self._failed = False
        self._due = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Checkpoints the thread ran (it copies what it finds: one may fold several commits).
        self.folds = 0
        #: Held by a pass of the thread and by a `step` of the long job; the steps waiting.
        self._quiet = threading.Lock()
        self._waiting = 0
        self._count = threading.Lock()

    @property
    def active(self) -> bool:
        """True while `aside` is held in this process (and its thread runs)."""
        return self._users > 0 and self._pid == os.getpid() and not self._failed

    @contextlib.contextmanager
    def aside(self) -> Iterator[None]:
        """Checkpoints on the thread, not in commits, until the last `aside` ends
        (nested and concurrent holders share one thread)."""
        with self._lock:
            if self._pid != os.getpid():  # a fork: the parent's thread is not here
                self._users, self._thread, self._pid = 0, None, os.getpid()
            self._users += 1
            if self._thread is None:
                self._stop.clear()
                self._failed = False
                self._thread = threading.Thread(
                    target=self._run, name="threadloom-wal-fold", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._users -= 1
                thread = self._thread if self._users == 0 else None
                if thread is not None:
                    self._thread = None
                    self._stop.set()
                    self._due.set()
            if thread is not None:
                thread.join()

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """A step of the long job (its write transaction): no pass of the thread runs
        meanwhile, as its syncs slow the step's writes and the writers queue behind those
        (see the module docstring). Outside `aside`, nothing to wait for. Taken before the
        write lock, never inside a write: the thread holds it while it waits for that."""
        if not self.active:
            yield
            return
        with self._count:
            self._waiting += 1
        try:
            self._quiet.acquire()
        finally:
            with self._count:
                self._waiting -= 1
        try:
            yield
        finally:
            self._quiet.release()

    def prepare(self, conn: apsw.Connection) -> None:
        """Set `conn`'s checkpoints for the write transaction it begins: left to the
        thread while `aside` is held, else SQLite's automatic one."""
        if self.active:
            conn.set_wal_hook(self._committed)  # replaces the automatic checkpoint
            if id(conn) not in self._aside:
                self._aside.add(id(conn))
                conn.execute("PRAGMA journal_size_limit=-1")
        else:
            conn.wal_autocheckpoint(AUTO)
            if id(conn) in self._aside:
                self._aside.discard(id(conn))
                conn.execute(f"PRAGMA journal_size_limit={self._limit}")

    def _committed(self, conn: apsw.Connection, name: str, pages: int) -> int:
        # Inside the commit, with the write lock held: only a signal, no I/O. Due once
        # AUTO pages were added since the last copy (or the WAL started over past AUTO).
        self._pages = pages
        if pages - self._copied >= AUTO or (pages < self._copied and pages >= AUTO):
            self._due.set()
        return apsw.SQLITE_OK

    def _run(self) -> None:
        conn = self._connect()
        try:
            while True:
                self._due.wait()
                self._due.clear()
                stopping = self._stop.is_set()
                # A step waiting goes first (one step per pass at least); a step that
                # starts waiting after this look waits for this pass.
                while self._waiting and not self._stop.is_set():
                    self._stop.wait(_YIELD)
                try:
                    with self._quiet:
                        self._fold(conn)
                    self.folds += 1
                except (apsw.BusyError, apsw.LockedError):
                    # Another checkpoint runs (a close, a connection outside `aside`):
                    # it copies the same frames; try again after it unless stopping.
                    if not stopping and not self._stop.wait(_RETRY):
                        self._due.set()
                except apsw.Error:
                    log.exception("checkpointing the WAL failed; commits will again")
                    self._failed = True
                    return
                if stopping:
                    return
        finally:
            self._retire(conn)

    def _fold(self, conn: apsw.Connection) -> None:
        """Copy the WAL into the database without a lock, then, past RESTART pages, let
        it start over with this process's writers queued behind (see `_restart`)."""
        log = self._passive(conn)
        if self._pages < RESTART:
            return  # the WAL grows on, its frames copied and synced: no lock taken
        # RESTART waits for no reader or other process's writer (no busy handler): then
        # it is a PASSIVE one, and the WAL starts over at a later pass.
        conn.set_busy_timeout(0)
        try:
            self._restart(conn, log)
        except apsw.BusyError:
            pass
        finally:
            conn.set_busy_handler(lock_wait.Waiting(conn.filename))

    def _passive(self, conn: apsw.Connection) -> int:
        """PASSIVE passes (fewer once at most _REST pages are left); the WAL's frames as
        the last one found them."""
        log = 0
        for _ in range(_PASSES):
            log, self._copied = conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
            if self._pages - self._copied <= _REST:
                break
        return log

    def _restart(self, conn: apsw.Connection, log: int) -> None:
        """A RESTART checkpoint with the writers held off, so the next writer starts the
        WAL over. Held only while no frame is left to copy (none committed since the
        PASSIVE pass copied every one): then it copies and syncs nothing; else the lock
        goes at once and a PASSIVE pass outside it copies what is left, up to _TRIES
        times. From FORCE pages the RESTART copies the rest (two syncs) under the lock."""
        for _ in range(_TRIES):
            with self._writers():
                if self._pages == log == self._copied or self._pages >= FORCE:
                    conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_RESTART)
                    self._copied = 0
                    return
            log = self._passive(conn)
