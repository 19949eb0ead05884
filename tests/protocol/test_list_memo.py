"""A planner extends a list channel from the encoding it planned last time (`_extend`):
its plans must be the very plans a fresh planner makes for the same puts.

The oracle is a planner that has never seen the thread (no memo), given the same known
refs and parent entries; both plan each step of random list histories: appends, edits
of old elements, shrinking, duplicates, secrets, and values under and over INLINE_LIMIT.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import SecretStr

from threadloom._langgraph import serialization
from threadloom.protocol import Known, Planner
from threadloom.protocol.plan import NOTHING_KNOWN

AGENT = "engine.v1"


def config(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def checkpoint(step: int, messages: list[Any]) -> dict[str, Any]:
    return {
        "v": 4,
        "id": f"1f0d0000-0000-6000-8000-{step:012d}",
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": {"messages": messages},
        "channel_versions": {"messages": step},
        "versions_seen": {},
    }


def message(n: int, size: int, secret: bool) -> Any:
    text = f"message {n} " + "x" * size
    if secret:
        return AIMessage(content=text, id=f"m{n}", additional_kwargs={"key": SecretStr("hush")})
    return HumanMessage(content=text, id=f"m{n}")


@st.composite
def histories(draw: st.DrawFn) -> list[list[Any]]:
    steps = draw(st.integers(2, 8))
    current: list[Any] = []
    out = []
    counter = 0
    for _ in range(steps):
        action = draw(st.sampled_from(["append", "append", "append", "edit", "drop", "dup"]))
        if action == "append" or not current:
            for _ in range(draw(st.integers(1, 40))):
                counter += 1
                size = draw(st.sampled_from([5, 60, 400, 3000]))
                current = [
                    *current,
                    message(counter, size, draw(st.booleans()) and counter % 7 == 0),
                ]
        elif action == "edit":
            at = draw(st.integers(0, len(current) - 1))
            current = [*current[:at], message(10_000 + at, 50, False), *current[at + 1 :]]
        elif action == "drop":
            current = current[: draw(st.integers(0, len(current) - 1))]
        else:
            current = [*current, current[draw(st.integers(0, len(current) - 1))]]
        out.append(list(current))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.booleans())
def test_extended_lists_plan_exactly_what_a_fresh_planner_plans(
    history: list[list[Any]], remember: bool
) -> None:
    """Same puts, same refs, same entries, step after step, with or without known refs."""
    warm = Planner(AGENT, serialization())
    known: set[str] = set()
    for step, messages in enumerate(history, start=1):
        cold = Planner(AGENT, serialization())
        state = Known(frozenset(known), {}) if remember else NOTHING_KNOWN
        a = warm.plan_checkpoint(config("t"), checkpoint(step, messages), {}, state)
        b = cold.plan_checkpoint(config("t"), checkpoint(step, messages), {}, state)
        assert a.puts == b.puts
        assert a.refs == b.refs
        assert a.entries == b.entries
        if remember:
            known |= a.refs


def test_a_long_list_is_extended_not_redone() -> None:
    """The second put of a grown list takes the memo path (not the full one)."""
    planner = Planner(AGENT, serialization())
    messages = [message(n, 300, False) for n in range(100)]
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    calls: list[int] = []
    original = planner.dump_elements

    def spy(items: list[Any], what: str) -> Any:
        calls.append(len(items))
        return original(items, what)

    planner.dump_elements = spy  # type: ignore[method-assign]
    grown = [*messages, message(100, 300, False), message(101, 300, False)]
    planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    assert calls == [2]
