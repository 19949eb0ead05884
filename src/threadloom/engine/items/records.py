"""What the Store's items are in memory: an item as read (`Stored`), a put or delete
(`Write`), their times and their namespaces' stored names (engine layer, no SQL but the
namespace-range condition `prefix_clause` builds)."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Final

#: One minute, in the unit of the item times.
MINUTE: Final = 60_000_000


def now_us() -> int:
    """The current time in item-time units."""
    return time.time_ns() // 1000


_EPOCH: Final = datetime(1970, 1, 1, tzinfo=timezone.utc)


def time_us(moment: datetime) -> int:
    """A datetime in item-time units (a naive one is taken as UTC, as SQLite writes it)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return (moment - _EPOCH) // timedelta(microseconds=1)


@dataclass(slots=True)
class Stored:
    """An item as read: times in microseconds, `score` set by searches that rank."""

    id: int
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: int
    updated_at: int
    expires_at: int | None
    ttl: float | None
    score: float | None = None


@dataclass
class Write:
    """One put (or, with `value` None, one delete) of a batch.

    Attributes:
        texts: the item's indexed text (one string per indexed field), or None to keep
            it out of the text index.
        vectors: (field path, embedding) per indexed field, or None for none.
        keys: the embedding cache key (`embedded.key`) of each of `vectors`, in order,
            or None when the embedder has no known identity (nothing is cached).
        ttl: minutes until the item expires unless read (None: never).
        checked: `value` already passed `check_json`.
        created_at, updated_at: the item's times (microseconds) when it brings its own,
            as a migrated item does (None: the batch's time; a replaced item keeps its
            `created_at`).
        create_only: write the item only where its key is not stored yet (a stored one
            is left as it is).
    """

    namespace: tuple[str, ...]
    key: str
    value: Mapping[str, Any] | None
    ttl: float | None = None
    texts: list[str] | None = None
    vectors: list[tuple[str, Sequence[float]]] | None = field(default=None)
    keys: list[bytes] | None = None
    checked: bool = False
    created_at: int | None = None
    updated_at: int | None = None
    create_only: bool = False


def namespace_name(namespace: Sequence[str]) -> str:
    """A namespace as stored: its labels joined by `.` (which no label holds)."""
    return ".".join(namespace)


def prefix_clause(prefix: Sequence[str], column: str = "n.name") -> tuple[str, list[str]]:
    """SQL (and its arguments) that holds for the namespaces under `prefix`."""
    if not prefix:
        return "1", []
    name = namespace_name(prefix)
    return f"({column} = ? OR ({column} >= ? AND {column} < ?))", [name, name + ".", name + "/"]
