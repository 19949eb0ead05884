"""Single-byte flips of the checkpoints' unique index: does a named read ever miss?

Builds a file of 40 threads x 8 checkpoints, then for each byte of the index's interior
pages and a seeded sample of each leaf page's bytes, flips it (XOR 0xFF) in a copy and
reads every checkpoint by id (`get_tuple` with `checkpoint_id`). Counts the reads that
returned None for a checkpoint the original holds (a silent miss: the issue's "damaged
index byte reads as no such checkpoint"), those that raised another exception than a
ThreadloomError, and the copies. Nothing is asserted (tests/integrity/test_index_misses.py
holds the case); the exit status is 0.

    python bench/index_flips.py              # 300 bytes a leaf page (~5,300 copies, minutes)
    python bench/index_flips.py --per-leaf 40
"""

from __future__ import annotations

import argparse
import random
import shutil
import tempfile
import time
from pathlib import Path

import apsw
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.errors import ThreadloomError

THREADS, CHECKPOINTS = 40, 8


def build(path: Path) -> list[tuple[str, str]]:
    saver = Saver(str(path))
    try:
        for t in range(THREADS):
            config = {"configurable": {"thread_id": f"thread-{t}", "checkpoint_ns": ""}}
            for step in range(CHECKPOINTS):
                config = saver.put(config, empty_checkpoint(), {"step": step}, {})
    finally:
        saver.close()
    conn = apsw.Connection(str(path))
    try:
        return [
            (str(a), str(b))
            for a, b in conn.execute(
                "SELECT t.thread_id, c.checkpoint_id FROM checkpoints c "
                "JOIN threads t ON t.id = c.thread"
            )
        ]
    finally:
        conn.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-leaf", type=int, default=300, help="bytes flipped a leaf page")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="threadloom-flips-"))
    started = time.perf_counter()
    try:
        original = folder / "original.db"
        ids = build(original)
        conn = apsw.Connection(str(original))
        pages = list(
            conn.execute(
                "SELECT pageno, pagetype FROM dbstat WHERE name = 'sqlite_autoindex_checkpoints_1'"
            )
        )
        size = int(conn.execute("PRAGMA page_size").fetchall()[0][0])
        conn.close()
        data = original.read_bytes()
        rng = random.Random(args.seed)
        copies = silent = other = raised = 0
        copy = folder / "copy.db"
        for page, kind in pages:
            span = range((page - 1) * size, page * size)
            offsets = span if kind == "internal" else rng.sample(span, args.per_leaf)
            for offset in offsets:
                damaged = bytearray(data)
                damaged[offset] ^= 0xFF
                for side in ("", "-wal", "-shm"):
                    Path(f"{copy}{side}").unlink(missing_ok=True)
                copy.write_bytes(bytes(damaged))
                copies += 1
                try:
                    saver = Saver(str(copy), readonly=True)
                except ThreadloomError:
                    raised += 1
                    continue
                try:
                    for thread_id, checkpoint_id in ids:
                        config = {
                            "configurable": {
                                "thread_id": thread_id,
                                "checkpoint_ns": "",
                                "checkpoint_id": checkpoint_id,
                            }
                        }
                        try:
                            found = saver.get_tuple(config)
                        except ThreadloomError:
                            raised += 1
                            continue
                        except Exception:  # noqa: BLE001 (counted: the report's point)
                            other += 1
                            continue
                        if found is None:
                            silent += 1
                finally:
                    saver.close()
        print(
            f"{len(pages)} index pages, {copies} copies, {copies and len(ids)} reads each: "
            f"{silent} silent misses, {other} other exceptions, {raised} ThreadloomErrors "
            f"({time.perf_counter() - started:.0f} s)"
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
