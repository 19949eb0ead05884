"""Vector search through the Store: fields per item, the true similarity as the score,
filters and deep offsets without lost results, no stale vectors, embedding outside the
write transaction."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import blake3
import pytest
from langchain_core.embeddings import Embeddings

from threadloom import AsyncStore, Store
from threadloom.engine.checks.verify import verify
from threadloom.errors import ThreadloomError, UnembeddedItemsWarning

DIMS = 16


def embed(text: str) -> list[float]:
    """A deterministic bag-of-words embedding: each token adds a hashed direction."""
    vector = [0.0] * DIMS
    for token in text.lower().split():
        digest = blake3.blake3(token.encode()).digest(length=DIMS)
        for i, byte in enumerate(digest):
            vector[i] += (byte - 127.5) / 127.5
    return vector


class Recorder(Embeddings):
    """Embeds with `embed`, recording which method saw which texts."""

    def __init__(self) -> None:
        self.documents: list[str] = []
        self.queries: list[str] = []
        self.during: Any = None

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        if self.during is not None:
            self.during()
        self.documents.extend(texts)
        return [embed(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        self.queries.append(text)
        return embed(text)


def similarity(a: list[float], b: list[float], metric: str) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    if metric == "inner_product":
        return dot
    if metric == "l2":
        return -math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b, strict=True)))
    na, nb = math.sqrt(sum(x * x for x in a)), math.sqrt(sum(y * y for y in b))
    return dot / (na * nb) if na and nb else 0.0


WORDS = [
    "tea",
    "coffee",
    "lisbon",
    "porto",
    "train",
    "museum",
    "rain",
    "sun",
    "river",
    "bridge",
    "cat",
    "dog",
]


def sentence(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in (1, 3, 7, 11)[: 1 + i % 4])


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


def opened(path: Path, recorder: Recorder, metric: str = "cosine", **more: Any) -> Store:
    index = {"dims": DIMS, "embed": recorder, "fields": ["text"], "distance_type": metric}
    return Store(path, index=index, **more)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path, recorder: Recorder) -> Iterator[Store]:
    made = opened(tmp_path / "v.db", recorder)
    try:
        yield made
    finally:
        made.close()


@pytest.mark.parametrize("metric", ["cosine", "l2", "inner_product"])
def test_scores_are_the_true_similarity_best_first(
    tmp_path: Path, recorder: Recorder, metric: str
) -> None:
    with opened(tmp_path / "m.db", recorder, metric) as store:
        texts = {f"k{i}": sentence(i) for i in range(60)}
        for key, text in texts.items():
            store.put(("docs",), key, {"text": text, "n": int(key[1:])})
        query = "tea in lisbon by train"
        hits = store.search(("docs",), query=query, limit=60)
        expected = sorted(
            ((similarity(embed(query), embed(t), metric), k) for k, t in texts.items()),
            key=lambda p: -p[0],
        )
        assert [h.score for h in hits] == pytest.approx([s for s, _ in expected], abs=1e-5)
        assert {h.key for h in hits} == set(texts)
        assert recorder.queries == [query]  # queries go through embed_query
        assert query not in recorder.documents


def test_fields_are_honoured_per_item(store: Store, recorder: Recorder) -> None:
    store.put(("d",), "a", {"text": "tea lisbon", "secret": "never embedded"})
    store.put(("d",), "b", {"title": "coffee porto", "text": "rain"}, index=["title"])
    store.put(("d",), "c", {"text": "tea lisbon"}, index=False)
    assert "never embedded" not in " ".join(recorder.documents)
    assert recorder.documents == ["tea lisbon", "coffee porto"]
    hits = store.search(("d",), query="coffee porto")
    assert hits[0].key == "b" and hits[0].score == pytest.approx(1.0, abs=1e-6)
    assert "c" not in {h.key for h in hits}  # index=False: not in vector search


def test_array_fields_score_their_best_element(tmp_path: Path, recorder: Recorder) -> None:
    index = {"dims": DIMS, "embed": recorder, "fields": ["tags[*]"]}
    with Store.from_conn_string(tmp_path / "a.db", index=index) as store:  # type: ignore[arg-type]
        store.put(("d",), "a", {"tags": ["cat dog", "river bridge"]})
        store.put(("d",), "b", {"tags": ["sun rain"]})
        hits = store.search(("d",), query="river bridge")
        assert hits[0].key == "a" and hits[0].score == pytest.approx(1.0, abs=1e-6)


def test_filters_and_deep_offsets_lose_nothing(store: Store) -> None:
    for i in range(400):
        store.put(("docs", str(i % 5)), f"k{i}", {"text": sentence(i), "n": i})
    query = "museum rain river"
    full = store.search(("docs",), query=query, limit=400)
    assert len(full) == 400
    pages = [store.search(("docs",), query=query, limit=7, offset=o) for o in range(0, 420, 7)]
    assert [h.key for p in pages for h in p] == [h.key for h in full]
    deep = store.search(("docs",), query=query, limit=10, offset=25)
    assert [h.key for h in deep] == [h.key for h in full[25:35]]
    rare = store.search(("docs",), query=query, filter={"n": {"$lt": 12}}, limit=50)
    assert [h.key for h in rare] == [h.key for h in full if h.value["n"] < 12]
    one = store.search(("docs", "3"), query=query, limit=400)
    assert [h.key for h in one] == [h.key for h in full if h.namespace == ("docs", "3")]


def test_a_deleted_or_reindexed_item_leaves_no_stale_vector(store: Store) -> None:
    store.put(("d",), "a", {"text": "cat dog"})
    store.put(("d",), "b", {"text": "sun rain"})
    store.put(("d",), "a", {"text": "river bridge"})
    hits = store.search(("d",), query="cat dog", limit=10)
    assert {h.key: h.value["text"] for h in hits} == {"a": "river bridge", "b": "sun rain"}
    assert hits[0].score < 0.99
    store.delete(("d",), "b")
    assert [h.key for h in store.search(("d",), query="sun rain")] == ["a"]
    with store.file.connection() as conn:
        assert conn.execute("SELECT count(*) FROM store_vectors").fetchall() == [(1,)]
    assert verify(store.file).sound


def test_embedding_happens_outside_the_write_transaction(store: Store, recorder: Recorder) -> None:
    """While the embedder runs, another connection can write the file at once."""
    path = store.file.path

    def write_meanwhile() -> None:
        other = apsw.Connection(path)
        other.set_busy_timeout(0)
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
        other.close()

    recorder.during = write_meanwhile
    store.put(("d",), "a", {"text": "tea"})
    assert store.get(("d",), "a") is not None


def test_a_wrong_embedding_size_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    def short(texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0] for _ in texts]

    index = {"dims": DIMS, "embed": short}
    with Store.from_conn_string(tmp_path / "w.db", index=index) as store:  # type: ignore[arg-type]
        with pytest.raises((ValueError, ThreadloomError), match=str(DIMS)):
            store.put(("d",), "a", {"text": "tea"})
        assert store.get(("d",), "a") is None


def test_a_file_indexed_at_other_dims_is_refused(tmp_path: Path, recorder: Recorder) -> None:
    with opened(tmp_path / "d.db", recorder) as store:
        store.put(("d",), "a", {"text": "tea"})
    index = {"dims": DIMS * 2, "embed": recorder}
    with pytest.raises(ThreadloomError, match=str(DIMS)):
        Store(tmp_path / "d.db", index=index)  # type: ignore[arg-type]


def test_async_store_with_an_async_embedding_function(tmp_path: Path) -> None:
    calls: list[int] = []

    async def aembed(texts: list[str]) -> list[list[float]]:
        calls.append(len(texts))
        await asyncio.sleep(0)
        return [embed(t) for t in texts]

    async def main() -> None:
        index = {"dims": DIMS, "embed": aembed, "fields": ["text"]}
        async with AsyncStore.from_conn_string(tmp_path / "as.db", index=index) as store:  # type: ignore[arg-type]
            await asyncio.gather(
                *(store.aput(("d",), f"k{i}", {"text": sentence(i)}) for i in range(30))
            )
            hits = await store.asearch(("d",), query=sentence(4), limit=3)
            assert hits[0].value["text"] == sentence(4)
            assert hits[0].score == pytest.approx(1.0, abs=1e-6)

    asyncio.run(main())
    # Concurrent puts were batched; a text repeated within a batch is embedded once.
    distinct = len({sentence(i) for i in range(30)})
    assert sum(calls) >= distinct + 1 and len(calls) < 31


def test_a_store_without_embeddings_leaves_no_stale_vector(
    tmp_path: Path, recorder: Recorder
) -> None:
    path = tmp_path / "mixed.db"
    with opened(path, recorder) as store:
        store.put(("d",), "a", {"text": "cat dog"})
        store.put(("d",), "b", {"text": "sun rain"})
    with Store.from_conn_string(path) as plain:
        plain.put(("d",), "a", {"text": "river bridge"})
    with opened(path, recorder) as store:
        with pytest.warns(UnembeddedItemsWarning, match="1 items under d have no vector"):
            hits = store.search(("d",), query="cat dog")
        assert [h.key for h in hits] == ["b"]
        assert verify(store.file).sound


def test_verify_names_a_damaged_vector_and_a_read_raises_no_wrong_answer(
    tmp_path: Path, recorder: Recorder
) -> None:
    path = tmp_path / "dv.db"
    with opened(path, recorder) as store:
        for i in range(20):
            store.put(("d",), f"k{i}", {"text": sentence(i)})
    raw = apsw.Connection(str(path))
    raw.execute(
        "UPDATE store_vectors SET vector = substr(vector, 1, 12) WHERE rowid = "
        "(SELECT min(rowid) FROM store_vectors)"
    )
    raw.execute("UPDATE store_lists SET size = size + 3 WHERE id = 0")
    raw.close()
    with opened(path, recorder) as store:
        report = verify(store.file)
        lines = [p.detail for p in report.problems if p.check == "store"]
        assert not report.sound and any("size" in line for line in lines), lines
        with pytest.raises(ThreadloomError):
            store.search(("d",), query="tea", limit=20)


def test_a_vector_too_large_for_float32_is_refused(tmp_path: Path) -> None:
    from threadloom.errors import InvalidValueError

    def huge(texts: list[str]) -> list[list[float]]:
        return [[3e38] + [0.0] * (DIMS - 1) for _ in texts]

    index = {"dims": DIMS, "embed": huge}
    with Store.from_conn_string(tmp_path / "h.db", index=index) as store:  # type: ignore[arg-type]
        with pytest.raises(InvalidValueError, match="overflow"):
            store.put(("d",), "a", {"text": "tea"})
        assert store.get(("d",), "a") is None


def test_a_batch_failing_in_its_transaction_leaves_no_wrong_field_numbers(
    store: Store,
) -> None:
    """The batch numbers a new field path, then fails inside its transaction (a field
    indexed twice); the rolled-back number goes to the next new path, and filters on
    both paths still answer right."""
    from langgraph.store.base import PutOp

    from threadloom.errors import InvalidValueError

    with pytest.raises(InvalidValueError, match="twice"):
        store.batch([PutOp(("n",), "k1", {"colour": "red", "text": "tea"}, index=["text", "text"])])
    assert store.get(("n",), "k1") is None
    store.put(("n",), "k5", {"size": "red", "text": "cat"})
    store.put(("n",), "k6", {"colour": "red", "text": "dog"})
    assert [i.key for i in store.search(("n",), filter={"colour": "red"})] == ["k6"]
    assert [i.key for i in store.search(("n",), filter={"size": "red"})] == ["k5"]
    assert verify(store.file).sound


def test_a_prefix_holding_every_item_skips_the_checks_and_never_leaks(store: Store) -> None:
    """A search under a prefix that holds every item of the file checks no candidate (the
    usual one-namespace file); once another namespace holds an item, nearer or not, the
    search keeps it out, down to a namespace whose name only starts like the prefix's."""
    for i in range(60):
        store.put(("notes", "a"), f"k{i}", {"text": sentence(i)})
    query = "museum rain river"
    expected = store.search(("notes",), query=query, limit=5)
    statements: list[str] = []

    def trace(_cursor: Any, sql: str, _bindings: Any) -> bool:
        statements.append(sql)
        return True

    with store.file.connection() as conn:
        conn.exec_trace = trace
        try:
            assert store.search(("notes",), query=query, limit=5) == expected
        finally:
            conn.exec_trace = None
    # Items are read twice: the probe of the other namespaces and the found items' rows.
    reads = [s for s in statements if "FROM store_items x" in s]
    assert len(reads) == 2 and "EXISTS" in reads[0] and "x.key" in reads[1]
    for name in (("other",), ("notesy",), ("note",)):
        store.put(name, "near", {"text": query})
        found = store.search(("notes",), query=query, limit=5)
        assert [h.key for h in found] == [h.key for h in expected]
        assert store.search((), query=query, limit=1)[0].key == "near"
        store.delete(name, "near")
