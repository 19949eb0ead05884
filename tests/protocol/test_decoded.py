"""Decoded list chunks: kept as pickles of the serializer's own result, handed out fresh."""

from __future__ import annotations

import dataclasses
import math
import pickle
import sys
import types
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from threadloom.core.lru import Budget
from threadloom.langgraph.tuples import KEPT_CLASSES
from threadloom.protocol.decoded import DecodedChunks, frame, load_elements

SERDE = JsonPlusSerializer()


class Counting:
    """LangGraph's serializer, counting the payloads it is asked to decode."""

    def __init__(self) -> None:
        self.calls = 0

    def loads_typed(self, typed: tuple[str, bytes]) -> Any:
        self.calls += 1
        return SERDE.loads_typed(typed)


def _messages() -> list[Any]:
    return [
        HumanMessage("what is the weather?", id="m1"),
        AIMessage(
            "",
            id="m2",
            tool_calls=[{"name": "weather", "args": {"city": "Paris"}, "id": "c1"}],
        ),
        ToolMessage("sunny, 21 C", tool_call_id="c1", id="m3"),
        AIMessage("It is sunny in Paris.", id="m4", response_metadata={"tokens": [1, 2]}),
    ]


def test_a_chunk_met_again_is_unpickled_equal_and_fresh() -> None:
    """The first read decodes, the second decodes and keeps a pickle, every later read
    unpickles without the serializer: each gives objects equal to what the serializer
    makes and shared with no other read, so mutating one read leaves the next intact."""
    messages = _messages()
    items = [SERDE.dumps_typed(m) for m in messages]
    serde = Counting()
    chunks = DecodedChunks(serde.loads_typed, kept_classes=KEPT_CLASSES)
    reads = [chunks.elements("t", "c-1", items) for _ in range(4)]
    assert serde.calls == 2  # one framed call per decode, two decodes
    assert (chunks.misses, chunks.hits) == (2, 2)
    for read in reads:
        assert read == messages
        assert [type(m) for m in read] == [type(m) for m in messages]
    for one, two in zip(reads, reads[1:], strict=False):
        assert one is not two and all(a is not b for a, b in zip(one, two, strict=True))
    reads[3][1].tool_calls[0]["args"]["city"] = "Lyon"
    reads[3].append(HumanMessage("added"))
    again = chunks.elements("t", "c-1", items)
    assert again == messages and again[1].tool_calls[0]["args"]["city"] == "Paris"


def test_elements_that_do_not_come_back_equal_are_decoded_every_time() -> None:
    """A NaN is not equal to itself, so its chunk's pickle would not be proven: the chunk
    is decoded by the serializer on every read, and the reads stay right."""
    items = [SERDE.dumps_typed({"score": float("nan")}), SERDE.dumps_typed({"n": 1})]
    serde = Counting()
    chunks = DecodedChunks(serde.loads_typed)
    for _ in range(4):
        got = chunks.elements("t", "c-nan", items)
        assert math.isnan(got[0]["score"]) and got[1] == {"n": 1}
    assert serde.calls == 4 and chunks.hits == 0


class Opaque:
    """A decoded value without `__eq__`: two copies never compare equal."""

    def __init__(self, payload: bytes) -> None:
        self.payload = payload


class OpaqueSerializer:
    """Decodes every payload into an `Opaque`."""

    calls = 0

    def loads_typed(self, typed: tuple[str, bytes]) -> Any:
        self.calls += 1
        return Opaque(typed[1])


def test_a_class_without_equality_is_never_kept() -> None:
    serde = OpaqueSerializer()
    chunks = DecodedChunks(serde.loads_typed)
    items = [("bytes", b"a"), ("bytes", b"b")]
    for _ in range(3):
        got = chunks.elements("t", "c-opaque", items)
        assert [o.payload for o in got] == [b"a", b"b"]
    assert serde.calls == 6 and chunks.hits == 0


def test_kept_chunks_are_charged_to_the_budget_and_forgotten_by_thread() -> None:
    budget = Budget(1024 * 1024)
    chunks = DecodedChunks(SERDE.loads_typed, 512 * 1024, budget, KEPT_CLASSES)
    items = [SERDE.dumps_typed(m) for m in _messages()]
    for thread in ("a", "b"):
        for _ in range(2):
            chunks.elements(thread, "c-1", items)
    assert budget.used == chunks.weight > 2 * sum(len(p) for _, p in items) // 2
    chunks.forget("a")
    held = chunks.weight
    assert 0 < held == budget.used
    chunks.forget()
    assert chunks.weight == budget.used == 0


def test_no_capacity_keeps_nothing() -> None:
    serde = Counting()
    chunks = DecodedChunks(serde.loads_typed, 0)
    items = [SERDE.dumps_typed(m) for m in _messages()]
    for _ in range(3):
        assert chunks.elements("t", "c-1", items) == _messages()
    assert serde.calls == 3 and chunks.weight == 0


def test_framed_elements_decode_as_they_do_one_by_one() -> None:
    """Plain msgpack elements frame into one array; anything else decodes one by one."""
    values = [{"a": 1}, [1, 2], "text", 3.5]
    items = [SERDE.dumps_typed(v) for v in values]
    assert all(kind == "msgpack" for kind, _ in items)
    framed = frame(items)
    assert framed is not None and SERDE.loads_typed(framed) == values
    assert load_elements(items, SERDE.loads_typed) == values
    mixed = [*items, SERDE.dumps_typed(b"raw"), SERDE.dumps_typed(None)]
    assert frame(mixed) is None
    assert load_elements(mixed, SERDE.loads_typed) == [*values, b"raw", None]


@dataclasses.dataclass
class Tracked:
    """An application's class whose construction does more than build it."""

    n: int
    built: list[int] = dataclasses.field(default_factory=list, compare=False)

    def __post_init__(self) -> None:
        BUILT.append(self.n)


BUILT: list[int] = []


class TrackedSerializer:
    """Decodes every payload into a `Tracked`, as a serializer running the class does."""

    def loads_typed(self, typed: tuple[str, bytes]) -> Any:
        return Tracked(len(typed[1]))


def test_an_application_class_is_built_by_the_serializer_on_every_read() -> None:
    """A class outside `kept_classes` (its constructor may count, log or register) is never
    kept, even when its pickle would load back equal: each read runs its constructor."""
    chunks = DecodedChunks(TrackedSerializer().loads_typed, kept_classes=KEPT_CLASSES)
    items = [("bytes", b"a"), ("bytes", b"bb")]
    expected = [Tracked(1), Tracked(2)]
    BUILT.clear()
    for _ in range(4):
        assert chunks.elements("t", "c-app", items) == expected
    assert BUILT == [1, 2] * 4 and chunks.hits == 0
    allowed = {*KEPT_CLASSES, (Tracked.__module__, Tracked.__qualname__)}
    trusting = DecodedChunks(TrackedSerializer().loads_typed, kept_classes=allowed)
    for _ in range(4):
        trusting.elements("t", "c-app", items)
    assert trusting.hits == 2  # named, it is kept: the list is what decides


def test_a_chunk_too_big_to_stay_kept_is_not_pickled_again_and_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A chunk over a quarter of the capacity is marked, not pickled: every read decodes
    it once, none pays for a pickle the map could not keep."""
    serde = Counting()
    chunks = DecodedChunks(serde.loads_typed, 64 * 1024, kept_classes=KEPT_CLASSES)
    items = [SERDE.dumps_typed({"text": "x" * 20_000}), SERDE.dumps_typed({"n": 1})]
    pickled: list[object] = []
    real = pickle.dumps

    def counting_dumps(obj: object, *args: Any, **kwargs: Any) -> bytes:
        pickled.append(obj)
        return real(obj, *args, **kwargs)

    monkeypatch.setattr(pickle, "dumps", counting_dumps)
    for _ in range(6):
        assert chunks.elements("t", "c-big", items)[1] == {"n": 1}
    assert pickled == [] and chunks.hits == 0 and serde.calls == 6
    assert chunks.weight < 1024
    small = [SERDE.dumps_typed({"n": n}) for n in range(3)]
    for _ in range(3):
        chunks.elements("t", "c-small", small)
    assert len(pickled) == 1 and chunks.hits == 1  # the same map keeps a small chunk


def test_a_kept_pickle_that_no_longer_loads_falls_back_to_the_serializer() -> None:
    """A class named by a kept pickle that went away (a module reloaded or unloaded) does
    not fail the read: the serializer decodes the chunk, and it is not kept again."""
    module = types.ModuleType("threadloom_test_fleeting")

    class Thing:
        def __init__(self, payload: bytes) -> None:
            self.payload = payload

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Thing) and other.payload == self.payload

    class Replacement(Thing):
        pass

    Thing.__module__, Thing.__qualname__ = module.__name__, "Thing"
    vars(module)["Thing"] = Thing
    makes: list[type[Thing]] = [Thing]

    def loads(typed: tuple[str, bytes]) -> Any:
        return makes[0](typed[1])

    sys.modules[module.__name__] = module
    try:
        chunks = DecodedChunks(loads, kept_classes={(module.__name__, "Thing")})
        items = [("bytes", b"a"), ("bytes", b"b")]
        for _ in range(3):
            chunks.elements("t", "c-thing", items)
        assert chunks.hits == 1
        del vars(module)["Thing"]
        makes[0] = Replacement
        for _ in range(3):
            got = chunks.elements("t", "c-thing", items)
            assert [type(g) for g in got] == [Replacement, Replacement]
            assert [g.payload for g in got] == [b"a", b"b"]
        assert chunks.hits == 1
    finally:
        sys.modules.pop(module.__name__, None)
