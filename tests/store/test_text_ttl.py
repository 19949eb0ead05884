"""Full-text search with scores a dedup rule can use, and TTLs honoured before a sweep."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from langgraph.store.base import TTLConfig

from threadloom import AsyncStore, Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.from_conn_string(tmp_path / "t.db") as opened:
        yield opened


FACTS = {
    "coffee": "The user drinks black coffee every morning",
    "coffee2": "user drinks coffee",
    "tea": "The user dislikes green tea",
    "long": "A long note that mentions coffee once among many other words about travel "
    "plans, hotels, trains, museums and the weather in the mountains",
}


def test_text_scores_order_hits_and_mean_token_overlap(store: Store) -> None:
    for key, text in FACTS.items():
        store.put(("u", "facts"), key, {"text": text})
    hits = store.search_text(("u",), "the user drinks black coffee every morning")
    scores = {i.key: i.score for i in hits}
    assert scores["coffee"] == pytest.approx(1.0)  # the same tokens: a duplicate
    assert all(s is not None and 0 < s <= 1 for s in scores.values())
    assert [i.key for i in hits][:2] == ["coffee", "coffee2"]
    assert scores["long"] is not None and scores["long"] < 0.3
    assert len(set(scores.values())) == len(scores)  # not one constant score
    # Ochiai over token sets: |Q∩D| / sqrt(|Q|·|D|)
    assert scores["coffee2"] == pytest.approx(3 / math.sqrt(7 * 3))


def test_the_dedup_rule_writes_new_facts_and_skips_duplicates(store: Store) -> None:
    """ "score >= 0.9 means duplicate" (the rule that silently drops every memory on a store
    scoring 1 for every hit) records new facts and skips only re-worded repeats."""
    written = []
    for fact in [
        "Ada prefers tea over coffee",
        "ada prefers TEA over coffee!",
        "Ada lives in Lisbon",
        "Ada's sister lives in Porto",
    ]:
        hits = store.search_text(("ada",), fact, limit=1)
        if hits and hits[0].score is not None and hits[0].score >= 0.9:
            continue
        store.put(("ada",), str(len(written)), {"text": fact})
        written.append(fact)
    assert written == [
        "Ada prefers tea over coffee",
        "Ada lives in Lisbon",
        "Ada's sister lives in Porto",
    ]


def test_fields_and_per_put_index_choose_the_indexed_text(tmp_path: Path) -> None:
    from threadloom.langgraph.store import Store as S

    with S.from_conn_string(tmp_path / "f.db") as store:
        store.put(("d",), "a", {"title": "rust", "body": "python"}, index=["title"])
        store.put(("d",), "b", {"title": "python"}, index=False)
        store.put(("d",), "c", {"title": "go", "tags": ["python", "web"]})
        assert [i.key for i in store.search_text(("d",), "python")] == ["c"]
        assert [i.key for i in store.search_text(("d",), "rust")] == ["a"]
        assert [i.key for i in store.search_text(("d",), "title")] == []  # keys are not text
        assert [i.key for i in store.search_text(("d",), "python", filter={"title": "go"})] == ["c"]


def test_text_pages_are_stable(store: Store) -> None:
    for i in range(30):
        store.put(("n",), f"k{i}", {"text": "shared " + " ".join(f"w{j}" for j in range(i % 7))})
    pages = [store.search_text(("n",), "shared w1", limit=7, offset=o) for o in range(0, 35, 7)]
    keys = [i.key for p in pages for i in p]
    assert len(keys) == len(set(keys)) == 30
    flat = [i.score for p in pages for i in p]
    assert flat == sorted(flat, reverse=True)


def test_text_ranking_is_the_documented_cosine_over_a_mixed_corpus(store: Store) -> None:
    """Every item sharing a token is ranked by |Q∩D| / sqrt(|Q|·|D|), then newest first,
    under a prefix and a filter, as a Python reading of docs/store.md ranks them."""
    from langgraph.store.base import PutOp

    words = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"]
    texts = {
        f"k{i:03d}": " ".join(words[j] for j in range(7) if (i * 5 + 3) % (j + 2) == 0)
        + f" n{i % 11}"
        for i in range(120)
    }
    store.batch(
        [
            PutOp(("c", str(i % 2)), k, {"text": t, "odd": i % 3})
            for i, (k, t) in enumerate(texts.items())
        ]
    )
    for query, prefix, filter in [
        ("alpha beta n3", ("c",), None),
        ("gamma gamma zeta unknown", ("c", "1"), None),
        ("eta n7 delta", ("c",), {"odd": 1}),
    ]:
        q = set(query.split())
        kept = [
            (i, k)
            for i, k in enumerate(texts)
            if (not prefix[1:] or str(i % 2) == prefix[1])
            and (filter is None or i % 3 == filter["odd"])
            and q & set(texts[k].split())
        ]
        # Same updated_at order as the put order within one batch: newest = highest row id.
        expected = sorted(
            kept,
            key=lambda p: (
                -len(q & set(texts[p[1]].split()))
                / math.sqrt(len(q) * len(set(texts[p[1]].split()))),
                -p[0],
            ),
        )
        found = store.search_text(prefix, query, filter=filter, limit=200)
        assert [i.key for i in found] == [k for _, k in expected], query
        for item, (_, key) in zip(found, expected, strict=True):
            d = set(texts[key].split())
            assert item.score == pytest.approx(len(q & d) / math.sqrt(len(q) * len(d)))


def test_text_search_makes_no_python_call_per_matching_item(store: Store) -> None:
    """A word most items hold costs no Python work per match: a search matching 400
    items runs as many Python calls as one matching 20."""
    import sys

    from langgraph.store.base import PutOp

    store.batch([PutOp(("m",), f"c{i}", {"text": f"common filler{i}"}) for i in range(400)])
    store.batch([PutOp(("m",), f"r{i}", {"text": f"rare filler{i}"}) for i in range(20)])
    calls = {}
    for word in ("rare", "common", "rare"):
        count = 0

        def profile(frame: object, event: str, arg: object) -> None:
            nonlocal count
            count += event in ("call", "c_call")

        sys.setprofile(profile)
        try:
            found = store.search_text(("m",), word, limit=5)
        finally:
            sys.setprofile(None)
        assert len(found) == 5
        calls[word] = count
    assert calls["common"] < calls["rare"] + 50, calls


def test_omit_expired_hides_items_before_any_sweep(tmp_path: Path) -> None:
    ttl = TTLConfig(default_ttl=0.01, omit_expired=True, refresh_on_read=False)  # 600 ms
    with Store.from_conn_string(tmp_path / "ttl.db", ttl=ttl) as store:
        store.put(("s",), "short", {"text": "soon gone"})
        store.put(("s",), "kept", {"text": "stays here"}, ttl=None)
        store.put(("s",), "fraction", {"text": "gone later"}, ttl=0.1)  # 6 s
        assert store.get(("s",), "short") is not None
        time.sleep(0.7)
        assert store.get(("s",), "short") is None
        assert {i.key for i in store.search(("s",))} == {"kept", "fraction"}
        assert {i.key for i in store.search_text(("s",), "soon")} == set()
        store.put(("t",), "gone", {"v": 1})
        time.sleep(0.7)
        assert store.list_namespaces() == [("s",)]
        assert store.sweep_ttl() == 2
        assert store.sweep_ttl() == 0


def test_without_omit_expired_items_stay_until_swept(tmp_path: Path) -> None:
    with Store.from_conn_string(tmp_path / "ttl.db", ttl=TTLConfig(default_ttl=0.001)) as store:
        store.put(("s",), "a", {"v": 1})
        time.sleep(0.1)
        assert store.get(("s",), "a", refresh_ttl=False) is not None
        assert store.sweep_ttl() == 1
        assert store.get(("s",), "a") is None


def test_reads_refresh_the_ttl(tmp_path: Path) -> None:
    ttl = TTLConfig(default_ttl=0.005, omit_expired=True, refresh_on_read=True)  # 300 ms
    with Store.from_conn_string(tmp_path / "ttl.db", ttl=ttl) as store:
        store.put(("s",), "read", {"v": 1})
        store.put(("s",), "unread", {"v": 2})
        for _ in range(4):
            time.sleep(0.1)
            assert store.get(("s",), "read") is not None
            assert store.search(("s",), filter={"v": 1})
        assert store.get(("s",), "unread", refresh_ttl=False) is None
        assert store.get(("s",), "read") is not None


def test_the_background_sweeper_starts_and_stops(tmp_path: Path) -> None:
    ttl = TTLConfig(default_ttl=0.0005, sweep_interval_minutes=0.001)  # type: ignore[typeddict-item]
    with Store.from_conn_string(tmp_path / "ttl.db", ttl=ttl) as store:
        store.put(("s",), "a", {"v": 1})
        store.start_ttl_sweeper()
        deadline = time.time() + 5
        while store.get(("s",), "a", refresh_ttl=False) is not None and time.time() < deadline:
            time.sleep(0.05)
        assert store.get(("s",), "a", refresh_ttl=False) is None
        assert store.stop_ttl_sweeper(timeout=2)


def test_async_store_batches_concurrent_calls_off_the_loop(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncStore.from_conn_string(tmp_path / "a.db") as store:
            ticks = 0
            running = True

            async def heartbeat() -> None:
                nonlocal ticks
                while running:
                    ticks += 1
                    await asyncio.sleep(0.001)

            beat = asyncio.create_task(heartbeat())
            await asyncio.gather(
                *(
                    store.aput(("u", str(i % 4)), f"k{i}", {"text": f"fact {i}", "i": i})
                    for i in range(200)
                )
            )
            await store.aput(("big",), "b", {"blob": "y" * (4 << 20)})
            running = False
            await beat
            assert ticks > 5  # the loop kept running while the file was written
            got = await asyncio.gather(
                *(store.aget(("u", str(i % 4)), f"k{i}") for i in range(200))
            )
            assert [g.value["i"] for g in got if g is not None] == list(range(200))
            hits = await store.asearch_text(("u",), "fact 7")
            assert hits[0].key == "k7" and hits[0].score == pytest.approx(1.0)
            assert len(await store.alist_namespaces(prefix=("u",))) == 4
            await store.adelete(("big",), "b")
            assert await store.aget(("big",), "b") is None
            assert await store.apurge(("u",)) == 200

    asyncio.run(main())


def test_the_async_sweeper_is_a_task(tmp_path: Path) -> None:
    ttl = TTLConfig(default_ttl=0.0005, sweep_interval_minutes=0.001)  # type: ignore[typeddict-item]

    async def main() -> None:
        async with AsyncStore.from_conn_string(tmp_path / "s.db", ttl=ttl) as store:
            await store.aput(("s",), "a", {"v": 1})
            task = await store.start_ttl_sweeper()
            assert await store.start_ttl_sweeper() is task
            for _ in range(100):
                if await store.aget(("s",), "a", refresh_ttl=False) is None:
                    break
                await asyncio.sleep(0.05)
            assert await store.aget(("s",), "a", refresh_ttl=False) is None
            assert await store.stop_ttl_sweeper(timeout=2)
            assert task.done()

    asyncio.run(main())


def _embed(texts: list[str]) -> list[list[float]]:
    return [[1.0, 0.0, 0.0] for _ in texts]


REFUSED: list[dict[str, object]] = [
    {"ttl": {"default_ttl": "30"}},
    {"ttl": {"default_ttl": 0}},
    {"ttl": {"default_tll": 30}},  # misspelt: dropped without a word before
    {"ttl": {"sweep_interval_minutes": -1}},
    {"ttl": {"refresh_on_read": "no"}},
    {"ttl": "30m"},
    {"text": "yes"},
    {"index": {"dims": 3}},
    {"index": {"dims": -3, "embed": _embed}},
    {"index": {"dims": "384", "embed": _embed}},
    {"index": {"dims": True, "embed": _embed}},
    {"index": {"dims": 3, "embed": _embed, "distance_type": "hamming"}},
    {"index": {"dims": 3, "embed": _embed, "search_mode": "fuzzy"}},
]


@pytest.mark.parametrize("settings", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_refused_settings_say_why_and_create_no_file(
    tmp_path: Path, settings: dict[str, object]
) -> None:
    """A setting the Store cannot honour is refused with a message naming it, before the
    file is made (a rejected configuration used to leave a new empty file behind)."""
    path = tmp_path / "refused.db"
    with pytest.raises((TypeError, ValueError)) as raised:
        Store(path, **settings)  # type: ignore[arg-type]
    assert str(raised.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == []

    async def open_async() -> None:
        async with AsyncStore.from_conn_string(path, **settings):  # type: ignore[arg-type]
            pass

    with pytest.raises((TypeError, ValueError)):
        asyncio.run(open_async())
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_item_ttl_that_is_not_minutes_is_refused(store: Store) -> None:
    """A put's `ttl` is minutes or None: a string or a bool was taken as "no TTL" before."""
    for bad in ("5", True, math.nan, math.inf):
        with pytest.raises(TypeError, match="ttl"):
            store.put(("u",), "k", {"v": 1}, ttl=bad)  # type: ignore[arg-type]
    assert store.get(("u",), "k") is None
    store.put(("u",), "k", {"v": 1}, ttl=2.5)
    assert store.get(("u",), "k") is not None
