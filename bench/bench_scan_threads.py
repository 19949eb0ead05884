"""The exact vector search on one thread and cut across the cores, in the same run.

Run: `python bench/bench_scan_threads.py` (100k x 384 uniform vectors, 200 queries;
`--count`, `--queries`, `--data clustered`, `--threads N` for the cut side, `--keep DIR`
to reuse the loaded Store file).

A `threadloom.Store` with a lookup embedder (text `"v<i>"` -> the i-th vector, `"q<i>"`
-> the i-th query: numpy, deterministic) is loaded through `batch` (500 puts a call).
Then each query is searched twice, alternating which side goes first: with
THREADLOOM_SCAN_THREADS=1 and with the cut across `--threads` (default: what
`scan_threads()` picks on this machine). Printed: p50 and p95 of `store.search(...,
limit=10)` per side and their ratio, recall@10 against numpy's exact top 10 (cosine), and
whether both sides returned the same keys and scores (they must: the cut changes only
which thread computes a bound). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from langgraph.store.base import PutOp

import threadloom
from threadloom.engine.items import scan

DIMS = 384
NS = ("bench",)


def _unit(matrix: Any) -> Any:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _data(kind: str, count: int, queries: int) -> tuple[Any, Any]:
    rng = np.random.default_rng(3)
    if kind == "uniform":
        return (
            _unit(rng.standard_normal((count, DIMS))).astype("f4"),
            _unit(rng.standard_normal((queries, DIMS))).astype("f4"),
        )
    centers = _unit(rng.standard_normal((max(1, count // 200), DIMS)))

    def draw(n: int) -> Any:
        picked = centers[rng.integers(0, len(centers), n)]
        return _unit(picked + 0.9 * _unit(rng.standard_normal((n, DIMS)))).astype("f4")

    return draw(count), draw(queries)


def _store(path: Path, vectors: Any, queries: Any) -> threadloom.Store:
    def embed(texts: list[str]) -> list[list[float]]:
        rows = [(vectors if t[0] == "v" else queries)[int(t[1:])] for t in texts]
        return [row.tolist() for row in rows]

    fresh = not path.exists()
    store = threadloom.Store(str(path), index={"dims": DIMS, "embed": embed, "fields": ["text"]})
    if fresh:
        started = time.perf_counter()
        for first in range(0, len(vectors), 500):
            last = min(len(vectors), first + 500)
            store.batch([PutOp(NS, str(i), {"text": f"v{i}"}) for i in range(first, last)])
        print(f"loaded {len(vectors)} items in {time.perf_counter() - started:.1f} s")
    return store


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--data", choices=("uniform", "clustered"), default="uniform")
    parser.add_argument("--threads", type=int, default=0, help="default: scan_threads()")
    parser.add_argument("--keep", help="directory to keep (and reuse) the Store file in")
    args = parser.parse_args()
    vectors, queries = _data(args.data, args.count, args.queries)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-scan-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"store-{args.data}-{args.count}.db"
    store = _store(path, vectors, queries)
    os.environ.pop(scan.SCAN_THREADS_ENV, None)
    cut = args.threads or scan.scan_threads()
    sides = {"1 thread": "1", f"{cut} threads": str(cut)}
    store.search(NS, query="q0", limit=10)  # loads the codes
    times: dict[str, list[float]] = {side: [] for side in sides}
    found: dict[str, list[list[tuple[str, float | None]]]] = {side: [] for side in sides}
    for q in range(args.queries):
        order = list(sides) if q % 2 == 0 else list(reversed(sides))
        for side in order:
            os.environ[scan.SCAN_THREADS_ENV] = sides[side]
            started = time.perf_counter()
            items = store.search(NS, query=f"q{q}", limit=10)
            times[side].append(time.perf_counter() - started)
            found[side].append([(item.key, item.score) for item in items])
    os.environ.pop(scan.SCAN_THREADS_ENV, None)
    truth = np.argsort(-(queries @ vectors.T), axis=1)[:, :10]
    one, many = sides
    print(
        f"{args.count} x {DIMS} {args.data}, {args.queries} queries, cores usable: "
        f"{len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.1f}"
    )
    print("| scan | search p50 ms | p95 ms | recall@10 |")
    print("| --- | ---: | ---: | ---: |")
    for side in sides:
        ms = sorted(t * 1e3 for t in times[side])
        hits = sum(
            len({int(k) for k, _ in got} & set(truth[i].tolist()))
            for i, got in enumerate(found[side])
        )
        print(
            f"| {side} | {statistics.median(ms):.2f} | {ms[int(0.95 * (len(ms) - 1))]:.2f} | "
            f"{hits / (10 * args.queries):.3f} |"
        )
    ratio = statistics.median(times[many]) / statistics.median(times[one])
    print(f"{many} / 1 thread, p50: {ratio:.2f}x; same results: {found[one] == found[many]}")
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
