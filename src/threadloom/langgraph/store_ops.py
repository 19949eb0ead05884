"""The Store adapter's ops: validation, what a batch needs from outside the file, and
the conversion of engine items to LangGraph's (adapter layer, beside `store.py`)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Final

from langgraph.store.base import (
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    SearchItem,
    SearchOp,
)

from threadloom.engine.items import Stored, Write, check_json, check_text
from threadloom.errors import InvalidArgumentError, InvalidValueError

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)

#: How `search(query=...)` ranks (docs/store.md, "Hybrid search").
MODES: Final = ("vector", "text", "hybrid")


def check_mode(mode: object) -> str:
    """A search mode named in MODES."""
    if mode not in MODES:
        raise InvalidArgumentError(
            f"search mode {mode!r} is not one of {', '.join(MODES)}; use 'vector' (the "
            "embedding's similarity), 'text' (words) or 'hybrid' (both, fused)"
        )
    return str(mode)


class RankedSearchOp(SearchOp):
    """A `SearchOp` that names its ranking (`mode`, one of MODES): what `search(...,
    mode=)` sends through `batch`. Equal only to an op of the same mode, so a batch of
    AsyncStore never merges two searches that differ by their mode."""

    mode: str

    def __new__(cls, *args: Any, mode: str, **kwargs: Any) -> RankedSearchOp:
        op = super().__new__(cls, *args, **kwargs)
        op.mode = check_mode(mode)
        return op

    def __eq__(self, other: object) -> bool:
        return tuple.__eq__(self, other) and getattr(other, "mode", None) == self.mode

    def __hash__(self) -> int:
        return hash((tuple(self), self.mode))


def search_mode(op: SearchOp, default: str) -> str:
    """The ranking `op` asks for (`default`: the store's)."""
    return str(getattr(op, "mode", default))


def as_time(us: int) -> datetime:
    # timedelta's positional microseconds: 2.5x faster than the keyword (two per item read).
    return _EPOCH + timedelta(0, 0, us)


def _times(stored: Stored) -> tuple[datetime, datetime]:
    """An item's created and updated times: one datetime for both when it was never put
    again (they are immutable)."""
    created = as_time(stored.created_at)
    if stored.updated_at == stored.created_at:
        return created, created
    return created, as_time(stored.updated_at)


def as_item(stored: Stored) -> Item:
    created, updated = _times(stored)
    return Item(
        value=stored.value,
        key=stored.key,
        namespace=stored.namespace,
        created_at=created,
        updated_at=updated,
    )


def as_search_item(stored: Stored) -> SearchItem:
    created, updated = _times(stored)
    return SearchItem(
        namespace=stored.namespace,
        key=stored.key,
        value=stored.value,
        created_at=created,
        updated_at=updated,
        score=stored.score,
    )


def check_labels(namespace: Sequence[Any], *, full: bool) -> None:
    """BaseStore's namespace rules, for ops handed to `batch` directly too."""
    if full and not namespace:
        raise InvalidNamespaceError("Namespace cannot be empty.")
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {tuple(namespace)}: labels are strings"
            )
        if not label or "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {tuple(namespace)}: a label is a "
                "non-empty string without '.' or NUL"
            )
    if full and namespace[0] == "langgraph":
        raise InvalidNamespaceError(
            f'Root label for namespace cannot be "langgraph". Got: {tuple(namespace)}'
        )


def check_key(key: object) -> None:
    """An item key is text SQLite can hold whole: a str without NUL or lone surrogates."""
    if not isinstance(key, str):
        raise InvalidArgumentError(f"an item key is a str, not {type(key).__name__}")
    if "\x00" in key:
        raise InvalidValueError(f"the item key {key!r} holds a NUL character; remove it")
    if not key.isascii():  # ASCII is always text UTF-8 holds (and no error to word)
        check_text(key, f"the item key {key!r}")


#: The keys of a Store's `ttl`: those of LangGraph's `TTLConfig` (langgraph-checkpoint 4.x).
#: A key a later LangGraph adds is refused until it is added here (docs/langgraph.md).
TTL_KEYS: Final = ("default_ttl", "refresh_on_read", "sweep_interval_minutes", "omit_expired")


def check_minutes(minutes: object, what: str, *, positive: bool = False) -> None:
    """`minutes` is None or a finite number (more than 0 when `positive`)."""
    if minutes is None:
        return
    if (
        isinstance(minutes, bool)
        or not isinstance(minutes, (int, float))
        or not math.isfinite(minutes)
        or (positive and minutes <= 0)
    ):
        more = " more than 0" if positive else ""
        raise InvalidArgumentError(
            f"{what} is a number of minutes{more} (or None), not {minutes!r}"
        )


def check_ttl_config(ttl: object) -> None:
    """A Store's `ttl`: None or a `TTLConfig` whose every setting is understood.

    Raises:
        InvalidArgumentError: not a mapping, an unknown key (a misspelt setting would
            otherwise be dropped without a word), or a value of the wrong kind.
    """
    if ttl is None:
        return
    if not isinstance(ttl, Mapping):
        raise InvalidArgumentError(
            f"ttl is LangGraph's TTLConfig, a dict of {', '.join(TTL_KEYS)}; "
            f"not {type(ttl).__name__}"
        )
    unknown = sorted(str(key) for key in ttl if key not in TTL_KEYS)
    if unknown:
        raise InvalidArgumentError(
            f"ttl has unknown settings {', '.join(map(repr, unknown))}; "
            f"the settings are {', '.join(TTL_KEYS)}"
        )
    check_minutes(ttl.get("default_ttl"), "ttl default_ttl", positive=True)
    check_minutes(ttl.get("sweep_interval_minutes"), "ttl sweep_interval_minutes", positive=True)
    for flag in ("refresh_on_read", "omit_expired"):
        if flag in ttl and not isinstance(ttl[flag], bool):
            raise InvalidArgumentError(f"ttl {flag} is True or False, not {ttl[flag]!r}")


def check_get(namespace: Sequence[Any], key: object) -> None:
    """A get's namespace and key (`validate` of a GetOp; `Store.get` makes no op)."""
    check_labels(namespace, full=False)
    check_key(key)


def validate(op: Op) -> None:
    if isinstance(op, PutOp):
        check_labels(op.namespace, full=True)
        check_key(op.key)
        if op.value is not None and not isinstance(op.value, dict):
            raise InvalidArgumentError(
                f"an item value is a dict (a JSON object), not {type(op.value).__name__}"
            )
        if op.value is not None:
            check_json(op.value)
            check_minutes(op.ttl, "an item's ttl")
    elif isinstance(op, GetOp):
        check_get(op.namespace, op.key)
    elif isinstance(op, SearchOp):
        check_labels(op.namespace_prefix, full=False)
    elif isinstance(op, ListNamespacesOp):
        for condition in op.match_conditions or ():
            check_labels([p for p in condition.path if p != "*"], full=False)
    else:
        raise InvalidArgumentError(f"unknown store operation {type(op).__name__}")


@dataclass
class Prepared:
    """What a batch needs that comes from outside the file: texts and embeddings."""

    ops: list[Op]
    writes: list[Write]
    queries: dict[str, list[float]]
    embed: list[str]
    #: (write index, field path) per text in `embed`.
    slots: list[tuple[int, str]]


def strings(value: Any) -> Iterator[str]:
    """Every string value inside `value` (keys excluded): the text of the `$` field."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for child in value.values():
            yield from strings(child)
    elif isinstance(value, list):
        for child in value:
            yield from strings(child)


def namespace_matches(condition: MatchCondition, namespace: tuple[str, ...]) -> bool:
    path = tuple(condition.path)
    if len(namespace) < len(path):
        return False
    pairs = (
        zip(namespace, path, strict=False)
        if condition.match_type == "prefix"
        else zip(reversed(namespace), reversed(path), strict=False)
    )
    if condition.match_type not in ("prefix", "suffix"):
        raise InvalidArgumentError(f"match type {condition.match_type!r} is not prefix or suffix")
    return all(p == "*" or n == p for n, p in pairs)
