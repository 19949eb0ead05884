"""Fingerprints of list elements: proof that pydantic models still encode as they did.

Layer: protocol (no I/O). A list channel's planner memo (`plan.Planner._extend`) keeps
the stored encodings of the elements it planned last time; before reusing them it must
know that every old element would still encode to the same bytes. Encoding the whole
list again to compare costs one call of the serializer's Python hook per message, so
the put grew with the conversation. A fingerprint answers the same question with a few
calls into ormsgpack's native encoder and no Python code per element (about a tenth of
the cost of encoding a list of LangChain messages).

The fingerprint of a list of pydantic models is the element classes plus a *strict*
msgpack encoding of each element's field data (`__dict__`) and extra fields
(`__pydantic_extra__`), by chunks of CHUNK elements. Strict: only exact `dict` (str
keys), `list`, `str`, `int` (64-bit), `float`, `bool`, `None` and bytes-like values are
encoded; anything else (a tuple, a subclass, an enum, a nested model, a secret, a
datetime, an arbitrary object) refuses the fingerprint, and the planner falls back to
encoding. So equal fingerprints mean equal classes and equal field values, with equal
types and equal dict order. Object identity is never trusted: a message changed in
place (LangGraph's `add_messages` itself gives id-less messages their id in place)
changes its fingerprint.

Soundness rests on two properties, both held by tests (tests/protocol/test_list_memo.py):

1. The serializer's encoding of a model is a function of its class and its field data.
   The adapter declares it (`Serialization.model_fingerprints`); LangGraph's
   JsonPlusSerializer encodes a pydantic v2 model as an ext of
   `(module, name, model_dump())`, and `model_dump()` is such a function when the class
   keeps pydantic's own `model_dump` and its core schema has no function serializer, no
   computed field and no `exclude_if` (`_pure`, checked once per class). Rebuilding a
   class's schema after its first use (`model_rebuild`) is not noticed.
2. `bytes`, `bytearray` and `memoryview` of equal content fingerprint alike (ormsgpack
   encodes all three as bin, with no option to refuse them); LangGraph encodes the
   three alike too.

A chunk of `SEAL_FROM` bytes or more (it holds a large field: a 20 MiB tool result's
text) is kept as its blake3 digest instead of its bytes, so a memo stays small and a
proof compares digests (256 bits: equal digests are taken as equal bytes, as the
content store's block keys are).

A fingerprint is taken before the elements are encoded, so a concurrent change during
the encoding makes the next fingerprint differ (and the memo is not trusted). Like
every LangGraph saver, the planner assumes values are not mutated while `put` runs.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, NamedTuple

import blake3
import ormsgpack

from threadloom.protocol.redact import walked_as_model

_STRICT = (
    ormsgpack.OPT_PASSTHROUGH_BIG_INT
    | ormsgpack.OPT_PASSTHROUGH_DATACLASS
    | ormsgpack.OPT_PASSTHROUGH_DATETIME
    | ormsgpack.OPT_PASSTHROUGH_ENUM
    | ormsgpack.OPT_PASSTHROUGH_SUBCLASS
    | ormsgpack.OPT_PASSTHROUGH_TUPLE
    | ormsgpack.OPT_PASSTHROUGH_UUID
)
_extra_of = operator.attrgetter("__pydantic_extra__")


#: Elements per encoded chunk of a fingerprint. Encodings of a few dozen KiB stay in the
#: allocator's arenas (one output buffer of the whole list costs twice as much), and a
#: grown list re-encodes at most one chunk plus its new elements.
CHUNK = 128

#: Chunks of at least this many bytes are kept as their digest (see the module docstring).
SEAL_FROM = 64 * 1024
#: The first byte of a sealed chunk: one no msgpack encoding starts with (0xc1 is unused).
_SEALED = b"\xc1"


class _Refused(Exception):
    """A value the strict encoding does not encode."""


def _refuse(value: Any) -> Any:
    raise _Refused(type(value).__name__)


class Views(NamedTuple):
    """What a fingerprint covers of each element of a list, gathered by C-level maps.

    Attributes:
        types: the class of each element.
        fields: each element's `__dict__` (the live dict, not a copy).
        extras: each element's `__pydantic_extra__`.
    """

    types: list[type]
    fields: list[dict[str, Any]]
    extras: list[Any]


def views(items: Sequence[Any]) -> Views | None:
    """Gather what the fingerprint of `items` covers, or None when some element's class
    is not one whose encoding is a function of its field data (see `_pure`).

    Cost: three C-level maps and a lookup per distinct class; no Python code per element.
    """
    types = list(map(type, items))
    for kind in set(types):
        pure = _pure_classes.get(kind)
        if pure is None:
            pure = _pure_classes.setdefault(kind, _pure(kind))
        if not pure:
            return None
    try:
        return Views(types, list(map(vars, items)), list(map(_extra_of, items)))
    except Exception:  # no __dict__ (slots) or no __pydantic_extra__
        return None


class Fingerprint(NamedTuple):
    """The fingerprint of a list of pydantic models (see the module docstring).

    Attributes:
        types: the class of each element.
        chunks: chunk `c` is the strict msgpack of `[fields, extras]` of the elements
            `ends[c - 1]` (0 for the first) up to `ends[c]`: CHUNK elements, fewer in the
            last chunk, or fewer in a sealed chunk, which is closed (later elements
            start a new chunk, so a grown list never encodes a large field again).
        ends: the end (exclusive) of each chunk's elements.
    """

    types: list[type]
    chunks: list[bytes]
    ends: list[int]

    @property
    def size(self) -> int:
        """Bytes this fingerprint holds (for a memo's budget)."""
        return sum(map(len, self.chunks)) + 8 * len(self.types) + 8 * len(self.ends)

    def holds(self, seen: Views) -> bool:
        """True when the first `len(self.types)` elements of `seen` are, field for field,
        the elements this fingerprint was taken of (same classes, same data).

        O(elements), in C: a type comparison per element, their data encoded again by
        chunks, and the chunks compared as bytes (digests, for sealed ones).
        """
        length = len(self.types)
        if len(seen.types) < length or not all(map(operator.is_, seen.types, self.types)):
            return False
        return _encode(seen, [0, *self.ends]) == self.chunks

    def grown(self, seen: Views) -> Fingerprint | None:
        """This fingerprint extended to every element of `seen`, whose first elements it
        `holds`: closed chunks (full or sealed) are kept, the last open one and the new
        elements encoded."""
        kept = len(self.chunks)
        if kept and not _closed(self.chunks[-1], self.ends, kept - 1):
            kept -= 1
        start = self.ends[kept - 1] if kept else 0
        bounds = _bounds(start, len(seen.types))
        rest = _encode(seen, bounds)
        if rest is None:
            return None
        return Fingerprint(seen.types, self.chunks[:kept] + rest, self.ends[:kept] + bounds[1:])


def fingerprint(seen: Views) -> Fingerprint | None:
    """Return the fingerprint of the elements `seen` describes, or None when some field
    holds a value the strict encoding refuses."""
    bounds = _bounds(0, len(seen.types))
    chunks = _encode(seen, bounds)
    return None if chunks is None else Fingerprint(seen.types, chunks, bounds[1:])


def _bounds(start: int, end: int) -> list[int]:
    """`start`, then the end of each chunk of CHUNK elements from it up to `end`."""
    return [start, *range(start + CHUNK, end, CHUNK), end] if end > start else [start]


def _closed(chunk: bytes, ends: list[int], index: int) -> bool:
    """True when chunk `index` takes no more elements: it is full, or sealed."""
    first = ends[index - 1] if index else 0
    return ends[index] - first >= CHUNK or chunk.startswith(_SEALED)


def _encode(seen: Views, bounds: list[int]) -> list[bytes] | None:
    """Strict encodings of the elements between consecutive `bounds`, one chunk each."""
    fields, extras = seen.fields, seen.extras
    try:
        return [
            _sealed(
                ormsgpack.packb(
                    [fields[first:end], extras[first:end]], default=_refuse, option=_STRICT
                )
            )
            for first, end in pairwise(bounds)
        ]
    except Exception:  # a refusal, a non-str key, a surrogate: encode instead
        return None


def _sealed(chunk: bytes) -> bytes:
    """A chunk as a fingerprint keeps it: its bytes, or from SEAL_FROM on its digest."""
    if len(chunk) < SEAL_FROM:
        return chunk
    return _SEALED + blake3.blake3(chunk).digest()


_pure_classes: dict[type, bool] = {}

# Serialization schemas that run a function: their output may depend on anything.
_FUNCTION_SERIALIZERS = frozenset({"function-plain", "function-wrap"})


def _pure(kind: type) -> bool:
    """True when `kind`'s `model_dump()` is a function of its field data alone."""
    try:
        from pydantic import BaseModel
    except ImportError:  # pragma: no cover - pydantic comes with langchain-core
        return False
    if not (isinstance(kind, type) and issubclass(kind, BaseModel)):
        return False
    if kind.model_dump is not BaseModel.model_dump or not walked_as_model(kind):
        return False  # its own dump, or redaction treats it as a secret
    if any("__class__" in vars(base) for base in kind.__mro__[:-1]):
        return False  # isinstance() would ask its instances, not their type
    if not getattr(kind, "__pydantic_complete__", False):
        return False
    schema = getattr(kind, "__pydantic_core_schema__", None)
    return isinstance(schema, dict) and _plain_serialization(schema)


def _plain_serialization(schema: dict[str, Any]) -> bool:
    """True when no part of a pydantic core schema serializes through a function."""
    stack: list[Any] = [schema]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            serialization = node.get("serialization")
            if isinstance(serialization, dict) and (
                serialization.get("type") in _FUNCTION_SERIALIZERS
            ):
                return False
            if node.get("computed_fields") or node.get("serialization_exclude_if"):
                return False
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
    return True


def array_header(payload: bytes) -> int | None:
    """Return the length of the msgpack array header `payload` starts with, or None."""
    if not payload:
        return None
    first = payload[0]
    if 0x90 <= first <= 0x9F:
        return 1
    if first == 0xDC:
        return 3
    if first == 0xDD:
        return 5
    return None
