"""Hybrid search: the vector and BM25 rankings fused, exact codes found by a weak
embedder, filters, pages and TTLs as in vector search, and each mode's scores."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.embeddings import Embeddings

from threadloom import AsyncStore, Store
from threadloom.engine.items import fusion
from threadloom.errors import InvalidArgumentError

#: Texts the crafted embedder knows, with their vectors (3 dims); others get `OTHER`.
MEANINGS = {
    "feline companion": [1.0, 0.05, 0.0],
    "my cat sleeps all day": [1.0, 0.0, 0.0],
    "rebate for the companion of a feline": [0.0, 1.0, 0.0],
    "a dog in the park": [0.7, 0.7, 0.0],
    "a parrot that talks": [0.6, 0.8, 0.0],
}
OTHER = [0.0, 0.0, 1.0]


class Crafted(Embeddings):
    """Vectors from MEANINGS: what the text means, whatever its words."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [MEANINGS.get(t, OTHER) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return MEANINGS.get(text, OTHER)


class Weak(Embeddings):
    """An embedder that carries nothing of codes: a vector from the text's length."""

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return [1.0, math.sin(len(text)), math.cos(len(text) * 3)]


def _index(embed: Embeddings, **more: Any) -> Any:
    return {"dims": 3, "embed": embed, "fields": ["text"], **more}


@pytest.fixture
def crafted(tmp_path: Path) -> Iterator[Store]:
    """A store of five items: the cat (near the query's meaning, none of its words), the
    rebate (its words, far in meaning) and three distractors."""
    with Store.from_conn_string(tmp_path / "m.db", index=_index(Crafted())) as store:
        for key, text in [
            ("cat", "my cat sleeps all day"),
            ("rebate", "rebate for the companion of a feline"),
            ("dog", "a dog in the park"),
            ("parrot", "a parrot that talks"),
            ("bill", "the electricity bill"),
        ]:
            store.put(("m",), key, {"text": text, "kind": "note" if key != "dog" else "pet"})
        yield store


def _keys(found: list[Any]) -> list[str]:
    return [item.key for item in found]


def test_fusion_finds_what_each_ranking_alone_misses(crafted: Store) -> None:
    """The vector ranking misses the rebate and the text ranking the cat; hybrid has both
    on top."""
    vector = _keys(crafted.search(("m",), query="feline companion", limit=2))
    text = _keys(crafted.search_text(("m",), "feline companion", limit=2))
    hybrid = _keys(crafted.search(("m",), query="feline companion", limit=2, mode="hybrid"))
    assert "rebate" not in vector and "cat" in vector
    assert "cat" not in text and "rebate" in text
    assert sorted(hybrid) == ["cat", "rebate"]


def test_each_mode_scores_as_documented(crafted: Store) -> None:
    """Vector scores are the cosine, text scores the token-set cosine, hybrid scores the
    normalized reciprocal rank fusion of the item's ranks (1-based) in both rankings."""
    vector = crafted.search(("m",), query="feline companion", limit=1, mode="vector")
    assert vector[0].key == "cat"
    assert vector[0].score == pytest.approx(1.0 / math.sqrt(1.0 + 0.05**2), abs=1e-6)
    text = crafted.search(("m",), query="feline companion", mode="text")
    assert [(i.key, i.score) for i in text] == [
        (i.key, i.score) for i in crafted.search_text(("m",), "feline companion")
    ]
    hybrid = crafted.search(("m",), query="feline companion", mode="hybrid")
    scores = {item.key: item.score for item in hybrid}
    near = _keys(crafted.search(("m",), query="feline companion", mode="vector"))
    assert scores["cat"] == pytest.approx(0.5)  # first by vector, no query word
    rank = near.index("rebate") + 1  # first by text
    assert scores["rebate"] == pytest.approx((1 / 61 + 1 / (60 + rank)) / (2 / 61))
    assert scores["dog"] == pytest.approx((1 / (60 + near.index("dog") + 1)) / (2 / 61))
    assert [i.score for i in hybrid] == sorted((i.score or 0.0 for i in hybrid), reverse=True)
    assert all(0.0 < (i.score or 0.0) <= 1.0 for i in hybrid)


def test_first_in_both_rankings_scores_one() -> None:
    """The fused score of an item first in both rankings is 1.0; an exact hit adds 1.0."""
    assert fusion.fuse([[7, 8], [7, 9]])[0] == (7, pytest.approx(1.0))
    assert fusion.fuse([[7, 8], [7, 9]], exact=[9])[0] == (9, pytest.approx(1.0 + 0.5 * 61 / 62))


def test_an_exact_code_is_found_with_an_embedder_that_ignores_it(tmp_path: Path) -> None:
    """`ERR-4711` finds its item first although the vectors rank it anywhere and many
    items share the token `err`; the vector ranking alone does not."""
    with Store.from_conn_string(tmp_path / "m.db", index=_index(Weak())) as store:
        for i in range(60):
            store.put(("logs",), f"k{i}", {"text": f"err {i} retried the job on node {i % 7}"})
        store.put(("logs",), "code", {"text": "ERR-4711: the disk of node 3 is full"})
        vector = _keys(store.search(("logs",), query="ERR-4711", limit=3))
        hybrid = store.search(("logs",), query="ERR-4711", limit=3, mode="hybrid")
        assert "code" not in vector
        assert hybrid[0].key == "code"
        assert 1.0 < (hybrid[0].score or 0.0) <= 2.0
        asked = store.search(("logs",), query="what about ERR-4711 on node 3", mode="hybrid")
        assert "code" in _keys(asked[:3])


def test_the_index_config_makes_hybrid_the_default(tmp_path: Path) -> None:
    """`search_mode` in the index config sets how `search(query=)` ranks; a call's `mode`
    overrides it; an unknown mode is refused."""
    index = _index(Crafted(), search_mode="hybrid")
    with Store.from_conn_string(tmp_path / "m.db", index=index) as store:
        store.put(("m",), "cat", {"text": "my cat sleeps all day"})
        store.put(("m",), "rebate", {"text": "rebate for the companion of a feline"})
        assert sorted(_keys(store.search(("m",), query="feline companion"))) == [
            "cat",
            "rebate",
        ]
        assert _keys(store.search(("m",), query="feline companion", mode="text")) == ["rebate"]
        with pytest.raises(InvalidArgumentError, match="search mode"):
            store.search(("m",), query="x", mode="fuzzy")
    with pytest.raises(InvalidArgumentError, match="search mode"):
        Store(tmp_path / "n.db", index=_index(Crafted(), search_mode="both"))


def test_hybrid_search_filters_namespaces_and_pages(crafted: Store) -> None:
    """Filters and namespace prefixes hold for both rankings; pages neither repeat nor
    skip an item."""
    crafted.put(("other",), "cat2", {"text": "my cat sleeps all day", "kind": "note"})
    found = crafted.search(
        ("m",), query="feline companion", filter={"kind": "note"}, limit=10, mode="hybrid"
    )
    keys = _keys(found)
    assert "dog" not in keys and "cat2" not in keys
    assert set(keys) <= {"cat", "rebate", "parrot", "bill"}
    whole = _keys(crafted.search((), query="a dog feline", limit=10, mode="hybrid"))
    paged = [
        key
        for at in range(0, 10, 2)
        for key in _keys(
            crafted.search((), query="a dog feline", limit=2, offset=at, mode="hybrid")
        )
    ]
    assert paged == whole
    assert "cat2" in whole


def test_hybrid_search_refreshes_ttls(tmp_path: Path) -> None:
    """A hybrid search refreshes the TTL of the items it returns, as a vector search does."""
    ttl = {"default_ttl": 1.0, "refresh_on_read": True}
    with Store.from_conn_string(tmp_path / "m.db", index=_index(Crafted()), ttl=ttl) as store:
        store.put(("m",), "cat", {"text": "my cat sleeps all day"})
        with store.file.read() as conn:
            before = conn.execute("SELECT expires_at FROM store_items").fetchall()[0][0]
        store.search(("m",), query="feline companion", mode="hybrid")
        with store.file.read() as conn:
            after = conn.execute("SELECT expires_at FROM store_items").fetchall()[0][0]
        assert after > before
        store.search(("m",), query="feline companion", mode="hybrid", refresh_ttl=False)
        with store.file.read() as conn:
            kept = conn.execute("SELECT expires_at FROM store_items").fetchall()[0][0]
        assert kept == after


def test_async_store_searches_in_every_mode(tmp_path: Path) -> None:
    """`AsyncStore.asearch(mode=)` ranks as `Store.search(mode=)` does."""

    async def run() -> list[list[str]]:
        path = tmp_path / "m.db"
        async with AsyncStore.from_conn_string(path, index=_index(Crafted())) as store:
            await store.aput(("m",), "cat", {"text": "my cat sleeps all day"})
            await store.aput(("m",), "rebate", {"text": "rebate for the companion of a feline"})
            return [
                _keys(await store.asearch(("m",), query="feline companion", mode=mode))
                for mode in ("vector", "text", "hybrid")
            ]

    vector, text, hybrid = asyncio.run(run())
    assert vector[0] == "cat" and text == ["rebate"] and sorted(hybrid) == ["cat", "rebate"]


def test_hybrid_without_an_index_ranks_by_bm25(tmp_path: Path) -> None:
    """A store without embeddings ranks a hybrid query by its words alone; first place
    scores 0.5, as first in one of the two rankings does."""
    with Store.from_conn_string(tmp_path / "m.db") as store:
        store.put(("m",), "a", {"text": "tea in lisbon"})
        store.put(("m",), "b", {"text": "coffee in porto"})
        found = store.search(("m",), query="porto coffee", mode="hybrid")
        assert [(i.key, i.score) for i in found] == [("b", pytest.approx(0.5))]
        assert len(store.search(("m",), query="porto coffee")) == 2  # LangGraph's listing


def test_the_bm25_shortcut_ranks_as_the_full_join(tmp_path: Path) -> None:
    """The BM25 ranking read from the file's best matches first equals the one joining
    and sorting every match, whether the prefix keeps many of them or few."""
    from langgraph.store.base import PutOp

    from threadloom.engine.format import text
    from threadloom.engine.items import fieldkeys
    from threadloom.engine.items.recall import where

    with Store.from_conn_string(tmp_path / "m.db") as store:
        store.batch(
            [PutOp(("a",), f"k{i}", {"text": f"common word {i % 17} n{i}"}) for i in range(400)]
            + [PutOp(("b",), f"k{i}", {"text": f"common other {i}"}) for i in range(5)]
        )
        tokens = store.items.tokens("common word 3")
        compiled = fieldkeys.compile_filter(None)
        with store.file.read() as conn:
            for prefix in (("a",), ("b",), ()):
                clause, args = where(prefix, compiled, None)
                ranked = [
                    store.recall._matching(
                        conn, text.expression(tokens), clause, args, compiled, None, full, 16
                    )
                    for full in (False, True)
                ]
                assert ranked[0] == ranked[1] and ranked[0], prefix
