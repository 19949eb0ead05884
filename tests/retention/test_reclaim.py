"""Reclaiming: the bytes of pruned rows leave with them, `compact` collects what earlier
deletions left, and `doctor` shows where the bytes are."""

from __future__ import annotations

import random
import re
import string
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import START, MessagesState, StateGraph

from tests.conversations._index import check_all
from tests.engine.test_graphs import thread
from tests.retention._helpers import age, assert_no_orphans, counts, released_blocks
from threadloom import Saver
from threadloom.engine.checks import reclaim
from threadloom.engine.checks.figures import figures
from threadloom.engine.checks.reclaim import compact
from threadloom.engine.checks.verify import verify
from threadloom.engine.content import blocks, training
from threadloom.langgraph.retention import RetentionPolicy


def big_reply(state: MessagesState) -> dict[str, Any]:
    """A reply of 12 KB of text that does not repeat: its message is stored in blocks."""
    turn = len(state["messages"])
    rng = random.Random(turn)
    text = "".join(rng.choice(string.ascii_letters + " ") for _ in range(12_000))
    return {"messages": [AIMessage(text, id=f"ai-{turn}")]}


def tool_chat(saver: Saver, turns: int = 4) -> None:
    graph = StateGraph(MessagesState).add_node("reply", big_reply).add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    for turn in range(turns):
        app.invoke({"messages": [HumanMessage(f"turn {turn}", id=f"h{turn}")]}, thread())


def test_blocks_of_pruned_rows_go_in_the_same_transaction(tmp_path: Path) -> None:
    """After one retention run no block waits for a sweep: those only the deleted rows
    listed are gone (LangGraph's prune, by contrast, leaves them for the grace)."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        tool_chat(saver)
        age(saver)
        rows = counts(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1))
        assert report.blocks > 0
        assert released_blocks(saver) == 0
        assert counts(saver)["blocks"] == rows["blocks"] - report.blocks
        assert_no_orphans(saver, "t")
        assert verify(saver.file).sound
        check_all(saver)
    with Saver.from_conn_string(str(tmp_path / "stock.db")) as saver:
        tool_chat(saver)
        saver.prune(["t"], strategy="keep_latest")
        assert released_blocks(saver) > 0  # swept only by a collection after the grace


def two_steps(saver: Saver, thread_id: str, first: str) -> None:
    """A thread of two checkpoints: `first` in its first, a short text in its head."""
    parent: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    for step, value in enumerate([first, "short"]):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1ef{step:029d}"
        checkpoint["channel_values"] = {"blob": value}
        checkpoint["channel_versions"] = {"blob": step + 1}
        config = saver.put({"configurable": parent}, checkpoint, {"step": step}, {"blob": step + 1})
        parent = dict(config["configurable"])


def test_a_dry_run_counts_the_blocks_the_applied_run_frees(tmp_path: Path) -> None:
    """The dry run's report equals the applied run's, blocks included: a block two pruned
    threads and an idle one share is freed by the last (the dry run remembers what the
    others would release), and the blocks other deletions released past their grace,
    which the run sweeps, are counted too; `blocks` is what the file lost."""
    rng = random.Random(7)
    shared = "".join(rng.choice(string.ascii_letters) for _ in range(40_000))
    other = "".join(rng.choice(string.ascii_letters) for _ in range(40_000))
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        two_steps(saver, "a", shared)
        two_steps(saver, "b", shared)
        two_steps(saver, "c", shared)
        two_steps(saver, "gone", other)
        saver.delete_thread("gone")  # its blocks wait for the grace
        age(saver)
        with saver.file.write() as conn:  # c is idle for 40 days
            conn.execute(
                "UPDATE threads SET updated_at = updated_at - 40 * 86400 WHERE thread_id = 'c'"
            )
        waiting = released_blocks(saver)
        assert waiting > 0
        rows = counts(saver)
        policy = RetentionPolicy(keep_last=1, max_age=30 * 86400)
        dry = saver.apply_retention(policy, apply=False).as_json()
        applied = saver.apply_retention(policy).as_json()
        assert rows["blocks"] - counts(saver)["blocks"] == applied["blocks"] > waiting
        assert released_blocks(saver) == 0
        assert [e["thread_id"] for e in applied["expired_threads"]] == ["c"]
        assert [p["thread_id"] for p in applied["pruned"]] == ["a", "b"]
    assert (dry.pop("mode"), applied.pop("mode")) == ("dry-run", "applied")
    for report in (dry, applied):
        for pruned in report["pruned"]:
            pruned.pop("applied")
    assert dry == applied


def test_doctor_shows_where_the_bytes_are(tmp_path: Path) -> None:
    """doctor's figures give bytes per table, the largest threads, and what compact can
    give back (free pages, released blocks waiting for their grace)."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        tool_chat(saver)
        tool_chat_other = StateGraph(MessagesState).add_node("reply", big_reply)
        app = tool_chat_other.add_edge(START, "reply").compile(checkpointer=saver)
        app.invoke({"messages": [HumanMessage("hi", id="x")]}, thread("small"))
        saver.prune(["t"], strategy="keep_latest")
        size = {t.thread_id: t.bytes for t in saver.threads()}
    found = figures(str(path))
    tables: dict[str, int] = found["table_bytes"]
    assert {"vals", "checkpoints", "writes", "blocks", "extents"} <= set(tables)
    assert list(tables.values()) == sorted(tables.values(), reverse=True)
    assert sum(tables.values()) == found["file_bytes"] - found["free_page_bytes"]
    largest = found["largest_threads"]
    assert [(t["thread_id"], t["bytes"]) for t in largest] == sorted(
        size.items(), key=lambda item: -item[1]
    )
    assert found["released_blocks"] > 0 and found["released_block_bytes"] > 0
    assert found["reclaimable_bytes"] >= found["released_block_bytes"]


def test_compact_collects_what_earlier_deletions_left(tmp_path: Path) -> None:
    """Values a prune had to keep (younger than min_age) and blocks waiting for their
    grace are collected by compact once old enough, in one run; the file is sound."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        tool_chat(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1))  # every value is young
        assert report.waiting > 0 and report.values == 0
        app = StateGraph(MessagesState).add_node("reply", big_reply).add_edge(START, "reply")
        app.compile(checkpointer=saver).invoke({"messages": [("user", "x")]}, thread("gone"))
        saver.delete_thread("gone")  # its blocks wait for the grace
        waiting = released_blocks(saver)
        assert waiting > 0
        with saver.file.write() as conn:  # an hour passes
            conn.execute("UPDATE vals SET created_at = created_at - 3600")
            conn.execute("UPDATE blocks SET released = released - 3600")
        before = counts(saver)
        done = compact(saver.file)
        assert done.values == report.waiting and done.value_bytes > 0
        assert done.blocks == waiting
        assert counts(saver)["vals"] == before["vals"] - done.values
        assert done.bytes_after < done.bytes_before
        assert released_blocks(saver) == 0
        assert_no_orphans(saver, "t")
        assert verify(saver.file).sound
        check_all(saver)


#: SQL that writes `meta.gc_epoch`.
_EPOCH_WRITE = re.compile(r"(INSERT INTO meta|UPDATE meta)[^\"]*gc_epoch", re.S)


def test_one_helper_bumps_the_gc_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`blocks.bump_gc_epoch` moves meta.gc_epoch by one (from 0 on a file that never had
    one) and returns it; compact's collection and its retraining each bump the epoch
    through it, and no other engine module writes the epoch with SQL of its own
    (`Scope.bump_epoch` too)."""
    calls: list[str] = []

    def counted(module: str) -> Any:
        def bump(conn: Any) -> int:
            calls.append(module)
            return blocks.bump_gc_epoch(conn)

        return bump

    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        with saver.file.write() as conn:
            conn.execute("DELETE FROM meta WHERE key = 'gc_epoch'")
            assert blocks.bump_gc_epoch(conn) == 1
            assert blocks.bump_gc_epoch(conn) == 2 == saver.checkpoints.scope.read_epoch(conn)
        tool_chat(saver)
        saver.apply_retention(RetentionPolicy(keep_last=1))  # every value is young
        age(saver)
        with saver.file.read() as conn:
            before = saver.checkpoints.scope.read_epoch(conn)
        monkeypatch.setattr(reclaim, "bump_gc_epoch", counted("reclaim"))
        monkeypatch.setattr(training, "bump_gc_epoch", counted("training"))
        assert compact(saver.file).values > 0
        assert sorted(calls) == ["reclaim", "training"]
        with saver.file.read() as conn:
            assert saver.checkpoints.scope.read_epoch(conn) == before + 2
    engine = Path(blocks.__file__).parent
    writers = sorted(
        path.name
        for path in engine.glob("*.py")
        if _EPOCH_WRITE.search(path.read_text()) and path.name != "blocks.py"
    )
    assert writers == []
