"""Figures of a threadloom file for `threadloom doctor --db`, read without changing it.

Engine layer. Reads through `recognize.look` (a read-only connection that creates no
side file), so a file of an older format is reported as it is, not upgraded.
"""

from __future__ import annotations

import os
from pathlib import Path

from threadloom.engine.recognize import Kind, look, recognize
from threadloom.engine.sql import fetchall
from threadloom.errors import EngineError


def figures(path: str) -> dict[str, object]:
    """What a threadloom file holds: format, sizes, rows, blocks and the dictionary.

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
        out: dict[str, object] = {"file": path, "file_format": version}
        out["file_bytes"] = sum(
            os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p)
        )

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
        return out
    finally:
        conn.close()
