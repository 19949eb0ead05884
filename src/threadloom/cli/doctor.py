"""`threadloom doctor`: versions, SQLite build, the core backend and the on-disk format;
with `--db FILE`, what that file holds and how its content store shares and compresses."""

from __future__ import annotations

import json
import os
import platform
from pathlib import Path

import apsw

from threadloom import __version__, core
from threadloom.engine.schema import FORMAT_VERSION
from threadloom.engine.sql import fetchall
from threadloom.errors import EngineError


def report(db: str | None = None) -> dict[str, object]:
    """Return what `doctor` prints (with the file's figures when `db` is given)."""
    found: dict[str, object] = {
        "threadloom": __version__,
        "python": platform.python_version(),
        "sqlite": apsw.sqlite_lib_version(),
        "apsw": apsw.apsw_version(),
        "format_version": FORMAT_VERSION,
        "backend": core.backend(),
    }
    if db is not None:
        found.update(inspect(db))
    return found


def inspect(path: str) -> dict[str, object]:
    """Figures of one threadloom file, read without changing it (not even upgrading it)."""
    if not Path(path).is_file():
        raise EngineError(f"{path!r} is not a file; give the path of a threadloom database")
    conn = apsw.Connection(
        f"file:{path}?mode=ro", flags=apsw.SQLITE_OPEN_READONLY | apsw.SQLITE_OPEN_URI
    )
    try:
        version = int(fetchall(conn, "PRAGMA user_version")[0][0])
        out: dict[str, object] = {"file": path, "file_format": version}
        size = os.path.getsize(path)
        wal = Path(f"{path}-wal")
        out["file_bytes"] = size + (wal.stat().st_size if wal.exists() else 0)
        if version < 1:
            return out

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
        return out
    finally:
        conn.close()


def run_doctor(*, as_json: bool, db: str | None = None) -> int:
    """Print the report as a table or JSON; return 0."""
    found = report(db)
    if as_json:
        print(json.dumps(found, indent=2))
    else:
        width = max(map(len, found))
        for key, value in found.items():
            print(f"{key:<{width}}  {value}")
    return 0


def run_compact(db: str) -> int:
    """Retrain the file's dictionary, re-encode its bodies and VACUUM it; print the sizes."""
    from threadloom.engine.database import Database

    if not Path(db).is_file():
        raise EngineError(f"{db!r} is not a file; give the path of a threadloom database")
    before = inspect(db)["file_bytes"]
    database = Database(db)
    try:
        database.content.compact()
    finally:
        database.close()
    after = inspect(db)["file_bytes"]
    print(f"{db}: {before} -> {after} bytes")
    return 0


def run_verify(db: str, *, bodies: bool, as_json: bool) -> int:
    """Check a file's physical store (and every body unless `bodies` is False).

    Returns:
        0 when sound (leaks, blocks kept longer than needed, are reported, not failed),
        1 when a problem was found.
    """
    from threadloom.engine.database import Database

    found = inspect(db)
    if found["file_format"] != FORMAT_VERSION:
        raise EngineError(
            f"{db!r} has on-disk format {found['file_format']}, not {FORMAT_VERSION}: open it "
            "with this threadloom (or run `threadloom compact --db`) to upgrade it, then verify"
        )
    database = Database(db)
    try:
        report = database.content.verify(bodies=bodies)
    finally:
        database.close()
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print(
            f"{db}: {report['rows']} rows, {report['blocks']} blocks, {report['extents']} extents: "
            + ("sound" if not report["problems"] else f"{len(report['problems'])} problems")
        )
        for line in report["problems"]:
            print(f"problem: {line}")
        for line in report["leaks"]:
            print(f"leak: {line}")
    return 1 if report["problems"] else 0
