"""Plain reading of serialized values: LangGraph's typed payloads as JSON-ready data.

Layer: protocol, pure and I/O-free. For the tools that show or index stored values and
must never run application code (the CLI, the viewer, index maintenance, migrations).

Invariants: nothing a payload names is imported or constructed (a type is only ever a
string here), a pickle is never unpickled, a secret's value never comes out, and the
result holds only dicts with str keys, lists, str, int, float, bool and None. Floats
stay floats, NaN and infinities included.

Tagged forms (stable: the viewer and the CLI's `--json` show them as they are):

| form                                              | stands for                             |
|---------------------------------------------------|----------------------------------------|
| `{"$type": "m.Name", "$value": v}`                | `Name(v)`: UUID (hex), Decimal, set,   |
|                                                   | Enum, ZoneInfo, ip address             |
| `{"$type": "m.Name", "$args": [...]}`             | `Name(*args)`: date, timedelta, Path   |
| `{"$type": "m.Name", "$kwargs": {...}}`           | `Name(**kwargs)`: dataclass,           |
|                                                   | namedtuple, pydantic model, time,      |
|                                                   | LangChain message                      |
| `{"$type": "m.Name", "$method": "f", "$value": v}`| `Name.f(v)`: datetime (`fromisoformat`)|
| `{"$type": "m.Name", "$masked": true}`            | a secret (its class name says so)      |
| `{"$bytes": "<base64>", "size": n}`               | bytes (`size` in bytes)                |
| `{"$unreadable": "pickle", "size": n}`            | what is not read: pickle, an encrypted |
|                                                   | or unknown kind, `msgpack ext <code>`  |
| `{"$map": {...}}`                                 | a stored map holding a tag's key       |

`"m.Name"` is the class's `__module__` and `__name__` as LangGraph recorded them. A
tagged object is recognised by its first key (`$type`, `$bytes`, `$unreadable` or
`$map`); a stored map that has any of those four keys is wrapped in `{"$map": ...}`, so
data never passes for a tag.

A non-str map key becomes the compact JSON text of its plain form (`1` -> `"1"`, `None`
-> `"null"`, `True` -> `"true"`, `(1, 2)` -> `"[1,2]"`); of two keys that give the same
text, the later one wins.
"""

from __future__ import annotations

import base64
import contextlib
import json
import struct
from collections.abc import Iterable, Mapping
from itertools import islice
from typing import Any

import ormsgpack

from threadloom.core.msgpack import skip
from threadloom.errors import InvalidArgumentError, InvalidValueError, ProtocolError

#: Deepest nesting read (containers and tagged objects); LangGraph's own encoder stops
#: far earlier, so a deeper payload is damaged or hostile, and the stack stays safe.
MAX_DEPTH = 200

# LangGraph's msgpack extension codes (`jsonplus.EXT_*`), facts of its stored format.
# Codes 0-5 hold (module, name, argument[, method]); 6 holds (dtype, shape, order,
# buffer); 7 holds the value itself.
_SINGLE_ARG, _POS_ARGS, _KW_ARGS, _METHOD, _PYDANTIC_V1, _PYDANTIC_V2 = range(6)
_NUMPY_ARRAY, _DELTA_SNAPSHOT = 6, 7
_FIELD = {
    _SINGLE_ARG: "$value",
    _POS_ARGS: "$args",
    _KW_ARGS: "$kwargs",
    _METHOD: "$value",
    _PYDANTIC_V1: "$kwargs",
    _PYDANTIC_V2: "$kwargs",
}
_DELTA_TYPE = "langgraph.checkpoint.serde.types._DeltaSnapshot"

_TAGS = frozenset({"$type", "$bytes", "$unreadable", "$map"})
_SCALARS: frozenset[type] = frozenset({str, int, float, bool, type(None)})


def plain(kind: str, payload: bytes) -> Any:
    """Decode a typed payload into JSON-ready data without importing anything it names.

    Args:
        kind: the payload's kind, as `dumps_typed` returned it (`msgpack`, `json`,
            `null`, `bytes`, `bytearray`, `pickle`, `msgpack+aes`, ...).
        payload: the serialized bytes.

    Returns:
        The value in plain form: LangGraph's extension types as tagged objects (see the
        module's table), bytes as `{"$bytes": ..., "size": n}`, and a kind that is not
        read (pickle, encrypted, unknown) as `{"$unreadable": kind, "size": n}`.

    Raises:
        ProtocolError: the payload is not valid for its kind, or nests deeper than
            MAX_DEPTH; the message names the kind.
        InvalidArgumentError: `kind` is not a str or `payload` not bytes-like.
    """
    if not isinstance(kind, str):
        raise InvalidArgumentError(f"kind must be a str, not {type(kind).__name__}")
    if not isinstance(payload, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"payload must be bytes, not {type(payload).__name__}")
    data = bytes(payload)
    if kind == "msgpack":
        reader = _Reader(kind)
        return reader.walk(reader.unpack(data), 0)
    if kind == "json":
        reader = _Reader(kind)
        try:
            value = json.loads(data)
        except RecursionError:
            raise reader.too_deep() from None
        except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
            raise ProtocolError(
                f"The 'json' payload is not valid JSON: {exc}; the stored value is damaged "
                "(`threadloom verify --db FILE` checks a file's values)"
            ) from None
        return reader.walk(value, 0)
    if kind == "null":
        return None
    if kind in ("bytes", "bytearray"):
        return _bytes(data)
    return {"$unreadable": kind, "size": len(data)}


def _bytes(data: bytes) -> dict[str, Any]:
    return {"$bytes": base64.b64encode(data).decode("ascii"), "size": len(data)}


def _secret(name: str) -> bool:
    # pydantic's SecretStr/SecretBytes (v1 and v2) and the secret types built on them.
    return "secret" in name.lower()


class _Tagged:
    """An extension's tagged form, its inner value not yet plain.

    Hashable (by identity), so a msgpack map may have one as a key.
    """

    __slots__ = ("head", "field", "inner")

    def __init__(self, head: dict[str, Any], field: str | None = None, inner: Any = None):
        self.head = head
        self.field = field
        self.inner = inner


class _Reader:
    """One decoding: the extension hook's nesting depth and the first error it raised."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.depth = 0
        self.error: ProtocolError | None = None

    def too_deep(self) -> ProtocolError:
        return ProtocolError(
            f"The {self.kind!r} value nests deeper than {MAX_DEPTH} levels; it is damaged "
            "or was not written by LangGraph's serializer, and is not read"
        )

    def malformed(self, detail: str) -> ProtocolError:
        return ProtocolError(
            f"The {self.kind!r} payload is not valid msgpack: {detail}; the stored value "
            "is damaged (`threadloom verify --db FILE` checks a file's values)"
        )

    def unpack(self, data: bytes) -> Any:
        """Decode one msgpack value that must span all of `data`."""
        try:
            value = ormsgpack.unpackb(data, ext_hook=self.ext, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError) as exc:  # MsgpackDecodeError is a ValueError
            # ormsgpack replaces what the hook raised by "ext_hook failed".
            raise (self.error or self.malformed(str(exc))) from None
        try:
            end = skip(data, 0)
        except (ValueError, IndexError, struct.error) as exc:
            raise self.malformed(str(exc)) from None
        if end != len(data):
            raise self.malformed(f"trailing bytes after the value ({len(data) - end})")
        return value

    def ext(self, code: int, data: bytes) -> _Tagged:
        """The ormsgpack extension hook: a tagged form, built from strings only."""
        try:
            return self._ext(code, data)
        except ProtocolError as exc:
            if self.error is None:
                self.error = exc
            raise

    def _ext(self, code: int, data: bytes) -> _Tagged:
        if code not in _FIELD and code not in (_NUMPY_ARRAY, _DELTA_SNAPSHOT):
            return _Tagged({"$unreadable": f"msgpack ext {code}", "size": len(data)})
        if self.depth >= MAX_DEPTH:
            raise self.too_deep()
        self.depth += 1
        try:
            inner = self.unpack(data)
        finally:
            self.depth -= 1
        if code == _DELTA_SNAPSHOT:
            return _Tagged({"$type": _DELTA_TYPE}, "$value", inner)
        if code == _NUMPY_ARRAY:
            if not isinstance(inner, list) or len(inner) != 4:
                raise self.malformed("a numpy array extension is not (dtype, shape, order, data)")
            dtype, shape, order, buffer = inner
            fields = {"dtype": dtype, "shape": shape, "order": order, "data": buffer}
            return _Tagged({"$type": "numpy.ndarray"}, "$kwargs", fields)
        least = 4 if code == _METHOD else 3
        if (
            not isinstance(inner, list)
            or len(inner) < least
            or not isinstance(inner[0], str)
            or not isinstance(inner[1], str)
            or (code == _METHOD and not isinstance(inner[3], str))
        ):
            raise self.malformed(f"extension {code} does not hold (module, name, argument)")
        name = f"{inner[0]}.{inner[1]}"
        if _secret(inner[1]):
            return _Tagged({"$type": name, "$masked": True})
        head: dict[str, Any] = {"$type": name}
        if code == _METHOD:
            head["$method"] = inner[3]
        return _Tagged(head, _FIELD[code], inner[2])

    def walk(self, value: Any, depth: int) -> Any:
        """Return `value` (as decoded) in plain form."""
        kind = type(value)
        if kind in _SCALARS:
            return value
        if depth >= MAX_DEPTH:
            raise self.too_deep()
        deeper = depth + 1
        if kind is list or kind is tuple:
            return [self.walk(item, deeper) for item in value]
        if kind is dict:
            out = {self.key(key, deeper): self.walk(item, deeper) for key, item in value.items()}
            return out if _TAGS.isdisjoint(out) else {"$map": out}
        if kind is bytes:
            return _bytes(value)
        if kind is _Tagged:
            tagged = dict(value.head)
            if value.field is not None:
                tagged[value.field] = self.walk(value.inner, deeper)
            return tagged
        raise ProtocolError(f"The {self.kind!r} payload decoded to a {kind.__name__}")

    def key(self, key: Any, depth: int) -> str:
        if type(key) is str:
            return key
        return json.dumps(self.walk(key, depth), separators=(",", ":"), ensure_ascii=False)


# --- messages ---------------------------------------------------------------------------

#: LangChain message classes (langchain_core.messages.*) by name: their `type`.
_CLASSES = {
    "HumanMessage": "human",
    "AIMessage": "ai",
    "SystemMessage": "system",
    "ToolMessage": "tool",
    "FunctionMessage": "function",
    "ChatMessage": "chat",
    "RemoveMessage": "remove",
}
_CLASSES.update({f"{name}Chunk": kind for name, kind in _CLASSES.items() if kind != "remove"})
#: The `type` field of a LangChain message (a chunk's is its class name): its plain type.
_TYPES = {kind: kind for kind in _CLASSES.values()} | {
    name: kind for name, kind in _CLASSES.items() if name.endswith("Chunk")
}
#: Roles LangChain accepts in a dict or a (role, content) pair.
_ROLES = {
    "human": "human",
    "user": "human",
    "ai": "ai",
    "assistant": "ai",
    "system": "system",
    "developer": "system",
    "tool": "tool",
    "function": "function",
}


def message(value: Any) -> dict[str, Any] | None:
    """Return one element of a messages list, in plain form, as a flat message.

    Reads the tagged form of a LangChain message (any class with a message `type`,
    chunks as their base type), LangChain's legacy JSON form (`{"lc": 1, "type":
    "constructor", ...}`), a dict with a `role` (or `type`) and `content`, and a
    `(role, content)` pair; roles `user` and `assistant` are read as `human` and `ai`.

    Returns:
        `{"type", "id", "name", "content"}`, plus `tool_calls` (`[{"id", "name",
        "args"}]`, ai only, when any), `tool_call_id` and `status` (tool), `role`
        (chat), and `additional_kwargs` / `response_metadata` when not empty; None
        when `value` is not a message.
    """
    if isinstance(value, Mapping):
        fields = _fields(value)
        if fields is None:
            return None
        kind, found = fields
        return _flat(kind, found)
    if isinstance(value, (list, tuple)) and len(value) == 2:
        role, content = value
        if isinstance(role, str) and role in _ROLES and isinstance(content, (str, list)):
            return _flat(_ROLES[role], {"content": content})
    return None


def _fields(value: Mapping[str, Any]) -> tuple[str, Mapping[str, Any]] | None:
    """The plain type and the fields of a message in any mapping form, or None."""
    tag = value.get("$type")
    if isinstance(tag, str):  # plain form of a LangChain message
        fields = value.get("$kwargs")
        if not isinstance(fields, Mapping) or "content" not in fields:
            return None
        declared = fields.get("type")
        kind = _TYPES.get(declared) if isinstance(declared, str) else None
        kind = kind or _CLASSES.get(tag.rpartition(".")[2])
        return (kind, fields) if kind else None
    if value.get("lc") == 1 and value.get("type") == "constructor":  # the "json" kind
        ids, fields = value.get("id"), value.get("kwargs")
        if not isinstance(ids, list) or not ids or not isinstance(fields, Mapping):
            return None
        kind = _CLASSES.get(ids[-1]) if isinstance(ids[-1], str) else None
        return (kind, fields) if kind and "content" in fields else None
    role = value.get("role", value.get("type"))
    if isinstance(role, str) and role in _ROLES and "content" in value:
        return _ROLES[role], value
    return None


def _flat(kind: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    content = fields.get("content")
    out: dict[str, Any] = {
        "type": kind,
        "id": fields.get("id"),
        "name": fields.get("name"),
        "content": "" if content is None else content,
    }
    if kind == "ai":
        calls = [_call(call) for call in fields.get("tool_calls") or () if isinstance(call, dict)]
        if calls:
            out["tool_calls"] = calls
    elif kind == "tool":
        out["tool_call_id"] = fields.get("tool_call_id")
        out["status"] = fields.get("status") or "success"
    elif kind == "chat":
        out["role"] = fields.get("role")
    for extra in ("additional_kwargs", "response_metadata"):
        if fields.get(extra):
            out[extra] = fields[extra]
    return out


def _call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call as `{"id", "name", "args"}`: LangChain's, or OpenAI's `function` form."""
    function = call.get("function")
    if isinstance(function, Mapping):  # {"id", "type": "function", "function": {...}}
        args = function.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(ValueError):  # else shown as the model sent them
                args = json.loads(args)
        return {"id": call.get("id"), "name": function.get("name"), "args": args}
    return {"id": call.get("id"), "name": call.get("name"), "args": call.get("args")}


def text(content: Any) -> str:
    """Return a message's content as text.

    A str is returned as is. In a list of content blocks, str items and the `text` of
    text blocks are kept, any other block is shown by its type (`[image]`,
    `[tool_use]`; `[block]` when it has none), and the parts are joined by newlines.
    Anything else gives "".
    """
    if isinstance(content, str):
        return content
    if isinstance(content, Mapping):
        content = [content]
    if not isinstance(content, (list, tuple)):
        return ""
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, Mapping):
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(f"[{kind}]" if isinstance(kind, str) and kind else "[block]")
    return "\n".join(part for part in parts if part)


_HUMAN = frozenset({"human", "HumanMessageChunk"})
_message = message  # human_text's parameter shadows the function


def human_text(message: Any) -> str | None:
    """Return the text of a human message, or None when `message` is not one.

    Takes a live value (a LangChain message, duck-typed by `.type` and `.content`; a
    dict; a `(role, content)` tuple) or its plain form, and imports nothing.
    """
    if isinstance(message, (Mapping, list, tuple)):
        flat = _message(message)
        return text(flat["content"]) if flat is not None and flat["type"] == "human" else None
    if getattr(message, "type", None) in _HUMAN:
        return text(getattr(message, "content", None))
    return None


def title(messages: Iterable[Any], limit: int = 80, scan: int = 16) -> str | None:
    """Return a title for a conversation: its first human message's text, shortened.

    Args:
        messages: a messages list, live or in plain form.
        limit: most characters of the title, "…" included.
        scan: how many elements to look at, from the first.

    Returns:
        The text of the first human message among the first `scan` elements whose text
        is not blank, whitespace collapsed to single spaces, cut at a word boundary
        (within a word only when its first word is longer than `limit`) with "…"
        appended when cut; None when no such message is there or `messages` is not a
        list-like value (a str, a dict).

    Raises:
        InvalidValueError: `limit` is under 1 or `scan` under 0.
    """
    if limit < 1 or scan < 0:
        raise InvalidValueError(f"title needs limit >= 1 and scan >= 0, not {limit}, {scan}")
    if isinstance(messages, (str, bytes, bytearray, Mapping)) or not isinstance(messages, Iterable):
        return None
    for element in islice(messages, scan):
        found = human_text(element)
        if found and not found.isspace():
            # A pasted document as the first question: only its start can be the title.
            return _shorten(" ".join(found[: 16 * limit].split()), limit)
    return None


def _shorten(line: str, limit: int) -> str:
    if len(line) <= limit:
        return line
    cut = line[: limit - 1]
    if line[limit - 1] != " ":
        space = cut.rfind(" ")
        if space > 0:
            cut = cut[:space]
    return cut + "…"
