"""The one LRU: bounded by weight, least recently used out first."""

from __future__ import annotations

from threadloom.core.lru import Lru


def test_the_least_recently_used_goes_first() -> None:
    """Reading an entry keeps it; the oldest untouched one is evicted past capacity."""
    lru: Lru[str, int] = Lru(2)
    lru.put("a", 1)
    lru.put("b", 2)
    assert lru.get("a") == 1
    lru.put("c", 3)
    assert "b" not in lru and lru.get("a") == 1 and lru.get("c") == 3


def test_weights_bound_the_total_and_heavy_entries_are_not_held() -> None:
    """Capacity counts weights; an entry heavier than the capacity is not held (and drops
    what its key held), unless the map keeps its newest entry."""
    lru: Lru[str, bytes] = Lru(10, len)
    lru.put_many([("a", b"1234"), ("b", b"1234")])
    lru.put("c", b"1234")
    assert "a" not in lru and lru.weight == 8
    lru.put("b", b"x" * 11)
    assert "b" not in lru and lru.weight == 4
    keeping: Lru[str, bytes] = Lru(10, len, keep_newest=True)
    keeping.put("a", b"1")
    keeping.put("big", b"x" * 50)
    assert list(keeping.get_many(["a", "big"])) == ["big"]


def test_put_many_without_replace_keeps_the_held_value() -> None:
    """With replace=False a held key keeps its value (content-addressed entries)."""
    lru: Lru[str, int] = Lru(5)
    lru.put("a", 1)
    lru.put_many([("a", 2)], replace=False)
    assert lru.get("a") == 1
    lru.drop_where(lambda key: key == "a")
    assert len(lru) == 0 and lru.weight == 0
