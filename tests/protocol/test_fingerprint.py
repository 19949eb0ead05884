"""Fingerprints (`protocol._fingerprint`): equal fingerprints only for values LangGraph's
serializer encodes alike, and the assumptions they rest on, held against LangGraph itself.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, ConfigDict, PlainSerializer, computed_field, field_serializer

from threadloom.protocol._fingerprint import CHUNK, Fingerprint, fingerprint, views


class Plain(BaseModel):
    """A model whose encoding is a function of its fields."""

    model_config = ConfigDict(extra="allow")
    value: Any = None


class Computed(BaseModel):
    value: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def double(self) -> int:
        return self.value * 2


class FieldSerialized(BaseModel):
    value: int = 0

    @field_serializer("value")
    def _value(self, value: int) -> int:
        return value


class Annotated_(BaseModel):
    value: Annotated[int, PlainSerializer(lambda v: v)] = 0


class OwnDump(BaseModel):
    value: int = 0

    def model_dump(self, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        return {"value": 1}


class Colour(str, enum.Enum):
    RED = "red"


class Text(str):
    pass


def fp(*items: Any) -> Fingerprint | None:
    seen = views(list(items))
    return None if seen is None else fingerprint(seen)


def test_messages_have_fingerprints() -> None:
    """LangChain's message classes qualify: pydantic's own dump, no function serializer."""
    assert fp(HumanMessage("a", id="1"), AIMessage("b", id="2"), ToolMessage("c", tool_call_id="t"))


@pytest.mark.parametrize("kind", [Computed, FieldSerialized, Annotated_, OwnDump])
def test_classes_whose_dump_runs_code_have_none(kind: type[BaseModel]) -> None:
    """Computed fields, field/plain serializers or an own model_dump: no fingerprint."""
    assert fp(kind(), kind()) is None


def test_non_models_have_none() -> None:
    """Plain values, dataclasses and None are encoded as usual, not fingerprinted."""
    assert fp({"a": 1}, {"b": 2}) is None
    assert fp("a", "b") is None


@pytest.mark.parametrize(
    "value",
    [(1, 2), Text("a"), Colour.RED, Plain(), 2**70, {1: "a"}, "\ud800", {1, 2}],
    ids=["tuple", "str-subclass", "enum", "nested-model", "big-int", "int-key", "surrogate", "set"],
)
def test_values_outside_the_strict_encoding_refuse(value: Any) -> None:
    """A field holding anything but exact JSON-like values refuses the fingerprint."""
    assert fp(Plain(value=value)) is None
    assert fp(Plain(value=[value])) is None


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (1, True),
        (1, 1.0),
        (0.0, -0.0),
        ({"x": 1, "y": 2}, {"y": 2, "x": 1}),
        ([1], [[1]]),
        ("1", 1),
        (None, ""),
    ],
    ids=["int-bool", "int-float", "zero-sign", "dict-order", "nesting", "str-int", "none-empty"],
)
def test_values_equal_under_python_equality_fingerprint_apart(a: Any, b: Any) -> None:
    """Values Python calls equal but LangGraph encodes differently never share a fingerprint."""
    serde = JsonPlusSerializer()
    assert serde.dumps_typed(Plain(value=a)) != serde.dumps_typed(Plain(value=b))
    left, right = fp(Plain(value=a)), fp(Plain(value=b))
    assert left is not None and right is not None
    assert left.chunks != right.chunks


def test_classes_are_compared_by_identity() -> None:
    """The same fields under another class are another fingerprint."""
    a = fp(HumanMessage("x", id="1"))
    b = fp(AIMessage("x", id="1"))
    assert a is not None and b is not None and a.types != b.types
    seen = views([AIMessage("x", id="1")])
    assert seen is not None and not a.holds(seen)


def test_extra_fields_are_covered() -> None:
    """An extra field (kept in __pydantic_extra__, not __dict__) changes the fingerprint."""
    message = HumanMessage("x", id="1")
    before = fp(message)
    message.__pydantic_extra__["mood"] = "new"  # type: ignore[index]
    seen = views([message])
    assert before is not None and seen is not None and not before.holds(seen)


def test_bytes_like_values_are_encoded_alike_by_langgraph() -> None:
    """The one conflation: bytes, bytearray and memoryview of equal content fingerprint alike,
    and LangGraph's serializer encodes a model holding any of them to the same bytes."""
    serde = JsonPlusSerializer()
    forms = [b"\x00data", bytearray(b"\x00data"), memoryview(b"\x00data")]
    encodings = {serde.dumps_typed(Plain(value=form)) for form in forms}
    assert len(encodings) == 1
    prints = {tuple(f.chunks) for f in (fp(Plain(value=form)) for form in forms) if f}
    assert len(prints) == 1


def test_holds_and_grown_by_chunks() -> None:
    """A grown list holds the old fingerprint; `grown` equals a fresh fingerprint."""
    messages = [HumanMessage(f"m{n}", id=str(n)) for n in range(2 * CHUNK + 5)]
    for size in (1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK):
        old = fp(*messages[:size])
        seen = views(messages)
        assert old is not None and seen is not None and old.holds(seen)
        assert old.grown(seen) == fingerprint(seen)
    old = fp(*messages[: CHUNK + 3])
    messages[CHUNK + 1].content = "changed"
    seen = views(messages)
    assert old is not None and seen is not None and not old.holds(seen)
    assert fp(*messages) is not None and not fp(*messages).holds(views(messages[:3]))  # type: ignore[union-attr,arg-type]


def test_a_large_chunk_is_kept_as_a_digest_and_still_tells_a_change() -> None:
    """A chunk of SEAL_FROM bytes or more is kept as 33 bytes; the same data holds, one
    character changed in a 1 MiB field does not."""
    from threadloom.protocol._fingerprint import SEAL_FROM

    big = ToolMessage(content="r" * (1 << 20), tool_call_id="c1", id="tool")
    items = [HumanMessage(content="hi", id="h"), big]
    seen = views(items)
    assert seen is not None
    taken = fingerprint(seen)
    assert taken is not None and taken.size < SEAL_FROM
    assert taken.holds(seen)
    big.content = big.content[:-1] + "s"
    changed = views(items)
    assert changed is not None and not taken.holds(changed)


def test_a_sealed_chunk_is_closed_and_never_encoded_again_by_growth() -> None:
    """Elements after a sealed chunk start a chunk of their own: `grown` keeps the sealed
    digest as it is (the 1 MiB field is not encoded again) and the result still tells a
    change in that field."""
    big = ToolMessage(content="r" * (1 << 20), tool_call_id="c1", id="tool")
    items = [HumanMessage(content="hi", id="h"), big]
    taken = fp(*items)
    grown_items = [*items, HumanMessage(content="next", id="n")]
    seen = views(grown_items)
    assert taken is not None and seen is not None and taken.holds(seen)
    after = taken.grown(seen)
    assert after is not None and after.chunks[0] is taken.chunks[0] and after.ends == [2, 3]
    assert after.holds(seen)
    big.content = "changed"
    changed = views(grown_items)
    assert changed is not None and not after.holds(changed)
