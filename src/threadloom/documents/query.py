"""The query language of the document service: predicates, order, pages, cursors (SPEC §7.7).

Pure: no I/O, no protobuf, no naas. Values are the decoded Python values of SPEC §7.5
(None, bool, int, float, str, datetime, bytes, list, dict). What the document operations
(`threadloom.documents.service`, behind `threadloom serve` and the naas adapter) use to
answer `find` and `count` over documents the file narrowed first; it works over any set
of `(key, data)` documents.

Invariants: a page holds at least one item and stops before the one that would exceed
its byte budget; a cursor is set iff items may follow, and is bound to its query
(namespace, collection, predicates in any order, ordering).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from threadloom.errors import InvalidArgumentError
from threadloom.protocol import MAX_IN_VALUES, MAX_PAGE

OPERATORS = frozenset({"eq", "ne", "lt", "lte", "gt", "gte", "in", "nin", "contains", "exists"})
DEFAULT_PAGE = 100
#: Per-item overhead of the page budget estimate (the SQL backend's DOCUMENT_OVERHEAD).
ITEM_OVERHEAD = 64

#: `(field, operator, value)`, ANDed with the others of a query.
Predicate = tuple[str, str, Any]
#: `(field, "asc" | "desc")`, or None for id order.
Order = tuple[str, str] | None


class QueryError(InvalidArgumentError, ValueError):
    """A malformed query (INVALID_ARGUMENT on the wire; a ValueError, as naas expects)."""


class Keyed(Protocol):
    """A document as the query language sees it: its id and its data."""

    @property
    def key(self) -> str: ...

    @property
    def data(self) -> Mapping[str, Any]: ...


D = TypeVar("D", bound=Keyed)


def predicates(where: Iterable[tuple[str, str, Any]]) -> list[Predicate]:
    """Check decoded predicates: known operators, `in`/`nin` lists, `exists` booleans.

    Raises:
        QueryError: with the service's message for the first bad predicate.
    """
    out: list[Predicate] = []
    for field, op, value in where:
        if op not in OPERATORS:
            raise QueryError(f"Unsupported predicate operator: {op}")
        if op in ("in", "nin") and (not isinstance(value, list) or len(value) > MAX_IN_VALUES):
            raise QueryError(f"{op} needs a list of at most {MAX_IN_VALUES} values")
        if op == "exists" and not isinstance(value, bool):
            raise QueryError("exists needs a boolean")
        out.append((field, op, value))
    return out


def ordering(field: str | None, direction: str = "") -> Order:
    """The order of `order_by (field, direction)` (empty direction = asc), None without it.

    Raises:
        QueryError: the direction is neither asc nor desc.
    """
    if field is None:
        return None
    direction = direction or "asc"
    if direction not in ("asc", "desc"):
        raise QueryError("Order direction must be asc or desc")
    return (field, direction)


def page_size(limit: int | None) -> int:
    """The page size of a request's `limit` (DEFAULT_PAGE when unset).

    Raises:
        QueryError: outside 1..MAX_PAGE.
    """
    if limit is None:
        return DEFAULT_PAGE
    if not 1 <= limit <= MAX_PAGE:
        raise QueryError(f"Page size must be an integer between 1 and {MAX_PAGE}")
    return limit


_MISSING = object()


def _kind(value: Any) -> int:
    """Type rank of SPEC §7.7: null/missing < bool < number < string < datetime < bytes <
    array < object."""
    if value is None or value is _MISSING:
        return 0
    if isinstance(value, bool):
        return 1
    if isinstance(value, (int, float)):
        return 2
    if isinstance(value, str):
        return 3
    if isinstance(value, datetime):
        return 4
    if isinstance(value, bytes):
        return 5
    if isinstance(value, list):
        return 6
    return 7


def _same(a: Any, b: Any) -> bool:
    """Structural equality: 1 == 1.0, a bool is not a number."""
    if _kind(a) != _kind(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)


def matches(data: Mapping[str, Any], predicate: Predicate) -> bool:
    """True when the document `data` satisfies one predicate (SPEC §7.7)."""
    field, op, value = predicate
    present = field in data
    found = data.get(field, _MISSING)
    if op == "exists":
        return present is value
    if op == "eq":
        return present and _same(found, value)
    if op == "ne":
        return present and not _same(found, value)
    if op == "in":
        return present and any(_same(found, v) for v in value)
    if op == "nin":
        return present and not any(_same(found, v) for v in value)
    if op == "contains":
        return isinstance(found, list) and any(_same(item, value) for item in found)
    if not present or found is None or value is None or _kind(found) != _kind(value):
        return False
    if _kind(found) not in (2, 3, 4, 5):
        return False
    left, right = _comparable(found), _comparable(value)
    return bool(
        {
            "lt": left < right,
            "lte": left <= right,
            "gt": left > right,
            "gte": left >= right,
        }[op]
    )


def matches_all(data: Mapping[str, Any], where: Sequence[Predicate]) -> bool:
    """True when `data` satisfies every predicate of `where`."""
    return all(matches(data, p) for p in where)


def _comparable(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode()  # binary (UTF-8 byte) order
    return value


def order_key(data: Mapping[str, Any], order: Order) -> tuple[Any, ...]:
    """The sort key of a document under `order` (before its id, which breaks ties)."""
    if order is None:
        return ()
    value = data.get(order[0], _MISSING)
    kind = _kind(value)
    if kind == 1 or kind == 2:
        return (kind, float(value), "")
    if kind == 3:
        return (kind, 0.0, value.encode().hex())
    if kind == 4:
        return (kind, value.timestamp(), "")
    if kind == 5:
        return (kind, 0.0, value.hex())
    if kind in (6, 7):
        return (kind, 0.0, json.dumps(value, sort_keys=True, default=str))
    return (kind, 0.0, "")


def fingerprint(namespace: str, collection: str, where: Sequence[Predicate], order: Order) -> str:
    """What a cursor is bound to: the query, predicates in any order."""
    texts = sorted(json.dumps([f, o, _json(v)], sort_keys=True) for f, o, v in where)
    text = json.dumps([namespace, collection, texts, order], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _json(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"bytes": value.hex()}
    if isinstance(value, datetime):
        return {"datetime": value.isoformat()}
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value


def write_cursor(position: tuple[tuple[Any, ...], str], bound: str) -> str:
    """The opaque cursor after `position` (order key, id) of the query `bound`."""
    text = json.dumps({"key": [list(position[0]), position[1]], "q": bound, "v": 1})
    return base64.urlsafe_b64encode(text.encode()).decode()


def read_cursor(cursor: str, bound: str) -> tuple[tuple[Any, ...], str]:
    """The position a cursor of the query `bound` stands after.

    Raises:
        QueryError: a garbled cursor, or one of another query.
    """
    try:
        found = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        if found.get("q") != bound or found.get("v") != 1:
            raise ValueError("foreign cursor")
        key, last = found["key"]
        if not isinstance(last, str) or not isinstance(key, list):
            raise ValueError("not a position")
        if key:  # the shape `order_key` writes: (type rank, number, text); () in id order
            rank, number, text = key
            if (
                type(rank) is not int
                or isinstance(number, bool)
                or not isinstance(number, (int, float))
                or not isinstance(text, str)
            ):
                raise ValueError("not a position")
        return tuple(key), last
    except (ValueError, KeyError, TypeError, AttributeError):
        raise QueryError("Invalid cursor for this query") from None


def estimate(key: str, data: Mapping[str, Any]) -> int:
    """The page budget's estimate: canonical JSON of the data (bytes as base64, datetimes
    as ISO text) + id + 64."""

    def plain(value: Any) -> Any:
        if isinstance(value, bytes):
            return base64.b64encode(value).decode()
        if isinstance(value, datetime):
            return value.isoformat()
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    text = json.dumps(plain(data), sort_keys=True, separators=(",", ":"))
    return len(text) + len(key) + ITEM_OVERHEAD


def page(
    items: Iterable[D],
    order: Order,
    *,
    limit: int,
    budget: int | None,
    bound: str,
    cursor: str | None = None,
) -> tuple[list[D], str | None]:
    """One page of matching `items`: sorted by `order` then id, after `cursor`, at most
    `limit` items and `budget` estimated bytes (never fewer than one item; None: no
    byte bound).

    Returns:
        The page and the cursor of the next one (None at the end).

    Raises:
        QueryError: the cursor is not one of this query (`bound`, see `fingerprint`).
    """
    descending = order is not None and order[1] == "desc"
    keyed = sorted(
        ((order_key(d.data, order), d) for d in items),
        key=lambda pair: (pair[0], pair[1].key),
        reverse=descending,
    )
    start = 0
    if cursor is not None:
        after = read_cursor(cursor, bound)
        start = next(
            (
                i
                for i, (k, d) in enumerate(keyed)
                if ((k, d.key) < after if descending else (k, d.key) > after)
            ),
            len(keyed),
        )
    out: list[tuple[tuple[Any, ...], D]] = []
    used = 0
    for pair in keyed[start:]:
        if len(out) >= limit:
            break
        if budget is not None:
            size = estimate(pair[1].key, pair[1].data)
            if out and used + size > budget:
                break
            used += size
        out.append(pair)
    following = None
    if start + len(out) < len(keyed):
        last_key, last = out[-1]
        following = write_cursor((last_key, last.key), bound)
    return [d for _, d in out], following
