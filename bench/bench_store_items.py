"""Store items on every LangGraph store: put, get, filtered search, vector and text search.

Run: `python bench/bench_store_items.py` (10,000 and 100,000 items; `--quick`: 2,000 items
and fewer operations; `--sizes`, `--stores`, `--keep`).

Stores, one at a time, each on a fresh file or database: InMemoryStore, SqliteStore (a file;
its `sqlite3` must load sqlite-vec, pysqlite3's where the stdlib's cannot), PostgresStore (a
throwaway local server; vector search only if the server has pgvector, which Debian's
packages here do not provide), threadloom.Store with an index, and threadloom.Store
without one (its text search, `search_text`, is FTS5). Every indexed store embeds field
`text` with `distance_type` cosine.

The corpus: items of 384 dimensions in clusters of about 500 (a mixture of Gaussians:
each topic's centre is seeded from the topic, each item is its centre plus noise), so the
nearest neighbours of a query are a few items of its topic among hundreds of near ones and
recall is meaningful. Vectors are made with numpy before any store opens (its time is
reported apart); the embedder the stores call only looks an item's vector up by the
number in its text (microseconds, reported per store), so latencies are the stores' own.

Measured per store: loading the items (`batch` of 500 puts; items/s), then put (new items,
one call each), get (random keys), filtered search without a query (`topic` and `kind`,
limit 10), vector search top-10, text search top-10 (threadloom without an index only:
LangGraph's stores ignore `query` without an index), p50 and p95 of each; the bytes on
disk once closed (Postgres: its store tables with indexes and TOAST); recall@10 of the
vector search against an exact search (numpy, cosine) over the same vectors. Ratios are
p50s against SqliteStore's.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import re
import sqlite3
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import _harness as h
import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import BaseStore, PutOp

STORES = (
    "InMemoryStore",
    "SqliteStore",
    "PostgresStore",
    "threadloom.Store",
    "threadloom.Store (no index)",
)
BASELINE = "SqliteStore"
DIMS = 384
CLUSTER = 500  # items per topic
SIGMA = 0.6  # noise per coordinate; centres have unit variance per coordinate
SEED = 20240601
LOAD_BATCH = 500
NAMESPACE = ("memories", "user-1")
KINDS = ("note", "fact", "preference")
COMMON = [
    "the",
    "user",
    "said",
    "that",
    "we",
    "should",
    "remember",
    "this",
    "about",
    "their",
    "work",
    "and",
    "plans",
]
NO_PGVECTOR = (
    "no pgvector on this server (Debian bookworm's packages have none: "
    "`apt-cache search pgvector` finds nothing), so PostgresStore runs without an index"
)


class Corpus:
    """`n` items plus `extra` fresh ones for the put timings, and the queries."""

    def __init__(self, n: int, extra: int, queries: int) -> None:
        started = time.perf_counter()
        self.n, self.total = n, n + extra
        self.topics = max(2, n // CLUSTER)
        centres = np.stack(
            [np.random.default_rng([SEED, t]).standard_normal(DIMS) for t in range(self.topics)]
        ).astype(np.float32)
        rng = np.random.default_rng([SEED, n, 1])
        self.topic_of = np.arange(self.total) % self.topics
        noise = rng.standard_normal((self.total, DIMS), dtype=np.float32) * SIGMA
        self.vectors = centres[self.topic_of] + noise
        self.query_topic = rng.integers(0, self.topics, queries)
        qnoise = rng.standard_normal((queries, DIMS), dtype=np.float32) * SIGMA
        self.query_vectors = centres[self.query_topic] + qnoise
        self.words = rng.integers(0, 40, (self.total, 10))
        self._unit: np.ndarray[Any, Any] | None = None
        self.seconds = time.perf_counter() - started

    def key(self, i: int) -> str:
        return f"m{i:07d}"

    def value(self, i: int) -> dict[str, Any]:
        topic = int(self.topic_of[i])
        words = " ".join(f"t{topic}w{w}" for w in self.words[i])
        text = f"memory {i}: {' '.join(COMMON[i % 7 : i % 7 + 4])} {words}"
        return {"text": text, "topic": f"topic-{topic:04d}", "kind": KINDS[i % 3], "n": i}

    def vector_query(self, q: int) -> str:
        return f"query {q}: what do I know about topic {int(self.query_topic[q])}"

    def text_query(self, q: int) -> str:
        topic = int(self.query_topic[q])
        return f"t{topic}w{q % 40} t{topic}w{(q * 7 + 3) % 40}"

    def filter(self, q: int) -> dict[str, Any]:
        return {"topic": f"topic-{int(self.query_topic[q]):04d}", "kind": KINDS[q % 3]}

    def exact_top(self, q: int, k: int = 10) -> set[str]:
        """The keys of the `k` items (of all `total`) nearest query `q` by cosine similarity."""
        if self._unit is None:
            self._unit = self.vectors / np.linalg.norm(self.vectors, axis=1, keepdims=True)
        query = self.query_vectors[q] / np.linalg.norm(self.query_vectors[q])
        similarity = self._unit @ query
        best = np.argpartition(-similarity, k)[:k]
        return {self.key(int(i)) for i in best}


class LookupEmbedder(Embeddings):
    """Returns the corpus's vector for the item or query number in a text (time recorded)."""

    _ITEM = re.compile(r"memory (\d+):")
    _QUERY = re.compile(r"query (\d+):")

    def __init__(self, corpus: Corpus) -> None:
        self.corpus = corpus
        self.seconds = 0.0

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        # SqliteStore embeds the whole document as JSON (it ignores `fields`) and its queries
        # through this method too; the number is found all the same, so every store is
        # searched over the same vectors.
        return [self._vector(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    def _vector(self, text: str) -> list[float]:
        started = time.perf_counter()
        if found := self._QUERY.search(text):
            out = self.corpus.query_vectors[int(found.group(1))].tolist()
        elif found := self._ITEM.search(text):
            out = self.corpus.vectors[int(found.group(1))].tolist()
        else:
            raise ValueError(f"no item or query number in {text[:80]!r}")
        self.seconds += time.perf_counter() - started
        return out


class Opened:
    """One open store: what it can search and how to measure its bytes once closed."""

    def __init__(self, store: BaseStore, vector: bool, text: bool) -> None:
        self.store, self.vector, self.text = store, vector, text
        self.bytes: int | None = None  # on disk, set when the store is closed
        self.note = ""


def _extension_sqlite() -> Any:
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        return importlib.import_module("pysqlite3.dbapi2")
    except ImportError as exc:
        raise h.Skipped(
            "this Python's sqlite3 cannot load sqlite-vec and pysqlite3 is not installed"
        ) from exc


@contextlib.contextmanager
def open_store(
    name: str, wd: Path, pg: h.PostgresServer, embedder: LookupEmbedder
) -> Iterator[Opened]:
    """Open store `name` on a fresh file or database; close it (and measure bytes) after."""
    index: Any = {"dims": DIMS, "embed": embedder, "fields": ["text"]}
    if name == "InMemoryStore":
        from langgraph.store.memory import InMemoryStore

        yield Opened(InMemoryStore(index=index), vector=True, text=False)
    elif name == "SqliteStore":
        from langgraph.store.sqlite import SqliteStore

        path = wd / "sqlite-store.db"
        conn = _extension_sqlite().connect(str(path), check_same_thread=False, isolation_level=None)
        try:
            store = SqliteStore(conn, index=index)
            store.setup()
            opened = Opened(store, vector=True, text=False)
            yield opened
        finally:
            conn.close()
        opened.bytes = h.at_rest_bytes(str(path))
    elif name == "PostgresStore":
        yield from _postgres_store(pg, index)
    else:
        import threadloom

        with_index = name == "threadloom.Store"
        path = wd / f"threadloom-{'index' if with_index else 'text'}.db"
        try:
            store = threadloom.Store(path, index=index if with_index else None)
        except ModuleNotFoundError as exc:  # the vector index is still being written
            raise h.Skipped(f"threadloom.Store cannot open with an index here ({exc})") from exc
        opened = Opened(store, vector=with_index, text=not with_index)
        try:
            yield opened
        finally:
            store.close()
        opened.bytes = h.at_rest_bytes(str(path))


def _postgres_store(pg: h.PostgresServer, index: Any) -> Iterator[Opened]:
    import psycopg
    from langgraph.store.postgres import PostgresStore

    if pg.dsn is None:
        raise h.Skipped(pg.reason or "no PostgreSQL server")
    dsn = pg.new_database()
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            has_vector = row.fetchone() is not None
        with PostgresStore.from_conn_string(dsn, index=index if has_vector else None) as store:
            store.setup()
            opened = Opened(store, vector=has_vector, text=False)
            opened.note = "" if has_vector else NO_PGVECTOR
            yield opened
        with psycopg.connect(dsn, autocommit=True) as conn:
            # The store's tables with their indexes and TOAST (not the catalogs).
            found = conn.execute(
                "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = 'public' AND c.relkind = 'r'"
            ).fetchone()
        opened.bytes = int(found[0]) if found else 0
    finally:
        pg.drop_database(dsn)


def measure(name: str, opened: Opened, corpus: Corpus, counts: dict[str, int]) -> dict[str, Any]:
    """Load the corpus into `opened.store`, then time each operation; return the figures."""
    store, timings = opened.store, h.Timings()
    rng = np.random.default_rng([SEED, corpus.n, 2])
    started = time.perf_counter()
    for first in range(0, corpus.n, LOAD_BATCH):
        last = min(first + LOAD_BATCH, corpus.n)
        store.batch([PutOp(NAMESPACE, corpus.key(i), corpus.value(i)) for i in range(first, last)])
    load_seconds = time.perf_counter() - started
    h.note(f"  {name}: loaded {corpus.n} items in {load_seconds:.1f} s")

    def timed(op: str, call: Callable[[], Any]) -> Any:
        begun = time.perf_counter()
        result = call()
        timings.add(op, time.perf_counter() - begun)
        return result

    for i in range(corpus.n, corpus.total):
        timed("put", lambda i=i: store.put(NAMESPACE, corpus.key(i), corpus.value(i)))
    for i in rng.integers(0, corpus.n, counts["get"]):
        item = timed("get", lambda i=i: store.get(NAMESPACE, corpus.key(int(i))))
        assert item is not None and item.key == corpus.key(int(i)), f"{name}: get missed {i}"
    for q in range(counts["filter"]):
        found = timed("filter", lambda q=q: store.search(NAMESPACE, filter=corpus.filter(q)))
        assert all(item.value["topic"] == corpus.filter(q)["topic"] for item in found), name
    recalls = []
    if opened.vector:
        for q in range(counts["vector"]):
            hits = timed(
                "vector", lambda q=q: store.search(NAMESPACE, query=corpus.vector_query(q))
            )
            recalls.append(len({item.key for item in hits} & corpus.exact_top(q)) / 10)
    if opened.text:
        for q in range(counts["text"]):
            timed("text", lambda q=q: store.search_text(NAMESPACE, corpus.text_query(q)))
    return {
        "load": corpus.n / load_seconds,
        "timings": timings,
        "recall": sum(recalls) / len(recalls) if recalls else None,
    }


def run_size(
    n: int,
    names: Sequence[str],
    wd: Path,
    pg: h.PostgresServer,
    counts: dict[str, int],
    failures: h.Failures,
) -> str:
    """Every store at `n` items; return the size's Markdown section."""
    corpus = Corpus(n, counts["put"], max(counts["vector"], counts["text"], counts["filter"]))
    h.note(f"{n} items: corpus of {corpus.topics} topics made in {corpus.seconds:.1f} s")
    figures: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    for name in names:
        embedder = LookupEmbedder(corpus)
        with failures.guard(f"{n} items", name):
            with open_store(name, wd / f"{n}", pg, embedder) as opened:
                figures[name] = measure(name, opened, corpus, counts)
                if opened.note:
                    notes.append(f"{name}: {opened.note}.")
            figures[name]["disk"] = opened.bytes
            figures[name]["embed"] = embedder.seconds
    base = figures.get(BASELINE, {}).get("timings")
    rows = []
    for name, f in figures.items():
        t: h.Timings = f["timings"]
        cells: list[Any] = [name, f"{f['load']:,.0f}"]
        for op in ("put", "get", "filter", "vector", "text"):
            cells.extend(h.ms(t.stats(op)))
        cells.append("-" if f["recall"] is None else f"{f['recall']:.3f}")
        cells.append(h.mib(f["disk"]))
        for op in ("put", "get", "filter", "vector"):
            mine = t.stats(op)
            theirs = base.stats(op) if base else None
            cells.append(h.ratio(mine[0] if mine else None, theirs[0] if theirs else None))
        cells.append(f"{f['embed']:.2f} s")
        rows.append(cells)
    headers = ["store", "load items/s"]
    for op in ("put", "get", "filter", "vector top-10", "text top-10"):
        headers += [f"{op} p50", f"{op} p95"]
    headers += ["recall@10", "on disk"]
    headers += [f"{op} vs Sqlite" for op in ("put", "get", "filter", "vector")]
    headers.append("embedder time")
    counted = ", ".join(f"{k} {v}" for k, v in counts.items())
    lines = [
        f"## {n:,} items ({corpus.topics} topics, {DIMS} dims; ms; operations: {counted})",
        "",
        h.table(headers, rows),
        "",
        f"Corpus made in {corpus.seconds:.1f} s (numpy), before any store opened. "
        "Text search: only threadloom.Store without an index has one; LangGraph's stores "
        "ignore `query` without an index.",
        *notes,
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2,000 items, fewer operations")
    p.add_argument("--sizes", help="comma-separated item counts (default 10000,100000)")
    p.add_argument("--stores", default=",".join(STORES), help=f"subset of: {', '.join(STORES)}")
    p.add_argument("--keep", action="store_true", help="keep the files (path on stderr)")
    args = p.parse_args(argv)
    names = [s.strip() for s in args.stores.split(",") if s.strip()]
    unknown = set(names) - set(STORES)
    if unknown:
        p.error(f"unknown store(s) {sorted(unknown)}; choose from {STORES}")
    sizes = [int(s) for s in (args.sizes or ("2000" if args.quick else "10000,100000")).split(",")]
    counts = (
        {"put": 50, "get": 200, "filter": 30, "vector": 20, "text": 30}
        if args.quick
        else {"put": 300, "get": 1000, "filter": 100, "vector": 50, "text": 100}
    )
    command = " ".join(["python bench/bench_store_items.py", *sys.argv[1:]])
    print(f"# Store items: `{command}`")
    print()
    print(h.describe_machine())
    failures = h.Failures()
    with h.workdir(args.keep) as wd, h.postgres_if(names, wanted=("PostgresStore",)) as pg:
        if pg.dsn is not None:
            print(f"PostgreSQL {pg.version}, server defaults.")
        for n in sizes:
            (wd / f"{n}").mkdir()
            print()
            print(run_size(n, names, wd, pg, counts, failures))
            sys.stdout.flush()
    return failures.report()


if __name__ == "__main__":
    raise SystemExit(main())
