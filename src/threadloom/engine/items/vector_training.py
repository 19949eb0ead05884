"""Retraining the vector index's lists while writers go on (engine layer).

A training runs in phases (`Training`); driven over a file (`Training.run`, the Store's
background thread `BackgroundTraining`) each is a transaction of its own, and the write lock is
only ever held for one short step; `VectorIndex.maintain` runs them all in the caller's
one write transaction instead.

1. plan (a read transaction): the vector count, a k-means sample of SAMPLE_PER_LIST
   vectors per list and held-out queries for the recall gauge; k-means then runs outside
   any transaction.
2. begin (a short write): the new lists go in with ids above every old one, and the meta
   key `vector_moving` names the training (first new list, token, owner pid, heartbeat);
   the generation changes, so searches probe the old and the new lists together, and puts
   go to the nearest new list. Every vector stays in exactly one list, near its centroid:
   a put made during the training is in the index (and found by a search) at once.
3. move (batches): a batch of rows of the old lists is read in a read transaction,
   assigned to the new lists outside the write lock and scored by the recall gauge; one
   short write per batch then moves the rows still as read (one changed meanwhile is
   assigned there) to the end of their new list, with their codes (vector_codes.py), and
   the training pauses as long as that write took. The batch (BATCH at first) follows the
   measured hold: halved after a write longer than HOLD, a quarter larger after one under
   half of it, so a slow disk or a loaded machine makes the steps smaller, not the stalls
   longer.
4. finish (a short write): rows still in old lists (written there by a process that does
   not know the training) move, the old lists go, the count, generation, recall and
   probes (wider or fewer: vector_recall.py) are recorded, the key goes; then the lists'
   short code chunks are packed (vector_packing.py).

Vectors keep their contents when they move, so the exact scan's codes stay valid (the
scan re-ranks by item, not by vector id). A training whose owner stopped (closed,
crashed) leaves `vector_moving`; the next training resumes it with the new lists'
centroids. Every write checks the token: of two trainings, the one taken over stops.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import apsw

from threadloom import core
from threadloom.engine.items import vector_codes, vector_packing
from threadloom.engine.items.kmeans import kmeans
from threadloom.engine.items.vector_recall import Gauge, choose, held_out, queries
from threadloom.engine.sql import Transactions, fetchall, ids
from threadloom.errors import EngineError, ThreadloomError

if TYPE_CHECKING:
    from threadloom.engine.items.vectors import VectorIndex

__all__ = [
    "BATCH",
    "HOLD",
    "MOVING_KEY",
    "BackgroundTraining",
    "Moving",
    "Training",
    "moving",
    "resumable",
]

log = logging.getLogger("threadloom.engine.items.vector_training")

#: The `meta` key naming a training in progress.
MOVING_KEY: Final = "vector_moving"
#: Rows assigned and moved by the first write transaction (~15 ms of writing at 384 dims,
#: more under load: bench/README.md); later ones follow HOLD, within BATCH_MIN..BATCH_MAX.
BATCH: Final = 128
BATCH_MIN: Final = 8
BATCH_MAX: Final = 1024
#: The write lock a step aims to hold, in seconds: 10 ms, as a loaded machine stretches a
#: hold several times over (bench/README.md, the stall round).
HOLD: Final = 0.01
#: The longest pause after a step (the pause is as long as the step's write, up to this).
PAUSE_MAX: Final = 0.1
#: Seconds without a heartbeat after which another process may take a training over.
STALE: Final = 60.0
#: Lists per square root of the vector count.
LISTS_PER_ROOT: Final = 1.0
#: k-means sample: this many vectors per list (at most all of them).
SAMPLE_PER_LIST: Final = 64
#: Lloyd iterations of a training (fewer when the assignment stops changing).
ITERATIONS: Final = 12
#: A vector's id is `list << _LIST_BITS | n` (vectors.LIST_BITS).
_LIST_BITS: Final = 32
#: List ids stay below this, so an id fits SQLite's signed 64-bit integer.
_MAX_LIST: Final = 2**31 - 1

#: Files (by path) a training of this process is running on.
_active: set[str] = set()
_active_lock = threading.Lock()


@dataclass(frozen=True)
class Moving:
    """A training in progress, as `meta.vector_moving` records it."""

    first: int
    token: str
    pid: int
    beat: float

    def text(self) -> str:
        return f"{self.first} {self.token} {self.pid} {self.beat:.3f}"


def moving(conn: apsw.Connection, settings: Mapping[str, Any] | None = None) -> Moving | None:
    """The training in progress recorded in the file, if any (`settings`: the `vector_*`
    meta rows as this transaction read them, so no query)."""
    if settings is None:
        found = fetchall(conn, "SELECT value FROM meta WHERE key = ?", (MOVING_KEY,))
        recorded = found[0][0] if found else None
    else:
        recorded = settings.get(MOVING_KEY)
    if recorded is None:
        return None
    try:
        first, token, pid, beat = str(recorded).split()
        return Moving(int(first), token, int(pid), float(beat))
    except ValueError:
        return Moving(0, "", 0, 0.0)  # unreadable: anyone may take it over


def resumable(conn: apsw.Connection, found: Moving, *, mine: bool = False) -> bool:
    """Whether a training may take `found` over: its owner is this process and no other
    training of this process runs on the file (`mine`: the caller is the one that runs),
    or its heartbeat is older than STALE."""
    if found.pid == os.getpid():
        if mine:
            return True
        with _active_lock:
            return _path(conn) not in _active
    return time.time() - found.beat > STALE


def _path(conn: apsw.Connection) -> str:
    return os.path.realpath(conn.filename) if conn.filename else str(id(conn))


@dataclass
class _Plan:
    total: int
    rng: random.Random
    sample: bytes
    #: Held-out queries: their vectors; before, the vector ids and the k-means sample to
    #: choose them from (`every`, `chosen`), then the ids chosen (`chosen`).
    queries: list[tuple[int, bytes]]
    every: list[int] | None = None
    chosen: list[int] | None = None
    #: A training taken over: its record, list ids and centroids (no k-means then).
    resumed: Moving | None = None
    list_ids: list[int] | None = None
    centroids: bytes = b""


@dataclass
class _State:
    record: Moving
    list_ids: list[int]
    centroids: bytes
    gauge: Gauge
    total: int
    #: The walk: the last old row read, and (resumed) the new rows to gauge up to.
    last: int = -1
    gauged: int = -1
    top: int = -1
    #: Rows the next step reads and moves (BATCH read when a training begins).
    batch: int = dataclasses.field(default_factory=lambda: BATCH)

    def adapt(self, held: float) -> None:
        """Size the next batch by how long the last step held the write lock."""
        if held > HOLD:
            self.batch = max(BATCH_MIN, self.batch // 2)
        elif held < HOLD / 2:
            self.batch = min(BATCH_MAX, self.batch + max(1, self.batch // 4))


class Training:
    """One training of `index`'s lists (see the module docstring)."""

    def __init__(self, index: VectorIndex) -> None:
        self.index = index
        self.dims = index.dims
        #: Set by `run`: this process's one training of the file (it may resume its own).
        self._mine = False

    # -- drivers -----------------------------------------------------------------------------

    def within(self, conn: apsw.Connection, total: int) -> None:
        """Every phase in the caller's write transaction (taking over any other training)."""
        plan = self._plan(conn, total)
        state = self._begin(conn, plan, self._centroids(plan, lambda: False), take_over=True)
        assert state is not None
        while rows := self._read(conn, state):
            self._move(conn, state, rows, self._assigned(state, rows))
        if self._finish(conn, state):
            vector_packing.pack(conn, self.dims)

    def run(
        self, file: Transactions, stop: Callable[[], bool] = lambda: False, *, force: bool = False
    ) -> bool:
        """Train over `file`, each phase its own transaction; False when another training
        of this process runs, none is due (`force`: trains any vectors unless another
        process's training is under way), it was stopped, or another took it over."""
        with file.read() as conn:
            path = _path(conn)
        with _active_lock:
            if path in _active:
                return False
            _active.add(path)
        self._mine = True
        try:
            # Checkpoints on a thread of their own, not in the commits of the steps or of
            # the writers meanwhile (which would hold the write lock while they sync).
            with file.checkpoints_aside():
                return self._steps(file, stop, force=force)
        finally:
            with _active_lock:
                _active.discard(path)

    def _steps(self, file: Transactions, stop: Callable[[], bool], *, force: bool) -> bool:
        """The phases after the checks of `run` (see the module docstring)."""
        with file.read() as conn:
            total = self.index.due(conn, training=True)
            if force and total is None and moving(conn) is None:
                total = self.index._count(conn) or None
            plan = None if total is None else self._plan(conn, total)
        if plan is None:
            return False
        centroids = self._centroids(plan, stop)
        if stop():
            return False
        # Each write takes `between_checkpoints` first: no checkpoint syncs while it holds
        # the write lock (wal_fold.py).
        with file.between_checkpoints(), file.write() as conn:
            state = self._begin(conn, plan, centroids, take_over=False)
        if state is None:
            return False
        while not stop():
            with file.read() as conn:
                rows = self._read(conn, state)
            if not rows:
                with file.between_checkpoints(), file.write() as conn:
                    finished = self._finish(conn, state)
                if finished:  # then its lists' short chunks, in steps of their own
                    vector_packing.run(file, self.dims, stop)
                return finished
            targets = self._assigned(state, rows)
            with file.between_checkpoints(), file.write() as conn:
                before = time.monotonic()  # the lock is held from here to the commit
                if not self._move(conn, state, rows, targets):
                    return False
            held = time.monotonic() - before
            state.adapt(held)
            # Leave the lock free at least as long as the step held it: writers that
            # queue behind the training get at least half of the time.
            time.sleep(min(held, PAUSE_MAX))
        return False

    # -- phases ------------------------------------------------------------------------------

    def _plan(self, conn: apsw.Connection, total: int) -> _Plan:
        rng = random.Random(total)
        found = moving(conn)
        if found is not None:
            rows = fetchall(
                conn,
                "SELECT id, centroid FROM store_lists WHERE id >= ? ORDER BY id",
                (found.first,),
            )
            if rows and all(len(row[1]) == 4 * self.dims for row in rows):
                return _Plan(
                    total,
                    rng,
                    b"",
                    held_out(conn, rng, []),
                    resumed=found,
                    list_ids=[row[0] for row in rows],
                    centroids=b"".join(row[1] for row in rows),
                )
        count = max(1, min(round(LISTS_PER_ROOT * math.sqrt(total)), total))
        every = [row[0] for row in fetchall(conn, "SELECT id FROM store_vectors")]
        chosen = sorted(rng.sample(every, min(len(every), count * SAMPLE_PER_LIST)))
        sample = self.index._matrix(
            row[0]
            for row in fetchall(
                conn, "SELECT vector FROM store_vectors WHERE id IN carray(?)", (ids(chosen),)
            )
        )
        return _Plan(total, rng, sample, [], every, chosen)

    def _centroids(self, plan: _Plan, stop: Callable[[], bool]) -> bytes:
        """k-means (outside any transaction), then the held-out queries are chosen (with
        the rng after k-means, as trainings always did; read by `_begin`)."""
        if plan.resumed is not None:
            return plan.centroids
        n = len(plan.sample) // (4 * self.dims)
        count = max(1, min(round(LISTS_PER_ROOT * math.sqrt(plan.total)), n))
        index = self.index
        centroids = kmeans(
            plan.sample, count, self.dims, index.metric, index._assign, plan.rng, ITERATIONS, stop
        )
        assert plan.every is not None and plan.chosen is not None
        plan.chosen = choose(plan.every, plan.rng, plan.chosen)
        plan.every = None
        return centroids

    def _begin(
        self, conn: apsw.Connection, plan: _Plan, centroids: bytes, *, take_over: bool
    ) -> _State | None:
        found = moving(conn)
        token = f"{random.SystemRandom().randrange(1, 2**62):x}"
        if plan.chosen is not None:
            plan.queries = queries(conn, plan.chosen)
            plan.chosen = None
        gauge = Gauge(self.dims, self.index.metric, plan.queries)
        if found is not None and plan.resumed is not None and found.token == plan.resumed.token:
            if not (take_over or resumable(conn, found, mine=self._mine)):
                return None
            assert plan.list_ids is not None
            record = Moving(found.first, token, os.getpid(), time.time())
            top = int(fetchall(conn, "SELECT coalesce(max(id), -1) FROM store_vectors")[0][0])
            state = _State(record, plan.list_ids, centroids, gauge, plan.total, top=top)
            state.gauged = (found.first << _LIST_BITS) - 1
            self._set(conn, {MOVING_KEY: record.text()})
            return state
        if found is not None and not (take_over or resumable(conn, found, mine=self._mine)):
            return None
        first = int(fetchall(conn, "SELECT coalesce(max(id), 0) FROM store_lists")[0][0]) + 1
        count = len(centroids) // (4 * self.dims)
        if first + count > _MAX_LIST:
            raise EngineError("the vector index ran out of list ids (over 2**31 trainings' worth)")
        list_ids = list(range(first, first + count))
        size = 4 * self.dims
        conn.executemany(
            "INSERT INTO store_lists(id, centroid, size) VALUES (?, ?, 0)",
            [(list_id, centroids[i * size : (i + 1) * size]) for i, list_id in enumerate(list_ids)],
        )
        record = Moving(first, token, os.getpid(), time.time())
        self._set(conn, {MOVING_KEY: record.text(), "vector_generation": _fresh()})
        if vector_codes.coded_from(conn) is None and self.index.coding(plan.total):
            vector_codes.set_coded_from(conn, first)  # the new lists are coded as they fill
        return _State(record, list_ids, centroids, gauge, plan.total)

    def _read(self, conn: apsw.Connection, state: _State) -> list[tuple[Any, ...]]:
        """The next rows of old lists (or, resumed, of new ones to gauge only)."""
        end = state.record.first << _LIST_BITS
        rows = fetchall(
            conn,
            "SELECT id, item, field, vector FROM store_vectors WHERE id > ? AND id < ? "
            "ORDER BY id LIMIT ?",
            (state.last, end, state.batch),
        )
        if rows:
            return rows
        while state.gauged < state.top:  # a resumed training: what was moved before it
            rows = fetchall(
                conn,
                "SELECT id, item, field, vector FROM store_vectors WHERE id > ? AND id <= ? "
                "ORDER BY id LIMIT ?",
                (state.gauged, state.top, 4 * state.batch),
            )
            if not rows:
                break
            state.gauged = rows[-1][0]
            state.gauge.add(rows)
        return []

    def _assigned(self, state: _State, rows: list[tuple[Any, ...]]) -> list[int]:
        """Each row's new list (C, outside the write lock), the rows scored by the gauge."""
        chosen = core.vector_nearest(
            self.index._matrix(row[3] for row in rows),
            state.centroids,
            self.dims,
            self.index._assign,
        )
        targets = [state.list_ids[i] for i in chosen]
        state.gauge.add(
            [
                (target << _LIST_BITS, row[1], row[2], row[3])
                for row, target in zip(rows, targets, strict=True)
            ]
        )
        state.last = rows[-1][0]
        return targets

    def _move(
        self,
        conn: apsw.Connection,
        state: _State,
        rows: list[tuple[Any, ...]],
        targets: list[int],
    ) -> bool:
        """Move `rows` to `targets` where they are still as read; False if taken over."""
        if not self._owned(conn, state):
            return False
        planned = {row[0]: (row, target) for row, target in zip(rows, targets, strict=True)}
        current = fetchall(
            conn,
            "SELECT id, item, field, vector FROM store_vectors WHERE id >= ? AND id <= ? "
            "ORDER BY id",
            (rows[0][0], rows[-1][0]),
        )
        self._relocate(conn, state, current, planned)
        self._set(conn, {MOVING_KEY: _beat(state).text()})
        return True

    def _relocate(
        self,
        conn: apsw.Connection,
        state: _State,
        current: list[tuple[Any, ...]],
        planned: dict[int, tuple[tuple[Any, ...], int]],
    ) -> None:
        if not current:
            return
        again = [row for row in current if planned.get(row[0], ((), 0))[0] != row]
        if again:
            chosen = core.vector_nearest(
                self.index._matrix(row[3] for row in again),
                state.centroids,
                self.dims,
                self.index._assign,
            )
            for row, i in zip(again, chosen, strict=True):
                planned[row[0]] = (row, state.list_ids[i])
        following: dict[int, int] = {}
        moved = []
        for row in current:
            target = planned[row[0]][1]
            vector_id = following.get(target) or self.index._next_id(conn, target)
            following[target] = vector_id + 1
            moved.append((vector_id, row[1], row[2], row[3]))
        vector_codes.drop(conn, [row[0] for row in current])
        conn.execute(
            "DELETE FROM store_vectors WHERE id >= ? AND id <= ?", (current[0][0], current[-1][0])
        )
        conn.executemany(
            "INSERT INTO store_vectors(id, item, field, vector) VALUES (?, ?, ?, ?)", moved
        )
        vector_codes.add(conn, [(row[0], row[1], row[3]) for row in moved], self.dims)

    def _finish(self, conn: apsw.Connection, state: _State) -> bool:
        """Move what is left in old lists, drop them, record the training; False if taken
        over."""
        if not self._owned(conn, state):
            return False
        end = state.record.first << _LIST_BITS
        last = -1
        while True:
            left = fetchall(
                conn,
                "SELECT id, item, field, vector FROM store_vectors WHERE id > ? AND id < ? "
                "ORDER BY id LIMIT ?",
                (last, end, BATCH),
            )
            if not left:
                break
            last = left[-1][0]
            self._relocate(conn, state, left, {})
        conn.execute("DELETE FROM store_lists WHERE id != 0 AND id < ?", (state.record.first,))
        # Every vector is in a new list now, and list 0 is empty: every list is coded when
        # the new ones are (an index the exact scan serves has no codes, vectors.py).
        conn.execute("DELETE FROM store_codes WHERE id < ?", (state.record.first << _LIST_BITS,))
        if vector_codes.coded_from(conn) is not None:
            vector_codes.set_coded_from(conn, 0)
        index = self.index
        recall, probes = state.gauge.measure(state.centroids, state.list_ids, index.probes)
        fewer, fewer_recall = state.gauge.fewer(state.centroids, state.list_ids, index.probes)
        self._set(
            conn,
            {
                "vector_dims": self.dims,
                "vector_metric": index.metric,
                "vector_trained": state.total,
                "vector_generation": _fresh(),
                "vector_recall": recall,
                "vector_probes": probes,
                "vector_fewer_probes": fewer,
                "vector_fewer_recall": fewer_recall,
            },
        )
        conn.execute("DELETE FROM meta WHERE key = ?", (MOVING_KEY,))
        index._cache = None
        return True

    def _owned(self, conn: apsw.Connection, state: _State) -> bool:
        found = moving(conn)
        return found is not None and found.token == state.record.token

    def _set(self, conn: apsw.Connection, values: dict[str, Any]) -> None:
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )


class BackgroundTraining:
    """One training at a time of `index` over `file`, on a daemon thread: `start` after a
    write found it due, `stop` before the file closes (the training stops after its current
    step; the next one resumes it)."""

    def __init__(self, index: VectorIndex, file: Transactions) -> None:
        self.index = index
        self.file = file
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def start(self) -> bool:
        """Start a training unless this object's is still running; True if it started."""
        with self._lock:
            if self._stop.is_set() or (self._thread is not None and self._thread.is_alive()):
                return False
            self._thread = threading.Thread(
                target=self._run, name="threadloom-vector-training", daemon=True
            )
            self._thread.start()
            return True

    def wait(self, timeout: float | None = None) -> None:
        """Wait for the running training, if any, to end."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def stop(self) -> None:
        """Stop the running training after its current step and wait for it."""
        self._stop.set()
        self.wait()

    def _run(self) -> None:
        try:
            Training(self.index).run(self.file, self._stop.is_set)
            # Lists trained before their chunks were packed at a training's end (once).
            vector_packing.run(self.file, self.index.dims, self._stop.is_set)
        except ThreadloomError:
            # The writes that made it due are committed: report, retry at the next one.
            log.exception("%s: retraining the vector index failed", self.file.path)
        except Exception:  # e.g. the file closed under it at exit: a thread has no caller
            log.exception("%s: the vector index's training stopped", self.file.path)


def _beat(state: _State) -> Moving:
    record = state.record
    return Moving(record.first, record.token, record.pid, time.time())


def _fresh() -> int:
    return random.SystemRandom().randrange(1, 2**62)
