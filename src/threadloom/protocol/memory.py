"""Remembered references (SPEC §4.4): what stored checkpoints reference.

A bounded LRU keyed by `(thread_id, checkpoint_ns, checkpoint_id)`. Recalling
a put's parent yields the refs to skip and the channel entries to reuse; its
ancestors (`metadata["parents"]`) contribute refs only. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from threadloom.protocol.constants import KNOWN_REFS_CAPACITY
from threadloom.protocol.plan import NOTHING_KNOWN, Known

CheckpointRef = tuple[str, str, str]


class KnownReferences:
    """LRU memory of the refs and channel entries of stored checkpoints.

    Args:
        capacity: most refs remembered in total, over every checkpoint.
    """

    def __init__(self, capacity: int = KNOWN_REFS_CAPACITY) -> None:
        self.capacity = capacity
        self._items: OrderedDict[CheckpointRef, Known] = OrderedDict()
        self._sizes: dict[CheckpointRef, int] = {}
        self._total = 0
        self._lock = threading.Lock()

    def remember(
        self,
        key: CheckpointRef,
        refs: Iterable[str],
        entries: Mapping[str, tuple[Any, dict[str, Any]]],
    ) -> None:
        """Remember that checkpoint `key` is stored and references `refs`."""
        frozen = refs if isinstance(refs, frozenset) else frozenset(refs)
        known = Known(frozen, dict(entries))
        size = len(known.refs)
        with self._lock:
            self._drop(key)
            self._items[key] = known
            self._sizes[key] = size
            self._total += size
            while self._total > self.capacity and len(self._items) > 1:
                self._drop(next(iter(self._items)))

    def recall(
        self,
        thread_id: str,
        parent: tuple[str, str] | None,
        ancestors: Iterable[tuple[str, str]] = (),
    ) -> Known:
        """Return the refs of `parent` and `ancestors` and the channel entries of `parent`.

        Args:
            thread_id: the thread of the put.
            parent: `(checkpoint_ns, checkpoint_id)` of the put's parent, if any.
            ancestors: `(checkpoint_ns, checkpoint_id)` pairs from `metadata["parents"]`.
        """
        refs: set[str] = set()
        entries: Mapping[str, tuple[Any, dict[str, Any]]] = {}
        ancestors = list(ancestors)
        with self._lock:
            if parent is not None and not ancestors:
                # The common case: one remembered set, returned as is (it is frozen).
                found = self._touch((thread_id, *parent))
                return NOTHING_KNOWN if found is None else found
            if parent is not None:
                found = self._touch((thread_id, *parent))
                if found is not None:
                    refs.update(found.refs)
                    entries = found.entries
            for ns, checkpoint_id in ancestors:
                found = self._touch((thread_id, ns, checkpoint_id))
                if found is not None:
                    refs.update(found.refs)
        if not refs and not entries:
            return NOTHING_KNOWN
        return Known(frozenset(refs), entries)

    def __contains__(self, key: object) -> bool:
        """True when checkpoint `(thread_id, checkpoint_ns, checkpoint_id)` is remembered."""
        with self._lock:
            return key in self._items

    def forget(self, thread_id: str) -> None:
        """Forget every checkpoint of `thread_id`."""
        with self._lock:
            for key in [k for k in self._items if k[0] == thread_id]:
                self._drop(key)

    def _touch(self, key: CheckpointRef) -> Known | None:
        found = self._items.get(key)
        if found is not None:
            self._items.move_to_end(key)
        return found

    def _drop(self, key: CheckpointRef) -> None:
        if key in self._items:
            del self._items[key]
            self._total -= self._sizes.pop(key)


def read_entries(
    channels: Mapping[str, dict[str, Any]], channel_versions: Mapping[str, Any]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Return the entries a read remembers: stored channels that have a version."""
    return {
        channel: (channel_versions[channel], entry)
        for channel, entry in channels.items()
        if channel_versions.get(channel) is not None
    }
