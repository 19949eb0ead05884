"""Where a Store bulk load's time goes: CPU by step, SQL by statement, cProfile.

Run from the repository root (PYTHONPATH at the tree to measure):
    .venv/bin/python bench/profile_store_load.py [--items 10000] [--loads 3] [--top 25]

bench_store_load.py's first load (its corpus and lookup embedder, 384 dims, batches of
500) on fresh files, three ways:

1. the calling thread's CPU seconds in each step of a batch (`Store.batch`, preparing,
   embedding, `Items.write` and its parts, the dictionary trainings after it), the
   least of `--loads` loads: CPU of one thread, so other jobs on the machine move it
   less than wall time (the vector index's training thread is not counted);
2. SQLite's own time per statement text (apsw's profile trace), one load;
3. cProfile of one load, the functions with the largest own time.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import apsw
from bench_store_items import LOAD_BATCH, NAMESPACE, Corpus, LookupEmbedder
from langgraph.store.base import PutOp

import threadloom
from threadloom.engine.items import rows, vectors
from threadloom.langgraph import store

#: The steps timed: (class, method).
STEPS = [
    (store.Store, "batch"),
    (store._StoreBase, "_prepare"),
    (store._StoreBase, "_embed"),
    (rows.Items, "write"),
    (rows.Items, "_columns"),
    (rows.Items, "_insert"),
    (rows.Items, "index_vectors"),
    (vectors.VectorIndex, "replace_many"),
    (rows.Items, "after_write"),
]


def _load(corpus: Corpus, hook: Callable[[], Any] | None = None) -> float:
    index: Any = {"dims": 384, "embed": LookupEmbedder(corpus), "fields": ["text"]}
    with tempfile.TemporaryDirectory() as folder:
        opened = threadloom.Store(Path(folder) / "t.db", index=index)
        try:
            begun = time.perf_counter()
            for first in range(0, corpus.n, LOAD_BATCH):
                last = min(first + LOAD_BATCH, corpus.n)
                ops = [PutOp(NAMESPACE, corpus.key(i), corpus.value(i)) for i in range(first, last)]
                opened.batch(ops)
            return time.perf_counter() - begun
        finally:
            opened.close()


def _timed(spent: dict[str, float]) -> None:
    for owner, name in STEPS:
        method = getattr(owner, name)

        @functools.wraps(method)
        def timed(*args: Any, _method: Any = method, _label: str = name, **kwargs: Any) -> Any:
            begun = time.thread_time()
            try:
                return _method(*args, **kwargs)
            finally:
                spent[_label] += time.thread_time() - begun

        setattr(owner, name, timed)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=10_000)
    p.add_argument("--loads", type=int, default=3)
    p.add_argument("--top", type=int, default=25)
    args = p.parse_args()
    corpus = Corpus(args.items, 0, 50)
    print(f"{args.items:,} items, batches of {LOAD_BATCH}, threadloom at {threadloom.__file__}")

    statements: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    tracing = [False]

    def traced(event: dict[str, Any]) -> None:
        if tracing[0] and event["code"] == apsw.SQLITE_TRACE_PROFILE:
            seen = statements[" ".join(event["sql"].split())[:90]]
            seen[0] += 1
            seen[1] += event["nanoseconds"] / 1e9

    apsw.connection_hooks.append(lambda c: c.trace_v2(apsw.SQLITE_TRACE_PROFILE, traced))
    tracing[0] = True
    wall = _load(corpus)
    tracing[0] = False
    total = sum(s for _, s in statements.values())
    print(f"\nSQL: {total:.3f} s of a {wall:.2f} s load, by statement:")
    for sql, (count, seconds) in sorted(statements.items(), key=lambda kv: -kv[1][1])[:12]:
        print(f"  {seconds:7.3f} s {count:7,}  {sql}")

    profile = cProfile.Profile()
    profile.enable()
    _load(corpus)
    profile.disable()
    print(f"\ncProfile, the {args.top} largest own times:")
    pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(args.top)

    best: dict[str, float] = {}
    for _ in range(args.loads):
        spent: dict[str, float] = defaultdict(float)
        _timed(spent)
        _load(corpus)
        for owner, name in STEPS:  # unwrap for the next load
            setattr(owner, name, getattr(owner, name).__wrapped__)
        for name, seconds in spent.items():
            best[name] = min(best.get(name, seconds), seconds)
    print(f"CPU of the calling thread by step, least of {args.loads} loads:")
    for owner, name in STEPS:
        print(f"  {owner.__name__ + '.' + name:28s} {best.get(name, 0.0):.3f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
