"""A bounded, thread-safe LRU map: the one LRU every layer uses.

Pure (no I/O). Entries weigh 1 unless a `weigh` function says otherwise; the map
holds at most `capacity` in total weight, evicting the least recently used first. An
entry heavier than the whole capacity is not held, unless the map keeps its newest
entry whatever it weighs (`keep_newest`, as the protocol's known-refs memory does).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Lru(Generic[K, V]):
    """A bounded LRU map.

    Args:
        capacity: most total weight held; 0 holds nothing.
        weigh: weight of a value (default 1 each).
        keep_newest: hold the newest entry even when it alone outweighs `capacity`.
    """

    def __init__(
        self, capacity: int, weigh: Callable[[V], int] | None = None, *, keep_newest: bool = False
    ) -> None:
        self.capacity = capacity
        self._weigh = weigh
        self._keep_newest = keep_newest
        self._items: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """True when `key` is held (without making it the most recently used)."""
        with self._lock:
            return key in self._items

    def values(self) -> list[V]:
        """The values held, least recently used first (a snapshot)."""
        with self._lock:
            return [value for value, _ in self._items.values()]

    @property
    def weight(self) -> int:
        """Total weight held."""
        return self._total

    def get(self, key: K) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._items.move_to_end(key)
            return found[0]

    def get_many(self, keys: Iterable[K]) -> dict[K, V]:
        """The values held among `keys`."""
        found: dict[K, V] = {}
        if not self.capacity:
            return found
        with self._lock:
            for key in keys:
                entry = self._items.get(key)
                if entry is not None:
                    self._items.move_to_end(key)
                    found[key] = entry[0]
        return found

    def put(self, key: K, value: V) -> None:
        """Hold `value` under `key`, evicting the least recently used beyond capacity."""
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]], *, replace: bool = True) -> None:
        """Hold several values; with `replace=False` a key already held keeps its value."""
        if not self.capacity:
            return
        weigh = self._weigh
        with self._lock:
            for key, value in items:
                old = self._items.get(key)
                if old is not None:
                    self._items.move_to_end(key)
                    if not replace:
                        continue
                    self._total -= old[1]
                size = weigh(value) if weigh is not None else 1
                if size > self.capacity and not self._keep_newest:
                    if old is not None:
                        del self._items[key]
                    continue
                self._items[key] = (value, size)
                self._total += size
                while self._total > self.capacity and len(self._items) > 1:
                    _, (_, evicted) = self._items.popitem(last=False)
                    self._total -= evicted

    def pop(self, key: K) -> V | None:
        """Remove `key`; return its value or None."""
        with self._lock:
            entry = self._items.pop(key, None)
            if entry is None:
                return None
            self._total -= entry[1]
            return entry[0]

    def drop_where(self, wanted: Callable[[K], bool]) -> None:
        """Remove every key for which `wanted(key)` is true."""
        with self._lock:
            for key in [k for k in self._items if wanted(k)]:
                self._total -= self._items.pop(key)[1]

    def clear(self) -> None:
        """Remove everything."""
        with self._lock:
            self._items.clear()
            self._total = 0
