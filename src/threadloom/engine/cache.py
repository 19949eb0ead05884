"""A bounded LRU of decoded value documents, shared by the threads of one process.

Value documents are content-addressed and never rewritten, so a cached body is
always the stored one; entries are dropped when this process deletes them.
Thread-safe (built on `core.lru.Lru`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from threadloom.core.lru import Lru

Key = tuple[int, str]

#: Bytes of payload the cache holds by default (an estimate: payload bytes plus overhead).
DEFAULT_CAPACITY = 4 * 1024 * 1024
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
        self._lru: Lru[Key, dict[str, Any]] = Lru(capacity, weight)

    def get_many(self, thread: int, refs: Iterable[str]) -> dict[str, dict[str, Any]]:
        """Return the cached bodies among `refs`."""
        if not self.capacity:
            return {}
        found = self._lru.get_many((thread, ref) for ref in refs)
        return {ref: data for (_, ref), data in found.items()}

    def put_many(self, thread: int, items: Iterable[tuple[str, dict[str, Any]]]) -> None:
        """Cache decoded bodies, evicting the least recently used beyond capacity."""
        if self.capacity:
            self._lru.put_many((((thread, ref), data) for ref, data in items), replace=False)

    def drop(self, thread: int, refs: Iterable[str] | None = None) -> None:
        """Forget `refs` of `thread`, or all of the thread's entries when `refs` is None."""
        if refs is None:
            self._lru.drop_where(lambda key: key[0] == thread)
            return
        for ref in refs:
            self._lru.pop((thread, ref))
