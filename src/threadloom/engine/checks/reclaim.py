"""`threadloom compact`: give the file's dead bytes back, and say what that took.

Engine layer. In order, each step its own write transaction(s):

1. every thread (every scope) loses the values no checkpoint or pending write reaches
   any more, once older than the grace (what a prune left because it was younger
   then, or what a document-service client stored and never referenced), with the
   blocks only they listed (`liveness.py`, `drops.py`);
2. blocks released by other deletions whose grace has passed are swept;
3. the Store's vector lists are trained again on every vector (k-means, each vector
   moved to its nearest list, the recall measured: engine/items/vector_training.py, in
   short write transactions);
4. the dictionary is retrained and every inline body re-encoded, mostly-dead extents
   are rewritten, and VACUUM rewrites the file without its free pages
   (`ContentStore.reclaim`).

A value younger than the grace is never collected (a client of `threadloom serve` may
be about to reference it); run compact again later for those.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any

import apsw

from threadloom.engine.checkpoints.liveness import Liveness
from threadloom.engine.content.blocks import bump_gc_epoch
from threadloom.engine.content.drops import Drops
from threadloom.engine.file import File
from threadloom.engine.items.vectors import stored_index
from threadloom.engine.sql import fetchall
from threadloom.engine.sql import vacuum as vacuum_on
from threadloom.errors import CorruptionError, MissingDocumentsError
from threadloom.protocol.constants import RETENTION_GRACE_SECONDS

log = logging.getLogger("threadloom.engine.checks.reclaim")


@dataclass
class Compacted:
    """What `compact` did (docs/cli.md, `compact --json`)."""

    file: str
    bytes_before: int
    bytes_after: int = 0
    pages_before: int = 0
    pages_after: int = 0
    free_pages_before: int = 0
    page_size: int = 0
    values: int = 0
    value_bytes: int = 0
    blocks: int = 0
    extents_rewritten: int = 0
    vectors_retrained: int = 0
    damaged: list[str] | None = None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "file": self.file,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "reclaimed": self.bytes_before - self.bytes_after,
            "page_size": self.page_size,
            "pages_before": self.pages_before,
            "pages_after": self.pages_after,
            "pages_freed": self.pages_before - self.pages_after,
            "free_pages_before": self.free_pages_before,
            "values": self.values,
            "value_bytes": self.value_bytes,
            "blocks": self.blocks,
            "extents_rewritten": self.extents_rewritten,
            "vectors_retrained": self.vectors_retrained,
            "damaged": list(self.damaged or []),
        }


def file_bytes(path: str) -> int:
    """The bytes of the database and its WAL."""
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def vacuum(file: File) -> tuple[int, int]:
    """VACUUM the file and fold its WAL in; return its bytes before and after.

    Only step 4's last part: nothing is collected, retrained or re-encoded. For a file
    just written in bulk (`migrate` into a new file), whose b-trees were filled in key
    order by many transactions and so left pages part empty.

    Raises:
        EngineError: another connection kept the file busy.
    """
    before = file_bytes(file.path)
    with file.connection() as conn:
        vacuum_on(conn, file.path)
    file.checkpoint_wal()
    return before, file_bytes(file.path)


def _pages(file: File) -> tuple[int, int, int]:
    with file.read() as conn:
        count = int(fetchall(conn, "PRAGMA page_count")[0][0])
        free = int(fetchall(conn, "PRAGMA freelist_count")[0][0])
        size = int(fetchall(conn, "PRAGMA page_size")[0][0])
    return count, free, size


def compact(file: File, grace: float = RETENTION_GRACE_SECONDS) -> Compacted:
    """Collect, sweep, retrain, rewrite and VACUUM the file (see the module docstring).

    Raises:
        EngineError: another connection kept the file busy during VACUUM.
    """
    done = Compacted(file.path, file_bytes(file.path), damaged=[])
    done.pages_before, done.free_pages_before, done.page_size = _pages(file)
    with file.read() as conn:
        threads = fetchall(conn, "SELECT id, thread_id FROM threads ORDER BY id")
    cutoff = time.time() - grace
    for thread, thread_id in threads:
        try:
            with file.write() as conn:
                values, size, blocks = _collect(file, conn, int(thread), cutoff, grace)
        except (CorruptionError, MissingDocumentsError) as exc:
            log.warning("%s: compact left thread %r alone: %s", file.path, thread_id, exc)
            assert done.damaged is not None
            done.damaged.append(str(thread_id))
            continue
        done.values += values
        done.value_bytes += size
        done.blocks += blocks
    done.vectors_retrained = _retrain_vectors(file)
    swept, done.extents_rewritten = file.content.reclaim()
    done.blocks += swept
    file.checkpoint_wal()  # VACUUM wrote the file into the WAL: fold it in to measure
    done.bytes_after = file_bytes(file.path)
    done.pages_after = _pages(file)[0]
    return done


def _retrain_vectors(file: File) -> int:
    """Train the Store's vector lists again over every vector; how many there are."""
    with file.read() as conn:
        index = stored_index(conn)
        count = int(fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0])
    if index is None or not count:
        return 0
    index.train(file, force=True)
    return count


def _collect(
    file: File, conn: apsw.Connection, thread: int, cutoff: float, grace: float
) -> tuple[int, int, int]:
    """Delete one thread's unreferenced values older than `cutoff`; return how many, the
    bytes they took (the thread index's unit) and the blocks swept with them."""
    live = Liveness(conn, file.content, thread)
    live.mark(body for _, body in live.checkpoints())
    live.later(lambda: [body for _, body in live.writes()])
    doomed, _ = live.unreferenced(cutoff)
    if not doomed:
        return 0, 0, 0
    drops = Drops(conn, file.content)
    count = drops.add_values(thread, doomed)
    drops.apply()
    conn.execute("UPDATE threads SET bytes = bytes - ? WHERE id = ?", (drops.bytes, thread))
    bump_gc_epoch(conn)  # writers that remember refs plan again
    swept = file.content.sweep(conn, grace, drops.released)
    return count, drops.bytes, swept
