"""Reads through the decoded chunks agree with LangGraph's InMemorySaver, read after read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadloom import Saver

text = st.text(alphabet="abcdefghij klmnop\u00e9\u4e2d", min_size=0, max_size=900)


@st.composite
def message(draw: st.DrawFn) -> Any:
    kind = draw(st.sampled_from(["human", "ai", "tool"]))
    body = draw(text)
    n = draw(st.integers(0, 10**6))
    if kind == "human":
        return HumanMessage(body, id=f"h{n}")
    if kind == "ai":
        calls = [{"name": "f", "args": {"q": body[:20]}, "id": f"c{n}"}]
        return AIMessage(body, id=f"a{n}", tool_calls=draw(st.sampled_from([[], calls])))
    return ToolMessage(body, tool_call_id=f"c{n}", id=f"t{n}")


#: One step of a conversation's list: append messages, rewrite one, drop one, start over.
step = st.one_of(
    st.tuples(st.just("append"), st.lists(message(), min_size=1, max_size=6)),
    st.tuples(st.just("edit"), st.integers(0, 200), text),
    st.tuples(st.just("drop"), st.integers(0, 200)),
    st.tuples(st.just("reset"), st.lists(message(), max_size=4)),
)


def _apply(messages: list[Any], change: tuple[Any, ...]) -> list[Any]:
    kind = change[0]
    if kind == "append":
        return [*messages, *change[1]]
    if kind == "reset":
        return list(change[1])
    if not messages:
        return messages
    at = change[1] % len(messages)
    if kind == "drop":
        return messages[:at] + messages[at + 1 :]
    edited = messages[at].model_copy(update={"content": change[2]})
    return [*messages[:at], edited, *messages[at + 1 :]]


def _values(tuples: list[Any]) -> list[Any]:
    return [
        (t.config["configurable"]["checkpoint_id"], t.checkpoint["channel_values"]) for t in tuples
    ]


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=1, max_size=12))
def test_reads_again_and_again_agree_with_the_in_memory_saver(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]
) -> None:
    """Whatever a thread's list went through (appends, edits in place, drops, a fresh
    start), every read, the first and the ones served from the decoded chunks, returns
    what InMemorySaver returns, of the same classes; a read's objects mutated by the
    caller change no later read."""
    path: Path = tmp_path_factory.mktemp("decoded") / "d.db"
    oracle = InMemorySaver()
    with Saver.from_conn_string(str(path)) as saver:
        configs: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}}] * 2
        messages: list[Any] = []
        for n, change in enumerate(steps, start=1):
            messages = _apply(messages, change)
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-8000-{n:012d}"
            made["channel_values"] = {"messages": messages, "note": {"n": n, "pad": "p" * 1100}}
            made["channel_versions"] = {"messages": n, "note": n}
            versions = {"messages": n, "note": n}
            configs = [
                s.put(c, made, {"step": n}, versions)
                for s, c in zip((saver, oracle), configs, strict=True)
            ]
        latest: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for _ in range(3):
            ours, theirs = saver.get_tuple(latest), oracle.get_tuple(latest)
            assert ours is not None and theirs is not None
            got = ours.checkpoint["channel_values"]
            assert got == theirs.checkpoint["channel_values"]
            assert [type(m) for m in got["messages"]] == [type(m) for m in messages]
            got["messages"].append(HumanMessage("mutated by a node"))
            got["note"]["n"] = -1
            for m in got["messages"][:1]:
                m.content = "changed in place"
            listed = _values(list(saver.list(latest)))
            assert listed == _values(list(oracle.list(latest)))


def _latest(saver: Saver) -> Any:
    found = saver.get_tuple({"configurable": {"thread_id": "t", "checkpoint_ns": ""}})
    assert found is not None
    return found


def test_a_read_right_after_a_put_takes_its_list_from_the_plan_and_fetches_no_value(
    tmp_path: Path,
) -> None:
    """The get_tuple that follows a put rebuilds the list the planner just encoded without
    fetching a value document (the value cache stays empty), agrees with InMemorySaver
    and hands out fresh objects; a planner that forgot its lists reads from the file."""
    oracle = InMemorySaver()
    with Saver.from_conn_string(str(tmp_path / "p.db")) as saver:
        scope = saver.checkpoints.scope
        configs: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}}] * 2
        messages: list[Any] = []
        for n in range(1, 8):
            messages = [*messages, HumanMessage(f"question {n} " + "q" * 300, id=f"h{n}")]
            messages = [*messages, AIMessage(f"answer {n} " + "a" * 400, id=f"a{n}")]
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-8000-{n:012d}"
            made["channel_values"] = {"messages": messages, "step": n}
            made["channel_versions"] = {"messages": n, "step": n}
            versions = {"messages": n, "step": n}
            configs = [
                s.put(c, made, {"step": n}, versions)
                for s, c in zip((saver, oracle), configs, strict=True)
            ]
            scope.cache.clear()
            ours, theirs = _latest(saver), oracle.get_tuple(configs[1])
            assert scope.cache.size == 0, "the read fetched value documents"
            assert theirs is not None
            assert ours.checkpoint["channel_values"] == theirs.checkpoint["channel_values"]
            assert ours.metadata == theirs.metadata
            ours.checkpoint["channel_values"]["messages"][0].content = "changed by a node"
            ours.checkpoint["channel_values"]["messages"].append(HumanMessage("added"))
            again = _latest(saver)
            assert again.checkpoint["channel_values"]["messages"] == messages
        scope.closures.clear()
        scope.planner.forget_lists()
        from_file = _latest(saver)
        assert scope.cache.size > 0
        assert from_file.checkpoint["channel_values"]["messages"] == messages


@settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(step, min_size=1, max_size=10))
def test_every_read_right_after_a_put_agrees_with_the_in_memory_saver(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]
) -> None:
    """Whatever a thread's list went through, the read that follows each put (served from
    the planner's lists when it can) returns what InMemorySaver returns."""
    path: Path = tmp_path_factory.mktemp("planned") / "p.db"
    oracle = InMemorySaver()
    with Saver.from_conn_string(str(path)) as saver:
        configs: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}}] * 2
        messages: list[Any] = []
        for n, change in enumerate(steps, start=1):
            messages = _apply(messages, change)
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-8000-{n:012d}"
            made["channel_values"] = {"messages": messages, "step": n}
            made["channel_versions"] = {"messages": n, "step": n}
            versions = {"messages": n, "step": n}
            configs = [
                s.put(c, made, {"step": n}, versions)
                for s, c in zip((saver, oracle), configs, strict=True)
            ]
            ours, theirs = _latest(saver), oracle.get_tuple(configs[1])
            assert theirs is not None
            got = ours.checkpoint["channel_values"]
            assert got == theirs.checkpoint["channel_values"]
            assert [type(m) for m in got["messages"]] == [type(m) for m in messages]


class Opaque:
    """Not msgpack-encodable by JsonPlusSerializer (a memoryview): pickled with
    pickle_fallback=True, so its list element's kind is "pickle"."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.view = memoryview(b"x")

    def __reduce__(self) -> Any:
        return (Opaque, (self.n,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.n == self.n

    def __hash__(self) -> int:
        return self.n


@pytest.mark.parametrize("where", ["first", "tail"])
def test_a_pickled_element_is_read_as_a_pickle_right_after_its_put(
    tmp_path: Path, where: str
) -> None:
    """The planner's lists keep msgpack encodings only: a list holding an element the
    serializer pickles (pickle_fallback=True) is read from the file after its put, in
    the put that first plans it and in one that appends it to a remembered list, and
    agrees with InMemorySaver (it was read back as msgpack, `{}` or an error)."""
    serde = JsonPlusSerializer(pickle_fallback=True)
    assert serde.dumps_typed(Opaque(1))[0] == "pickle"
    oracle = InMemorySaver(serde=serde)
    with Saver.from_conn_string(str(tmp_path / "p.db"), serde=serde) as saver:
        configs: list[Any] = [{"configurable": {"thread_id": "t", "checkpoint_ns": ""}}] * 2
        items: list[Any] = ["a" * 600, "b" * 600]
        rounds = [[*items, Opaque(7)]] if where == "first" else [items, [*items, Opaque(7)]]
        for n, value in enumerate(rounds * 2, start=1):
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-8000-{n:012d}"
            made["channel_values"] = {"items": value}
            made["channel_versions"] = {"items": n}
            configs = [
                s.put(c, made, {"step": n}, {"items": n})
                for s, c in zip((saver, oracle), configs, strict=True)
            ]
            saver.checkpoints.scope.closures.clear()
            theirs = oracle.get_tuple(configs[1])
            assert theirs is not None
            assert (
                _latest(saver).checkpoint["channel_values"] == theirs.checkpoint["channel_values"]
            )
        scope = saver.checkpoints.scope
        scope.planner.forget_lists()
        scope.closures.clear()
        scope.cache.clear()
        assert _latest(saver).checkpoint["channel_values"] == {"items": rounds[-1]}
