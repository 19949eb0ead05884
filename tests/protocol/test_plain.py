"""Plain reading (`protocol.plain`): LangGraph's own serializer writes every value, and the
plain form must be exact, JSON-ready, and reached without importing or unpickling anything.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import enum
import importlib.abc
import json
import sys
import uuid
from collections.abc import Iterator, Sequence
from types import ModuleType, SimpleNamespace
from typing import Any

import ormsgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.load import dumpd
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    ChatMessage,
    FunctionMessage,
    HumanMessage,
    RemoveMessage,
    SystemMessage,
    ToolMessage,
)
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, SecretStr

from tests.helpers import unavailable
from threadloom.errors import InvalidValueError, ProtocolError
from threadloom.protocol.plain import MAX_DEPTH, human_text, message, plain, text, title

SERDE = JsonPlusSerializer()
HERE = __name__


def read(value: Any) -> Any:
    """The plain form of `value` as LangGraph's serializer stores it."""
    return plain(*SERDE.dumps_typed(value))


def ext(code: int, *fields: Any) -> ormsgpack.Ext:
    """A LangGraph msgpack extension holding `fields` (module, name, argument, ...)."""
    return ormsgpack.Ext(code, ormsgpack.packb(list(fields)))


def packed(value: Any) -> bytes:
    return ormsgpack.packb(value)


class Colour(enum.Enum):
    RED = "red"


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Profile(BaseModel):
    name: str
    seen: datetime.datetime
    token: SecretStr


FLIPPED: list[str] = []


def _flip() -> str:
    FLIPPED.append("unpickled")
    return "flipped"


class Trap:
    """Not msgpack-serializable; unpickling it runs `_flip`."""

    def __reduce__(self) -> tuple[Any, tuple[()]]:
        return (_flip, ())


class Imports(importlib.abc.MetaPathFinder):
    """Records every module name the import system is asked to find."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> None:
        self.names.append(fullname)
        return None


@pytest.fixture
def imports() -> Iterator[Imports]:
    finder = Imports()
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)


def base(type_: str, **fields: Any) -> dict[str, Any]:
    """The plain form LangGraph gives a LangChain message's common fields."""
    return {
        "content": fields.pop("content", ""),
        "additional_kwargs": {},
        "response_metadata": {},
        "type": type_,
        "name": None,
        "id": None,
        **fields,
    }


# --- values -----------------------------------------------------------------------------


def test_human_message_is_a_tagged_model() -> None:
    """A HumanMessage reads as its class name and its model_dump fields, exactly."""
    assert read(HumanMessage("hi", id="m1")) == {
        "$type": "langchain_core.messages.human.HumanMessage",
        "$kwargs": base("human", content="hi", id="m1"),
    }


def test_ai_message_with_tool_calls_and_blocks() -> None:
    """An AIMessage keeps its content blocks and tool calls in the tagged form."""
    blocks = [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "c1"}]
    value = AIMessage(blocks, tool_calls=[{"name": "search", "args": {"q": "tea"}, "id": "c1"}])
    assert read(value) == {
        "$type": "langchain_core.messages.ai.AIMessage",
        "$kwargs": base(
            "ai",
            content=blocks,
            tool_calls=[{"name": "search", "args": {"q": "tea"}, "id": "c1", "type": "tool_call"}],
            invalid_tool_calls=[],
            usage_metadata=None,
        ),
    }


def test_scalars_of_the_standard_library_are_tagged() -> None:
    """datetime, date, time, UUID, set, tuple, Enum, dataclass: LangGraph's encoding, tagged."""
    moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc)
    utc = {
        "$type": "datetime.timezone",
        "$args": [{"$type": "datetime.timedelta", "$args": [0, 0, 0]}],
    }
    assert read(
        {
            "at": moment,
            "day": datetime.date(2026, 1, 2),
            "time": datetime.time(1, 2, tzinfo=datetime.timezone.utc),
            "id": uuid.UUID(int=5),
            "tags": {"a"},
            "pair": (1, "two"),
            "colour": Colour.RED,
            "point": Point(1, 2),
        }
    ) == {
        "at": {
            "$type": "datetime.datetime",
            "$method": "fromisoformat",
            "$value": "2026-01-02T03:04:05+00:00",
        },
        "day": {"$type": "datetime.date", "$args": [2026, 1, 2]},
        "time": {
            "$type": "datetime.time",
            "$kwargs": {
                "hour": 1,
                "minute": 2,
                "second": 0,
                "microsecond": 0,
                "tzinfo": utc,
                "fold": 0,
            },
        },
        "id": {"$type": "uuid.UUID", "$value": "00000000000000000000000000000005"},
        "tags": {"$type": "builtins.set", "$value": ["a"]},
        "pair": [1, "two"],
        "colour": {"$type": f"{HERE}.Colour", "$value": "red"},
        "point": {"$type": f"{HERE}.Point", "$kwargs": {"x": 1, "y": 2}},
    }


def test_pydantic_model_with_a_secret_is_masked() -> None:
    """A model reads as its fields; its SecretStr is masked and its value appears nowhere."""
    seen = datetime.datetime(2026, 1, 1)
    result = read(Profile(name="Ada", seen=seen, token=SecretStr("sk-live-123")))
    assert result == {
        "$type": f"{HERE}.Profile",
        "$kwargs": {
            "name": "Ada",
            "seen": {
                "$type": "datetime.datetime",
                "$method": "fromisoformat",
                "$value": "2026-01-01T00:00:00",
            },
            "token": {"$type": "pydantic.types.SecretStr", "$masked": True},
        },
    }
    assert "sk-live-123" not in json.dumps(result)
    assert read(SecretStr("pw")) == {"$type": "pydantic.types.SecretStr", "$masked": True}


def test_bytes_kinds_and_bytes_inside_values() -> None:
    """bytes and bytearray kinds, and bytes inside msgpack, read as base64 with their size."""
    tagged = {"$bytes": base64.b64encode(b"\x00\xffab").decode(), "size": 4}
    assert SERDE.dumps_typed(b"\x00\xffab")[0] == "bytes"
    assert read(b"\x00\xffab") == tagged
    assert read(bytearray(b"\x00\xffab")) == tagged
    assert read({"blob": b"\x00\xffab"}) == {"blob": tagged}
    assert read(None) is None


def test_json_kind_and_legacy_message_form() -> None:
    """The json kind is parsed as JSON; a LangChain `lc` constructor reads as a message."""
    legacy = json.dumps(dumpd(HumanMessage("hi", id="m1"))).encode()
    assert plain("json", b'{"a": [1, 2.5, null]}') == {"a": [1, 2.5, None]}
    assert message(plain("json", legacy)) == {
        "type": "human",
        "id": "m1",
        "name": None,
        "content": "hi",
    }


def test_non_str_keys_become_json_text() -> None:
    """Non-str map keys become the compact JSON text of their plain form."""
    assert read({1: "a", (1, "b"): "c", None: "d", 2.5: "e", False: "f"}) == {
        "1": "a",
        '[1,"b"]': "c",
        "null": "d",
        "2.5": "e",
        "false": "f",
    }


def test_a_map_holding_a_tag_key_is_wrapped() -> None:
    """Stored data with a tag's key comes out under `$map`, never passing for a tag."""
    spoof = {"$type": "pydantic.types.SecretStr", "$masked": True}
    assert read(spoof) == {"$map": spoof}
    assert read({"$value": 1}) == {"$value": 1}
    assert plain("json", b'{"$bytes": "x"}') == {"$map": {"$bytes": "x"}}


def test_results_are_json_ready() -> None:
    """Everything read survives a JSON round trip unchanged (only JSON types inside)."""
    value = read(
        [
            HumanMessage("hi"),
            {"when": datetime.datetime(2026, 1, 1), "raw": b"x", 7: {Colour.RED}},
            Point(1, 2),
        ]
    )
    assert json.loads(json.dumps(value, allow_nan=False)) == value


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text().filter(lambda k: not k.startswith("$")), children, max_size=4)
    ),
    max_leaves=25,
)


@given(_JSON)
def test_plain_data_reads_as_langgraph_loads_it(value: Any) -> None:
    """For data without extension types, plain() equals LangGraph's own loads_typed."""
    typed = SERDE.dumps_typed(value)
    assert plain(*typed) == SERDE.loads_typed(typed)


# --- what is not read -------------------------------------------------------------------


def test_pickle_is_never_unpickled() -> None:
    """A pickle payload is reported by size; unpickling it would have run code."""
    serde = JsonPlusSerializer(pickle_fallback=True)
    kind, payload = serde.dumps_typed(Trap())
    assert kind == "pickle"
    assert plain(kind, payload) == {"$unreadable": "pickle", "size": len(payload)}
    assert FLIPPED == []
    assert serde.loads_typed((kind, payload)) == "flipped"  # the trap is armed
    assert FLIPPED == ["unpickled"]


def test_encrypted_kind_is_unreadable() -> None:
    """EncryptedSerializer's kinds (`msgpack+aes`) are reported by kind and size."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    try:
        import Crypto.Cipher.AES  # noqa: F401 (pycryptodome, for from_pycryptodome_aes)
    except ImportError:
        unavailable("pycryptodome is not installed, so EncryptedSerializer cannot encrypt")
    kind, payload = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16).dumps_typed({"a": 1})
    assert kind == "msgpack+aes"
    assert plain(kind, payload) == {"$unreadable": "msgpack+aes", "size": len(payload)}


def test_unknown_kind_and_unknown_ext_code() -> None:
    """An unknown kind or msgpack extension code is reported, not guessed at."""
    assert plain("cbor", b"abc") == {"$unreadable": "cbor", "size": 3}
    assert plain("msgpack", packed([ormsgpack.Ext(42, b"xyz")])) == [
        {"$unreadable": "msgpack ext 42", "size": 3}
    ]


def test_a_missing_module_reads_without_an_import(imports: Imports) -> None:
    """A type from a module that does not exist reads as its tagged form; no import is tried."""
    payload = packed(
        {
            "obj": ext(2, "no_such_pkg_tl.models", "Thing", {"a": 1}),
            "at": ext(3, "no_such_pkg_tl.clock", "Clock", "noon", "parse"),
            "args": ext(1, "no_such_pkg_tl.shapes", "Pair", [1, 2]),
        }
    )
    assert plain("msgpack", payload) == {
        "obj": {"$type": "no_such_pkg_tl.models.Thing", "$kwargs": {"a": 1}},
        "at": {"$type": "no_such_pkg_tl.clock.Clock", "$method": "parse", "$value": "noon"},
        "args": {"$type": "no_such_pkg_tl.shapes.Pair", "$args": [1, 2]},
    }
    assert not [name for name in imports.names if name.startswith("no_such_pkg_tl")]
    # The finder does see imports: LangGraph's own loader tries this one.
    JsonPlusSerializer(allowed_msgpack_modules=True).loads_typed(("msgpack", payload))
    assert "no_such_pkg_tl" in imports.names


def test_plain_does_not_import_a_named_module(imports: Imports) -> None:
    """Reading a payload naming an importable module leaves sys.modules without it."""
    name = "email.mime.audio"  # stdlib and importable
    saved = sys.modules.pop(name, None)
    try:
        payload = packed(ext(0, name, "MIMEAudio", "x"))
        assert plain("msgpack", payload) == {"$type": f"{name}.MIMEAudio", "$value": "x"}
        assert name not in sys.modules
        assert name not in imports.names
    finally:
        if saved is not None:
            sys.modules[name] = saved


def test_numpy_array_ext_without_numpy() -> None:
    """A numpy array extension reads as its dtype, shape, order and raw buffer."""
    payload = packed(ormsgpack.Ext(6, packed(["<i2", [2], "C", b"\x01\x00\x02\x00"])))
    assert plain("msgpack", payload) == {
        "$type": "numpy.ndarray",
        "$kwargs": {
            "dtype": "<i2",
            "shape": [2],
            "order": "C",
            "data": {"$bytes": "AQACAA==", "size": 4},
        },
    }


def test_numpy_array_from_the_serializer() -> None:
    """A real numpy array reads as the same tagged form (when numpy is installed)."""
    numpy = pytest.importorskip("numpy")
    array = numpy.arange(6, dtype="<i4").reshape(2, 3)
    result = read(array)
    assert result["$type"] == "numpy.ndarray"
    assert {k: v for k, v in result["$kwargs"].items() if k != "data"} == {
        "dtype": "<i4",
        "shape": [2, 3],
        "order": "C",
    }
    assert base64.b64decode(result["$kwargs"]["data"]["$bytes"]) == array.tobytes()


def test_delta_snapshot_ext() -> None:
    """LangGraph's delta-channel snapshot (ext 7) reads as its value, tagged."""
    payload = packed(ormsgpack.Ext(7, packed(["a", "b"])))
    assert plain("msgpack", payload) == {
        "$type": "langgraph.checkpoint.serde.types._DeltaSnapshot",
        "$value": ["a", "b"],
    }


# --- errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", b"\x92\x01", b"\xc0\xc0", b"", packed(ext(0, "only.module"))],
    ids=["reserved", "truncated", "trailing", "empty", "short-ext"],
)
def test_malformed_msgpack_raises(payload: bytes) -> None:
    """Malformed msgpack raises ProtocolError naming the kind."""
    with pytest.raises(ProtocolError, match="'msgpack' payload is not valid msgpack"):
        plain("msgpack", payload)


def test_malformed_json_raises() -> None:
    """Malformed JSON raises ProtocolError naming the kind."""
    with pytest.raises(ProtocolError, match="'json' payload is not valid JSON"):
        plain("json", b'{"a": ')


def test_depth_guard_on_arrays() -> None:
    """Arrays nested MAX_DEPTH deep read; one level more raises ProtocolError."""
    assert MAX_DEPTH == 200
    nested: Any = None
    for _ in range(MAX_DEPTH):
        nested = [nested]
    assert plain("msgpack", b"\x91" * MAX_DEPTH + b"\xc0") == nested
    with pytest.raises(ProtocolError, match="'msgpack' value nests deeper than 200"):
        plain("msgpack", b"\x91" * (MAX_DEPTH + 1) + b"\xc0")


def test_depth_guard_on_extensions_and_json() -> None:
    """Deeply nested extensions and JSON raise ProtocolError instead of exhausting the stack."""
    inner = packed(None)
    for _ in range(5000):
        inner = packed(ormsgpack.Ext(0, packed(["m", "Box", ormsgpack.Ext(5, inner)])))
    with pytest.raises(ProtocolError, match="nests deeper"):
        plain("msgpack", inner)
    with pytest.raises(ProtocolError, match="'json' value nests deeper"):
        plain("json", b"[" * 300 + b"]" * 300)
    with pytest.raises(ProtocolError, match="'json' value nests deeper"):
        plain("json", b"[" * 100_000)


# --- messages ---------------------------------------------------------------------------


def flat(value: Any) -> dict[str, Any] | None:
    """The flat message of `value` as stored by LangGraph."""
    return message(read(value))


def test_every_message_class() -> None:
    """Each LangChain message class flattens to its type and its own fields."""
    meta = {"model_name": "m"}
    assert flat(HumanMessage("hi", id="h", name="ada")) == {
        "type": "human",
        "id": "h",
        "name": "ada",
        "content": "hi",
    }
    assert flat(SystemMessage("be brief")) == {
        "type": "system",
        "id": None,
        "name": None,
        "content": "be brief",
    }
    assert flat(AIMessage("ok", response_metadata=meta, additional_kwargs={"x": 1})) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": "ok",
        "additional_kwargs": {"x": 1},
        "response_metadata": meta,
    }
    assert flat(ToolMessage("boom", tool_call_id="c1", status="error")) == {
        "type": "tool",
        "id": None,
        "name": None,
        "content": "boom",
        "tool_call_id": "c1",
        "status": "error",
    }
    assert (flat(ToolMessage("42", tool_call_id="c2")) or {}).get("status") == "success"
    assert flat(FunctionMessage("r", name="f")) == {
        "type": "function",
        "id": None,
        "name": "f",
        "content": "r",
    }
    assert flat(ChatMessage("hm", role="critic")) == {
        "type": "chat",
        "id": None,
        "name": None,
        "content": "hm",
        "role": "critic",
    }
    assert flat(RemoveMessage(id="gone")) == {
        "type": "remove",
        "id": "gone",
        "name": None,
        "content": "",
    }


def test_ai_tool_calls_and_chunks() -> None:
    """AI tool calls flatten to id, name and args; a chunk reads as `ai`."""
    call = {"id": "c1", "name": "search", "args": {"q": "tea"}}
    blocks = [{"type": "text", "text": "Looking."}]
    assert flat(AIMessage(blocks, tool_calls=[{**call, "type": "tool_call"}])) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": blocks,
        "tool_calls": [call],
    }
    chunk = AIMessageChunk(
        content="", tool_call_chunks=[{"name": "f", "args": '{"a": 1}', "id": "c9", "index": 0}]
    )
    assert flat(chunk) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": "",
        "tool_calls": [{"id": "c9", "name": "f", "args": {"a": 1}}],
    }
    assert flat(AIMessage("no calls")) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": "no calls",
    }


def test_dict_and_tuple_messages() -> None:
    """Role dicts and (role, content) pairs flatten, live or stored; user is human."""
    assert flat({"role": "user", "content": "hi"}) == message({"role": "user", "content": "hi"})
    assert flat(("user", "hi")) == {"type": "human", "id": None, "name": None, "content": "hi"}
    assert message(("assistant", "yo")) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": "yo",
    }
    openai_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    assert message({"role": "assistant", "content": None, "tool_calls": [openai_call]}) == {
        "type": "ai",
        "id": None,
        "name": None,
        "content": "",
        "tool_calls": [{"id": "c1", "name": "f", "args": {"a": 1}}],
    }
    assert message({"type": "human", "content": "x", "id": "7"}) == {
        "type": "human",
        "id": "7",
        "name": None,
        "content": "x",
    }
    assert message({"role": "tool", "content": "r", "tool_call_id": "c1"}) == {
        "type": "tool",
        "id": None,
        "name": None,
        "content": "r",
        "tool_call_id": "c1",
        "status": "success",
    }


@pytest.mark.parametrize(
    "value",
    [
        "hi",
        {"content": "no role"},
        {"role": "narrator", "content": "x"},
        ("user", "hi", "extra"),
        ("user", 3),
        ["foo", "bar"],
        {"$type": "myapp.Thing", "$kwargs": {"a": 1}},
        {"$type": "myapp.Note", "$kwargs": {"type": "human"}},
        {"$type": "myapp.Note", "$kwargs": {"type": ["human"], "content": "x"}},
        None,
        42,
    ],
)
def test_what_is_not_a_message(value: Any) -> None:
    """A value that is not a message in any form gives None."""
    assert message(value) is None


def test_a_list_of_messages() -> None:
    """A stored list of mixed messages flattens element by element."""
    stored = read([SystemMessage("s"), ("user", "q"), AIMessage("a"), {"role": "tool"}])
    assert [m and m["type"] for m in map(message, stored)] == ["system", "human", "ai", None]


def test_text_of_content() -> None:
    """Content reads as text: text blocks kept, other blocks named by their type."""
    assert text("as is  ") == "as is  "
    assert (
        text(
            [
                {"type": "text", "text": "Look:"},
                {"type": "image_url", "image_url": {"url": "x"}},
                "raw",
                {"type": "tool_use", "id": "c"},
                {"kind": "?"},
            ]
        )
        == "Look:\n[image_url]\nraw\n[tool_use]\n[block]"
    )
    assert text({"type": "image"}) == "[image]"
    assert text(None) == ""


# --- titles -----------------------------------------------------------------------------


def test_human_text_live_and_plain() -> None:
    """human_text reads live objects (duck-typed), dicts, tuples and plain forms alike."""
    live = HumanMessage([{"type": "text", "text": "hello"}])
    assert human_text(live) == "hello"
    assert human_text(read(live)) == "hello"
    assert human_text(SimpleNamespace(type="human", content="duck")) == "duck"
    assert human_text({"role": "user", "content": "d"}) == "d"
    assert human_text(("human", "t")) == "t"
    assert human_text(AIMessage("no")) is None
    assert human_text(read(AIMessage("no"))) is None
    assert human_text("just a string") is None


def test_title_of_live_and_stored_messages() -> None:
    """The title is the first human text, whitespace collapsed, live or stored."""
    messages = [SystemMessage("sys"), AIMessage("hi"), HumanMessage("  Plan  a\n trip ")]
    assert title(messages) == "Plan a trip"
    assert title(read(messages)) == "Plan a trip"
    assert title([{"role": "user", "content": "from a dict"}]) == "from a dict"
    assert title([("user", "from a tuple")]) == "from a tuple"
    assert title([HumanMessage("  "), HumanMessage("second")]) == "second"
    assert title([AIMessage("only ai")]) is None
    assert title([]) is None
    assert title("not a list") is None
    assert title({"messages": [HumanMessage("x")]}) is None


def test_title_truncation() -> None:
    """A long title is cut at a word boundary, "…" included in the limit."""
    line = [HumanMessage("one two three four")]
    assert title(line, limit=18) == "one two three four"
    assert title(line, limit=17) == "one two three…"
    assert title(line, limit=10) == "one two…"
    assert title(line, limit=8) == "one two…"
    assert title([HumanMessage("abcdefghijkl")], limit=5) == "abcd…"
    assert title(line, limit=1) == "…"
    with pytest.raises(InvalidValueError):
        title(line, limit=0)


def test_title_scans_only_the_first_elements() -> None:
    """Only the first `scan` elements are looked at."""
    messages: list[Any] = [AIMessage("a")] * 16 + [HumanMessage("late")]
    assert title(messages) is None
    assert title(messages, scan=17) == "late"
    assert title(iter(messages), scan=17) == "late"
