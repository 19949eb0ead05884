"""The one LRU: bounded by weight, least recently used out first; maps sharing a budget."""

from __future__ import annotations

import gc

import pytest

from threadloom.core import lru
from threadloom.core.lru import Budget, Lru, MiB, parse_bytes
from threadloom.errors import InvalidArgumentError


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


def test_maps_of_one_budget_hold_its_capacity_together() -> None:
    """Two maps drawing on one budget stay within it together, least recently used out
    first whichever map holds it."""
    budget = Budget(10)
    a: Lru[str, bytes] = Lru(100, len, budget=budget)
    b: Lru[str, bytes] = Lru(100, len, budget=budget)
    a.put("old", b"1234")
    b.put("mid", b"1234")
    assert a.get("old") == b"1234"  # now newer than "mid"
    b.put("new", b"1234")
    assert "mid" not in b and "old" in a and "new" in b
    assert budget.used == 8 == a.weight + b.weight and len(budget) == 2
    for n in range(100):
        (a if n % 2 else b).put(f"k{n}", b"12")
        assert budget.used <= budget.capacity
    a.put("huge", b"x" * 11)  # within a's own capacity, over the budget's
    assert "huge" not in a and budget.used <= 10


def test_a_budget_charges_cost_and_spares_a_kept_newest_entry() -> None:
    """`cost` is what the budget counts; a map that keeps its newest entry keeps it under
    budget pressure too, while its older entries go."""
    budget = Budget(100)
    refs: Lru[str, list[str]] = Lru(
        1000, len, keep_newest=True, budget=budget, cost=lambda v: 30 * len(v)
    )
    refs.put("first", ["r"])
    refs.put("newest", ["r"] * 5)  # 150 bytes, over the whole budget
    assert "newest" in refs and "first" not in refs and refs.weight == 5
    other: Lru[str, bytes] = Lru(100, len, budget=budget)
    other.put("x", b"1")
    assert "newest" in refs and "x" not in other


def test_a_collected_map_gives_its_bytes_back_and_resize_evicts() -> None:
    """A map that is garbage-collected no longer counts; a smaller capacity evicts at once."""
    budget = Budget(1000)
    gone: Lru[str, bytes] = Lru(1000, len, budget=budget)
    gone.put("a", b"x" * 600)
    del gone
    gc.collect()
    kept: Lru[str, bytes] = Lru(1000, len, budget=budget)
    kept.put("b", b"x" * 600)
    assert "b" in kept and budget.used == 600 and len(budget) == 1
    kept.put("c", b"x" * 300)
    budget.resize(400)
    assert budget.used == 300 and "b" not in kept and "c" in kept
    kept.clear()
    assert budget.used == 0 and len(budget) == 0


def test_sizes_parse_and_the_process_budget_reads_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """THREADLOOM_MEMORY_BUDGET sets the process budget (bytes or K/M/G); nonsense is refused."""
    assert parse_bytes("33554432") == 32 * MiB == parse_bytes("32M") == parse_bytes("32MiB")
    assert parse_bytes("512k") == 512 * 1024 and parse_bytes("1G") == 1024 * MiB
    with pytest.raises(InvalidArgumentError, match="not a size"):
        parse_bytes("lots")
    with pytest.raises(InvalidArgumentError, match="bytes >= 0"):
        Budget(-1)
    monkeypatch.setattr(lru, "_process_budget", None)
    monkeypatch.setenv(lru.BUDGET_ENV, "8M")
    assert lru.process_budget().capacity == 8 * MiB
    assert lru.process_budget() is lru.process_budget()
    monkeypatch.setattr(lru, "_process_budget", None)
    monkeypatch.delenv(lru.BUDGET_ENV)
    assert lru.process_budget().capacity == lru.DEFAULT_BUDGET
    monkeypatch.setattr(lru, "_process_budget", None)
    monkeypatch.setenv(lru.BUDGET_ENV, "much")
    with pytest.raises(InvalidArgumentError):
        lru.process_budget()


def test_a_grouped_map_drops_a_group_whatever_removed_its_other_entries() -> None:
    """`drop_group` removes exactly the keys whose part at `group` is the value, also
    after entries left by eviction (own capacity or the budget's), pop and replace."""
    budget = Budget(1000)
    lru_map: Lru[tuple[str, int], int] = Lru(6, group=0, budget=budget)
    for thread in ("a", "b"):
        for i in range(3):
            lru_map.put((thread, i), i)
    lru_map.put(("c", 0), 0)  # capacity 6: ("a", 0) goes
    assert ("a", 0) not in lru_map
    assert lru_map.pop(("a", 1)) == 1
    lru_map.put(("b", 1), 10)  # replaced, still one entry of "b"
    lru_map.drop_group("b")
    assert sorted(k for k in [("a", 2), ("c", 0)] if k in lru_map) == [("a", 2), ("c", 0)]
    assert len(lru_map) == 2 and budget.used == 2 and len(budget) == 2
    lru_map.drop_group("a")
    lru_map.drop_group("nobody")
    assert len(lru_map) == 1 and ("c", 0) in lru_map
    budget.resize(0)  # the budget evicts the last one: its group goes with it
    assert len(lru_map) == 0
    budget.resize(1000)
    lru_map.put(("c", 1), 1)
    assert ("c", 1) in lru_map
    lru_map.drop_group("c")
    assert len(lru_map) == 0
    lru_map.clear()
    with pytest.raises(InvalidArgumentError):
        Lru[str, int](4).drop_group("a")
