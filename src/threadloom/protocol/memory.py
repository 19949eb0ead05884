"""Remembered references (SPEC §4.4): what stored checkpoints reference.

A bounded LRU keyed by `(thread_id, checkpoint_ns, checkpoint_id)`. Recalling
a put's parent yields the refs to skip and the channel entries to reuse; its
ancestors (`metadata["parents"]`) contribute refs only. Thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from threadloom.core.lru import Lru
from threadloom.protocol.constants import KNOWN_REFS_CAPACITY
from threadloom.protocol.shapes import NOTHING_KNOWN, Known

CheckpointRef = tuple[str, str, str]


class KnownReferences:
    """LRU memory of the refs and channel entries of stored checkpoints.

    Args:
        capacity: most refs remembered in total, over every checkpoint.
    """

    def __init__(self, capacity: int = KNOWN_REFS_CAPACITY) -> None:
        self.capacity = capacity
        # As the released planner's memory: the newest checkpoint is kept, however many
        # refs it holds.
        self._lru: Lru[CheckpointRef, Known] = Lru(
            capacity, lambda known: len(known.refs), keep_newest=True
        )

    def remember(
        self,
        key: CheckpointRef,
        refs: Iterable[str],
        entries: Mapping[str, tuple[Any, dict[str, Any]]],
    ) -> None:
        """Remember that checkpoint `key` is stored and references `refs`."""
        frozen = refs if isinstance(refs, frozenset) else frozenset(refs)
        self._lru.put(key, Known(frozen, dict(entries)))

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
        ancestors = list(ancestors)
        found = self._lru.get((thread_id, *parent)) if parent is not None else None
        if not ancestors:
            # The common case: one remembered set, returned as is (it is frozen).
            return NOTHING_KNOWN if found is None else found
        refs: set[str] = set(found.refs) if found is not None else set()
        entries = found.entries if found is not None else {}
        for ns, checkpoint_id in ancestors:
            other = self._lru.get((thread_id, ns, checkpoint_id))
            if other is not None:
                refs.update(other.refs)
        if not refs and not entries:
            return NOTHING_KNOWN
        return Known(frozenset(refs), entries)

    def __contains__(self, key: object) -> bool:
        """True when checkpoint `(thread_id, checkpoint_ns, checkpoint_id)` is remembered."""
        return key in self._lru

    def forget(self, thread_id: str) -> None:
        """Forget every checkpoint of `thread_id`."""
        self._lru.drop_where(lambda key: key[0] == thread_id)


def read_entries(
    channels: Mapping[str, dict[str, Any]], channel_versions: Mapping[str, Any]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Return the entries a read remembers: stored channels that have a version."""
    return {
        channel: (channel_versions[channel], entry)
        for channel, entry in channels.items()
        if channel_versions.get(channel) is not None
    }
