"""The Store's vector index (engine/items/vectors.py): search, recall, training at 100k-1M x 384.

Run: `python bench/bench_vectors.py` (100k clustered; `--count 1000000` for 1M, `--data
uniform` for vectors without structure, `--keep DIR` to reuse the built file, `--queries N`).

Data (numpy, deterministic): a mixture of Gaussians on the unit sphere (`--clusters`
clusters, default count/200, around 25 topics: center = unit(topic + 0.8 x a random unit
vector), Zipf-like cluster shares, a point = unit(center + noise of norm 0.8-1.5 x the
center's): neighbours at cosine ~0.3-0.6, as sentence embeddings), or with `--data
uniform` normalized N(0, I) vectors (no structure: the worst case of an inverted-file
index). Queries are fresh draws from the same distribution, not indexed vectors; their
true top 10 is computed with numpy while the data is generated.

Build: the items and their vectors are inserted into list 0 in bulk (SQL, 20,000 a
transaction), then one training over all of them is run the way the Store runs it
(`VectorIndex.train`: short steps, writers going on) while a writer thread puts one new
item every 5 ms (`replace` in a write transaction of its own): the training's time, and the
writer's put latency during it (p50, p99, max: the longest a writer waited), are printed.

Measured after: the default `search` (the exact scan, 4-bit then int8, re-ranked in float32 up to
`EXACT_CODE_BYTES` of codes when they fit THREADLOOM_VECTOR_BUDGET, else the lists with
the recall recorded at training; `--exact-up-to 0` makes it the lists at 100k too), the
lists alone per probe setting (`vector_probe.probe` over the int8 codes in the file, and
with `--float-rows` over the float32 rows as before the codes), p50 and p95 over the
queries (the whole call, warm OS cache) and recall@10 against numpy's exact top 10; the
paths answer each query in turn, so load falls on all alike. Also the codes' size in the
file and the process's peak RSS. `--no-train` measures a kept file as it is. Nothing is
asserted.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from threadloom import core
from threadloom.core.lru import process_budget
from threadloom.core.similarity import pack
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.items import vector_packing, vector_probe
from threadloom.engine.items.vectors import VectorIndex

DIMS = 384
CHUNK = 20_000


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _unit(matrix: Any) -> Any:
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


class Mixture:
    """The data and query generator (see the module docstring)."""

    def __init__(self, kind: str, clusters: int, seed: int, topics: int = 25) -> None:
        self.kind = kind
        rng = np.random.default_rng(seed)
        directions = _unit(rng.standard_normal((topics, DIMS)))
        picked = directions[rng.integers(0, topics, clusters)]
        self.centers = _unit(picked + 0.8 * _unit(rng.standard_normal((clusters, DIMS))))
        weights = 1 / np.sqrt(np.arange(1, clusters + 1))
        self.weights = weights / weights.sum()
        self.sigmas = rng.uniform(0.8, 1.5, clusters) / np.sqrt(DIMS)

    def draw(self, rng: Any, count: int) -> Any:
        noise = rng.standard_normal((count, DIMS))
        if self.kind == "uniform":
            return _unit(noise).astype(np.float32)
        which = rng.choice(len(self.centers), count, p=self.weights)
        points = self.centers[which] + noise * self.sigmas[which, None]
        return _unit(points).astype(np.float32)


def build(path: Path, mixture: Mixture, count: int, queries: Any) -> Any:
    """Create the file with `count` items and vectors in list 0; return the queries' true
    top-10 item ids (cosine: the vectors are unit)."""
    rng = np.random.default_rng(1)
    best_scores = np.full((len(queries), 10), -np.inf)
    best_items = np.zeros((len(queries), 10), dtype=np.int64)
    file = File(path)
    try:
        with file.write() as conn:
            file.ensure(conn, features.STORE)  # the Store's tables (format 8: made on first write)
            conn.execute("INSERT INTO store_namespaces(id, name, depth) VALUES (1, 'bench', 1)")
            conn.execute(
                "INSERT INTO meta(key, value) VALUES ('vector_dims', ?), ('vector_metric', "
                "'cosine')",
                (DIMS,),
            )
        started = time.perf_counter()
        for first in range(1, count + 1, CHUNK):
            vectors = mixture.draw(rng, min(CHUNK, count + 1 - first))
            items = np.arange(first, first + len(vectors))
            with file.write() as conn:
                conn.executemany(
                    "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
                    "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0)",
                    [(int(item), str(item)) for item in items],
                )
                conn.executemany(
                    "INSERT INTO store_vectors(id, item, field, vector) VALUES (?, ?, '$', ?)",
                    [
                        (int(item), int(item), row.tobytes())
                        for item, row in zip(items, vectors, strict=True)
                    ],
                )
            scores = np.concatenate([best_scores, queries @ vectors.T], axis=1)
            seen = np.broadcast_to(items, (len(queries), len(items)))
            ids = np.concatenate([best_items, seen], axis=1)
            top = np.argsort(-scores, axis=1)[:, :10]
            best_scores = np.take_along_axis(scores, top, 1)
            best_items = np.take_along_axis(ids, top, 1)
            if (first - 1) % 200_000 == 0:
                note(f"  {first - 1 + len(vectors)} items, {time.perf_counter() - started:.0f} s")
    finally:
        file.close()
    return best_items


def train_with_writer(file: File, index: VectorIndex, mixture: Mixture) -> dict[str, float]:
    """One forced training (`train`) while a writer puts an item every 5 ms."""
    return with_writer(file, index, mixture, lambda: index.train(file, force=True))


def with_writer(
    file: File, index: VectorIndex, mixture: Mixture, action: Callable[[], object]
) -> dict[str, float]:
    """`action()` while a writer puts an item every 5 ms: its time and the puts' latency."""
    rng = np.random.default_rng(5)
    latencies: list[float] = []
    done = threading.Event()
    with file.read() as conn:
        item = first = int(conn.execute("SELECT max(id) FROM store_items").fetchall()[0][0]) + 1

    def writer() -> None:
        nonlocal item
        while not done.is_set():
            vector = mixture.draw(rng, 1)[0].tolist()
            before = time.perf_counter()
            with file.write() as conn:
                conn.execute(
                    "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
                    "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0)",
                    (item, str(item)),
                )
                index.replace(conn, item, [("$", vector)])
            latencies.append(time.perf_counter() - before)
            item += 1
            time.sleep(0.005)

    thread = threading.Thread(target=writer)
    thread.start()
    before = time.perf_counter()
    try:
        action()
    finally:
        took = time.perf_counter() - before
        done.set()
        thread.join()
    with file.write() as conn:  # the writer's items are not in the queries' true top 10
        conn.execute("DELETE FROM store_items WHERE id >= ?", (first,))
    latencies.sort()
    return {
        "training_s": took,
        "puts": len(latencies),
        "put_p50_ms": statistics.median(latencies) * 1e3,
        "put_p99_ms": latencies[int(0.99 * (len(latencies) - 1))] * 1e3,
        "put_max_ms": latencies[-1] * 1e3,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--clusters", type=int, default=0, help="default: count / 200")
    parser.add_argument("--data", choices=("clustered", "uniform"), default="clustered")
    parser.add_argument("--probes", default="8,16,64")
    parser.add_argument("--keep", help="directory to keep (and reuse) the built file in")
    parser.add_argument(
        "--exact-up-to",
        type=int,
        default=None,
        help="VectorIndex(exact_up_to=...): 0 makes the default search use the lists",
    )
    parser.add_argument(
        "--no-train",
        action="store_true",
        help="measure the kept file's index as it is (no training first)",
    )
    parser.add_argument(
        "--pack",
        action="store_true",
        help="first pack the kept file's short code chunks (vector_packing.run, short steps)",
    )
    parser.add_argument(
        "--float-rows",
        action="store_true",
        help="also probe the lists reading float32 rows (the path before codes), interleaved",
    )
    args = parser.parse_args(argv)
    clusters = args.clusters or max(1, args.count // 200)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="bench-vectors-"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"vectors-{args.data}-{args.count}-{clusters}-v3.db"
    mixture = Mixture(args.data, clusters, seed=7)
    queries = mixture.draw(np.random.default_rng(99), args.queries)
    truth_path = path.with_suffix(f".truth{args.queries}.npy")
    index = VectorIndex(DIMS, "cosine", exact_up_to=args.exact_up_to)
    note(f"backend {core.backend()}, {args.count} x {DIMS} {args.data}: {path}")
    if not path.exists() or not truth_path.exists():
        path.unlink(missing_ok=True)
        started = time.perf_counter()
        np.save(truth_path, build(path, mixture, args.count, queries))
        note(f"built in {time.perf_counter() - started:.0f} s")
    truth = [set(map(int, row)) for row in np.load(truth_path)]
    file = File(path)
    try:
        trained = None if args.no_train else train_with_writer(file, index, mixture)
        if args.pack:
            packed: list[int] = []
            run = with_writer(
                file, index, mixture, lambda: packed.append(vector_packing.run(file, DIMS))
            )
            note(
                f"packed {packed[0]} lists in {run['training_s']:.1f} s; a writer's "
                f"{run['puts']:.0f} puts meanwhile: p50 {run['put_p50_ms']:.1f} ms, p99 "
                f"{run['put_p99_ms']:.1f} ms, max {run['put_max_ms']:.1f} ms"
            )
        file.checkpoint_wal()
        with file.read() as conn:
            lists = conn.execute("SELECT count(*) - 1 FROM store_lists").fetchall()[0][0]
            recorded = dict(
                conn.execute(
                    "SELECT key, value FROM meta WHERE key IN ('vector_recall', 'vector_probes')"
                ).fetchall()
            )
            codes = conn.execute("SELECT count(*), total(length(body)) FROM store_codes").fetchall()
            before = time.perf_counter()
            index.search(conn, queries[0].tolist(), 10)
            loading = time.perf_counter() - before
        held = index.scan.held()
        print(
            f"\n{args.count} vectors x {DIMS}, {args.data}"
            + (f" ({clusters} clusters)" if args.data == "clustered" else "")
            + f", cosine, backend {core.backend()}, {lists} lists, "
            f"file {os.path.getsize(path) / 2**20:.0f} MiB"
        )
        if trained is not None:
            print(
                f"training at {args.count} (`train`, short steps): {trained['training_s']:.1f} "
                f"s; a writer's {trained['puts']:.0f} puts meanwhile: p50 "
                f"{trained['put_p50_ms']:.1f} ms, p99 {trained['put_p99_ms']:.1f} ms, max "
                f"{trained['put_max_ms']:.1f} ms"
            )
        print(
            f"codes in the file: {codes[0][0]} chunks, {codes[0][1] / 2**20:.1f} MiB "
            f"({codes[0][1] / max(args.count, 1):.0f} bytes a vector)"
        )
        print(
            f"recorded at training: recall@10 {recorded.get('vector_recall')} at "
            f"{index.probes} probes, wider probes {recorded.get('vector_probes')} (0: none)"
        )
        print(
            f"memory budget {process_budget().capacity / 2**20:.0f} MiB; codes (4-bit planes) "
            + (f"held: {held.nbytes / 2**20:.1f} MiB" if held else "not held (over budget)")
            + f", first default search {loading * 1e3:.0f} ms\n"
        )
        print("| path | p50 ms | p95 ms | recall@10 |")
        print("| --- | ---: | ---: | ---: |")
        # Every path answers each query in turn (interleaved), so load changes on the shared
        # machine fall on all of them alike.
        paths: list[tuple[str, int | None, bool]] = [("default `search`", None, True)]
        for p in args.probes.split(","):
            paths.append((f"lists (int8 codes), {p} probes", int(p), True))
            if args.float_rows:
                paths.append((f"lists (float32 rows), {p} probes", int(p), False))
        times: list[list[float]] = [[] for _ in paths]
        hits = [0] * len(paths)
        with file.read() as conn:
            for query, expected in zip(queries, truth, strict=True):
                as_list = query.tolist()
                for at, (_, probes, coded) in enumerate(paths):
                    before = time.perf_counter()
                    if probes is None:
                        found = index.search(conn, as_list, 10)
                    else:
                        found = vector_probe.probe(
                            index, conn, pack(as_list), 10, None, probes, codes=coded
                        )
                    times[at].append(time.perf_counter() - before)
                    hits[at] += len(expected & {item for item, _ in found})
        for at, (name, _, _) in enumerate(paths):
            row(name, times[at], hits[at] / (10 * len(queries)))
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\npeak RSS of the process: {rss:.0f} MiB")
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
