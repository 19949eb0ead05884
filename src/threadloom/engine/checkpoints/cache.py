"""The scope's caches and how much memory each entry is estimated to take.

`ValueCache` is a bounded LRU of decoded value documents, shared by the threads of one
process. Value documents are content-addressed and never rewritten, so a cached body
is always the stored one; entries are dropped when this process deletes them.
`closure_cost` estimates a resolved checkpoint (the reader's closure cache). Every
cache is bounded by its own capacity and draws on a `core.lru.Budget`, by default the
process's one. Thread-safe (built on `core.lru.Lru`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from threadloom.core.lru import Budget, Lru

Key = tuple[int, str]

#: Bytes of payload the cache holds by default (an estimate: payload bytes plus overhead).
DEFAULT_CAPACITY = 4 * 1024 * 1024
_OVERHEAD = 256
#: Estimated bytes of a decoded checkpoint document beside its channels and payloads.
_DOC_OVERHEAD = 2048


def weight(data: Mapping[str, Any]) -> int:
    """Estimate the memory a decoded value document takes."""
    value = data.get("value")
    if value is not None:
        payload = value.get("payload")
        return _OVERHEAD + (len(payload) if payload is not None else 80 * len(value["parts"]))
    if "payload" in data:
        return _OVERHEAD + len(data["payload"])
    return _OVERHEAD + 80 * len(data.get("elements") or data.get("chunks") or ())


def _inline(stored: Any) -> int:
    """Bytes of the payload a stored value carries inline (0 for a ref)."""
    if isinstance(stored, Mapping):
        payload = stored.get("payload")
        if isinstance(payload, (bytes, str)):
            return len(payload)
    return 0


def closure_cost(item: tuple[Mapping[str, Any], tuple[Mapping[str, Any], Any]]) -> int:
    """Estimate the memory a resolved checkpoint takes: `(document, (fetched, raw))`.

    `fetched` holds only the value documents the checkpoint's own entries reach (the
    reader's `_own`), counted in full although the value cache may hold the same objects:
    a closure keeps them alive after the cache lets them go. So are the channels' raw
    payloads (a list's elements), which the closure alone may keep.
    """
    doc, (fetched, raw) = item
    channels = doc.get("channels") or {}
    size = _DOC_OVERHEAD + _OVERHEAD * len(channels)
    size += _inline(doc.get("checkpoint")) + _inline(doc.get("metadata"))
    size += sum(weight(data) for data in fetched.values())
    for channel in (raw or {}).values():
        if isinstance(channel, tuple) and len(channel) == 2 and isinstance(channel[1], bytes):
            size += _OVERHEAD + len(channel[1])  # (kind, payload)
            continue
        items, parts = channel.items, channel.parts
        size += 64 * len(items) + 64 * len(parts) + sum(len(p) for _, p in items)
    return size


class ValueCache:
    """LRU of `(thread row id, ref) -> decoded body`, bounded by estimated bytes.

    Args:
        capacity: most estimated bytes held; 0 disables the cache.
        budget: the byte budget it also draws on (None: `capacity` alone bounds it).
    """

    def __init__(self, capacity: int = DEFAULT_CAPACITY, budget: Budget | None = None) -> None:
        self.capacity = capacity
        self._lru: Lru[Key, dict[str, Any]] = Lru(capacity, weight, budget=budget, group=0)

    @property
    def size(self) -> int:
        """Estimated bytes held now."""
        return self._lru.weight

    def clear(self) -> None:
        """Forget everything."""
        self._lru.clear()

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
            self._lru.drop_group(thread)
            return
        for ref in refs:
            self._lru.pop((thread, ref))

    def drop_threads(self, threads: set[int]) -> None:
        """Forget every entry of these threads."""
        for thread in threads:
            self._lru.drop_group(thread)
