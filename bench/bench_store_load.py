"""Bulk loads into the Store against SqliteStore: items/s with and without vectors.

Run: `python bench/bench_store_load.py` (10,000 items, 3 rounds; `--items`, `--rounds`,
`--quick`: 2,000 items, 1 round).

The corpus and the lookup embedder are bench_store_items.py's (384 dims; the embedder
finds each item's vector by the number in its text, so its time is microseconds and the
rates are the stores' own). Each round loads the items into every store on a fresh file,
one store after another (`batch` of 500 puts), then puts the same items again unchanged
(`re-put`): what an agent that saves its memories every turn does; then puts them again
with one field of each value changed (`update`: the number `n`, a filter field; the
indexed text stays): an agent updating its memories' metadata. Rounds interleave the
stores, so load from anything else on the machine falls on all of them; the table shows
each store's median and the median of its per-round ratio to SqliteStore. "embedded"
counts the texts the embedder was asked for in the re-put (threadloom's embedding cache
asks for none). Then, on threadloom.Store's file of the last round, the p50 of 50
top-10 searches in each mode (`search(query=..., mode=...)`, bench_store_items.py's
vector queries, which share common words with many items).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _harness as h
from bench_store_items import LOAD_BATCH, NAMESPACE, Corpus, LookupEmbedder, _extension_sqlite
from langgraph.store.base import BaseStore, PutOp

STORES = (
    "SqliteStore",
    "threadloom.Store",
    "SqliteStore (no index)",
    "threadloom.Store (no index)",
)
#: The store each is compared with: SqliteStore with the same index, or without one.
BASELINE = {
    "SqliteStore": "SqliteStore",
    "threadloom.Store": "SqliteStore",
    "SqliteStore (no index)": "SqliteStore (no index)",
    "threadloom.Store (no index)": "SqliteStore (no index)",
}


class Counting(LookupEmbedder):
    """The lookup embedder, counting the texts it is asked for."""

    def __init__(self, corpus: Corpus) -> None:
        super().__init__(corpus)
        self.texts = 0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.texts += len(texts)
        return super().embed_documents(texts)


def _open(name: str, wd: Path, embedder: Counting) -> tuple[BaseStore, Any]:
    index: Any = {"dims": 384, "embed": embedder, "fields": ["text"]}
    with_index = "no index" not in name
    if name.startswith("SqliteStore"):
        from langgraph.store.sqlite import SqliteStore

        conn = _extension_sqlite().connect(
            str(wd / "sqlite.db"), check_same_thread=False, isolation_level=None
        )
        store = SqliteStore(conn, index=index if with_index else None)
        store.setup()
        return store, conn.close
    import threadloom

    opened = threadloom.Store(wd / "threadloom.db", index=index if with_index else None)
    return opened, opened.close


def _value(corpus: Corpus, i: int, bump: int) -> dict[str, Any]:
    value = corpus.value(i)
    value["n"] += bump
    return value


def _load(store: BaseStore, corpus: Corpus, bump: int = 0) -> float:
    """Put every item (`bump` added to each value's `n`); items/s."""
    started = time.perf_counter()
    for first in range(0, corpus.n, LOAD_BATCH):
        last = min(first + LOAD_BATCH, corpus.n)
        ops = [PutOp(NAMESPACE, corpus.key(i), _value(corpus, i, bump)) for i in range(first, last)]
        store.batch(ops)
    return corpus.n / (time.perf_counter() - started)


def _modes(store: Any, corpus: Corpus, queries: int = 50) -> dict[str, float]:
    """p50 ms of top-10 searches in each mode."""
    found: dict[str, float] = {}
    for mode in ("vector", "text", "hybrid"):
        times = []
        for q in range(queries):
            begun = time.perf_counter()
            store.search(NAMESPACE, query=corpus.vector_query(q), mode=mode)
            times.append((time.perf_counter() - begun) * 1000)
        found[mode] = statistics.median(times)
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=10_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="2,000 items, one round")
    p.add_argument("--no-search", action="store_true", help="skip the search timings")
    p.add_argument("--stores", default=",".join(STORES), help=f"subset of: {', '.join(STORES)}")
    args = p.parse_args(argv)
    n, rounds = (2_000, 1) if args.quick else (args.items, args.rounds)
    names = [s for s in args.stores.split(",") if s]
    corpus = Corpus(n, 0, 50)
    searches: dict[str, float] = {}
    rates: dict[tuple[str, str], list[float]] = {}
    embedded: dict[str, int] = {}
    for r in range(rounds):
        for name in names:
            embedder = Counting(corpus)
            with tempfile.TemporaryDirectory() as folder:
                store, close = _open(name, Path(folder), embedder)
                try:
                    rates.setdefault((name, "load"), []).append(_load(store, corpus))
                    before = embedder.texts
                    rates.setdefault((name, "re-put"), []).append(_load(store, corpus))
                    embedded[name] = embedder.texts - before
                    rates.setdefault((name, "update"), []).append(_load(store, corpus, n))
                    if name == "threadloom.Store" and r == rounds - 1 and not args.no_search:
                        searches = _modes(store, corpus)
                finally:
                    close()
            h.note(f"round {r + 1}: {name}: {rates[(name, 'load')][-1]:,.0f} items/s")
    print(f"{n:,} items, {rounds} rounds interleaved, batches of {LOAD_BATCH}")
    print(
        "| store | load items/s | vs SqliteStore | re-put items/s | vs SqliteStore "
        "| update items/s | vs SqliteStore | embedded |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name in names:
        cells = [name]
        for phase in ("load", "re-put", "update"):
            mine = rates[(name, phase)]
            cells.append(f"{statistics.median(mine):,.0f}")
            other = rates.get((BASELINE[name], phase))
            ratio = (
                statistics.median(a / b for a, b in zip(mine, other, strict=True))
                if other
                else None
            )
            cells.append(f"{ratio:.2f}x" if ratio else "-")
        cells.append(f"{embedded[name]:,}" if "no index" not in name else "-")
        print("| " + " | ".join(cells) + " |")
    if searches:
        shown = ", ".join(f"{mode} {ms:.2f} ms" for mode, ms in searches.items())
        print(f"threadloom.Store top-10 p50 by mode: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
