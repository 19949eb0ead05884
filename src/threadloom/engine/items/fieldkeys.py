"""The Store's filter index: typed, order-preserving keys of JSON values, and filters.

Engine layer, no SQL. A stored value (a JSON object) is indexed as one row per field
reachable through objects only (`fields`): its path (the keys from the top, as a JSON
array) and a key (`key`) whose byte order is the value order within a type:

- `null` 0x01, `false` 0x02, `true` 0x03;
- numbers 0x10 + an exact decimal encoding (`number`): integers of any size and floats
  compare exactly as numbers (2**53 + 1 > 2.0**53; 1 == 1.0), never through a float;
- strings 0x20 + UTF-8 (byte order is code point order, as Python compares str); a
  string longer than 32 bytes 0x22 + its first 32 bytes + 8 bytes of its blake3, so long
  texts do not fill the index: equality stays exact, and a range is decided by the first
  32 bytes (ties with an operand longer than that are checked on the value);
- objects 0x30 and arrays 0x31 + blake3 of their canonical form (equality only).

Booleans are not numbers here (JSON's types, as PostgreSQL's jsonb): `{"n": True}` does
not match 1, where Python's `True == 1` would.

`compile_filter` turns a LangGraph filter into `Condition`s that `engine/items/rows.py` decides
in SQL; `matches` is the same semantics in Python: the specification the SQL is tested
against, and the check of the few values the index holds only in part.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from operator import ge, gt, le, lt
from typing import Any, Final

import blake3

from threadloom.errors import InvalidValueError

NULL: Final = b"\x01"
FALSE: Final = b"\x02"
TRUE: Final = b"\x03"
NUMBER: Final = b"\x10"
STRING: Final = b"\x20"
LONG: Final = b"\x22"
#: Strings longer than this many UTF-8 bytes are indexed by their start and a hash.
SHORT: Final = 32
OBJECT: Final = b"\x30"
ARRAY: Final = b"\x31"
#: A NaN: indexed so its field counts as present, outside every range and equality.
NAN: Final = b"\x12"
#: Upper bound (exclusive) of each type's keys.
_END: Final = {
    NUMBER: b"\x11",
    STRING: b"\x21",
    LONG: b"\x23",
    OBJECT: b"\x31",
    ARRAY: b"\x32",
}

#: Fields indexed per value at most; a value with more is `partial` (filters re-check it).
MAX_FIELDS: Final = 256
#: Objects deeper than this are indexed as a whole (equality), not field by field.
MAX_DEPTH: Final = 8

_BIAS: Final = 1 << 31
_OPERATORS: Final = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def number(value: int | float) -> bytes | None:
    """The order-preserving key of a number, without its type byte; None for NaN.

    value = sign × 0.d1d2…dn × 10**e with d1 ≠ 0 and dn ≠ 0: zero is 0x02, a positive
    number 0x03 + (e + 2**31, 4 bytes) + the digits, a negative one 0x01 + the same
    exponent and digits inverted + 0xFF (so a shorter digit string sorts above a longer
    one with the same start, as -0.12 > -0.123); infinities are 0x04 and 0x00.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if math.isinf(value):
            return b"\x04" if value > 0 else b"\x00"
        sign, digit_tuple, exponent = Decimal(value).as_tuple()
        digits = "".join(map(str, digit_tuple))
        negative = bool(sign)
        shift = int(exponent)
    else:
        negative = value < 0
        digits = str(-value if negative else value)
        shift = 0
    stripped = digits.lstrip("0")
    if not stripped:
        return b"\x02"
    trimmed = stripped.rstrip("0")
    shift += len(stripped) - len(trimmed)
    place = len(trimmed) + shift + _BIAS
    if not negative:
        return b"\x03" + place.to_bytes(4, "big") + trimmed.encode()
    inverted = bytes(0xFF - c for c in trimmed.encode())
    return b"\x01" + ((1 << 32) - 1 - place).to_bytes(4, "big") + inverted + b"\xff"


def key(value: Any) -> bytes | None:
    """The typed key of a JSON value (None for NaN, which equals nothing)."""
    if value is None:
        return NULL
    if value is True:
        return TRUE
    if value is False:
        return FALSE
    if isinstance(value, (int, float)):
        found = number(value)
        return None if found is None else NUMBER + found
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        if len(raw) <= SHORT:
            return STRING + raw
        return LONG + raw[:SHORT] + blake3.blake3(raw).digest(length=8)
    if isinstance(value, Mapping):
        return OBJECT + blake3.blake3(_canonical(value)).digest(length=16)
    if isinstance(value, (list, tuple)):
        return ARRAY + blake3.blake3(_canonical(value)).digest(length=16)
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def _canonical(value: Any) -> bytes:
    """Bytes equal exactly when two JSON values are equal (objects unordered)."""
    if isinstance(value, Mapping):
        parts = sorted(
            (k.encode("utf-8", "surrogatepass"), _canonical(v)) for k, v in value.items()
        )
        body = b"".join(len(k).to_bytes(4, "big") + k + v for k, v in parts)
        return b"{" + len(parts).to_bytes(4, "big") + body
    if isinstance(value, (list, tuple)):
        items = [_canonical(v) for v in value]
        return b"[" + len(items).to_bytes(4, "big") + b"".join(items)
    if isinstance(value, str):
        raw = value.encode("utf-8", "surrogatepass")
        return b"s" + len(raw).to_bytes(4, "big") + raw
    found = key(value)
    if found is None:  # NaN: one token, so a value's keys are the same at every reading
        return b"nan"
    return len(found).to_bytes(4, "big") + found


@functools.lru_cache(maxsize=4096)
def path_text(path: tuple[str, ...]) -> str:
    """How a field path is stored: its keys as a compact JSON array (keys may hold `.`)."""
    return json.dumps(list(path), ensure_ascii=False, separators=(",", ":"))


def fields(value: Mapping[str, Any]) -> tuple[list[tuple[str, bytes]], bool]:
    """The index rows of a stored value, and whether they are all of them.

    Returns:
        ([(path, key)], complete): `complete` is False when the value has more than
        MAX_FIELDS fields or objects deeper than MAX_DEPTH (then only the first are
        indexed and filters check the value itself).
    """
    if len(value) <= MAX_FIELDS:
        # The common value, flat (no object inside), keyed here without the walk's
        # generator and path tuples (a bulk load calls this once per item).
        rows: list[tuple[str, bytes]] = []
        for name, leaf in value.items():
            if isinstance(leaf, Mapping):
                break
            found = key(leaf)
            rows.append((path_text((name,)), NAN if found is None else found))
        else:
            return rows, True
    return _fields(value)


def _fields(value: Mapping[str, Any]) -> tuple[list[tuple[str, bytes]], bool]:
    """`fields` by the walk: any value."""
    rows: list[tuple[str, bytes]] = []
    complete = True
    for path, leaf in _walk(value, ()):
        if len(rows) >= MAX_FIELDS or len(path) > MAX_DEPTH:
            complete = False
            if len(rows) >= MAX_FIELDS:
                break
            continue
        found = key(leaf)
        rows.append((path_text(path), NAN if found is None else found))
    return rows, complete


def _walk(
    value: Mapping[str, Any], prefix: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, child in value.items():
        path = (*prefix, name)
        yield path, child
        if isinstance(child, Mapping):
            yield from _walk(child, path)


# -- filters -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Condition:
    """One test on the field at `path`: it has a key in one of `ranges` ([low, high)
    each; `negate`: it has none).

    `or_missing`: the test also passes when the value has no field at `path` (a filter
    `{"x": None}` matches an item without `x`, as LangGraph's InMemoryStore does).
    """

    path: str
    ranges: tuple[tuple[bytes, bytes], ...]
    negate: bool = False
    or_missing: bool = False


@dataclass(frozen=True)
class Compiled:
    """A filter as SQL-decidable conditions (all must hold).

    `recheck`: part of the filter (an array holding objects, matched as InMemoryStore does
    by containment) is not decided by the conditions; the caller checks `matches` too.
    """

    conditions: tuple[Condition, ...]
    recheck: bool


class FilterError(InvalidValueError):
    """A filter that cannot be decided (an unknown operator, a range over an object)."""


def compile_filter(filter: Mapping[str, Any] | None) -> Compiled:
    """Translate a LangGraph search filter.

    `{"k": v}` is equality (an object `v` matches an object holding at least its fields,
    recursively; an array matches an equal array); `{"k": {"$op": v}}` applies operators
    `$eq $ne $gt $gte $lt $lte`: `$eq`/`$ne` compare whole values, the ranges compare
    numbers with numbers and strings with strings (a value of another type never matches).

    Raises:
        FilterError: an unknown operator, a range whose bound is not a number or a string,
            or operators mixed with plain keys.
    """
    conditions: list[Condition] = []
    recheck = _compile(filter or {}, (), conditions)
    return Compiled(_merged(conditions), recheck)


def _merged(conditions: list[Condition]) -> tuple[Condition, ...]:
    """Positive range tests on one path become one test of their intersection
    (`{"$gte": 10, "$lt": 20}` reads one range of the index, not two)."""
    out: list[Condition] = []
    for c in conditions:
        for i, seen in enumerate(out):
            if (
                seen.path == c.path
                and not (seen.negate or seen.or_missing or c.negate or c.or_missing)
                and len(seen.ranges) == len(c.ranges)
            ):
                ranges = tuple(
                    (max(a[0], b[0]), min(a[1], b[1]))
                    for a, b in zip(seen.ranges, c.ranges, strict=True)
                )
                out[i] = Condition(c.path, ranges)
                break
        else:
            out.append(c)
    return tuple(out)


def _compile(filter: Mapping[str, Any], prefix: tuple[str, ...], out: list[Condition]) -> bool:
    recheck = False
    for name, wanted in filter.items():
        path = (*prefix, name)
        text = path_text(path)
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            for operator, operand in wanted.items():
                condition, unsure = _operator(text, str(operator), operand)
                out.append(condition)
                recheck |= unsure
        elif isinstance(wanted, Mapping):
            out.append(Condition(text, ((OBJECT, _END[OBJECT]),)))
            recheck |= _compile(wanted, path, out)
        elif isinstance(wanted, (list, tuple)) and _holds_object(wanted):
            out.append(Condition(text, ((ARRAY, _END[ARRAY]),)))
            recheck = True
        else:
            found = key(wanted)
            if found is None:
                out.append(Condition(text, ((b"", b""),)))  # NaN: nothing matches
            else:
                out.append(Condition(text, ((found, found + b"\x00"),), or_missing=wanted is None))
    return recheck


def _holds_object(values: list[Any] | tuple[Any, ...]) -> bool:
    return any(
        isinstance(v, Mapping) or (isinstance(v, (list, tuple)) and _holds_object(v))
        for v in values
    )


def _operator(path: str, operator: str, operand: Any) -> tuple[Condition, bool]:
    """The condition of one operator, and whether some values it keeps need a re-check."""
    if operator not in _OPERATORS:
        raise FilterError(
            f"filter operator {operator!r} is not one of {', '.join(sorted(_OPERATORS))} "
            "(operators and plain keys cannot be mixed in one object)"
        )
    found = key(operand)
    if operator in ("$eq", "$ne"):
        negate = operator == "$ne"
        if found is None:  # NaN equals nothing: $eq NaN holds for nothing, $ne NaN for all
            return Condition(path, ((b"", b""),), negate=negate), False
        return Condition(path, ((found, found + b"\x00"),), negate=negate), False
    kind = _kind(operand)
    if kind is None or found is None:
        raise FilterError(
            f"filter {operator} needs a number or a string to compare with, not "
            f"{json.dumps(operand, default=repr)[:40]}"
        )
    if kind == NUMBER:
        return Condition(path, (_range(operator, kind, found),)), False
    # Strings: the short ones compare exactly; the long ones by their first SHORT bytes.
    raw = operand.encode("utf-8", "surrogatepass")
    short = _range(operator, STRING, STRING + raw)
    start = raw[:SHORT]
    above = operator in ("$gt", "$gte")
    if len(raw) <= SHORT:
        long = (LONG + start, _END[LONG]) if above else (LONG, LONG + start)
        return Condition(path, (short, long)), False
    # Long strings starting with the operand's first SHORT bytes are kept and re-checked.
    long = (LONG + start, _END[LONG]) if above else (LONG, LONG + start + b"\xff" * 9)
    return Condition(path, (short, long)), True


def _range(operator: str, kind: bytes, found: bytes) -> tuple[bytes, bytes]:
    end = _END[kind]
    if operator == "$gt":
        return found + b"\x00", end
    if operator == "$gte":
        return found, end
    if operator == "$lt":
        return kind, found
    return kind, found + b"\x00"


def _kind(value: Any) -> bytes | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return NUMBER
    if isinstance(value, str):
        return STRING
    return None


# -- the same semantics in Python ----------------------------------------------------------


_MISSING: Final = object()


def matches(value: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    """Whether `value` passes `filter`, with exactly the semantics `compile_filter` gives SQL."""
    compile_filter(filter)  # the same errors for the same filters
    return _matches(value, filter or {})


def _matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    for name, wanted in filter.items():
        found = value.get(name, _MISSING)
        if isinstance(wanted, Mapping) and any(str(k).startswith("$") for k in wanted):
            if not all(_apply(found, str(op), operand) for op, operand in wanted.items()):
                return False
        elif isinstance(wanted, Mapping):
            if not isinstance(found, Mapping) or not _matches(found, wanted):
                return False
        elif isinstance(wanted, (list, tuple)):
            if not _contains(found, wanted):
                return False
        elif wanted is None:
            if found is not _MISSING and found is not None:
                return False
        elif found is _MISSING or not _equal(found, wanted):
            return False
    return True


def _contains(found: Any, wanted: Any) -> bool:
    """InMemoryStore's comparison inside arrays: objects by containment, the rest equal."""
    if isinstance(wanted, Mapping):
        return isinstance(found, Mapping) and _matches(found, wanted)
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(found, (list, tuple))
            and len(found) == len(wanted)
            and all(_contains(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return found is not _MISSING and _equal(found, wanted)


def _equal(a: Any, b: Any) -> bool:
    ka, kb = key(a), key(b)
    return ka is not None and ka == kb


def _apply(found: Any, name: str, operand: Any) -> bool:
    if name == "$eq":
        return found is not _MISSING and _equal(found, operand)
    if name == "$ne":
        return found is _MISSING or not _equal(found, operand)
    kind = _kind(operand)
    if found is _MISSING or _kind(found) != kind:
        return False
    compare = _COMPARE[name]
    if kind == STRING:  # strings compare whole (their keys hold only 32 bytes of long ones)
        return bool(compare(str(found), str(operand)))
    mine, theirs = key(found), key(operand)  # numbers compare by their exact keys
    return mine is not None and theirs is not None and bool(compare(mine, theirs))


_COMPARE: Final = {
    "$gt": gt,
    "$gte": ge,
    "$lt": lt,
    "$lte": le,
}
