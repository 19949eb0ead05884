"""Remembered references (SPEC §4.4): what stored checkpoints reference.

A bounded LRU keyed by `(thread_id, checkpoint_ns, checkpoint_id)`. Recalling
a put's parent yields the refs to skip and the channel entries to reuse; its
ancestors (`metadata["parents"]`) contribute refs only. Thread-safe.

Its capacity counts refs, as the released planner's memory does (so both forget
alike); given a `core.lru.Budget`, the memory also charges the estimated bytes of each
remembered checkpoint to it (`known_cost`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from threadloom.core.lru import Budget, Lru
from threadloom.protocol.constants import KNOWN_REFS_CAPACITY
from threadloom.protocol.shapes import NOTHING_KNOWN, Known

CheckpointRef = tuple[str, str, str]

#: Estimated bytes of a remembered checkpoint: a base, per ref (its slot in the frozen
#: set and its share of the ref strings, which consecutive checkpoints share), and per
#: channel entry (a small dict and its version), plus any payload an entry holds inline.
_BASE_COST = 256
_REF_COST = 64
_ENTRY_COST = 320


def known_cost(known: Known) -> int:
    """Estimate the memory one remembered checkpoint takes."""
    inline = 0
    for _, entry in known.entries.values():
        value = entry.get("value") if isinstance(entry, dict) else None
        payload = value.get("payload") if isinstance(value, dict) else None
        if isinstance(payload, (bytes, str)):
            inline += len(payload)
    return _BASE_COST + _REF_COST * len(known.refs) + _ENTRY_COST * len(known.entries) + inline


class KnownReferences:
    """LRU memory of the refs and channel entries of stored checkpoints.

    Args:
        capacity: most refs remembered in total, over every checkpoint.
        budget: the byte budget the memory also draws on (None: refs alone bound it).
    """

    def __init__(self, capacity: int = KNOWN_REFS_CAPACITY, budget: Budget | None = None) -> None:
        self.capacity = capacity
        # As the released planner's memory: the newest checkpoint is kept, however many
        # refs it holds.
        self._lru: Lru[CheckpointRef, Known] = Lru(
            capacity,
            lambda known: len(known.refs),
            keep_newest=True,
            budget=budget,
            cost=known_cost,
            group=0,
        )

    @property
    def refs(self) -> int:
        """Refs remembered now, over every checkpoint."""
        return self._lru.weight

    @property
    def cost(self) -> int:
        """Estimated bytes remembered now."""
        return self._lru.cost

    def clear(self) -> None:
        """Forget everything."""
        self._lru.clear()

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
        self._lru.drop_group(thread_id)


def read_entries(
    channels: Mapping[str, dict[str, Any]], channel_versions: Mapping[str, Any]
) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Return the entries a read remembers: stored channels that have a version."""
    return {
        channel: (channel_versions[channel], entry)
        for channel, entry in channels.items()
        if channel_versions.get(channel) is not None
    }
