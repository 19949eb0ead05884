"""The statements of one Store put, re-put and get, and the WAL pages a put writes.

Run: `python bench/profile_store_put.py` (10,000 items; `--items N`). Loads the corpus of
`bench_store_items.py` into a threadloom.Store with an index (batches of 500), waits for
the background training, then lists every statement (apsw's exec tracer, on every
connection, the caller's thread only: executemany rows count once each) of a new item's put, of
the same put again (unchanged value and vector), and of a get; then puts 100 new items
with the WAL's automatic checkpoints and the background training off and counts the WAL
frames (4 KiB pages) each put wrote, by the b-tree each page belongs to (`dbstat`).
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import apsw
from bench_store_items import DIMS, LOAD_BATCH, NAMESPACE, Corpus, LookupEmbedder
from langgraph.store.base import PutOp

import threadloom

_FRAME = 4096 + 24


def _traced(label: str, call: Callable[[], Any]) -> None:
    seen: list[str] = []

    caller = threading.get_ident()

    def tracer(_cursor: Any, sql: str, _bindings: Any) -> bool:
        if threading.get_ident() == caller:  # not the background training's
            seen.append(" ".join(sql.split()))
        return True

    for conn in apsw.connections():
        conn.exec_trace = tracer
    try:
        call()
    finally:
        for conn in apsw.connections():
            conn.exec_trace = None
    print(f"{label}: {len(seen)} statements")
    for sql in seen:
        print(f"  {sql[:150]}")


def _frames(path: Path, store: Any, corpus: Corpus, first: int, count: int) -> None:
    with apsw.Connection(str(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for conn in apsw.connections():
        conn.wal_autocheckpoint(0)
    for i in range(first, first + count):
        store.put(NAMESPACE, corpus.key(i), corpus.value(i))
    data = Path(f"{path}-wal").read_bytes()
    pages = collections.Counter(
        int.from_bytes(data[at : at + 4], "big") for at in range(32, len(data) - 23, _FRAME)
    )
    with apsw.Connection(str(path)) as conn:
        owner = {
            int(page): str(name) for name, page in conn.execute("SELECT name, pageno FROM dbstat")
        }
    by: collections.Counter[str] = collections.Counter()
    for page, times in pages.items():
        by[owner.get(page, "(new page)")] += times
    print(f"WAL frames a put writes: {sum(pages.values()) / count:.1f}")
    for name, times in by.most_common():
        print(f"  {times / count:6.2f}  {name}")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--items", type=int, default=10_000)
    args = p.parse_args(argv)
    n = args.items
    corpus = Corpus(n, 200, 1)
    with tempfile.TemporaryDirectory() as wd:
        path = Path(wd) / "profile.db"
        index: Any = {"dims": DIMS, "embed": LookupEmbedder(corpus), "fields": ["text"]}
        store = threadloom.Store(path, index=index)
        try:
            for first in range(0, n, LOAD_BATCH):
                last = min(first + LOAD_BATCH, n)
                store.batch(
                    [PutOp(NAMESPACE, corpus.key(i), corpus.value(i)) for i in range(first, last)]
                )
            for i in range(n, n + 5):  # warm the caches, and let a due training run
                store.put(NAMESPACE, corpus.key(i), corpus.value(i))
            if store.training is not None:
                store.training.wait()
            new = n + 10
            _traced("put", lambda: store.put(NAMESPACE, corpus.key(new), corpus.value(new)))
            _traced("put again", lambda: store.put(NAMESPACE, corpus.key(new), corpus.value(new)))
            _traced("get", lambda: store.get(NAMESPACE, corpus.key(n // 2)))
            if store.training is not None:
                store.training.wait()
            store.training = None  # no training during the count: its pages are not a put's
            _frames(path, store, corpus, n + 50, 100)
        finally:
            store.close()
    print(f"backend {threadloom.core.backend()}, {n} items, pid {os.getpid()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
