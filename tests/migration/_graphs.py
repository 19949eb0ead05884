"""Real LangGraph graphs for the migration tests, and a JSON form of what they store.

Imported by the tests (threadloom's venv) and by `naas_engine_checkpoints.py` (the naas
venv), so it imports only LangGraph and langchain-core: no pytest, no threadloom. The
graphs are those of tests/engine/test_graphs.py (a deterministic model, no network):
each `run` leaves a thread as an application would find it (tools called, a subgraph
paused at an interrupt, a review paused, a fan-out whose branch failed, Sends, a fork),
each `resume` continues it. `snapshots` and `tuples` give everything LangGraph returns
for a thread (every `StateSnapshot` field, every checkpoint tuple, pending writes in
order) as JSON-able values, the same in both venvs, so two checkpointers that hold the
same thread give equal forms.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import threading
import time
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.types import Command, Send, interrupt

LONG = "lorem ipsum dolor sit amet " * 80  # > 1 KiB: a blob or list items, not inline
SCENARIOS = ("tools", "subgraph", "review", "fanout", "send", "fork")


def plain(value: Any, ids: bool = True) -> Any:
    """A JSON-able form of a stored value (messages by their fields; without their ids
    unless `ids`: a node that does not set them gets random ones)."""
    if isinstance(value, BaseMessage):
        dumped = value.model_dump()
        if not ids:
            dumped.pop("id", None)
        return {"message": type(value).__name__, **plain(dumped, ids)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), ids) for f in dataclasses.fields(value)}
    if isinstance(value, BaseException):
        return {"error": type(value).__name__, "args": plain(list(value.args), ids)}
    if isinstance(value, Send):
        return {"send": value.node, "arg": plain(value.arg, ids)}
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {str(k): plain(v, ids) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [plain(v, ids) for v in value]
        return sorted(items, key=repr) if isinstance(value, (set, frozenset)) else items
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"repr": repr(value)}


# -- the graphs ---------------------------------------------------------------------------


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


def _model(state: MessagesState) -> dict[str, Any]:
    messages = state["messages"]
    turn = sum(isinstance(m, HumanMessage) for m in messages)
    last = messages[-1]
    if isinstance(last, HumanMessage):
        call = {"name": "multiply", "args": {"a": 6, "b": turn + 1}, "id": f"call-{turn}"}
        return {"messages": [AIMessage(content="", tool_calls=[call], id=f"ai-{turn}-call")]}
    assert isinstance(last, ToolMessage)
    return {
        "messages": [AIMessage(content=f"The answer is {last.content}. {LONG}", id=f"ai-{turn}")]
    }


def agent_graph() -> StateGraph:
    """agent -> tools (ToolNode) -> agent -> END."""
    graph = StateGraph(MessagesState)
    graph.add_node("agent", _model)
    graph.add_node("tools", ToolNode([multiply]))
    graph.add_edge(START, "agent")
    graph.add_conditional_edges("agent", tools_condition)
    graph.add_edge("tools", "agent")
    return graph


class Inner(TypedDict):
    messages: Annotated[list, operator.add]
    notes: Annotated[list, operator.add]


class Outer(TypedDict):
    messages: Annotated[list, operator.add]
    notes: Annotated[list, operator.add]
    done: bool


def subgraph_graph() -> StateGraph:
    """A parent whose middle node is a compiled subgraph that interrupts once."""
    inner = StateGraph(Inner)
    inner.add_node("research", lambda s: {"notes": ["researched " + str(len(s["messages"]))]})

    def approve(state: Inner) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "notes": state["notes"]})
        return {"notes": [f"approved={answer}"], "messages": [LONG]}

    inner.add_node("approve", approve)
    inner.add_edge(START, "research")
    inner.add_edge("research", "approve")
    outer = StateGraph(Outer)
    outer.add_node("prepare", lambda s: {"messages": ["prepared"]})
    outer.add_node("child", inner.compile())
    outer.add_node("finish", lambda s: {"done": True})
    outer.add_edge(START, "prepare")
    outer.add_edge("prepare", "child")
    outer.add_edge("child", "finish")
    outer.add_edge("finish", END)
    return outer


class Review(TypedDict):
    draft: str
    verdicts: Annotated[list, operator.add]
    published: bool


def review_graph() -> StateGraph:
    """write -> review (two interrupts for a human verdict) -> publish."""

    def review(state: Review) -> dict[str, Any]:
        first = interrupt({"draft": state["draft"][:20], "round": 1})
        second = interrupt({"round": 2, "first": first})
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


class Fan(TypedDict):
    log: Annotated[list, operator.add]


def fanout_graph(fail: bool) -> StateGraph:
    """START -> (a, b) -> join; b fails (after a finished) when `fail`."""
    a_done = threading.Event()

    def a(state: Fan) -> dict[str, Any]:
        a_done.set()
        return {"log": ["a:" + LONG]}

    def b(state: Fan) -> dict[str, Any]:
        a_done.wait(5)
        time.sleep(0.05)  # margin for the runner to record a's result before b fails
        if fail:
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


class MapState(TypedDict):
    topics: list[str]
    results: Annotated[list, operator.add]
    summary: str


def send_graph() -> StateGraph:
    """plan -> Send("work", topic) per topic -> summarize."""

    def fan_out(state: MapState) -> list[Send]:
        return [Send("work", {"topic": t}) for t in state["topics"]]

    graph = StateGraph(MapState)
    graph.add_node("plan", lambda s: {"topics": [*s["topics"], "extra"]})
    graph.add_node("work", lambda s: {"results": [f"{s['topic']}:{len(s['topic'])}:{LONG}"]})
    graph.add_node("summarize", lambda s: {"summary": ",".join(r[:12] for r in s["results"])})
    graph.add_edge(START, "plan")
    graph.add_conditional_edges("plan", fan_out, ["work"])
    graph.add_edge("work", "summarize")
    graph.add_edge("summarize", END)
    return graph


class Counter(TypedDict):
    count: int
    log: Annotated[list, operator.add]


def counter_graph() -> StateGraph:
    """step1 -> step2 -> step3, each appending to the log and bumping the count."""
    graph = StateGraph(Counter)
    for name in ("step1", "step2", "step3"):
        graph.add_node(name, lambda s, n=name: {"count": s["count"] + 1, "log": [n + ":" + LONG]})
    graph.add_edge(START, "step1")
    graph.add_edge("step1", "step2")
    graph.add_edge("step2", "step3")
    graph.add_edge("step3", END)
    return graph


def graph_of(name: str, *, fail: bool = False) -> StateGraph:
    """The graph of scenario `name` (`fail`: the fan-out's branch b fails)."""
    if name == "tools":
        return agent_graph()
    if name == "subgraph":
        return subgraph_graph()
    if name == "review":
        return review_graph()
    if name == "fanout":
        return fanout_graph(fail)
    if name == "send":
        return send_graph()
    if name == "fork":
        return counter_graph()
    raise ValueError(name)


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "user_id": f"owner-of-{thread_id}"}}


def run(name: str, checkpointer: Any, thread_id: str) -> None:
    """Leave thread `thread_id` as scenario `name` does (paused, failed or done)."""
    conf = config(thread_id)
    if name == "tools":
        graph = agent_graph().compile(checkpointer=checkpointer)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, conf)
        graph.invoke({"messages": [HumanMessage(LONG, id="h2")]}, conf)
    elif name == "subgraph":
        graph = subgraph_graph().compile(checkpointer=checkpointer)
        graph.invoke({"messages": ["hi"], "notes": [], "done": False}, conf)
    elif name == "review":
        graph = review_graph().compile(checkpointer=checkpointer)
        graph.invoke({"draft": "v1", "verdicts": [], "published": False}, conf)
        graph.invoke(Command(resume="ok"), conf)
    elif name == "fanout":
        graph = fanout_graph(True).compile(checkpointer=checkpointer)
        with contextlib.suppress(RuntimeError):  # b fails: the thread keeps a's write
            graph.invoke({"log": []}, conf)
    elif name == "send":
        graph = send_graph().compile(checkpointer=checkpointer)
        graph.invoke({"topics": ["cats", "dogs", "birds"], "results": [], "summary": ""}, conf)
    elif name == "fork":
        graph = counter_graph().compile(checkpointer=checkpointer)
        graph.invoke({"count": 0, "log": []}, conf)
        past = next(s for s in graph.get_state_history(conf) if s.next == ("step2",))
        forked = graph.update_state(past.config, {"count": 100, "log": ["forked"]})
        graph.invoke(None, forked)
    else:
        raise ValueError(name)


def resume(name: str, checkpointer: Any, thread_id: str) -> Any:
    """Continue the thread scenario `name` left; return the final values (plain)."""
    conf = config(thread_id)
    graph = graph_of(name).compile(checkpointer=checkpointer)
    if name in ("subgraph", "review"):
        out = graph.invoke(Command(resume={"verdict": "yes"}), conf)
    elif name == "fanout":
        out = graph.invoke(None, conf)
    elif name == "tools":
        out = graph.invoke({"messages": [HumanMessage("and 6 x 4?", id="h3")]}, conf)
    elif name == "send":
        out = graph.invoke({"topics": ["fish"], "results": [], "summary": ""}, conf)
    else:
        out = graph.invoke({"count": 7, "log": ["again"]}, conf)
    return plain(out, ids=False)


# -- what a checkpointer returns for a thread ---------------------------------------------


def _task(task: Any) -> dict[str, Any]:
    state = task.state
    return {
        "id": task.id,
        "name": task.name,
        "path": plain(task.path),
        "error": plain(task.error),
        "interrupts": plain(task.interrupts),
        "state": plain(state.config if hasattr(state, "config") else state),
        "result": plain(task.result),
    }


def snapshot(state: Any) -> dict[str, Any]:
    """Every field of a `StateSnapshot`."""
    return {
        "values": plain(state.values),
        "next": list(state.next),
        "config": plain(state.config),
        "metadata": plain(state.metadata),
        "created_at": state.created_at,
        "parent_config": plain(state.parent_config),
        "tasks": [_task(t) for t in state.tasks],
        "interrupts": plain(state.interrupts),
    }


def snapshots(name: str, checkpointer: Any, thread_id: str) -> dict[str, Any]:
    """`get_state` (with subgraphs) and `get_state_history` of the thread and of every
    subgraph namespace its latest state shows."""
    graph = graph_of(name).compile(checkpointer=checkpointer)
    conf = config(thread_id)
    state = graph.get_state(conf, subgraphs=True)
    children = {}
    for task in state.tasks:
        if task.state is not None and hasattr(task.state, "config"):
            child = task.state.config
            ns = child["configurable"]["checkpoint_ns"]
            children[ns] = {
                "state": snapshot(task.state),
                "history": [snapshot(s) for s in graph.get_state_history(child)],
            }
    return {
        "state": snapshot(state),
        "history": [snapshot(s) for s in graph.get_state_history(conf)],
        "children": children,
    }


def tuples(checkpointer: Any, thread_id: str) -> list[dict[str, Any]]:
    """Every checkpoint tuple of the thread (all namespaces, newest first), pending writes
    in the order the checkpointer returns them."""
    return [
        {
            "config": plain(t.config),
            "parent": plain(t.parent_config),
            "checkpoint": plain(t.checkpoint),
            "metadata": plain(t.metadata),
            "writes": plain(t.pending_writes),
        }
        for t in checkpointer.list({"configurable": {"thread_id": thread_id}})
    ]


def continued(name: str, checkpointer: Any, thread_id: str) -> dict[str, Any]:
    """Resume the thread; return the final values and the history without ids or times
    (new checkpoints get new ids on each side)."""
    final = resume(name, checkpointer, thread_id)
    graph = graph_of(name).compile(checkpointer=checkpointer)
    rows = [
        [plain(s.values, ids=False), list(s.next), s.metadata.get("step"), s.metadata.get("source")]
        for s in graph.get_state_history(config(thread_id))
    ]
    return {"final": final, "history": rows}


def dated_thread(saver: Any, thread_id: str, days: list[int]) -> list[str]:
    """Checkpoints of `thread_id` dated `days` (2024-05-DD, UTC), one message each, put
    through `saver` as a graph's steps would be; returns their `ts`."""
    from langgraph.checkpoint.base import empty_checkpoint

    stamps: list[str] = []
    parent: str | None = None
    for n, day in enumerate(days, start=1):
        made = empty_checkpoint()
        made["id"] = f"1ef0{day:04d}-0000-6000-8000-{n:012d}"
        made["ts"] = f"2024-05-{day:02d}T06:32:42.235444+00:00"
        made["channel_values"] = {"messages": [HumanMessage(f"turn {n}", id=f"h{n}")]}
        made["channel_versions"] = {"messages": n}
        conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if parent is not None:
            conf["checkpoint_id"] = parent
        saver.put({"configurable": conf}, made, {"source": "loop", "step": n}, {"messages": n})
        parent = made["id"]
        stamps.append(made["ts"])
    return stamps
