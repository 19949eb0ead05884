"""Retention on real LangGraph graphs: what is kept reads back as before, what goes is gone.

Every test runs a graph on threadloom, applies a keep-last policy, and compares the kept
checkpoints' `get_state_history` rows (values, next, tasks with their interrupts,
metadata, parent) with the same rows before; then the thread must hold exactly the
values its remaining documents reach (one prune, no second one), the thread index must
say what the rows say, `verify` must find the file sound, and the graph must go on as
it does on InMemorySaver.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from tests.conversations._index import check_all
from tests.engine.test_graphs import (
    agent_graph,
    delta_graph,
    delta_history_rows,
    plain,
    review_graph,
    subgraph_graph,
    thread,
)
from tests.retention._helpers import (
    age,
    assert_no_orphans,
    counts,
    later,
    snapshots,
    value_documents,
)
from threadloom import Saver
from threadloom.engine.checks.verify import verify
from threadloom.langgraph.retention import RetentionPolicy


def kept_unchanged(before: dict[str, Any], after: dict[str, Any], keep: int) -> None:
    """The checkpoints left are among those before, each read back exactly as before."""
    assert after, "retention left no checkpoint"
    assert set(after) <= set(before)
    for checkpoint_id, row in after.items():
        assert row == before[checkpoint_id], checkpoint_id
    newest = sorted(before, reverse=True)[:keep]
    assert set(newest) <= set(after), "a checkpoint among the newest was deleted"


def sound(saver: Saver) -> None:
    report = verify(saver.file)
    assert report.sound, report.problems
    check_all(saver)


def test_tool_agent_keeps_its_last_checkpoints_and_goes_on(tmp_path: Path) -> None:
    """A tool agent pruned to its last 4 checkpoints reads them back unchanged, holds no
    orphaned value after one prune, and its next turn ends as on InMemorySaver."""
    turns = ["what is 6 x 2?", "and 6 x 3?", "and 6 x 4?"]
    with Saver.from_conn_string(str(tmp_path / "agent.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        for text in turns:
            graph.invoke({"messages": [HumanMessage(text, id=text)]}, thread())
        before = snapshots(graph, thread())
        rows = counts(saver)
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=4))
        after = snapshots(graph, thread())
        assert len(after) == 4
        kept_unchanged(before, after, 4)
        assert report.kept == 4 and report.checkpoints == len(before) - 4
        assert report.values > 0 and counts(saver)["vals"] == rows["vals"] - report.values
        assert report.writes == rows["writes"] - counts(saver)["writes"]
        assert [p.thread_id for p in report.pruned] == ["t"]
        assert_no_orphans(saver, "t")
        sound(saver)
        ours = graph.invoke({"messages": [HumanMessage("and 6 x 5?", id="last")]}, thread())
    memory = agent_graph().compile(checkpointer=InMemorySaver())
    for text in [*turns, "and 6 x 5?"]:
        theirs = memory.invoke(
            {"messages": [HumanMessage(text, id=text if text in turns else "last")]}, thread()
        )
    assert plain(ours) == plain(theirs)


def test_values_younger_than_min_age_wait_for_a_later_run(tmp_path: Path) -> None:
    """Orphaned values younger than min_age are kept (counted as waiting), also once past
    the grace; a run once they are older (here: `now` moving min_age) collects them, and
    no checkpoint goes twice."""
    with Saver.from_conn_string(str(tmp_path / "young.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        graph.invoke({"messages": [HumanMessage("and 6 x 3?", id="h2")]}, thread())
        age(saver, 120)  # past the grace, younger than min_age
        first = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=600))
        assert first.checkpoints > 0 and first.values == 0 and first.waiting > 0
        second = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=600), now=later())
        assert second.checkpoints == 0 and second.values == first.waiting
        assert second.waiting == 0
        assert_no_orphans(saver, "t")
        sound(saver)


def test_a_clock_ahead_never_moves_the_grace(tmp_path: Path) -> None:
    """`now` an hour ahead moves min_age, not the grace: on the real clock, values
    orphaned a moment ago are kept (waiting), none is missing from a kept checkpoint, and
    a run once they are past the grace collects them."""
    with Saver.from_conn_string(str(tmp_path / "ahead.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        graph.invoke({"messages": [HumanMessage("and 6 x 3?", id="h2")]}, thread())
        before = snapshots(graph, thread())
        stored, _ = value_documents(saver, "t")
        first = saver.apply_retention(RetentionPolicy(keep_last=1), now=later())
        assert first.checkpoints > 0 and first.values == 0 and first.waiting > 0
        assert value_documents(saver, "t")[0] == stored
        kept_unchanged(before, snapshots(graph, thread()), 1)
        saver.checkpoints.grace = 0.5
        time.sleep(0.6)
        second = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=0))
        assert second.values == first.waiting and second.waiting == 0
        assert_no_orphans(saver, "t")
        sound(saver)


def test_values_younger_than_the_grace_survive_a_prune(tmp_path: Path) -> None:
    """With a grace of 0.5 s on the real clock, a prune right after a turn collects the
    values the earlier turn orphaned (past the grace) and keeps those the last turn
    orphaned (younger), also with min_age 0 and now an hour ahead."""
    with Saver.from_conn_string(str(tmp_path / "grace.db")) as saver:
        saver.checkpoints.grace = 0.5
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        first_turn, _ = value_documents(saver, "t")
        time.sleep(0.6)
        graph.invoke({"messages": [HumanMessage("and 6 x 3?", id="h2")]}, thread())
        report = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=0), now=later())
        stored, reached = value_documents(saver, "t")
        assert report.values > 0 and report.waiting > 0
        assert stored - reached, "the last turn's orphans should be waiting"
        assert not (stored - reached) & first_turn, "an orphan past the grace was kept"
        assert len(stored - reached) == report.waiting
        time.sleep(0.6)
        again = saver.apply_retention(RetentionPolicy(keep_last=1, min_age=0))
        assert again.values == report.waiting
        assert_no_orphans(saver, "t")
        sound(saver)


def test_a_paused_subgraph_keeps_its_linked_checkpoints_and_resumes(tmp_path: Path) -> None:
    """Keep-last 1 on a thread paused inside a subgraph keeps the root head and the
    subgraph checkpoints linked to it (metadata.parents), drops those of earlier runs,
    and the resume ends as on InMemorySaver."""
    start = {"messages": ["hi"], "notes": [], "done": False}
    with Saver.from_conn_string(str(tmp_path / "sub.db")) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        graph.invoke(start, thread())
        graph.invoke(Command(resume="first"), thread())
        graph.invoke(start, thread())  # a second run, paused in the subgraph again
        paused = graph.get_state(thread(), subgraphs=True)
        child_config = paused.tasks[0].state.config
        child_before = snapshots(graph, child_config)
        listed = list(saver.list(thread()))
        children = [t for t in listed if t.config["configurable"]["checkpoint_ns"]]
        head = max(
            t.config["configurable"]["checkpoint_id"]
            for t in listed
            if not t.config["configurable"]["checkpoint_ns"]
        )
        linked = {
            t.config["configurable"]["checkpoint_id"]
            for t in children
            if t.metadata.get("parents", {}).get("") == head
        }
        assert linked and len(linked) < len(children)
        before = snapshots(graph, thread())
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1))
        left = list(saver.list(thread()))
        roots = [t for t in left if not t.config["configurable"]["checkpoint_ns"]]
        assert [t.config["configurable"]["checkpoint_id"] for t in roots] == [head]
        assert {
            t.config["configurable"]["checkpoint_id"]
            for t in left
            if t.config["configurable"]["checkpoint_ns"]
        } == linked
        assert report.kept == 1 + len(linked)
        kept_unchanged(before, snapshots(graph, thread()), 1)
        assert snapshots(graph, child_config) == child_before
        assert graph.get_state(thread(), subgraphs=True).tasks[0].state.values == (
            paused.tasks[0].state.values
        )
        assert_no_orphans(saver, "t")
        sound(saver)
        ours = graph.invoke(Command(resume="second"), thread())
    memory = subgraph_graph().compile(checkpointer=InMemorySaver())
    memory.invoke(start, thread())
    memory.invoke(Command(resume="first"), thread())
    memory.invoke(start, thread())
    assert plain(ours) == plain(memory.invoke(Command(resume="second"), thread()))


def test_delta_channel_ancestors_are_kept_and_the_state_rebuilds(tmp_path: Path) -> None:
    """Keep-last 2 on a DeltaChannel thread also keeps the ancestors back to the last
    snapshot (with their writes): the kept states and their delta histories are as
    before, and the graph goes on as on InMemorySaver."""

    def drive(checkpointer: Any) -> Any:
        graph = delta_graph().compile(checkpointer=checkpointer)
        graph.invoke({"log": [], "steps": 0}, thread())
        for _ in range(4):
            graph.invoke({"log": ["more"]}, thread())
        graph.invoke({"log": ["pause"]}, thread(), interrupt_before=["tally"])
        return graph

    with Saver.from_conn_string(str(tmp_path / "delta.db")) as saver:
        graph = drive(saver)
        before = snapshots(graph, thread())
        deltas = dict(zip(before, delta_history_rows(saver, graph, thread()), strict=True))
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=2))
        after = snapshots(graph, thread())
        assert 2 < len(after) < len(before), "the DeltaChannel ancestors were not kept"
        assert report.kept == len(after)
        kept_unchanged(before, after, 2)
        rebuilt = 0
        for checkpoint_id, row in zip(
            after, delta_history_rows(saver, graph, thread()), strict=True
        ):
            # A checkpoint whose DeltaChannel changed since its snapshot is rebuilt from
            # its ancestors' writes: that history must be whole. (One holding the
            # snapshot is not; its own ancestors may go.)
            if "counters_since_delta_snapshot" in after[checkpoint_id][3]:
                assert row == deltas[checkpoint_id], checkpoint_id
                rebuilt += 1
        assert rebuilt >= 2
        assert_no_orphans(saver, "t")
        sound(saver)
        graph.invoke(None, thread())
        ours = graph.invoke({"log": ["again"]}, thread())
    memory = drive(InMemorySaver())
    memory.invoke(None, thread())
    assert plain(ours) == plain(memory.invoke({"log": ["again"]}, thread()))


def test_interrupts_and_pending_writes_of_kept_checkpoints_survive(tmp_path: Path) -> None:
    """A review paused at its second interrupt keeps the interrupt and the first answer
    (pending writes of the head) through a keep-last 1 prune, and resumes as on memory."""
    start = {"draft": "v1", "verdicts": [], "published": False}
    with Saver.from_conn_string(str(tmp_path / "review.db")) as saver:
        graph = review_graph().compile(checkpointer=saver)
        graph.invoke(start, thread())
        graph.invoke(Command(resume="ok"), thread())
        head = graph.get_state(thread())
        assert head.tasks[0].interrupts
        before = snapshots(graph, thread())
        age(saver)
        saver.apply_retention(RetentionPolicy(keep_last=1))
        after = snapshots(graph, thread())
        assert list(after) == [head.config["configurable"]["checkpoint_id"]]
        kept_unchanged(before, after, 1)
        assert_no_orphans(saver, "t")
        sound(saver)
        ours = graph.invoke(Command(resume="ship it"), thread())
    memory = review_graph().compile(checkpointer=InMemorySaver())
    memory.invoke(start, thread())
    memory.invoke(Command(resume="ok"), thread())
    assert plain(ours) == plain(memory.invoke(Command(resume="ship it"), thread()))
    assert ours["verdicts"] == ["ok", "ship it"]


def test_langgraph_prune_keeps_working_beside_retention(tmp_path: Path) -> None:
    """After a retention run, LangGraph's `prune(thread_ids, strategy)` still keeps the
    latest checkpoint only, and `delete` still removes the thread."""
    with Saver.from_conn_string(str(tmp_path / "both.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        for name in ("a", "b"):
            graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread(name))
        age(saver)
        saver.apply_retention(RetentionPolicy(keep_last=3))
        state = plain(graph.get_state(thread("a")).values)
        saver.prune(["a"], strategy="keep_latest")
        assert len(list(saver.list(thread("a")))) == 1
        assert plain(graph.get_state(thread("a")).values) == state
        saver.prune(["b"], strategy="delete")
        assert list(saver.list(thread("b"))) == []
        sound(saver)
