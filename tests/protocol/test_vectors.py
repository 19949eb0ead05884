"""The released naas planner's vectors, reproduced byte for byte (SPEC §12)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from langgraph.checkpoint.base import get_checkpoint_metadata

from tests.helpers import DictStore, inputs, jsonl
from threadloom.langgraph.tuples import serialization
from threadloom.protocol import (
    CHECKPOINTS,
    CHECKPOINTS_V1,
    WRITES,
    WRITES_V1,
    KnownReferences,
    Planner,
    Put,
    read_entries,
    restore,
)

AGENT = "engine.v1"


def _warm_plans() -> list[tuple[str, list[Put]]]:
    planner = Planner(AGENT, serialization())
    memory = KnownReferences()
    plans = []
    for step in inputs():
        if "checkpoint" not in step:
            plan = planner.plan_writes(
                step["config"], step["writes"], step["task_id"], step["task_path"]
            )
            plans.append((step["name"], plan.puts))
            continue
        conf = step["config"]["configurable"]
        parent = (
            (conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
            if "checkpoint_id" in conf
            else None
        )
        ancestors = step["metadata"].get("parents", {}).items()
        known = memory.recall(conf["thread_id"], parent, ancestors)
        checkpoint_plan = planner.plan_checkpoint(
            step["config"], step["checkpoint"], step["metadata"], known
        )
        assert checkpoint_plan.config == step["returned_config"]
        new = checkpoint_plan.config["configurable"]
        memory.remember(
            (new["thread_id"], new["checkpoint_ns"], new["checkpoint_id"]),
            set(known.refs) | checkpoint_plan.refs,
            checkpoint_plan.entries,
        )
        plans.append((step["name"], checkpoint_plan.puts))
    return plans


def _assert_same(puts: list[Put], rows: list[dict[str, Any]]) -> None:
    assert len(puts) == len(rows)
    for put, row in zip(puts, rows, strict=False):
        got = (put.collection, put.key, put.if_version, put.on_conflict)
        want = (row["collection"], row["key"], row["if_version"], row["on_conflict"])
        assert got == want, f"seq {row['seq']}"
        assert put.data == row["data"], f"data of seq {row['seq']} ({row['collection']})"


def _store() -> DictStore:
    store = DictStore()
    for _, puts in _warm_plans():
        store.apply(puts)
    return store


def test_warm_plan_matches_puts_jsonl() -> None:
    """A remembering planner produces exactly the 59 puts of puts.jsonl, in order."""
    rows = jsonl("puts.jsonl")
    planned = [put for _, puts in _warm_plans() for put in puts]
    assert len(rows) == 59
    _assert_same(planned, rows)
    steps = [name for name, puts in _warm_plans() for _ in puts]
    assert steps == [row["step"] for row in rows]


def test_cold_plan_matches_puts_cold_c3() -> None:
    """A planner with no memory plans c3 as the 49 create-only puts of puts_cold_c3.jsonl."""
    step = next(s for s in inputs() if s["name"] == "c3")
    plan = Planner(AGENT, serialization()).plan_checkpoint(
        step["config"], step["checkpoint"], step["metadata"]
    )
    rows = jsonl("puts_cold_c3.jsonl")
    assert len(rows) == 49
    _assert_same(plan.puts, rows)


def test_outcomes_in_a_fresh_and_a_warm_store() -> None:
    """Applying the puts gives the vectors' outcomes; the cold c3 plan is all no-ops."""
    store = DictStore()
    outcomes = [o for _, puts in _warm_plans() for o in store.apply(puts)]
    assert outcomes == [row["outcome_in_fresh_store"] for row in jsonl("puts.jsonl")]
    step = next(s for s in inputs() if s["name"] == "c3")
    cold = Planner(AGENT, serialization()).plan_checkpoint(
        step["config"], step["checkpoint"], step["metadata"]
    )
    assert store.apply(cold.puts) == [
        r["outcome_in_warm_store"] for r in jsonl("puts_cold_c3.jsonl")
    ]


def _short(value: Any) -> Any:
    """Mirror reads.jsonl: long strings are shown as sha256 + length."""
    if isinstance(value, str) and len(value) > 1000:
        return {"len": len(value), "sha256": hashlib.sha256(value.encode()).hexdigest()}
    return value


@pytest.mark.parametrize("row", jsonl("reads.jsonl"), ids=lambda row: row["step"])
def test_restore_and_resolution_batches(row: dict[str, Any]) -> None:
    """A fresh reader resolves each checkpoint in the vectors' batches and restores the input."""
    store = _store()
    step = next(s for s in inputs() if s["name"] == row["step"])
    data = store.checkpoint(row["checkpoint_key"])
    writes = store.find(
        WRITES,
        thread_id=data["thread_id"],
        checkpoint_ns=data["checkpoint_ns"],
        checkpoint_id=data["checkpoint_id"],
    )
    fetched, read = store.resolve([data, *writes])
    assert [{"collection": b.collection, "refs": b.refs} for b in read] == row["resolution_batches"]
    assert sorted(fetched) == row["fetched_refs"]
    planner = Planner(AGENT, serialization())
    restored = restore(data, writes, fetched, planner.loads)
    assert restored.checkpoint == step["checkpoint"]
    assert restored.metadata == get_checkpoint_metadata(step["config"], step["metadata"])
    assert restored.metadata == row["restored_metadata"]
    assert restored.config == row["config"]
    assert restored.parent_config == row["restored_parent_config"]
    pending = [[t, c, _short(v)] for t, c, v in restored.pending_writes]
    assert pending == row["restored_pending_writes"]


def test_read_then_put_reuses_entries() -> None:
    """After reading c3, remembering it lets sub1 plan only its checkpoint document."""
    store = _store()
    c3, sub1 = (next(s for s in inputs() if s["name"] == n) for n in ("c3", "sub1"))
    key = Planner(AGENT, serialization()).key("thread-1", "", c3["checkpoint"]["id"])
    data = store.checkpoint(key)
    fetched, _ = store.resolve([data])
    restored = restore(data, [], fetched, Planner(AGENT, serialization()).loads)
    memory = KnownReferences()
    memory.remember(
        ("thread-1", "", data["checkpoint_id"]),
        fetched,
        read_entries(data["channels"], restored.checkpoint["channel_versions"]),
    )
    known = memory.recall("thread-1", None, sub1["metadata"]["parents"].items())
    plan = Planner(AGENT, serialization()).plan_checkpoint(
        sub1["config"], sub1["checkpoint"], sub1["metadata"], known
    )
    assert [p.collection for p in plan.puts] == [CHECKPOINTS]


def test_schema1_documents_restore() -> None:
    """Schema-1 documents written by core's legacy writer decode to the original checkpoints."""
    rows = jsonl("schema1_puts.jsonl")
    checkpoints = [r["data"] for r in rows if r["collection"] == CHECKPOINTS_V1]
    writes = [r["data"] for r in rows if r["collection"] == WRITES_V1]
    planner = Planner(AGENT, serialization())
    by_name = {s["name"]: s for s in inputs()}
    for data, name in zip(checkpoints, ("c1", "c2"), strict=False):
        assert planner.key("thread-1", "", data["checkpoint_id"]) == next(
            r["key"] for r in rows if r["data"] is data
        )
        mine = [w for w in writes if w["checkpoint_id"] == data["checkpoint_id"]]
        restored = restore(data, mine, {}, planner.loads)
        step = by_name[name]
        assert restored.checkpoint == step["checkpoint"]
        assert restored.metadata == get_checkpoint_metadata(step["config"], step["metadata"])
    c2 = restore(checkpoints[1], writes, {}, planner.loads)
    assert [(t, c) for t, c, _ in c2.pending_writes] == [
        ("task-1", "__error__"),
        ("task-1", "messages"),
    ]
    assert c2.parent_config == {
        "configurable": {
            "thread_id": "thread-1",
            "checkpoint_ns": "",
            "checkpoint_id": checkpoints[0]["checkpoint_id"],
        }
    }
