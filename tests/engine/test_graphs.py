"""Real LangGraph graphs on threadloom behave exactly as on LangGraph's InMemorySaver.

Each scenario runs twice, once per checkpointer, and the final state and the whole
`get_state_history` (values, next, step and source) must match. Message ids that
`add_messages` draws at random, and checkpoint/task ids (time-based), are the only
things left out of the comparison. The model is a deterministic function of the
conversation, so nothing touches the network.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import BaseMessage, HumanMessage
from langgraph.channels.delta import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from tests.migration._graphs import (  # the graphs the migration tests share; re-exported
    Counter,
    Inner,
    MapState,
    Outer,
    agent_graph,
    counter_graph,
    send_graph,
    subgraph_graph,
)

__all__ = [
    "Counter",
    "Inner",
    "MapState",
    "Outer",
    "agent_graph",
    "counter_graph",
    "send_graph",
    "subgraph_graph",
]
from threadloom import AsyncSaver, Saver

DURABILITY = ("sync", "async", "exit")
LONG = "lorem ipsum dolor sit amet " * 80  # > 1 KiB: stored as a blob / list items, not inline

Checkpointer = BaseCheckpointSaver[Any]


# -- comparison helpers -------------------------------------------------------------------


def plain(value: Any) -> Any:
    """Return `value` with messages as dicts without their (random) ids."""
    if isinstance(value, BaseMessage):
        dumped = value.model_dump()
        dumped.pop("id", None)
        return (type(value).__name__, plain(dumped))
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    return value


def history(graph: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Return the thread's history as comparable rows: values, next, step, source."""
    return [
        (plain(s.values), s.next, s.metadata.get("step"), s.metadata.get("source"))
        for s in graph.get_state_history(config)
    ]


async def ahistory(graph: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    """Async twin of `history`."""
    return [
        (plain(s.values), s.next, s.metadata.get("step"), s.metadata.get("source"))
        async for s in graph.aget_state_history(config)
    ]


def thread(name: str = "t") -> dict[str, Any]:
    """A config for thread `name`."""
    return {"configurable": {"thread_id": name}}


def both(tmp_path: Path, scenario: Callable[[Checkpointer], Any]) -> tuple[Any, Any]:
    """Run `scenario` on a threadloom Saver and on InMemorySaver; return (threadloom, memory)."""
    with Saver.from_conn_string(str(tmp_path / "graph.db")) as saver:
        ours = scenario(saver)
    return ours, scenario(InMemorySaver())


async def both_async(
    tmp_path: Path, scenario: Callable[[Checkpointer], Awaitable[Any]]
) -> tuple[Any, Any]:
    """Run `scenario` on an AsyncSaver and on InMemorySaver; return (threadloom, memory)."""
    async with AsyncSaver.from_conn_string(str(tmp_path / "async.db")) as saver:
        ours = await scenario(saver)
    return ours, await scenario(InMemorySaver())


# -- a tool-calling agent -----------------------------------------------------------------


@pytest.mark.parametrize("durability", DURABILITY)
def test_tool_agent_matches_memory(tmp_path: Path, durability: str) -> None:
    """A two-turn tool-calling agent ends in the same state and history as on InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = agent_graph().compile(checkpointer=checkpointer)
        config = thread()
        graph.invoke(
            {"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, config, durability=durability
        )
        final = graph.invoke(
            {"messages": [HumanMessage(LONG, id="h2")]}, config, durability=durability
        )
        return plain(final), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    final, rows = ours
    assert [m[0] for m in final["messages"]] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ] * 2
    assert final["messages"][2][1]["content"] == "12"
    assert final["messages"][6][1]["content"] == "18"
    if durability == "exit":
        assert len(rows) == 2  # one checkpoint per invoke
    else:
        assert len(rows) == 10


@pytest.mark.parametrize("durability", DURABILITY)
def test_tool_agent_async_api(tmp_path: Path, durability: str) -> None:
    """`ainvoke` and `aget_state_history` on AsyncSaver match InMemorySaver's async API."""

    async def scenario(checkpointer: Checkpointer) -> Any:
        graph = agent_graph().compile(checkpointer=checkpointer)
        config = thread()
        await graph.ainvoke(
            {"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, config, durability=durability
        )
        final = await graph.ainvoke(
            {"messages": [HumanMessage(LONG, id="h2")]}, config, durability=durability
        )
        state = await graph.aget_state(config)
        return plain(final), plain(state.values), state.next, await ahistory(graph, config)

    ours, theirs = asyncio.run(both_async(tmp_path, scenario))
    assert ours == theirs
    assert len(ours[3]) == (2 if durability == "exit" else 10)


@pytest.mark.parametrize("durability", DURABILITY)
def test_async_subgraph_interrupt_matches_memory(tmp_path: Path, durability: str) -> None:
    """On AsyncSaver a subgraph's interrupt and `Command(resume=...)` via ainvoke match memory."""

    async def scenario(checkpointer: Checkpointer) -> Any:
        graph = subgraph_graph().compile(checkpointer=checkpointer)
        config = thread()
        first = await graph.ainvoke(
            {"messages": ["hi"], "notes": [], "done": False}, config, durability=durability
        )
        paused = await graph.aget_state(config, subgraphs=True)
        child = paused.tasks[0].state
        child_rows = await ahistory(graph, child.config)
        final = await graph.ainvoke(Command(resume="yes"), config, durability=durability)
        return (
            [i.value for i in first["__interrupt__"]],
            plain(child.values),
            child_rows,
            plain(final),
            await ahistory(graph, config),
        )

    ours, theirs = asyncio.run(both_async(tmp_path, scenario))
    assert ours == theirs
    assert ours[3]["notes"] == ["researched 2", "approved=yes"]


def test_async_saver_streams_without_blocking(tmp_path: Path) -> None:
    """Two threads streamed concurrently through one AsyncSaver both finish with full histories."""

    async def run() -> list[Any]:
        async with AsyncSaver.from_conn_string(str(tmp_path / "async.db")) as saver:
            graph = agent_graph().compile(checkpointer=saver)

            async def one(name: str) -> Any:
                config = thread(name)
                chunks = [
                    c
                    async for c in graph.astream(
                        {"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, config
                    )
                ]
                return len(chunks), await ahistory(graph, config)

            return await asyncio.gather(one("x"), one("y"))

    x, y = asyncio.run(run())
    assert x == y
    assert x[0] == 3 and len(x[1]) == 5


# -- subgraph -----------------------------------------------------------------------------


@pytest.mark.parametrize("durability", DURABILITY)
def test_subgraph_interrupt_matches_memory(tmp_path: Path, durability: str) -> None:
    """A subgraph's checkpoints (child namespace), interrupt and resume match InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = subgraph_graph().compile(checkpointer=checkpointer)
        config = thread()
        first = graph.invoke(
            {"messages": ["hi"], "notes": [], "done": False}, config, durability=durability
        )
        paused = graph.get_state(config, subgraphs=True)
        child = paused.tasks[0].state
        child_view = (plain(child.values), child.next)
        child_history = history(graph, child.config)
        final = graph.invoke(Command(resume="yes"), config, durability=durability)
        return (
            [i.value for i in first["__interrupt__"]],
            paused.next,
            child_view,
            child_history,
            plain(final),
            history(graph, config),
        )

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    interrupts, paused_next, child_view, child_history, final, _ = ours
    assert interrupts == [{"question": "approve?", "notes": ["researched 2"]}]
    assert paused_next == ("child",)
    assert child_view[1] == ("approve",)
    assert child_history  # the subgraph's own checkpoints were stored and listed
    assert final["done"] is True
    assert final["notes"] == ["researched 2", "approved=yes"]


# -- interrupt + Command(resume=...) ------------------------------------------------------


class Review(TypedDict):
    draft: str
    verdicts: Annotated[list, operator.add]
    published: bool


def review_graph() -> StateGraph:
    """draft -> review (interrupts for a human verdict, twice) -> publish."""

    def review(state: Review) -> dict[str, Any]:
        first = interrupt({"draft": state["draft"], "round": 1})
        second = interrupt({"draft": state["draft"], "round": 2, "first": first})
        return {"verdicts": [first, second]}

    graph = StateGraph(Review)
    graph.add_node("write", lambda s: {"draft": s["draft"] + " (edited) " + LONG})
    graph.add_node("review", review)
    graph.add_node("publish", lambda s: {"published": True})
    graph.add_edge(START, "write")
    graph.add_edge("write", "review")
    graph.add_edge("review", "publish")
    graph.add_edge("publish", END)
    return graph


@pytest.mark.parametrize("durability", DURABILITY)
def test_interrupt_and_resume_match_memory(tmp_path: Path, durability: str) -> None:
    """Two interrupts in one node resume with `Command(resume=...)` exactly as on InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = review_graph().compile(checkpointer=checkpointer)
        config = thread()
        seen = []
        out = graph.invoke(
            {"draft": "v1", "verdicts": [], "published": False}, config, durability=durability
        )
        seen.append(([i.value for i in out["__interrupt__"]], graph.get_state(config).next))
        out = graph.invoke(Command(resume="ok"), config, durability=durability)
        seen.append(([i.value for i in out["__interrupt__"]], graph.get_state(config).next))
        final = graph.invoke(Command(resume={"score": 5}), config, durability=durability)
        return seen, plain(final), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    seen, final, _ = ours
    assert seen[0][0][0]["round"] == 1 and seen[0][1] == ("review",)
    assert seen[1][0][0] == {"draft": final["draft"], "round": 2, "first": "ok"}
    assert final["verdicts"] == ["ok", {"score": 5}] and final["published"] is True


# -- parallel branches: one fails, the run resumes from pending writes ---------------------


class Fan(TypedDict):
    log: Annotated[list, operator.add]


def failing_fan_graph(calls: dict[str, int], fail_once: set[str]) -> StateGraph:
    """START -> (a, b) -> join; b fails the first time, after a has finished."""
    a_done = threading.Event()

    def a(state: Fan) -> dict[str, Any]:
        calls["a"] += 1
        a_done.set()
        return {"log": ["a:" + LONG]}

    def b(state: Fan) -> dict[str, Any]:
        calls["b"] += 1
        a_done.wait(5)
        if "b" in fail_once:
            # A margin for the runner to record a's result before b fails: a's thread may
            # stall on a loaded machine between setting the event and returning.
            time.sleep(0.5)
            fail_once.discard("b")
            raise RuntimeError("b failed")
        return {"log": ["b"]}

    graph = StateGraph(Fan)
    graph.add_node("a", a)
    graph.add_node("b", b)
    graph.add_node("join", lambda s: {"log": [f"join after {len(s['log'])}"]})
    graph.add_edge(START, "a")
    graph.add_edge(START, "b")
    graph.add_edge(["a", "b"], "join")
    graph.add_edge("join", END)
    return graph


@pytest.mark.parametrize("durability", DURABILITY)
def test_failed_branch_resumes_from_pending_writes(tmp_path: Path, durability: str) -> None:
    """After one parallel branch fails, resuming reruns only it: the other's write is reused."""

    def scenario(checkpointer: Checkpointer) -> Any:
        calls = {"a": 0, "b": 0}
        graph = failing_fan_graph(calls, {"b"}).compile(checkpointer=checkpointer)
        config = thread()
        with pytest.raises(RuntimeError, match="b failed"):
            graph.invoke({"log": []}, config, durability=durability)
        state = graph.get_state(config)
        tasks = sorted((t.name, t.error is not None, plain(t.result)) for t in state.tasks)
        final = graph.invoke(None, config, durability=durability)
        return dict(calls), tasks, plain(final), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    calls, tasks, final, _ = ours
    assert calls == {"a": 1, "b": 2}
    assert tasks == [("a", False, {"log": ["a:" + LONG]}), ("b", True, None)]
    assert final["log"] == ["a:" + LONG, "b", "join after 2"]


# -- Send (map-reduce) --------------------------------------------------------------------


@pytest.mark.parametrize("durability", DURABILITY)
def test_send_map_reduce_matches_memory(tmp_path: Path, durability: str) -> None:
    """`Send` fan-out (pending sends stored as writes) ends as on InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = send_graph().compile(checkpointer=checkpointer)
        config = thread()
        final = graph.invoke(
            {"topics": ["cats", "dogs", "birds"], "results": [], "summary": ""},
            config,
            durability=durability,
        )
        return plain(final), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    final, _ = ours
    assert len(final["results"]) == 4
    assert final["summary"].startswith("cats:4:lore")


# -- time travel --------------------------------------------------------------------------


@pytest.mark.parametrize("durability", ("sync", "async"))
def test_time_travel_matches_memory(tmp_path: Path, durability: str) -> None:
    """Replaying and forking (update_state) from an earlier checkpoint match InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = counter_graph().compile(checkpointer=checkpointer)
        config = thread()
        graph.invoke({"count": 0, "log": []}, config, durability=durability)
        past = next(s for s in graph.get_state_history(config) if s.next == ("step2",))
        replayed = graph.invoke(None, past.config, durability=durability)
        forked_config = graph.update_state(past.config, {"count": 100, "log": ["forked"]})
        fork_state = graph.get_state(forked_config)
        forked = graph.invoke(None, forked_config, durability=durability)
        return (
            plain(replayed),
            plain(fork_state.values),
            fork_state.next,
            plain(forked),
            history(graph, config),
        )

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    replayed, fork_values, fork_next, forked, rows = ours
    assert replayed["count"] == 3
    assert fork_values["count"] == 100 and fork_next == ("step2",)
    assert forked["count"] == 102 and "forked" in forked["log"]
    assert len(rows) > 5


def test_exit_durability_time_travel(tmp_path: Path) -> None:
    """With durability "exit" only each run's final checkpoint is stored, as on InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = counter_graph().compile(checkpointer=checkpointer)
        config = thread()
        graph.invoke({"count": 0, "log": []}, config, durability="exit")
        graph.invoke({"count": 10, "log": []}, config, durability="exit")
        first = list(graph.get_state_history(config))[-1]
        rerun = graph.invoke({"count": 5, "log": []}, first.config, durability="exit")
        return plain(rerun), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    assert ours[0]["count"] == 8


# -- DeltaChannel (get_delta_channel_history) ----------------------------------------------


def concat(state: list, writes: Sequence[list]) -> list:
    """A batching-invariant list reducer for DeltaChannel."""
    return state + [item for write in writes for item in write]


class Delta(TypedDict):
    log: Annotated[list, DeltaChannel(concat, snapshot_frequency=3)]
    steps: int


def delta_graph() -> StateGraph:
    """START -> (left, right) -> tally: two tasks write the delta channel in one step."""
    graph = StateGraph(Delta)
    graph.add_node("left", lambda s: {"log": [f"left{s['steps']}", LONG[: 20 + s["steps"]]]})
    graph.add_node("right", lambda s: {"log": [f"right{s['steps']}"]})
    graph.add_node("tally", lambda s: {"steps": s["steps"] + 1, "log": [f"tally{len(s['log'])}"]})
    graph.add_edge(START, "left")
    graph.add_edge(START, "right")
    graph.add_edge(["left", "right"], "tally")
    graph.add_edge("tally", END)
    return graph


def delta_history_rows(checkpointer: Checkpointer, graph: Any, config: dict[str, Any]) -> Any:
    """get_delta_channel_history of every checkpoint in the thread, task ids dropped."""
    rows = []
    for snapshot in graph.get_state_history(config):
        found = checkpointer.get_delta_channel_history(config=snapshot.config, channels=["log"])
        entry = found["log"]
        rows.append(([(ch, value) for _, ch, value in entry["writes"]], entry.get("seed")))
    return rows


@pytest.mark.parametrize("durability", DURABILITY)
def test_delta_channel_graph_matches_memory(tmp_path: Path, durability: str) -> None:
    """A DeltaChannel state rebuilt from stored writes gives the same values as on InMemorySaver."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = delta_graph().compile(checkpointer=checkpointer)
        config = thread()
        for _ in range(4):
            final = graph.invoke(
                {"log": [], "steps": 0} if _ == 0 else {"log": ["more"]},
                config,
                durability=durability,
            )
        return plain(final), history(graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    final, _ = ours
    assert final["steps"] == 4
    assert len(final["log"]) > 12


def test_delta_channel_history_matches_memory(tmp_path: Path) -> None:
    """get_delta_channel_history returns InMemorySaver's writes, in order, and seed everywhere."""

    def scenario(checkpointer: Checkpointer) -> Any:
        graph = delta_graph().compile(checkpointer=checkpointer)
        config = thread()
        graph.invoke({"log": [], "steps": 0}, config)
        for _ in range(3):
            graph.invoke({"log": ["more"]}, config)
        return delta_history_rows(checkpointer, graph, config)

    ours, theirs = both(tmp_path, scenario)
    assert ours == theirs
    assert any(len(writes) > 2 for writes, _ in ours)


def test_async_delta_channel_history_matches_memory(tmp_path: Path) -> None:
    """aget_delta_channel_history on AsyncSaver returns what InMemorySaver returns."""

    async def scenario(checkpointer: Checkpointer) -> Any:
        graph = delta_graph().compile(checkpointer=checkpointer)
        config = thread()
        await graph.ainvoke({"log": [], "steps": 0}, config)
        await graph.ainvoke({"log": ["more"]}, config)
        rows = []
        async for snapshot in graph.aget_state_history(config):
            found = await checkpointer.aget_delta_channel_history(
                config=snapshot.config, channels=["log", "steps"]
            )
            rows.append(
                {
                    ch: ([(c, v) for _, c, v in entry["writes"]], entry.get("seed"))
                    for ch, entry in found.items()
                }
            )
        return rows

    ours, theirs = asyncio.run(both_async(tmp_path, scenario))
    assert ours == theirs
    assert len(ours) >= 6


# -- copy_thread, prune, delete_for_runs under a real graph ---------------------------------


def test_copied_thread_continues_like_the_original(tmp_path: Path) -> None:
    """copy_thread gives the same history, and the graph continues on the copy as on the source."""
    with Saver.from_conn_string(str(tmp_path / "graph.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, thread("src"))
        saver.copy_thread("src", "dst")
        assert history(graph, thread("dst")) == history(graph, thread("src"))
        ours = graph.invoke({"messages": [HumanMessage(LONG, id="h2")]}, thread("dst"))
        ours_rows = history(graph, thread("dst"))
        assert len(history(graph, thread("src"))) == 5  # the source is untouched
    memory = agent_graph().compile(checkpointer=InMemorySaver())
    memory.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, thread("src"))
    theirs = memory.invoke({"messages": [HumanMessage(LONG, id="h2")]}, thread("src"))
    assert plain(ours) == plain(theirs)
    assert ours_rows == history(memory, thread("src"))


@pytest.mark.parametrize("make_graph", [counter_graph, delta_graph], ids=["plain", "delta"])
def test_prune_keep_latest_keeps_state_and_continues(tmp_path: Path, make_graph: Any) -> None:
    """After prune(keep_latest) the latest state is unchanged (DeltaChannel too) and runs go on."""
    start = {"count": 0, "log": []} if make_graph is counter_graph else {"log": [], "steps": 0}
    again = {"count": 7, "log": ["again"]} if make_graph is counter_graph else {"log": ["again"]}
    with Saver.from_conn_string(str(tmp_path / "graph.db")) as saver:
        graph = make_graph().compile(checkpointer=saver)
        for _ in range(3):
            graph.invoke(start, thread())
        # pause mid-run so the head is not a DeltaChannel snapshot point
        pause = {"interrupt_before": ["tally"]} if make_graph is delta_graph else {}
        graph.invoke(start, thread(), **pause)
        before = plain(graph.get_state(thread()).values)
        total = len(history(graph, thread()))
        saver.prune(["t"], strategy="keep_latest")
        assert plain(graph.get_state(thread()).values) == before
        kept = len(history(graph, thread()))
        if make_graph is counter_graph:
            assert kept == 1
        else:  # the ancestors back to the last DeltaChannel snapshot stay
            assert 1 < kept < total
        if pause:
            graph.invoke(None, thread())
        ours = graph.invoke(again, thread())
    memory = make_graph().compile(checkpointer=InMemorySaver())
    for _ in range(3):
        memory.invoke(start, thread())
    memory.invoke(start, thread(), **pause)
    if pause:
        memory.invoke(None, thread())
    theirs = memory.invoke(again, thread())
    assert plain(ours) == plain(theirs)


def test_prune_keep_latest_after_a_branch_not_taken_since(tmp_path: Path) -> None:
    """keep_latest leaves one checkpoint even when a branch channel last held a value long ago."""

    class Routed(TypedDict):
        n: int
        log: Annotated[list, operator.add]

    graph = StateGraph(Routed)
    graph.add_node("first", lambda s: {"log": ["first"]})
    graph.add_node("other", lambda s: {"log": ["other"]})
    graph.add_conditional_edges(
        START, lambda s: "first" if s["n"] == 0 else "other", ["first", "other"]
    )
    graph.add_edge("first", END)
    graph.add_edge("other", END)
    with Saver.from_conn_string(str(tmp_path / "graph.db")) as saver:
        compiled = graph.compile(checkpointer=saver)
        for n in range(10):
            compiled.invoke({"n": n, "log": []}, thread())
        before = plain(compiled.get_state(thread()).values)
        saver.prune(["t"], strategy="keep_latest")
        assert plain(compiled.get_state(thread()).values) == before
        assert len(history(compiled, thread())) == 1


def test_delete_for_runs_removes_one_run_of_a_graph(tmp_path: Path) -> None:
    """delete_for_runs of the second run leaves the history of the first run only."""
    first_run, second_run = str(uuid.uuid4()), str(uuid.uuid4())

    def run(checkpointer: Checkpointer, runs: list[str]) -> Any:
        graph = counter_graph().compile(checkpointer=checkpointer)
        for run_id in runs:
            config = {"configurable": {"thread_id": "t", "run_id": run_id}}
            graph.invoke({"count": 0, "log": []}, config)
        return graph

    with Saver.from_conn_string(str(tmp_path / "graph.db")) as saver:
        graph = run(saver, [first_run, second_run])
        assert len(history(graph, thread())) == 10
        saver.delete_for_runs([second_run])
        ours = history(graph, thread())
        runs = {s.metadata.get("run_id") for s in graph.get_state_history(thread())}
    assert runs == {first_run}
    assert ours == history(run(InMemorySaver(), [first_run]), thread())
