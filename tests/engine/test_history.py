"""A thread's checkpoint history and pending interrupts, read class-free
(engine/conversations/history.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langgraph.types import Command

from tests.engine.test_graphs import (
    counter_graph,
    review_graph,
    send_graph,
    subgraph_graph,
    thread,
)
from threadloom import Saver
from threadloom.engine import CheckpointStore, File
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE


def _store(path: Path) -> tuple[File, CheckpointStore]:
    file = File.open(path, readonly=True)
    return file, CheckpointStore(file, namespace=DEFAULT_NAMESPACE, agent_id=DEFAULT_AGENT_ID)


def _ids(snapshot: Any) -> tuple[Any, ...]:
    conf = snapshot.config["configurable"]
    parent = (snapshot.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    return (
        conf["checkpoint_id"],
        parent,
        snapshot.metadata.get("step"),
        snapshot.metadata.get("source"),
    )


def test_history_lists_what_langgraph_lists_with_nodes_and_forks(tmp_path: Path) -> None:
    """After a replay and an update_state fork, the root history is LangGraph's
    get_state_history (ids, parents, steps, sources), with the nodes each step ran and
    three children on the checkpoint both forks start from."""
    path = tmp_path / "tt.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = counter_graph().compile(checkpointer=saver)
        config = thread()
        graph.invoke({"count": 0, "log": []}, config)
        past = next(s for s in graph.get_state_history(config) if s.next == ("step2",))
        graph.invoke(None, past.config)
        graph.invoke(None, graph.update_state(past.config, {"count": 100, "log": ["x"]}))
        expected = [_ids(s) for s in graph.get_state_history(config)]
        fork_point = past.config["configurable"]["checkpoint_id"]
    file, store = _store(path)
    try:
        page = store.histories.history("t", ns="", limit=100)
    finally:
        file.close()
    assert [(s.checkpoint_id, s.parent_id, s.step, s.source) for s in page.steps] == expected
    assert page.next is None and page.found
    by_id = {s.checkpoint_id: s for s in page.steps}
    assert by_id[fork_point].forks == 3
    assert by_id[fork_point].nodes == ("step1",)
    assert sum(s.forks for s in page.steps) == len(page.steps) - 1
    assert [s.nodes for s in page.steps if s.source == "loop" and s.step == 0] == [
        ("__start__",)
    ] * 1
    assert {s.nodes for s in page.steps if s.source in ("input", "update", "fork")} == {()}
    assert sorted(s.source for s in page.steps if s.step == 2) == ["fork", "loop", "update"]
    assert all(s.time.startswith("20") and s.time.endswith("+00:00") for s in page.steps)


def test_push_tasks_are_named_by_the_sends_they_ran(tmp_path: Path) -> None:
    """A Send fan-out's step is attributed to the node the Sends target."""
    path = tmp_path / "send.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = send_graph().compile(checkpointer=saver)
        graph.invoke({"topics": ["a", "b"], "results": [], "summary": ""}, thread())
    file, store = _store(path)
    try:
        steps = store.histories.history("t").steps
    finally:
        file.close()
    assert [(s.step, s.source, s.nodes) for s in steps] == [
        (3, "loop", ("summarize",)),
        (2, "loop", ("work",)),
        (1, "loop", ("plan",)),
        (0, "loop", ("__start__",)),
        (-1, "input", ()),
    ]
    assert [s.writes for s in steps] == [0, 1, 6, 4, 4]  # summarize; 3 x 2 work; plan


def test_pages_cover_every_namespace_once(tmp_path: Path) -> None:
    """Paging a subgraph thread with `next` one checkpoint at a time yields every
    checkpoint of every namespace once, in the order of one big page."""
    path = tmp_path / "sub.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        graph.invoke({"messages": ["hi"], "notes": [], "done": False}, thread())
        graph.invoke(Command(resume="yes"), thread())
    file, store = _store(path)
    try:
        whole = store.histories.history("t", limit=1000)
        paged, cursor = [], None
        while True:
            page = store.histories.history("t", limit=1, before=cursor)
            paged += page.steps
            cursor = page.next
            if cursor is None:
                break
        roots = store.histories.history("t", ns="").steps
        with pytest.raises(InvalidArgumentError):
            store.histories.history("t", limit=0)
        missing = store.histories.history("nope")
    finally:
        file.close()
    assert paged == whole.steps
    namespaces = {s.checkpoint_ns for s in whole.steps}
    assert "" in namespaces and len(namespaces) == 2
    assert [s for s in whole.steps if s.checkpoint_ns == ""] == roots
    child = [s for s in whole.steps if s.checkpoint_ns]
    assert [s.nodes for s in child if s.source == "loop"][-2:] == [("research",), ("__start__",)]
    assert not missing.found and missing.steps == [] and missing.next is None


def test_interrupts_of_the_head_are_read_class_free(tmp_path: Path) -> None:
    """The head of a paused graph holds its interrupt (id, node, value as asked); a second
    interrupt of the same step replaces it; once resumed to the end the head holds none."""
    path = tmp_path / "review.db"
    seen = []
    with Saver.from_conn_string(str(path)) as saver:
        graph = review_graph().compile(checkpointer=saver)
        out = graph.invoke({"draft": "v1", "verdicts": [], "published": False}, thread())
        for resume in ("ok", "fine", None):
            info = saver.thread("t")
            assert info is not None and info.head is not None
            asked = out["__interrupt__"][0] if "__interrupt__" in out else None
            seen.append((asked, saver.checkpoints.histories.interrupts("t", info.head)))
            if resume is not None:
                out = graph.invoke(Command(resume=resume), thread())
    for asked, found in seen[:2]:
        assert [i.as_json() for i in found] == [
            {"id": asked.id, "node": "review", "value": asked.value}
        ]
    assert seen[0][0].value["round"] == 1 and seen[1][0].value["round"] == 2
    assert seen[2] == (None, [])
