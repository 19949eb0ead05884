"""A bounded LRU of decoded value documents, shared by the threads of one process.

Value documents are content-addressed and never rewritten, so a cached body is
always the stored one; entries are dropped when this process deletes them.
Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

Key = tuple[int, str]

#: Bytes of payload the cache holds by default (an estimate: payload bytes plus overhead).
DEFAULT_CAPACITY = 64 * 1024 * 1024
_OVERHEAD = 256


def weight(data: dict[str, Any]) -> int:
    """Estimate the memory a decoded value document takes."""
    value = data.get("value")
    if value is not None:
        payload = value.get("payload")
        return _OVERHEAD + (len(payload) if payload is not None else 80 * len(value["parts"]))
    if "payload" in data:
        return _OVERHEAD + len(data["payload"])
    return _OVERHEAD + 80 * len(data.get("elements") or data.get("chunks") or ())


class ValueCache:
    """LRU of `(thread row id, ref) -> decoded body`, bounded by estimated bytes.

    Args:
        capacity: most estimated bytes held; 0 disables the cache.
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[Key, tuple[dict[str, Any], int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def get_many(self, thread: int, refs: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Return the cached bodies among `refs`."""
        found: dict[str, dict[str, Any]] = {}
        if not self.capacity:
            return found
        with self._lock:
            for ref in refs:
                entry = self._items.get((thread, ref))
                if entry is not None:
                    self._items.move_to_end((thread, ref))
                    found[ref] = entry[0]
        return found

    def put_many(self, thread: int, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Cache decoded bodies, evicting the least recently used beyond capacity."""
        if not self.capacity:
            return
        with self._lock:
            for ref, data in items:
                key = (thread, ref)
                if key in self._items:
                    self._items.move_to_end(key)
                    continue
                size = weight(data)
                self._items[key] = (data, size)
                self._total += size
            while self._total > self.capacity and self._items:
                _, (_, size) = self._items.popitem(last=False)
                self._total -= size

    def drop(self, thread: int, refs: Iterable[str] | None = None) -> None:
        """Forget `refs` of `thread`, or all of the thread's entries when `refs` is None."""
        with self._lock:
            keys = (
                [k for k in self._items if k[0] == thread]
                if refs is None
                else [(thread, ref) for ref in refs]
            )
            for key in keys:
                entry = self._items.pop(key, None)
                if entry is not None:
                    self._total -= entry[1]
