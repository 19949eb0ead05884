"""Every cache of the engine is bounded by bytes, and all of a process's together by one budget."""

from __future__ import annotations

import gc
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import MemoryBudget, Saver, memory_budget
from threadloom.core.lru import Lru
from threadloom.engine.checkpoints import scope as scope_module
from threadloom.engine.checkpoints.scope import Scope
from threadloom.errors import InvalidArgumentError


def _checkpoint(n: int, messages: list[str]) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
    checkpoint["channel_values"] = {"messages": messages, "note": f"step {n}"}
    checkpoint["channel_versions"] = {"messages": n, "note": n}
    return checkpoint


def _conversations(saver: Saver, threads: int, turns: int, size: int = 600) -> None:
    """`threads` conversations of `turns` puts each: a growing message list, a pending
    write per put, and a get_tuple of the latest checkpoint after each put."""
    for t in range(threads):
        config: dict[str, Any] = {"configurable": {"thread_id": f"thread-{t}", "checkpoint_ns": ""}}
        messages: list[str] = []
        for n in range(1, turns + 1):
            messages = [*messages, f"{t}/{n} " + "word " * (size // 5)]
            config = saver.put(config, _checkpoint(t * 1000 + n, messages), {"step": n}, {})  # type: ignore[arg-type]
            saver.put_writes(config, [("messages", f"pending {t}/{n}")], f"task-{n}")  # type: ignore[arg-type]
            assert saver.get_tuple(config) is not None


def _caches(scope: Scope) -> dict[str, Lru[Any, Any]]:
    return {
        "values": scope.cache._lru,
        "closures": scope.closures,
        "pending writes": scope.pending,
        "known refs": scope.memory._lru,
        "list memo": scope.planner._lists,
        "thread rows": scope._thread_rows,
        "chunk bases": scope.chunk_bases,
        "delta compressors": scope.delta_compressors,
        "decoded chunks": scope.planner.decoded._kept,
    }


def test_every_cache_stays_within_its_capacity_and_the_budget(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After many distinct threads and values, each cache's accounted weight is within its
    own capacity and all of them together within the budget they draw on."""
    monkeypatch.setattr(scope_module, "CLOSURE_BYTES", 64 * 1024)
    monkeypatch.setattr(scope_module, "PENDING_BYTES", 16 * 1024)
    monkeypatch.setattr(scope_module, "LIST_MEMO_BYTES", 64 * 1024)
    monkeypatch.setattr(scope_module, "DECODED_BYTES", 32 * 1024)
    monkeypatch.setattr(scope_module, "THREAD_ROW_BYTES", 20 * 200)
    monkeypatch.setattr(scope_module, "MEMORY_REFS", 300)
    budget = MemoryBudget(1024 * 1024)
    with Saver.from_conn_string(str(db_path), memory_budget=budget) as saver:
        scope = saver.checkpoints.scope
        scope.cache._lru.capacity = 128 * 1024
        _conversations(saver, threads=40, turns=6)
        caches = _caches(scope)
        for name, cache in caches.items():
            assert 0 < cache.weight <= cache.capacity, name
        assert 0 < len(scope._thread_rows) <= 20  # 40 threads met, at most 20 remembered
        assert scope.memory.refs <= 300
        assert budget.used == sum(cache.cost for cache in caches.values()) <= budget.capacity


def test_savers_of_one_process_share_one_budget(db_path: Path, tmp_path: Path) -> None:
    """Many savers (scopes, files) drawing on one budget hold its capacity together, the
    least recently used entries going first whichever saver holds them; a closed saver's
    entries go back at once."""
    budget = MemoryBudget(256 * 1024)
    savers = [
        Saver(
            db_path if i % 2 else tmp_path / "other.db", agent_id=f"agent-{i}", memory_budget=budget
        )
        for i in range(6)
    ]
    try:
        for saver in savers:
            _conversations(saver, threads=3, turns=5)
            assert budget.used <= budget.capacity
        held = [sum(c.cost for c in _caches(s.checkpoints.scope).values()) for s in savers]
        assert sum(held) == budget.used and held[-1] > held[0]
        savers[-1].close()
        assert budget.used == sum(held[:-1])
    finally:
        for saver in savers:
            saver.close()
    assert budget.used == 0 and len(budget) == 0


def test_the_process_budget_is_the_default_and_a_saver_may_have_its_own(db_path: Path) -> None:
    """Without `memory_budget` a saver draws on the process's budget; an int gives it its own."""
    with Saver.from_conn_string(str(db_path)) as shared:
        assert shared.checkpoints.scope.budget is memory_budget()
    with Saver.from_conn_string(str(db_path), memory_budget=1 << 20) as own:
        assert own.checkpoints.scope.budget is not memory_budget()
        assert own.checkpoints.scope.budget.capacity == 1 << 20
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        Saver(db_path, memory_budget="lots")  # type: ignore[arg-type]


def test_accounted_bytes_are_not_far_below_what_the_caches_hold(db_path: Path) -> None:
    """The estimates the budget counts cover what the caches really hold (traced heap
    freed when they are emptied), within a factor of two: a budget of bytes that
    undercounts would not bound memory. zstd allocates its contexts itself, out of the
    traced heap: the delta compressors are charged at least what zstd reports."""
    tracemalloc.start()
    try:
        with Saver.from_conn_string(str(db_path), memory_budget=64 << 20) as saver:
            scope = saver.checkpoints.scope
            _conversations(saver, threads=30, turns=8, size=2000)
            costs = {name: cache.cost for name, cache in _caches(scope).items()}
            kept = scope.delta_compressors.values()
            assert kept, "no compressor kept: the test proves nothing of them"
            untraced = sum(k.compressor.memory_size() for k in kept)
            assert costs["delta compressors"] >= untraced
            accounted = scope.budget.used - costs["delta compressors"]
            gc.collect()
            before = tracemalloc.get_traced_memory()[0]
            scope.release()
            gc.collect()
            freed = before - tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert accounted > 0 and scope.budget.used == 0
    assert accounted / 2 <= freed <= 2 * accounted, (freed, accounted, costs)


def test_a_listed_page_is_cached_whole_when_its_checkpoints_fit(db_path: Path) -> None:
    """Each checkpoint a list page resolves is cached at its own cost, not at the cost of
    every value the page fetched: ten checkpoints of one large value each (well under the
    closure cache together) are all held after one listing, and read again from it."""
    with Saver.from_conn_string(str(db_path), memory_budget=64 << 20) as saver:
        scope = saver.checkpoints.scope
        config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for n in range(1, 11):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
            checkpoint["channel_values"] = {
                "value": f"{n} " + random.Random(n).randbytes(45_000).hex()
            }
            checkpoint["channel_versions"] = {"value": n}
            config = saver.put(config, checkpoint, {"step": n}, {"value": n})  # type: ignore[arg-type]
        scope.closures.clear()
        listed = list(saver.list({"configurable": {"thread_id": "t"}}, limit=10))
        assert len(listed) == 10
        assert len(scope.closures) == 10, scope.closures.weight
        assert scope.closures.weight < scope_module.CLOSURE_BYTES
        assert list(saver.list({"configurable": {"thread_id": "t"}}, limit=10)) == listed


def test_a_scope_keeps_the_caches_of_its_active_threads_only(db_path: Path) -> None:
    """Once more than ACTIVE_THREADS threads were used, every cache holds entries of the
    most recently used ones only (many short threads do not keep the caches full of
    threads that are done), also after a dictionary training refreshed the scope (six
    turns a thread); a forgotten thread reads back what a fresh saver reads."""
    active = scope_module.ACTIVE_THREADS
    first = {"configurable": {"thread_id": "thread-0", "checkpoint_ns": ""}}
    with Saver.from_conn_string(str(db_path)) as saver:
        scope = saver.checkpoints.scope
        _conversations(saver, threads=active + 5, turns=6)
        held = {
            "values": {key[0] for key in scope.cache._lru._items},
            "closures": {key[0] for key in scope.closures._items},
            "pending writes": {key[1] for key in scope.pending._items},
            "known refs": {key[0] for key in scope.memory._lru._items},
            "list memo": {key[0] for key in scope.planner._lists._items},
        }
        for name, threads in held.items():
            assert 0 < len(threads) <= active, name
        compressors = {key[0] for key in scope.delta_compressors._items}
        assert compressors and compressors <= held["list memo"]  # of the threads in use
        assert scope._thread_rows.get("thread-0") not in held["values"]
        assert "thread-0" not in held["known refs"] | held["list memo"]
        again = saver.get_tuple(first)  # type: ignore[arg-type]
    with Saver.from_conn_string(str(db_path), memory_budget=0) as fresh:
        expected = fresh.get_tuple(first)  # type: ignore[arg-type]
    assert again is not None and expected is not None
    assert again.checkpoint == expected.checkpoint
    assert again.pending_writes == expected.pending_writes


def test_one_long_thread_keeps_its_caches(db_path: Path) -> None:
    """A single thread, however many puts, is never forgotten for being idle: its list
    encodings and values stay cached."""
    with Saver.from_conn_string(str(db_path)) as saver:
        scope = saver.checkpoints.scope
        _conversations(saver, threads=1, turns=scope_module.ACTIVE_THREADS * 3)
        assert scope.planner.memo_size > 0 and len(scope.cache._lru) > 0
        assert {key[0] for key in scope.planner._lists._items} == {"thread-0"}


def test_a_budget_of_nothing_keeps_no_decoded_chunks(db_path: Path) -> None:
    """`memory_budget=0` turns the decoded chunks off like every other cache: each read
    decodes, and the reads are what a saver with caches returns."""
    with Saver.from_conn_string(str(db_path)) as saver:
        _conversations(saver, threads=1, turns=6)
        config: Any = {"configurable": {"thread_id": "thread-0", "checkpoint_ns": ""}}
        cached = [saver.get_tuple(config) for _ in range(3)]
        assert saver.checkpoints.scope.planner.decoded.hits > 0
    with Saver.from_conn_string(str(db_path), memory_budget=0) as bare:
        reads = [bare.get_tuple(config) for _ in range(3)]
        decoded = bare.checkpoints.scope.planner.decoded
        assert decoded.hits == 0 and decoded.weight == 0
    assert all(r is not None and c is not None for r, c in zip(reads, cached, strict=True))
    assert [r.checkpoint for r in reads] == [c.checkpoint for c in cached]  # type: ignore[union-attr]
