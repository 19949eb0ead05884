"""Files at rest: a new file, and the 30-turn tool chat, threadloom against SqliteSaver.

Run from the repository root: `python bench/bench_sizes.py [--turns 30] [--quick]`.

Sizes are the file plus its `-wal` and `-shm` after every connection closed. Unlike the
timings of the other scripts they do not depend on load: two runs give the same pages
(the bytes of a message differ only by its ids). Printed as a Markdown table with, for
threadloom, the file's page count, free pages and b-trees (tables and indexes).
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _workload import build_graph, config_of, tool_results, turn_input  # noqa: E402

import threadloom  # noqa: E402


def at_rest(path: Path) -> int:
    """Bytes of the file and its side files as they lie."""
    return sum(
        os.path.getsize(f"{path}{s}") for s in ("", "-wal", "-shm") if os.path.exists(f"{path}{s}")
    )


def shape(path: Path) -> str:
    """Pages, free pages and b-trees of an SQLite file."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        trees = conn.execute("SELECT count(*) FROM sqlite_schema WHERE rootpage > 0").fetchone()[0]
    finally:
        conn.close()
    return f"{pages} pages, {free} free, {trees} b-trees"


def chat(saver: Any, turns: int) -> None:
    graph = build_graph(saver, tool_results())
    for turn in range(1, turns + 1):
        graph.invoke(turn_input("chat", turn), config_of("chat"))


def sqlite_saver(path: Path, body: Callable[[Any], None]) -> None:
    from langgraph.checkpoint.sqlite import SqliteSaver

    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        saver = SqliteSaver(conn)
        saver.setup()
        body(saver)
    finally:
        conn.close()


def ours(path: Path, body: Callable[[Any], None]) -> None:
    saver = threadloom.Saver(str(path))
    try:
        body(saver)
    finally:
        saver.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--quick", action="store_true", help="a 5-turn chat")
    args = parser.parse_args()
    if args.quick:
        args.turns = 5
    folder = Path(tempfile.mkdtemp(prefix="bench-sizes-"))
    rows = []
    for name, kind in (("a new file, nothing written", "new"), (f"{args.turns}-turn chat", "chat")):
        body: Callable[[Any], None] = (
            (lambda s: None) if kind == "new" else (lambda s: chat(s, args.turns))
        )
        theirs, mine = folder / f"sqlite-{kind}.db", folder / f"threadloom-{kind}.db"
        sqlite_saver(theirs, body)
        ours(mine, body)
        store = folder / f"store-{kind}.db"
        if kind == "new":
            threadloom.Store(str(store)).close()
        a, b = at_rest(theirs), at_rest(mine)
        rows.append((name, a, b, shape(mine)))
        if kind == "new":
            rows.append(
                ("a new file, a Store opened and closed", None, at_rest(store), shape(store))
            )
    print("| file at rest | SqliteSaver | threadloom.Saver | ratio | threadloom's file |")
    print("|---|---|---|---|---|")
    for name, a, b, described in rows:
        theirs_text = f"{a / 1024:.1f} KiB" if a is not None else "-"
        ratio = f"{b / a:.3f}x" if a else "-"
        print(f"| {name} | {theirs_text} | {b / 1024:.1f} KiB | {ratio} | {described} |")


if __name__ == "__main__":
    main()
