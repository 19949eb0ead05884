"""Figures of a threadloom file for `threadloom doctor --db`, read without changing it.

Engine layer. Reads through `recognize.look` (a read-only connection that creates no
side file), so a file of an older format is reported as it is, not upgraded.
"""

from __future__ import annotations

import os
from pathlib import Path

import apsw

from threadloom.engine.checks.wal import wal
from threadloom.engine.format import features
from threadloom.engine.format.recognize import Kind, look, recognize
from threadloom.engine.format.schema import CODES_FORMAT
from threadloom.engine.items.vectors import stored_index
from threadloom.engine.sql import fetchall
from threadloom.errors import EngineError

#: Threads `doctor --db` lists by size.
TOP_THREADS = 10


def figures(path: str) -> dict[str, object]:
    """What a threadloom file holds: format, sizes, rows, blocks, the dictionary, and
    the WAL (`wal.py`: its size, and why it is large and what to do).

    Raises:
        EngineError: the path is not a file (NotOurFileError: not a threadloom file).
    """
    if not Path(path).is_file():
        raise EngineError(f"{path!r} is not a file; give the path of a threadloom database")
    if recognize(path) is Kind.NEW:
        return {"file": path, "file_format": 0, "file_bytes": os.path.getsize(path)}
    conn = look(path)
    try:
        version = int(fetchall(conn, "PRAGMA user_version")[0][0])
        features.attach_absent(conn)
        out: dict[str, object] = {"file": path, "file_format": version}
        out["file_bytes"] = sum(
            os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p)
        )
        out.update(counts(conn, version))
        out.update(space(conn, version))
        out["wal"] = wal(path)
        return out
    finally:
        conn.close()


def counts(conn: apsw.Connection, version: int) -> dict[str, object]:
    """The rows a file holds (threads, checkpoints, pending writes, values, blocks and
    their sharing, the Store's), each a `count(*)` or a sum over its table: their cost
    grows with the file."""
    out: dict[str, object] = {}

    def count(sql: str) -> int:
        return int(fetchall(conn, sql)[0][0] or 0)

    out["threads"] = count("SELECT count(*) FROM threads")
    out["checkpoints"] = count("SELECT count(*) FROM checkpoints")
    out["pending_writes"] = count("SELECT count(*) FROM writes")
    out["values"] = count("SELECT count(*) FROM vals")
    if version >= 2:
        blocks, raw, refs = fetchall(
            conn, "SELECT count(*), total(size), total(size * max(refs, 0)) FROM blocks"
        )[0]
        stored = fetchall(conn, "SELECT total(length(body)) FROM extents")[0][0]
        out["blocks"] = blocks
        out["block_bytes_stored"] = int(stored)
        out["block_bytes_referenced"] = int(refs)
        out["block_sharing"] = round(refs / raw, 2) if raw else None
        out["dictionary"] = fetchall(conn, "SELECT max(id) FROM dicts")[0][0]
    if version >= 5:
        out["store_namespaces"] = count("SELECT count(*) FROM store_namespaces")
        out["store_items"] = count("SELECT count(*) FROM store_items")
        out["store_value_bytes"] = count("SELECT total(size) FROM store_items")
        out["store_vectors"] = count("SELECT count(*) FROM store_vectors")
        # The vector lists' recall@10 on held-out queries at their last training, and the
        # wider probes that reached the floor (engine/items/vector_recall.py); None untrained.
        recorded: dict[str, object] = dict(
            fetchall(
                conn,
                "SELECT key, value FROM meta "
                "WHERE key IN ('vector_recall', 'vector_probes', 'vector_moving', "
                "'vector_fewer_probes')",
            )
        )
        recall = recorded.get("vector_recall")
        out["store_vector_recall"] = None if recall is None else round(float(str(recall)), 3)
        out["store_vector_probes"] = recorded.get("vector_probes")
        # Fewer probes whose held-out recall held the floor (vector_recall.Gauge.fewer).
        out["store_vector_fewer_probes"] = recorded.get("vector_fewer_probes")
        # A training moving vectors to new lists (vector_training.py): started, not finished.
        out["store_vector_training"] = "vector_moving" in recorded
    if version >= CODES_FORMAT:
        # The vectors' int8 codes packed per list (vector_codes.py): what a search by the
        # lists reads, and whether every list has them: true; false while the lists wait
        # for the training that codes them (an upgraded file, or an index grown beyond the
        # exact scan); None when the exact scan serves the index, which has no codes.
        coded = fetchall(conn, "SELECT 1 FROM meta WHERE key = 'vector_codes_from'")
        out["store_vector_codes_bytes"] = count("SELECT total(length(body)) FROM store_codes")
        index = stored_index(conn)
        if not coded and (index is None or not index.coding(int(str(out["store_vectors"])))):
            out["store_vector_codes_complete"] = None
        else:
            out["store_vector_codes_complete"] = bool(coded) and not fetchall(
                conn,
                "SELECT 1 FROM store_lists WHERE size > 0 AND id < "
                "(SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'vector_codes_from')",
            )
    return out


def space(conn: apsw.Connection, version: int, top: int = TOP_THREADS) -> dict[str, object]:
    """Where the file's bytes are: per table (its indexes included, from SQLite's
    `dbstat`), the largest threads by the thread index's `bytes`, and what `compact`
    can give back (free pages, extent bytes no block holds, blocks released and
    waiting for their grace)."""
    out: dict[str, object] = {}
    page_size = int(fetchall(conn, "PRAGMA page_size")[0][0])
    free = int(fetchall(conn, "PRAGMA freelist_count")[0][0])
    try:
        rows = fetchall(
            conn,
            "SELECT coalesce(m.tbl_name, d.name), sum(d.pgsize) FROM dbstat d "
            "LEFT JOIN sqlite_schema m ON m.name = d.name WHERE d.aggregate = 1 "
            "GROUP BY 1 ORDER BY 2 DESC, 1",
        )
    except apsw.SQLError:  # an SQLite built without dbstat
        rows = []
    out["table_bytes"] = {str(name): int(size) for name, size in rows}
    if version >= 6:
        out["largest_threads"] = [
            {"namespace": ns, "agent_id": agent, "thread_id": thread_id, "bytes": int(size)}
            for ns, agent, thread_id, size in fetchall(
                conn,
                "SELECT s.namespace, s.agent_id, t.thread_id, t.bytes FROM threads t "
                "JOIN scopes s ON s.id = t.scope ORDER BY t.bytes DESC, t.id LIMIT ?",
                (top,),
            )
        ]
    out["free_page_bytes"] = free * page_size
    reclaimable = free * page_size
    if version >= 2:
        extents = int(fetchall(conn, "SELECT total(length(body)) FROM extents")[0][0])
        held, released, waiting = fetchall(
            conn,
            "SELECT total(length), total(refs <= 0), total(CASE WHEN refs <= 0 THEN length END) "
            "FROM blocks",
        )[0]
        out["dead_extent_bytes"] = extents - int(held)
        out["released_blocks"] = int(released)
        out["released_block_bytes"] = int(waiting)
        reclaimable += extents - int(held) + int(waiting)
    out["reclaimable_bytes"] = reclaimable
    return out
