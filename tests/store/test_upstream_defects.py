"""Known defects of LangGraph's stores, each shown on the store that has it, and threadloom's fix.

Every defect is a pair of tests: the `upstream` one asserts the wrong answer the installed
LangGraph store gives today (so it fails the day upstream fixes it, and this file must be
updated to say so), the `threadloom` one asserts the right answer from `threadloom.Store`.
Measured on langgraph-checkpoint-sqlite 3.1.2, langgraph-checkpoint-postgres 3.2.0,
langgraph-checkpoint 4.3.2 (InMemoryStore) and PostgreSQL 15.

SqliteStore's vector search loads sqlite-vec, so it needs a `sqlite3` that can load
extensions; Pythons built without it (pyenv's and macOS's defaults) get pysqlite3's
instead, the module SqliteStore users on such Pythons are pointed to. The defects are in
SqliteStore's SQL and Python, not in the SQLite build under it.
"""

from __future__ import annotations

import contextlib
import importlib
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from langgraph.store.base import BaseStore, SearchItem
from langgraph.store.memory import InMemoryStore
from langgraph.store.postgres import PostgresStore
from langgraph.store.sqlite import SqliteStore

from tests.helpers import unavailable
from tests.store._hashing_embedder import DIMS, HashingEmbedder, cosine, dot, l1, l2

ROOT = Path(__file__).resolve().parents[2]
Opener = Callable[..., Any]


def extension_sqlite() -> ModuleType:
    """A DB-API `sqlite3` module whose connections can load extensions (for sqlite-vec)."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    try:
        return importlib.import_module("pysqlite3.dbapi2")
    except ImportError:
        unavailable(
            "this Python's sqlite3 cannot load extensions and pysqlite3 is not installed "
            "(pip install pysqlite3-binary), so SqliteStore cannot load sqlite-vec"
        )


@pytest.fixture
def open_sqlite_store(tmp_path: Path) -> Iterator[Opener]:
    """Opens SqliteStores on fresh files (an extension-capable sqlite3 when indexed)."""
    opened: list[Any] = []

    def open_store(*, index: dict[str, Any] | None = None, ttl: Any = None) -> SqliteStore:
        module = extension_sqlite() if index else sqlite3
        conn = module.connect(
            str(tmp_path / f"sqlite-store-{len(opened)}.db"),
            check_same_thread=False,
            isolation_level=None,
        )
        opened.append(conn)
        store = SqliteStore(conn, index=index, ttl=ttl)  # type: ignore[arg-type]
        store.setup()
        return store

    yield open_store
    for conn in opened:
        conn.close()


@pytest.fixture
def open_threadloom_store(tmp_path: Path) -> Iterator[Opener]:
    """Opens threadloom Stores on fresh files, closed after the test."""
    import threadloom

    with contextlib.ExitStack() as stack:
        count = iter(range(1_000))

        def open_store(*, index: dict[str, Any] | None = None, ttl: Any = None) -> BaseStore:
            path = tmp_path / f"threadloom-store-{next(count)}.db"
            return stack.enter_context(
                threadloom.Store.from_conn_string(str(path), index=index, ttl=ttl)
            )

        yield open_store


@pytest.fixture
def postgres_store(postgres_database: str) -> Iterator[PostgresStore]:
    """A PostgresStore (no index) on a database of its own on the session's server."""
    with PostgresStore.from_conn_string(postgres_database) as store:
        store.setup()
        yield store


def index_config(embedder: HashingEmbedder, distance: str | None = None) -> dict[str, Any]:
    """LangGraph's IndexConfig over field `t`, with PostgresStore's `distance_type`."""
    config: dict[str, Any] = {"dims": DIMS, "embed": embedder, "fields": ["t"]}
    if distance is not None:
        config["distance_type"] = distance
    return config


def keys(results: list[SearchItem]) -> list[str]:
    return [item.key for item in results]


def scores(results: list[SearchItem]) -> dict[str, float | None]:
    return {item.key: item.score for item in results}


# -- SqliteStore: `fields` --------------------------------------------------------------------


def test_upstream_sqlitestore_ignores_fields(open_sqlite_store: Opener) -> None:
    """SqliteStore embeds the whole document as JSON, not the `fields` it was given."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index={"dims": DIMS, "embed": embedder, "fields": ["title"]})
    store.put(("docs",), "a", {"title": "apple pie", "body": "zebra crossing"})
    # It reads the undocumented `text_fields` key instead, so `fields` falls back to "$".
    assert embedder.documents_embedded() == ['{"body": "zebra crossing", "title": "apple pie"}']


def test_threadloom_embeds_only_fields(open_threadloom_store: Opener) -> None:
    """threadloom's Store embeds the text at the configured `fields` and nothing else."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index={"dims": DIMS, "embed": embedder, "fields": ["title"]})
    store.put(("docs",), "a", {"title": "apple pie", "body": "zebra crossing"})
    assert embedder.documents_embedded() == ["apple pie"]
    assert keys(store.search(("docs",), query="apple pie")) == ["a"]
    assert store.search(("docs",), query="zebra crossing")[0].score == pytest.approx(0.0)


# -- SqliteStore: distance types ------------------------------------------------------------

NEAR_FAR = {"near": "apple", "mid": "apple banana", "far": "zebra lion tiger"}
QUERY = "apple apple"


def put_near_far(store: BaseStore) -> None:
    for key, text in NEAR_FAR.items():
        store.put(("docs",), key, {"t": text})


def embedded_vectors(embedder: HashingEmbedder) -> dict[str, list[float]]:
    """What SqliteStore embedded for each NEAR_FAR key (its first documents, in put order)."""
    texts = embedder.documents_embedded()[: len(NEAR_FAR)]
    return dict(zip(NEAR_FAR, map(embedder.vector, texts), strict=True))


def test_upstream_sqlitestore_l2_sorts_farthest_first(open_sqlite_store: Opener) -> None:
    """SqliteStore's `l2` score is the distance itself, sorted descending: farthest first."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index=index_config(embedder, "l2"))
    put_near_far(store)
    results = store.search(("docs",), query=QUERY)
    query = embedder.vector(QUERY)
    distance = {k: l2(query, v) for k, v in embedded_vectors(embedder).items()}
    assert keys(results) == sorted(distance, key=distance.__getitem__, reverse=True)
    assert keys(results)[0] == "far"
    for key, score in scores(results).items():
        assert score == pytest.approx(distance[key], rel=1e-5)


def test_threadloom_l2_scores_minus_distance_nearest_first(open_threadloom_store: Opener) -> None:
    """threadloom's `l2` score is minus the L2 distance (as PostgresStore's), nearest first."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index=index_config(embedder, "l2"))
    put_near_far(store)
    results = store.search(("docs",), query=QUERY)
    query = embedder.vector(QUERY)
    expected = {k: -l2(query, embedder.vector(t)) for k, t in NEAR_FAR.items()}
    assert keys(results) == ["near", "mid", "far"]
    for key, score in scores(results).items():
        assert score == pytest.approx(expected[key], rel=1e-5)


def test_upstream_sqlitestore_inner_product_is_minus_l1(open_sqlite_store: Opener) -> None:
    """SqliteStore's `inner_product` score is minus the L1 distance, not the dot product."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index=index_config(embedder, "inner_product"))
    put_near_far(store)
    results = store.search(("docs",), query=QUERY)
    query = embedder.vector(QUERY)
    vectors = embedded_vectors(embedder)
    for key, score in scores(results).items():
        assert score == pytest.approx(-l1(query, vectors[key]), rel=1e-5)
        assert score != pytest.approx(dot(query, vectors[key]))


def test_threadloom_inner_product_scores_dot_product(open_threadloom_store: Opener) -> None:
    """threadloom's `inner_product` score is the dot product, largest first."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index=index_config(embedder, "inner_product"))
    put_near_far(store)
    results = store.search(("docs",), query=QUERY)
    query = embedder.vector(QUERY)
    expected = {k: dot(query, embedder.vector(t)) for k, t in NEAR_FAR.items()}
    assert [expected[k] for k in keys(results)] == sorted(expected.values(), reverse=True)
    for key, score in scores(results).items():
        assert score == pytest.approx(expected[key], rel=1e-5)


# -- SqliteStore: offset ----------------------------------------------------------------------

RANKED = {f"k{i}": "apple " + " ".join(f"filler{i}x{j}" for j in range(i)) for i in range(10)}


def exact_ranking(embedder: HashingEmbedder, query: str) -> list[str]:
    """RANKED's keys by cosine similarity to `query`, best first (no ties, checked)."""
    q = embedder.vector(query)
    similarity = {k: cosine(q, embedder.vector(t)) for k, t in RANKED.items()}
    assert len(set(similarity.values())) == len(similarity), "the test data must not tie"
    return sorted(similarity, key=similarity.__getitem__, reverse=True)


def test_upstream_sqlitestore_offset_past_twice_limit_is_empty(open_sqlite_store: Opener) -> None:
    """SqliteStore ranks only 2 x limit rows before the offset: offset >= 2 x limit gives []."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index=index_config(embedder))
    for key, text in RANKED.items():
        store.put(("docs",), key, {"t": text})
    assert keys(store.search(("docs",), query="apple", limit=2, offset=0)) == ["k0", "k1"]
    assert len(store.search(("docs",), query="apple", limit=2, offset=3)) == 1
    assert store.search(("docs",), query="apple", limit=2, offset=4) == []
    assert store.search(("docs",), query="apple", limit=2, offset=6) == []


def test_threadloom_offset_pages_through_the_ranking(open_threadloom_store: Opener) -> None:
    """threadloom's pages of a vector search are slices of the exact ranking at any offset."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index=index_config(embedder))
    for key, text in RANKED.items():
        store.put(("docs",), key, {"t": text})
    ranking = exact_ranking(embedder, "apple")
    for offset in (0, 2, 3, 4, 6, 8):
        page = store.search(("docs",), query="apple", limit=2, offset=offset)
        assert keys(page) == ranking[offset : offset + 2], offset


# -- SqliteStore: orphaned vectors ------------------------------------------------------------


def replace_contents(store: BaseStore) -> None:
    """Three items whose old text said "apple" (or "pear") and whose current text does not."""
    store.put(("docs",), "reput", {"t": "apple"})
    store.put(("docs",), "reput", {"t": "zebra"}, index=False)
    store.put(("docs",), "deleted", {"t": "apple"})
    store.delete(("docs",), "deleted")
    store.put(("docs",), "deleted", {"t": "zebra"}, index=False)
    store.put(("docs",), "shrunk", {"tags": ["apple", "pear"]}, index=["tags[*]"])
    store.put(("docs",), "shrunk", {"tags": ["zebra"]}, index=["tags[*]"])
    store.put(("docs",), "current", {"t": "apple"})


def test_upstream_sqlitestore_keeps_orphaned_vectors(open_sqlite_store: Opener) -> None:
    """SqliteStore keeps the vectors of replaced or deleted text: items match words they lost."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index=index_config(embedder))
    replace_contents(store)
    found = scores(store.search(("docs",), query="apple"))
    # The stale vectors score as high as the item that says "apple" today.
    assert found["reput"] == pytest.approx(found["current"])
    assert found["deleted"] == pytest.approx(found["current"])
    assert found["shrunk"] == pytest.approx(1.0)  # its old `tags.0` vector, "apple" alone
    assert scores(store.search(("docs",), query="pear"))["shrunk"] == pytest.approx(1.0)
    # The foreign key's ON DELETE CASCADE never fires: SQLite's foreign keys are off.
    rows = store.conn.execute("SELECT count(*) FROM store_vectors WHERE key = 'deleted'")
    assert rows.fetchone()[0] == 1


def test_threadloom_searches_current_text_only(open_threadloom_store: Opener) -> None:
    """threadloom's vector search scores each item by its current text only."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index=index_config(embedder))
    replace_contents(store)
    for query in ("apple", "pear"):
        found = scores(store.search(("docs",), query=query))
        for key in ("reput", "deleted", "shrunk"):
            # Unindexed items may be listed after the scored ones, without a score.
            assert found.get(key) is None or found[key] < 0.5, (query, key, found)
    assert keys(store.search(("docs",), query="apple"))[0] == "current"


# -- SqliteStore: TTLConfig.omit_expired ------------------------------------------------------

TTL = {"omit_expired": True}


def put_expiring(store: BaseStore) -> None:
    """One item that expires 60 ms after its put, one that never does; then wait past it."""
    store.put(("mem", "old"), "gone", {"v": 1}, ttl=0.001)
    store.put(("mem", "kept"), "kept", {"v": 2})
    time.sleep(0.3)


def test_upstream_sqlitestore_returns_expired_items(open_sqlite_store: Opener) -> None:
    """SqliteStore with `omit_expired` still returns expired items until a sweep deletes them."""
    store = open_sqlite_store(ttl=TTL)
    put_expiring(store)
    assert store.get(("mem", "old"), "gone") is not None
    assert "gone" in keys(store.search(("mem",)))
    assert ("mem", "old") in store.list_namespaces()


def test_threadloom_omits_expired_items(open_threadloom_store: Opener) -> None:
    """threadloom's Store with `omit_expired` hides expired items from get, search and listings."""
    store = open_threadloom_store(ttl=TTL)
    put_expiring(store)
    assert store.get(("mem", "old"), "gone") is None
    assert keys(store.search(("mem",))) == ["kept"]
    assert store.list_namespaces() == [("mem", "kept")]


# -- SqliteStore: queries embedded as documents ---------------------------------------------


def test_upstream_sqlitestore_embeds_queries_as_documents(open_sqlite_store: Opener) -> None:
    """SqliteStore embeds a search query with `embed_documents`, never `embed_query`."""
    embedder = HashingEmbedder()
    store = open_sqlite_store(index=index_config(embedder))
    store.put(("docs",), "a", {"t": "apple"})
    embedder.calls.clear()
    store.search(("docs",), query="which fruit")
    assert embedder.calls == [("embed_documents", ["which fruit"])]


def test_threadloom_embeds_queries_as_queries(open_threadloom_store: Opener) -> None:
    """threadloom embeds a search query with `embed_query` (asymmetric models need it)."""
    embedder = HashingEmbedder()
    store = open_threadloom_store(index=index_config(embedder))
    store.put(("docs",), "a", {"t": "apple"})
    embedder.calls.clear()
    store.search(("docs",), query="which fruit")
    assert embedder.calls == [("embed_query", ["which fruit"])]


# -- SqliteStore: setup() needs enable_load_extension ---------------------------------------


class NoExtensionLoading(sqlite3.Connection):
    """A connection as a Python built without loadable extensions has (pyenv's default).

    A subclass cannot delete the method, but it can make the attribute lookup fail the way
    it fails on those builds, which is all SqliteStore does with it.
    """

    @property
    def enable_load_extension(self) -> Any:
        raise AttributeError("'sqlite3.Connection' object has no attribute 'enable_load_extension'")


def test_upstream_sqlitestore_setup_needs_load_extension(tmp_path: Path) -> None:
    """SqliteStore with an index cannot set up on a sqlite3 that cannot load extensions."""
    conn = sqlite3.connect(str(tmp_path / "s.db"), factory=NoExtensionLoading)
    try:
        assert not hasattr(conn, "enable_load_extension")
        store = SqliteStore(conn, index=index_config(HashingEmbedder()))
        with pytest.raises(AttributeError, match="enable_load_extension"):
            store.setup()
        SqliteStore(conn).setup()  # without an index it needs no extension
    finally:
        conn.close()


NO_EXTENSIONS_SCRIPT = """
import sys

# Neither sqlite-vec nor the stdlib's sqlite3 may be used: their import fails.
for name in ("sqlite3", "_sqlite3", "sqlite_vec"):
    sys.modules[name] = None

import threadloom
from tests.store._hashing_embedder import DIMS, HashingEmbedder

index = {"dims": DIMS, "embed": HashingEmbedder(), "fields": ["t"]}
with threadloom.Store.from_conn_string(sys.argv[1], index=index) as store:
    store.put(("docs",), "a", {"t": "apple"})
    store.put(("docs",), "b", {"t": "zebra"})
    hits = store.search(("docs",), query="apple")
    print(hits[0].key, round(hits[0].score, 6))
"""


def test_threadloom_vector_search_loads_no_extension(tmp_path: Path) -> None:
    """threadloom's vector search runs with neither sqlite-vec nor the stdlib sqlite3 importable."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(NO_EXTENSIONS_SCRIPT), str(tmp_path / "t.db")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["a", "1.0"]


# -- SqliteStore: integers past 2**53 in filters --------------------------------------------

BIG = 2**53


def put_big_numbers(store: BaseStore) -> None:
    store.put(("n",), "big", {"n": BIG})
    store.put(("n",), "big+1", {"n": BIG + 1})


def test_upstream_sqlitestore_filters_big_ints_as_real(open_sqlite_store: Opener) -> None:
    """SqliteStore casts filter integers to REAL: 2**53 + 1 finds the item holding 2**53."""
    store = open_sqlite_store()
    put_big_numbers(store)
    # float(2**53 + 1) == 2**53, and SQLite compares the stored integers with it exactly.
    assert keys(store.search(("n",), filter={"n": BIG + 1})) == ["big"]
    assert keys(store.search(("n",), filter={"n": {"$eq": BIG + 1}})) == ["big"]
    # The range operators CAST the stored value to REAL too: 2**53 + 1 is not above 2**53.
    assert keys(store.search(("n",), filter={"n": {"$gt": BIG}})) == []


def test_threadloom_filters_big_ints_exactly(open_threadloom_store: Opener) -> None:
    """threadloom compares integer filters exactly, past 2**53 too."""
    store = open_threadloom_store()
    put_big_numbers(store)
    assert keys(store.search(("n",), filter={"n": BIG + 1})) == ["big+1"]
    assert keys(store.search(("n",), filter={"n": {"$eq": BIG + 1}})) == ["big+1"]
    assert keys(store.search(("n",), filter={"n": BIG})) == ["big"]
    assert keys(store.search(("n",), filter={"n": {"$gt": BIG}})) == ["big+1"]


# -- PostgresStore: range operators compare text --------------------------------------------

NUMBERS = (2, 9, 10, 11, 100)


def range_results(store: BaseStore) -> dict[str, list[int]]:
    for n in NUMBERS:
        store.put(("n",), f"k{n}", {"n": n})
    return {
        op: sorted(item.value["n"] for item in store.search(("n",), filter={"n": {op: 10}}))
        for op in ("$gt", "$gte", "$lt", "$lte")
    }


def test_upstream_postgresstore_compares_numbers_as_text(postgres_store: PostgresStore) -> None:
    """PostgresStore's $gt/$gte/$lt/$lte compare `value->>key` as text: 9 >= 10, 2 >= 10."""
    assert range_results(postgres_store) == {
        "$gt": [2, 9, 11, 100],
        "$gte": [2, 9, 10, 11, 100],
        "$lt": [],
        "$lte": [10],
    }


def test_threadloom_compares_numbers_as_numbers(open_threadloom_store: Opener) -> None:
    """threadloom's range operators compare numbers numerically."""
    assert range_results(open_threadloom_store()) == {
        "$gt": [11, 100],
        "$gte": [10, 11, 100],
        "$lt": [2, 9],
        "$lte": [2, 9, 10],
    }


# -- Text search without an index -----------------------------------------------------------
# Not a defect: LangGraph's stores ignore `query` without an index, and threadloom's
# `search(query=)` does the same (a drop-in); its word ranking is `search_text`.

MEMORIES = {
    "exact": "green tea",
    "longer": "I like green tea in the morning",
    "other": "the meeting is on friday",
}


def put_memories(store: BaseStore) -> None:
    for key, text in MEMORIES.items():
        store.put(("memories",), key, {"text": text})


@pytest.mark.parametrize("name", ["InMemoryStore", "SqliteStore", "PostgresStore"])
def test_upstream_text_query_without_index_is_ignored(
    name: str, open_sqlite_store: Opener, request: pytest.FixtureRequest
) -> None:
    """LangGraph's stores without an index ignore `query`: every item, every score None."""
    if name == "InMemoryStore":
        store: BaseStore = InMemoryStore()
    elif name == "SqliteStore":
        store = open_sqlite_store()
    else:
        store = request.getfixturevalue("postgres_store")
    put_memories(store)
    results = store.search(("memories",), query="green tea")
    assert sorted(keys(results)) == sorted(MEMORIES)  # "other" shares no word with the query
    assert [item.score for item in results] == [None, None, None]


def test_threadloom_query_without_index_is_ignored_as_upstream(
    open_threadloom_store: Opener,
) -> None:
    """threadloom's Store without an index answers `search(query=)` as SqliteStore does:
    every item under the prefix passing the filter, newest first, every score None."""
    store = open_threadloom_store()
    put_memories(store)
    results = store.search(("memories",), query="green tea")
    assert keys(results) == ["other", "longer", "exact"]  # newest update first
    assert [item.score for item in results] == [None, None, None]
    limited = store.search(("memories",), query="green tea", filter={"text": "green tea"})
    assert keys(limited) == ["exact"]
    assert keys(store.search(("memories",), query="zebra", limit=1, offset=1)) == ["longer"]


def test_threadloom_text_scores_rank_hits(open_threadloom_store: Opener) -> None:
    """threadloom's full-text scores are in (0, 1], 1.0 only for the exact tokens, best first."""
    store = open_threadloom_store()
    put_memories(store)
    results = store.search_text(("memories",), "green tea")
    found = scores(results)
    assert keys(results)[:2] == ["exact", "longer"]
    assert found["exact"] == pytest.approx(1.0)
    assert found["longer"] is not None and 0.0 < found["longer"] < 1.0
    # An item sharing no word is no hit; if a store lists it at all, it comes last.
    assert "other" not in found or (found["other"] or 0.0) < found["longer"]
    ranked = [item.score or 0.0 for item in results]
    assert ranked == sorted(ranked, reverse=True)
