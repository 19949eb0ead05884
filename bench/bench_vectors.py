"""The Store's vector index (engine/items/vectors.py): search latency and recall at 100k x 384.

Run: `python bench/bench_vectors.py` (`--count 20000` for a quicker run, `--data uniform` for
uniform random vectors, `--keep DIR` to reuse the built file between runs).

Data: a deterministic mixture of Gaussians (`Mixture`: `--clusters` clusters around 25
topics, Zipf-like cluster shares, every vector normalized), or with `--data uniform`
normalized N(0, I) vectors (no structure: the worst case of an inverted-file index).
Queries are fresh draws from the same distribution, not vectors of the index.

Build: items are put the way the Store will: `replace` per item in write transactions of
2,000 items, `maintain` after each (so the lists were trained at 4,096, 8,192, ... and last
at 65,536 vectors when 100k are in). Then one forced training at the full count is timed.

Measured: the default `search` (the exact int8 scan with float32 re-ranking up to
`EXACT_CODE_BYTES` of codes when its codes fit THREADLOOM_MEMORY_BUDGET, else the lists with the
recall recorded at training), the lists alone per probe setting (`probe`; 16 probes is the
old default path), and `exact` (a float32 scan of the file): p50 and p95 over the queries
(the whole call: SQLite reads, scores, selection; the connection's default page cache, warm
OS cache) and recall@10 against `exact`. The first default search loads the codes (timed
apart). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from threadloom import core
from threadloom.core.lru import process_budget
from threadloom.core.similarity import pack
from threadloom.engine.file import File
from threadloom.engine.items.vectors import VectorIndex

DIMS = 384


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _unit(values: list[float]) -> list[float]:
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


class Mixture:
    """A deterministic mixture of Gaussians on the unit sphere (or uniform directions).

    Clustered: `topics` directions, each cluster's center near one of them (center = unit(
    topic + 0.8 x a random unit vector)), so clusters of one topic overlap as related
    documents do; a point is unit(center + noise) with a noise of norm 0.8-1.5 times the
    center's, drawn per cluster (neighbours at cosine ~0.3-0.6, as sentence embeddings).
    """

    def __init__(self, kind: str, clusters: int, seed: int, topics: int = 25) -> None:
        self.kind = kind
        rng = random.Random(seed)
        directions = [_unit([rng.gauss(0, 1) for _ in range(DIMS)]) for _ in range(topics)]
        self.centers = []
        for _ in range(clusters):
            topic = rng.choice(directions)
            spread = _unit([rng.gauss(0, 1) for _ in range(DIMS)])
            self.centers.append(_unit([t + 0.8 * s for t, s in zip(topic, spread, strict=True)]))
        self.weights = [1 / (i + 1) ** 0.5 for i in range(clusters)]
        # noise of norm ratio * |center|: sigma per coordinate = ratio / sqrt(DIMS)
        self.sigmas = [rng.uniform(0.8, 1.5) / math.sqrt(DIMS) for _ in range(clusters)]

    def draw(self, rng: random.Random) -> list[float]:
        gauss = rng.gauss
        if self.kind == "uniform":
            return _unit([gauss(0, 1) for _ in range(DIMS)])
        (index,) = rng.choices(range(len(self.centers)), self.weights)
        sigma = self.sigmas[index]
        return _unit([c + gauss(0, sigma) for c in self.centers[index]])


def build(path: Path, mixture: Mixture, count: int, index: VectorIndex) -> list[float]:
    """Create the file with `count` items and their vectors; return the training times."""
    rng = random.Random(1)
    trainings = []
    file = File(path)
    try:
        with file.write() as conn:
            conn.execute("INSERT INTO store_namespaces(id, name, depth) VALUES (1, 'bench', 1)")
        started = time.perf_counter()
        for first in range(1, count + 1, 2000):
            with file.write() as conn:
                for item in range(first, min(first + 2000, count + 1)):
                    conn.execute(
                        "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
                        "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0)",
                        (item, str(item)),
                    )
                    index.replace(conn, item, [("$", mixture.draw(rng))])
            with file.write() as conn:
                before = time.perf_counter()
                if index.maintain(conn):
                    trainings.append(time.perf_counter() - before)
                    note(f"  trained at {first + 1999} vectors in {trainings[-1]:.2f} s")
            if first % 20000 == 1:
                note(f"  {first + 1999} items, {time.perf_counter() - started:.0f} s")
    finally:
        file.close()
    return trainings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=500)
    parser.add_argument("--data", choices=("clustered", "uniform"), default="clustered")
    parser.add_argument("--metric", default="cosine")
    parser.add_argument("--probes", default="16,64")
    parser.add_argument("--keep", help="directory to keep (and reuse) the built file in")
    args = parser.parse_args(argv)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-vectors-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vectors-{args.data}-{args.count}-{args.clusters}-{args.metric}-v2.db"
    mixture = Mixture(args.data, args.clusters, seed=7)
    index = VectorIndex(DIMS, args.metric)  # type: ignore[arg-type]
    note(f"backend {core.backend()}, {args.count} x {DIMS} {args.data} {args.metric}: {path}")
    if not path.exists():
        started = time.perf_counter()
        trainings = build(path, mixture, args.count, index)
        note(f"built in {time.perf_counter() - started:.0f} s; trainings {trainings}")
    file = File(path)
    try:
        with file.write() as conn:
            before = time.perf_counter()
            index.retrain(conn)
            training = time.perf_counter() - before
            lists = conn.execute("SELECT count(*) - 1 FROM store_lists").fetchall()[0][0]
        file.checkpoint_wal()
        rng = random.Random(99)
        queries = [mixture.draw(rng) for _ in range(args.queries)]
        exact, exact_times = [], []
        with file.read() as conn:
            for query in queries:
                before = time.perf_counter()
                exact.append({item for item, _ in index.exact(conn, query, 10)})
                exact_times.append(time.perf_counter() - before)
        print(
            f"\n{args.count} vectors x {DIMS}, {args.data}"
            + (f" ({args.clusters} clusters)" if args.data == "clustered" else "")
            + f", {args.metric}, backend {core.backend()}, {lists} lists, "
            f"file {os.path.getsize(path) / 2**20:.0f} MiB"
        )
        with file.read() as conn:
            recorded = dict(
                conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('vector_recall', 'vector_probes')"
                ).fetchall()
            )
            before = time.perf_counter()
            index.search(conn, queries[0], 10)
            loading = time.perf_counter() - before
        held = index.scan.held()
        print(f"training at {args.count}: {training:.2f} s (in one write transaction)")
        print(
            f"recorded at training: recall@10 {recorded.get('vector_recall')} at "
            f"{index.probes} probes, wider probes {recorded.get('vector_probes')} (0: none)"
        )
        print(
            f"memory budget {process_budget().capacity / 2**20:.0f} MiB; int8 codes "
            + (f"held: {held.nbytes / 2**20:.1f} MiB" if held else "not held (over budget)")
            + f", first default search (loads them) {loading * 1e3:.0f} ms\n"
        )
        print("| path | p50 ms | p95 ms | recall@10 |")
        print("| --- | ---: | ---: | ---: |")
        row("exact float32 scan (`exact`)", exact_times, 1.0)
        paths: list[tuple[str, int | None]] = [("default `search`", None)]
        paths += [(f"lists, {p} probes", int(p)) for p in args.probes.split(",")]
        for name, probes in paths:
            times, hits = [], 0
            with file.read() as conn:
                for query, truth in zip(queries, exact, strict=True):
                    before = time.perf_counter()
                    if probes is None:
                        found = index.search(conn, query, 10)
                    else:
                        found = index.probe(conn, pack(query), 10, None, probes)
                    times.append(time.perf_counter() - before)
                    hits += len(truth & {item for item, _ in found})
            row(name, times, hits / (10 * len(queries)))
    finally:
        file.close()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


def row(name: str, times: list[float], recall: float) -> None:
    times = sorted(times)
    p95 = times[int(0.95 * (len(times) - 1))]
    print(f"| {name} | {statistics.median(times) * 1e3:.1f} | {p95 * 1e3:.1f} | {recall:.3f} |")


if __name__ == "__main__":
    sys.exit(main())
