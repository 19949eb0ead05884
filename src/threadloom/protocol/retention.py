"""Retention rules (SPEC §6.1–6.2): which checkpoints a keep-last prune keeps.

Pure: the stores decide what to delete from these answers.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any, NamedTuple


class Retained(NamedTuple):
    """What retention needs to know of one stored checkpoint.

    Attributes:
        checkpoint_ns: its namespace (`""` for the root graph).
        checkpoint_id: its id.
        root_parent: `metadata["parents"][""]` when non-empty, else None.
    """

    checkpoint_ns: str
    checkpoint_id: str
    root_parent: str | None


def root_parent(metadata: Mapping[str, Any]) -> str | None:
    """Return the root checkpoint a subgraph checkpoint belongs to, from its metadata."""
    parents = metadata.get("parents") if isinstance(metadata, Mapping) else None
    if isinstance(parents, Mapping):
        value = parents.get("")
        if value:
            return str(value)
    return None


def kept_checkpoints(stored: Iterable[Retained], keep_last: int) -> set[tuple[str, str]]:
    """Return `(checkpoint_ns, checkpoint_id)` of every checkpoint a keep-last prune keeps.

    Roots keep their `keep_last` newest; a subgraph checkpoint linked to a root
    (through `parents[""]`) is kept with its root; an unlinked one keeps the
    `keep_last` newest of its own namespace. An id listed twice (its schema-1 and
    schema-2 documents) counts once.

    Raises:
        ValueError: `keep_last` is below 1.
    """
    if keep_last < 1:
        raise ValueError(f"keep_last must be at least 1, got {keep_last}")
    items = list(stored)
    roots = sorted({s.checkpoint_id for s in items if s.checkpoint_ns == ""}, reverse=True)
    kept_roots = set(roots[:keep_last])
    kept = {("", checkpoint_id) for checkpoint_id in kept_roots}
    unlinked: dict[str, set[str]] = {}
    for item in items:
        if item.checkpoint_ns == "":
            continue
        if kept_roots and item.root_parent is not None:
            if item.root_parent in kept_roots:
                kept.add((item.checkpoint_ns, item.checkpoint_id))
        else:
            unlinked.setdefault(item.checkpoint_ns, set()).add(item.checkpoint_id)
    for ns, ids in unlinked.items():
        kept.update((ns, checkpoint_id) for checkpoint_id in sorted(ids, reverse=True)[:keep_last])
    return kept


def created_before(created_at: datetime | str | None, cutoff: datetime) -> bool:
    """Return True when `created_at` is known and earlier than `cutoff`.

    ISO text (a trailing `Z` accepted) and datetimes are read; naive means UTC;
    anything unreadable counts as not older (the document is kept).
    """
    if isinstance(created_at, str):
        text = created_at[:-1] + "+00:00" if created_at.endswith("Z") else created_at
        try:
            created_at = datetime.fromisoformat(text)
        except ValueError:
            return False
    if not isinstance(created_at, datetime):
        return False
    if created_at.tzinfo is None:
        created_at = created_at.replace(tzinfo=timezone.utc)
    if cutoff.tzinfo is None:
        cutoff = cutoff.replace(tzinfo=timezone.utc)
    return created_at < cutoff
