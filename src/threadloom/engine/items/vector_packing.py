"""Packing the vector lists' code chunks into full ones (engine layer).

A training moves vectors to the end of their new lists a batch at a time, so each list
gets one short chunk per step (vector_codes.add packs a run only every RUN + 1 chunks):
at 1M vectors a training left 12,345 chunks where 4,450 hold the codes, and a probe reads
every chunk of its lists, each a row of its own. Packing rewrites each list with more
chunks than it needs as full chunks (`vector_codes.repack`), so the codes and the float32
rows never disagree: the vectors stay as they are, only their chunks change.

When: at the end of every training (in its one transaction for `maintain`, after it in
short steps for `train`, so `compact` too), and once on a file trained before this
(`due`: `meta.vector_codes_packed` is not the generation of the lists), by the Store's
background thread. Steps: `run` packs lists in write transactions that hold the lock
about HOLD each (vector_training's rule), pausing as long as each held it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Final

import apsw

from threadloom.engine.items import vector_codes
from threadloom.engine.sql import Transactions, fetchall

__all__ = ["PACKED_KEY", "due", "pack", "run"]

#: The `meta` key holding the lists' generation whose chunks were last packed.
PACKED_KEY: Final = "vector_codes_packed"
#: The write lock a step aims to hold, in seconds (whole lists: vector_training.HOLD is
#: 10 ms, a list's rewrite can take more).
HOLD: Final = 0.02
#: The longest pause after a step (vector_training.PAUSE_MAX).
PAUSE_MAX: Final = 0.1


def due(conn: apsw.Connection, settings: Mapping[str, Any] | None = None) -> bool:
    """Whether the lists were trained (or the file upgraded) since their chunks were last
    packed, and no training is under way (meta reads only: cheap in a writer's
    transaction; none with `settings`, the `vector_*` meta rows as it read them)."""
    rows: Mapping[str, Any] = settings or dict(
        fetchall(
            conn,
            "SELECT key, value FROM meta WHERE key IN ('vector_generation', 'vector_moving', ?, ?)",
            (PACKED_KEY, vector_codes.FROM_KEY),
        )
    )
    generation = rows.get("vector_generation")
    if generation is None or "vector_moving" in rows or vector_codes.FROM_KEY not in rows:
        return False
    return str(rows.get(PACKED_KEY)) != str(generation)


def pack(conn: apsw.Connection, dims: int) -> int:
    """Pack every loose list in the caller's write transaction; the lists rewritten."""
    done = sum(vector_codes.repack(conn, list_id, dims) for list_id in vector_codes.loose(conn))
    _record(conn)
    return done


def run(file: Transactions, dims: int, stop: Callable[[], bool] = lambda: False) -> int:
    """Pack every loose list over `file` in short write transactions (each list whole in
    one), stopping early when `stop()` or a training begins; the lists rewritten. Records
    the generation packed once every list is."""
    with file.read() as conn:
        if not due(conn):
            return 0
        pending = vector_codes.loose(conn)
        generation = _generation(conn)
    done = 0
    # Each step rewrites ~100 KiB of chunks a list: the WAL's checkpoints run on a thread
    # of their own (wal_fold.py), not in the commits that hold the write lock, nor beside
    # them (`between_checkpoints`).
    with file.checkpoints_aside():
        while not stop():
            with file.between_checkpoints(), file.write() as conn:
                before = time.monotonic()  # the lock is held from here to the commit
                if _generation(conn) != generation or not due(conn):
                    return done  # a training began or ended meanwhile: its end packs
                while pending:  # one list at least, more while under HOLD
                    done += vector_codes.repack(conn, pending.pop(0), dims)
                    if time.monotonic() - before >= HOLD:
                        break
                if not pending:
                    _record(conn)
                    return done
            time.sleep(min(time.monotonic() - before, PAUSE_MAX))
    return done


def _generation(conn: apsw.Connection) -> str | None:
    found = fetchall(conn, "SELECT value FROM meta WHERE key = 'vector_generation'")
    return None if not found else str(found[0][0])


def _record(conn: apsw.Connection) -> None:
    conn.execute(
        "INSERT INTO meta(key, value) SELECT ?, value FROM meta WHERE key = "
        "'vector_generation' ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (PACKED_KEY,),
    )
