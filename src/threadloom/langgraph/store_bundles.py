"""The Store items a thread bundle carries (`threadloom bundle --store-prefix`): read
from a file's Store under namespace prefixes, and written into another's.

Adapters' wing: items are read and written through `Store`, so an imported item is
text-indexed as the target's Store indexes a put (no vectors: `threadloom reembed` embeds
them), keeps its own times, and is create-only (`Store.import_items`). Expired items are
not carried.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from typing import Any

from langgraph.store.base import Item

from threadloom.engine.items import time_us
from threadloom.langgraph.store import Store

#: Items one search page reads.
PAGE = 1000
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)


def items_under(
    path: str | os.PathLike[str], prefixes: Sequence[Sequence[str]]
) -> list[dict[str, Any]]:
    """Every live item of the file's Store under `prefixes`, as a bundle carries it
    (`{"namespace", "key", "value", "created_at", "updated_at"}`, times in microseconds),
    each once."""
    found: dict[tuple[tuple[str, ...], str], dict[str, Any]] = {}
    store = Store(path, readonly=True)
    try:
        for prefix in prefixes:
            offset = 0
            while True:
                page = store.search(tuple(prefix), limit=PAGE, offset=offset, refresh_ttl=False)
                for item in page:
                    found[(tuple(item.namespace), item.key)] = {
                        "namespace": list(item.namespace),
                        "key": item.key,
                        "value": item.value,
                        "created_at": time_us(item.created_at),
                        "updated_at": time_us(item.updated_at),
                    }
                if len(page) < PAGE:
                    break
                offset += PAGE
    finally:
        store.close()
    return [found[k] for k in sorted(found)]


def import_items(path: str | os.PathLike[str], items: Sequence[Mapping[str, Any]]) -> int:
    """Store bundle items in the file's Store, create-only with their own times; return
    how many were written (a key already stored is left as it is)."""
    if not items:
        return 0
    store = Store(path)
    try:
        return store.import_items(
            [
                Item(
                    value=dict(item["value"]),
                    key=str(item["key"]),
                    namespace=tuple(item["namespace"]),
                    created_at=_moment(int(item["created_at"])),
                    updated_at=_moment(int(item["updated_at"])),
                )
                for item in items
            ]
        )
    finally:
        store.close()


def _moment(us: int) -> datetime.datetime:
    return _EPOCH + datetime.timedelta(microseconds=us)
