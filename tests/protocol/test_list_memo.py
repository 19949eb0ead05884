"""A planner extends a list channel from the encoding it planned last time (`_extend`):
its plans must be the very plans a fresh planner makes for the same puts.

The oracle is a planner that has never seen the thread (no memo), given the same known
refs and parent entries; both plan each step of random list histories: appends, edits
of old elements, shrinking, duplicates, secrets, and values under and over INLINE_LIMIT.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from pydantic import SecretStr

from threadloom.langgraph.tuples import serialization
from threadloom.protocol import Known, Planner, _fingerprint, _list_memo
from threadloom.protocol.restore import raw_channels
from threadloom.protocol.shapes import NOTHING_KNOWN

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
    _plans_match_a_fresh_planner(history, remember)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(), st.booleans())
def test_lists_with_large_elements_plan_what_a_fresh_planner_plans(
    history: list[list[Any]], remember: bool
) -> None:
    """With thresholds lowered so that large encodings are memoized by length only
    (KEEP_BELOW) and large fingerprint chunks by digest (SEAL_FROM), plans stay exact."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_list_memo, "KEEP_BELOW", 300)
        patch.setattr(_fingerprint, "SEAL_FROM", 2000)
        _plans_match_a_fresh_planner(history, remember)


def _plans_match_a_fresh_planner(history: list[list[Any]], remember: bool) -> None:
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
        assert a.known_refs(state) == frozenset(state.refs) | a.refs
        assert a.planned == a.refs - state.refs
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


# -- in-place changes: the memo must never trust object identity ------------------------


def _mutations() -> st.SearchStrategy[tuple[str, int, int]]:
    kinds = st.sampled_from(
        [
            "append",
            "append",
            "content",
            "same-content",
            "kwargs",
            "reorder",
            "int-to-bool",
            "int-to-float",
            "zero-sign",
            "tool-args",
            "id-none",
            "extra",
            "tuple",
        ]
    )
    return st.tuples(kinds, st.integers(0, 10_000), st.integers(1, 12))


def _tool_message(n: int, size: int) -> Any:
    call = {"name": "search", "args": {"q": f"q{n}", "turn": 1}, "id": f"c{n}", "type": "tool_call"}
    return AIMessage(content="x" * size, id=f"a{n}", tool_calls=[call])


def _mutate(messages: list[Any], kind: str, at: int, count: int, counter: list[int]) -> None:
    """Change `messages` in place as a node could (same list, same message objects)."""
    if kind == "append" or not messages:
        for _ in range(count):
            counter[0] += 1
            n = counter[0]
            messages.append(_tool_message(n, 200) if n % 3 == 0 else message(n, 300, False))
        return
    m = messages[at % len(messages)]
    if kind == "content":
        m.content = m.content + " edited"
    elif kind == "same-content":
        m.content = "".join(list(m.content))  # an equal string, another object
    elif kind == "kwargs":
        m.additional_kwargs["note"] = at
    elif kind == "reorder":
        m.additional_kwargs.update(a=1, b=2)
        m.additional_kwargs["a"] = m.additional_kwargs.pop("a")  # same items, new order
    elif kind == "int-to-bool":
        m.additional_kwargs["flag"] = 1
        messages[(at + 1) % len(messages)].additional_kwargs["flag"] = True
    elif kind == "int-to-float":
        m.response_metadata["n"] = 1.0 if m.response_metadata.get("n") == 1 else 1
    elif kind == "zero-sign":
        m.response_metadata["z"] = -0.0 if m.response_metadata.get("z") == 0.0 else 0.0
    elif kind == "tool-args" and getattr(m, "tool_calls", None):
        m.tool_calls[0]["args"]["turn"] += 1
    elif kind == "id-none":
        m.id = None if m.id is not None else f"fresh-{at}"
    elif kind == "extra":
        m.__pydantic_extra__["mood"] = "new"  # type: ignore[index]
    elif kind == "tuple":
        m.additional_kwargs["seq"] = (
            (1, 2) if isinstance(m.additional_kwargs.get("seq"), list) else [1, 2]
        )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutations(), min_size=2, max_size=10), st.booleans())
def test_messages_changed_in_place_plan_what_a_fresh_planner_plans(
    steps: list[tuple[str, int, int]], remember: bool
) -> None:
    """A message changed in place (same object, even to an equal-looking value) is planned anew."""
    _changes_are_planned_anew(steps, remember)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_mutations(), min_size=2, max_size=10), st.booleans())
def test_large_messages_changed_in_place_plan_what_a_fresh_planner_plans(
    steps: list[tuple[str, int, int]], remember: bool
) -> None:
    """The same, with large encodings and fingerprint chunks kept by length and digest."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_list_memo, "KEEP_BELOW", 250)
        patch.setattr(_fingerprint, "SEAL_FROM", 600)
        _changes_are_planned_anew(steps, remember)


def _changes_are_planned_anew(steps: list[tuple[str, int, int]], remember: bool) -> None:
    warm = Planner(AGENT, serialization())
    known: set[str] = set()
    messages: list[Any] = []
    counter = [0]
    for step, (kind, at, count) in enumerate(steps, start=1):
        _mutate(messages, kind, at, count, counter)
        current = list(messages)  # LangGraph hands each put a new list of the same objects
        cold = Planner(AGENT, serialization())
        state = Known(frozenset(known), {}) if remember else NOTHING_KNOWN
        a = warm.plan_checkpoint(config("t"), checkpoint(step, current), {}, state)
        b = cold.plan_checkpoint(config("t"), checkpoint(step, current), {}, state)
        assert a.puts == b.puts
        assert a.refs == b.refs
        assert a.known_refs(state) == frozenset(state.refs) | a.refs
        if remember:
            known |= a.refs


class _Spy:
    """A serializer wrapper that records the length of every list it encodes."""

    def __init__(self, serde: Any) -> None:
        self.serde = serde
        self.lists: list[int] = []

    def dumps_typed(self, obj: Any) -> Any:
        if isinstance(obj, list):
            self.lists.append(len(obj))
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: Any) -> Any:
        return self.serde.loads_typed(data)


def test_a_grown_list_of_messages_is_not_encoded_again() -> None:
    """With fingerprints the old messages are compared, never re-encoded: only the tail is."""
    planner = Planner(AGENT, serialization())
    spy = _Spy(planner.serde.serde)
    planner.serde.serde = spy  # type: ignore[assignment]
    messages = [message(n, 300, False) for n in range(200)]
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    spy.lists.clear()
    grown = [*messages, message(200, 300, False), message(201, 300, False)]
    planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    assert spy.lists == [2]


def test_a_message_changed_in_place_is_encoded_again() -> None:
    """An old message edited in place sends the planner back to encoding the list."""
    planner = Planner(AGENT, serialization())
    spy = _Spy(planner.serde.serde)
    planner.serde.serde = spy  # type: ignore[assignment]
    messages = [message(n, 300, False) for n in range(200)]
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    messages[17].additional_kwargs["edited"] = True
    spy.lists.clear()
    grown = [*messages, message(200, 5, False)]
    planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    assert 201 in spy.lists


def test_a_list_too_long_for_its_fingerprint_keeps_its_encodings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Over the per-list budget with its fingerprint, a memo keeps its encodings without it."""
    messages = [message(n, 300, False) for n in range(100)]
    sizing = Planner(AGENT, serialization())
    payload = sum(len(p) for _, p in sizing.dump_elements(messages, "m"))
    sizing.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    (full,) = sizing._lists.values()
    assert full.proof is not None
    bare = full._replace(proof=None).size
    planner = Planner(AGENT, serialization(), memo_bytes=2 * (bare + full.proof.size // 2))
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    (memo,) = planner._lists.values()
    assert memo.proof is None and memo.total == payload
    grown = [*messages, message(100, 300, False)]
    a = planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    b = Planner(AGENT, serialization()).plan_checkpoint(
        config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN
    )
    assert a.puts == b.puts


def test_fingerprints_can_be_turned_off() -> None:
    """`model_fingerprints=False`: a grown list is proven by encoding it again, same plans."""
    from dataclasses import replace

    planner = Planner(AGENT, replace(serialization(), model_fingerprints=False))
    spy = _Spy(planner.serde.serde)
    planner.serde.serde = spy  # type: ignore[assignment]
    messages = [message(n, 300, False) for n in range(50)]
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    spy.lists.clear()
    grown = [*messages, message(50, 300, False)]
    a = planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    assert spy.lists == [51]  # the byte proof (the one new message is encoded alone)
    b = Planner(AGENT, serialization()).plan_checkpoint(
        config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN
    )
    assert a.puts == b.puts


# -- large elements: kept by length, proven by digest ---------------------------------------


def test_a_large_tool_result_stays_out_of_the_memo_and_the_list_is_still_extended() -> None:
    """A 1 MiB tool result: the memo keeps its length, not its bytes, so the list stays
    memoized, and the next put encodes only the new messages (its ref is known)."""
    planner = Planner(AGENT, serialization())
    spy = _Spy(planner.serde.serde)
    planner.serde.serde = spy  # type: ignore[assignment]
    big = ToolMessage(content="r" * (1 << 20), tool_call_id="c1", id="tool")
    messages = [message(0, 300, False), _tool_message(1, 20), big]
    first = planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    assert planner.memo_size < 64 * 1024
    spy.lists.clear()
    grown = [*messages, message(3, 300, False), message(4, 300, False)]
    state = Known(frozenset(first.refs), {})
    a = planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, state)
    assert spy.lists == [2]  # the two new messages, not the list
    b = Planner(AGENT, serialization()).plan_checkpoint(
        config("t"), checkpoint(2, grown), {}, state
    )
    assert a.puts == b.puts


def test_a_large_result_whose_ref_is_not_known_is_planned_in_full() -> None:
    """Its bytes were not kept: when its document must be planned again (its ref not
    known), the planner encodes the list anew and plans what a fresh planner plans."""
    planner = Planner(AGENT, serialization())
    big = ToolMessage(content="r" * (1 << 20), tool_call_id="c1", id="tool")
    messages = [message(0, 300, False), big]
    planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    grown = [*messages, message(2, 300, False)]
    a = planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN)
    b = Planner(AGENT, serialization()).plan_checkpoint(
        config("t"), checkpoint(2, grown), {}, NOTHING_KNOWN
    )
    assert a.puts == b.puts
    assert any(p.data["ref"].startswith("p-") for p in a.puts[:-1])  # its parts, again


def test_a_large_result_changed_in_place_is_not_reused() -> None:
    """One character of a 1 MiB result changed in place: the digest differs, a new ref."""
    planner = Planner(AGENT, serialization())
    big = ToolMessage(content="r" * (1 << 20), tool_call_id="c1", id="tool")
    messages = [message(0, 300, False), big]
    first = planner.plan_checkpoint(config("t"), checkpoint(1, messages), {}, NOTHING_KNOWN)
    big.content = big.content[:-1] + "s"
    state = Known(frozenset(first.refs), {})
    grown = [*messages, message(2, 300, False)]
    a = planner.plan_checkpoint(config("t"), checkpoint(2, grown), {}, state)
    b = Planner(AGENT, serialization()).plan_checkpoint(
        config("t"), checkpoint(2, grown), {}, state
    )
    assert a.puts == b.puts
    assert a.puts[-1].data["channels"] != first.puts[-1].data["channels"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_a_planner_without_keys_plans_the_same_documents(history: list[list[Any]]) -> None:
    """A planner made with `keyed=False` (the engine's) plans the documents, refs and
    entries a keyed one plans, step after step, with every key left empty."""
    bare, keyed = Planner(AGENT, serialization(), keyed=False), Planner(AGENT, serialization())
    for step, messages in enumerate(history, start=1):
        a = bare.plan_checkpoint(config("t"), checkpoint(step, messages), {"step": step})
        b = keyed.plan_checkpoint(config("t"), checkpoint(step, messages), {"step": step})
        assert [p._replace(key="") for p in b.puts] == a.puts
        assert all(p.key == "" for p in a.puts) and all(p.key for p in b.puts)
        assert (a.refs, a.entries) == (b.refs, b.entries)
        writes = [("messages", messages[-1:]), ("__error__", "boom")]
        c = bare.plan_writes(a.config, writes, "task")
        d = keyed.plan_writes(b.config, writes, "task")
        assert [p._replace(key="") for p in d.puts] == c.puts


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_the_planned_list_is_the_list_its_documents_hold(history: list[list[Any]]) -> None:
    """`planned_list` gives, for the list a plan just made, the elements and chunks that
    its planned documents give when read back (`raw_channels`); for any other ref, None."""
    planner = Planner(AGENT, serialization())
    for step, messages in enumerate(history, start=1):
        plan = planner.plan_checkpoint(config("t"), checkpoint(step, messages), {})
        entry = plan.checkpoint.data["channels"]["messages"]
        found = planner.planned_list("t", "", "messages", entry.get("blob", "b-none"))
        if "blob" not in entry:
            assert found is None  # inline: no list blob
            continue
        fetched = {p.data["ref"]: p.data for p in plan.puts[:-1]}
        expected = raw_channels({"messages": entry}, fetched)["messages"]
        if found is None:
            # Only a list of one (never memoized) or with an encoding too large to keep.
            large = any(len(payload) >= _list_memo.KEEP_BELOW for _, payload in expected.items)
            assert len(expected.items) < 2 or large
            continue
        assert found == expected
        assert planner.planned_list("t", "", "messages", "b-" + "0" * 64) is None
        assert planner.planned_list("t", "", "other", entry["blob"]) is None
