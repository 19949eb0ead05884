"""A bounded, thread-safe LRU map and the byte budget maps share: the one LRU every layer uses.

Pure (no I/O). Entries weigh 1 unless a `weigh` function says otherwise; a map holds at
most `capacity` in total weight, evicting the least recently used first. An entry
heavier than the whole capacity is not held, unless the map keeps its newest entry
whatever it weighs (`keep_newest`, as the protocol's known-refs memory does).

A map may also draw on a `Budget`: every map of a budget holds at most the budget's
capacity in estimated bytes together (`cost`, which defaults to the weight), and a
put beyond it evicts the least recently used entry of whichever map holds it. One
budget serves the whole process (`process_budget()`, THREADLOOM_MEMORY_BUDGET): every
cache of every scope and file draws on it, so their total does not grow with the
number of savers, threads or values. Maps of one budget share its lock.
"""

from __future__ import annotations

import itertools
import os
import re
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any, Generic, TypeVar

from threadloom.errors import InvalidArgumentError

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

MiB = 1024 * 1024
#: Bytes every threadloom cache of a process holds together unless
#: THREADLOOM_MEMORY_BUDGET (or `process_budget().resize`) says otherwise.
DEFAULT_BUDGET = 32 * MiB
BUDGET_ENV = "THREADLOOM_MEMORY_BUDGET"
_UNITS = {"": 1, "k": 1024, "m": MiB, "g": 1024 * MiB}


class Budget:
    """Bytes that several LRU maps hold together, least recently used out first.

    Args:
        capacity: most estimated bytes held by all its maps together; 0 holds nothing.
    """

    def __init__(self, capacity: int) -> None:
        self._capacity = _checked(capacity)
        self._lock = threading.Lock()
        # Every entry of every map, least recently used first: (map token, key).
        self._order: OrderedDict[tuple[int, Hashable], None] = OrderedDict()
        self._members: dict[int, weakref.ref[Lru[Any, Any]]] = {}
        self._tokens = itertools.count(1)
        # What maps garbage-collected since the last operation held: (token, [(key, cost)]).
        # A finalizer may run while the lock is held (a put that allocates), so it only
        # appends here; `_reap` settles the accounts under the lock.
        self._dead: list[tuple[int, list[tuple[Any, int]]]] = []
        self._used = 0

    @property
    def capacity(self) -> int:
        """Most estimated bytes its maps hold together."""
        return self._capacity

    @property
    def used(self) -> int:
        """Estimated bytes its maps hold now."""
        with self._lock:
            self._reap()
            return self._used

    def __len__(self) -> int:
        """Entries held by all its maps."""
        with self._lock:
            self._reap()
            return len(self._order)

    def resize(self, capacity: int) -> None:
        """Change the capacity, evicting least recently used entries down to it."""
        with self._lock:
            self._capacity = _checked(capacity)
            self._reap()
            self._shrink()

    def _join(self, lru: Lru[Any, Any]) -> int:
        token = next(self._tokens)
        with self._lock:
            self._members[token] = weakref.ref(lru)
        weakref.finalize(lru, _bury, self._dead, token, lru._items)
        return token

    def _reap(self) -> None:
        """Release what collected maps held (under the lock)."""
        while self._dead:
            token, held = self._dead.pop()
            self._members.pop(token, None)
            for key, cost in held:
                self._used -= cost
                self._order.pop((token, key), None)

    def _shrink(self) -> None:
        """Evict the least recently used entries of any map down to capacity (under the lock)."""
        skipped = 0
        while self._used > self._capacity and self._order and skipped <= len(self._order):
            token, key = next(iter(self._order))
            ref = self._members.get(token)
            owner = ref() if ref is not None else None
            if owner is None:
                del self._order[(token, key)]
                continue
            if owner._keep_newest and next(reversed(owner._items)) == key:
                # That map keeps its newest entry whatever it weighs: look past it.
                self._order.move_to_end((token, key))
                skipped += 1
                continue
            owner._remove(key)


def _bury(
    dead: list[tuple[int, list[tuple[Any, int]]]],
    token: int,
    items: OrderedDict[Any, tuple[Any, int, int]],
) -> None:
    # The map is gone: free its values now, leave the accounts to the next `_reap`.
    dead.append((token, [(key, cost) for key, (_, _, cost) in items.items()]))
    items.clear()


class Lru(Generic[K, V]):
    """A bounded LRU map.

    Args:
        capacity: most total weight held; 0 holds nothing.
        weigh: weight of a value (default 1 each).
        keep_newest: hold the newest entry even when it alone outweighs `capacity`.
        budget: the budget this map also draws on (None: only `capacity` bounds it).
        cost: estimated bytes of a value charged to `budget` (default: its weight).
        group: for tuple keys, the position of the part that groups them (a thread's
            entries, say): `drop_group` then removes a group without a pass over the map.
    """

    def __init__(
        self,
        capacity: int,
        weigh: Callable[[V], int] | None = None,
        *,
        keep_newest: bool = False,
        budget: Budget | None = None,
        cost: Callable[[V], int] | None = None,
        group: int | None = None,
    ) -> None:
        self.capacity = capacity
        self._weigh = weigh
        self._cost = cost
        self._keep_newest = keep_newest
        self._items: OrderedDict[K, tuple[V, int, int]] = OrderedDict()
        self._total = 0
        self._budget = budget
        self._lock = budget._lock if budget is not None else threading.Lock()
        self._token = budget._join(self) if budget is not None else 0
        self._group = group
        #: The keys held of each group (`group`), kept with every insert and removal.
        self._groups: dict[Any, set[K]] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: object) -> bool:
        """True when `key` is held (without making it the most recently used)."""
        with self._lock:
            return key in self._items

    def values(self) -> list[V]:
        """The values held, least recently used first (a snapshot)."""
        with self._lock:
            return [value for value, _, _ in self._items.values()]

    @property
    def weight(self) -> int:
        """Total weight held."""
        return self._total

    @property
    def cost(self) -> int:
        """Estimated bytes held (charged to the budget, if any)."""
        with self._lock:
            return sum(cost for _, _, cost in self._items.values())

    @property
    def budget(self) -> Budget | None:
        """The budget this map draws on, if any."""
        return self._budget

    def _touch(self, key: K) -> None:
        self._items.move_to_end(key)
        if self._budget is not None:
            self._budget._order.move_to_end((self._token, key))

    def _remove(self, key: K) -> V:
        value, weight, cost = self._items.pop(key)
        self._total -= weight
        if self._group is not None:
            part = key[self._group]  # type: ignore[index]
            members = self._groups[part]
            members.discard(key)
            if not members:
                del self._groups[part]
        if self._budget is not None:
            self._budget._used -= cost
            del self._budget._order[(self._token, key)]
        return value

    def get(self, key: K) -> V | None:
        """The value of `key` (now the most recently used), or None."""
        with self._lock:
            found = self._items.get(key)
            if found is None:
                return None
            self._touch(key)
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
                    self._touch(key)
                    found[key] = entry[0]
        return found

    def put(self, key: K, value: V) -> None:
        """Hold `value` under `key`, evicting the least recently used beyond capacity."""
        self.put_many(((key, value),))

    def put_many(self, items: Iterable[tuple[K, V]], *, replace: bool = True) -> None:
        """Hold several values; with `replace=False` a key already held keeps its value."""
        if not self.capacity:
            return
        weigh, charge, budget = self._weigh, self._cost, self._budget
        with self._lock:
            if budget is not None:
                budget._reap()
            for key, value in items:
                if key in self._items:
                    if not replace:
                        self._touch(key)
                        continue
                    self._remove(key)
                weight = weigh(value) if weigh is not None else 1
                cost = charge(value) if charge is not None else weight
                if not self._keep_newest and (
                    weight > self.capacity or (budget is not None and cost > budget._capacity)
                ):
                    continue
                self._items[key] = (value, weight, cost)
                self._total += weight
                if self._group is not None:
                    part = key[self._group]  # type: ignore[index]
                    members = self._groups.get(part)
                    if members is None:
                        self._groups[part] = {key}
                    else:
                        members.add(key)
                if budget is not None:
                    budget._order[(self._token, key)] = None
                    budget._used += cost
                while self._total > self.capacity and len(self._items) > 1:
                    self._remove(next(iter(self._items)))
                if budget is not None:
                    budget._shrink()

    def pop(self, key: K) -> V | None:
        """Remove `key`; return its value or None."""
        with self._lock:
            if key not in self._items:
                return None
            return self._remove(key)

    def drop_where(self, wanted: Callable[[K], bool]) -> None:
        """Remove every key for which `wanted(key)` is true."""
        with self._lock:
            for key in [k for k in self._items if wanted(k)]:
                self._remove(key)

    def drop_group(self, part: Hashable) -> None:
        """Remove every key whose part at `group` is `part` (as many steps as it has keys).

        Raises:
            InvalidArgumentError: the map was made without `group`.
        """
        if self._group is None:
            raise InvalidArgumentError("drop_group needs a map made with group=")
        with self._lock:
            for key in list(self._groups.get(part, ())):
                self._remove(key)

    def clear(self) -> None:
        """Remove everything."""
        with self._lock:
            for key in list(self._items):
                self._remove(key)


def parse_bytes(text: str) -> int:
    """Bytes from `"33554432"`, `"32M"`, `"32MiB"`, `"512k"` or `"1G"` (binary units).

    Raises:
        InvalidArgumentError: not a size.
    """
    found = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if found is None:
        raise InvalidArgumentError(
            f"{text!r} is not a size in bytes; write e.g. 33554432, 32M or 32MiB"
        )
    return int(found.group(1)) * _UNITS[found.group(2).lower()]


def _checked(capacity: int) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise InvalidArgumentError(f"a memory budget is a number of bytes >= 0, not {capacity!r}")
    return capacity


_process_budget: Budget | None = None
_process_lock = threading.Lock()


def process_budget() -> Budget:
    """The budget every threadloom cache of this process draws on (made on first use).

    Its capacity is THREADLOOM_MEMORY_BUDGET when set (bytes, or with a K/M/G suffix),
    else DEFAULT_BUDGET; `resize` changes it at run time.

    Raises:
        InvalidArgumentError: THREADLOOM_MEMORY_BUDGET is not a size.
    """
    global _process_budget
    with _process_lock:
        if _process_budget is None:
            text = os.environ.get(BUDGET_ENV, "").strip()
            _process_budget = Budget(parse_bytes(text) if text else DEFAULT_BUDGET)
        return _process_budget
