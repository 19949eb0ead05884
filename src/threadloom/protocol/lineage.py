"""A thread's history on two sides: divergence (SPEC §8.1) and the order documents go in.

Pure and I/O-free, shared by every mover of threads: export and import over NATS
(`nats.transfer`) and `threadloom migrate` (`migration/`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from threadloom.protocol.constants import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES

#: The collections of value documents (those a checkpoint or a pending write references).
VALUES = (PARTS, ITEMS, BLOBS)

Document = tuple[str, Mapping[str, Any]]


def diverged(ours: Sequence[Mapping[str, Any]], theirs: Sequence[Mapping[str, Any]]) -> bool:
    """True when the target's root head is not ours and our root head is not on its lineage.

    The lineage is the target's head, then each parent while the target holds it, plus the
    first parent it does not hold (naas's `DocumentCheckpointSaver.lineage`), so a target
    that continued the source's history has not diverged, nor has one that holds an
    incomplete copy of it.

    Args:
        ours, theirs: checkpoints of one thread on each side, as mappings with
            `checkpoint_ns`, `checkpoint_id` and (theirs) `parent_id`: checkpoint documents,
            or rows of their identifying fields.
    """
    mine = {d["checkpoint_id"] for d in ours if d.get("checkpoint_ns") == ""}
    root = {d["checkpoint_id"]: d for d in theirs if d.get("checkpoint_ns") == ""}
    if not root or not mine:
        return False
    head = max(root)
    if head in mine:
        return False
    our_head = max(mine)
    seen: set[str] = set()
    current: str | None = head
    while current is not None and current not in seen:
        if current == our_head:
            return False
        seen.add(current)
        parent = root.get(current)
        current = parent.get("parent_id") if parent is not None else None
    return True


def put_order(docs: Sequence[Document]) -> list[Document]:
    """Values first, then checkpoints oldest first, each followed by its pending writes
    (in `(task_id, index)` order); writes of no listed checkpoint last."""
    values = [d for d in docs if d[0] in VALUES]
    checkpoints = sorted(
        (d for d in docs if d[0] == CHECKPOINTS), key=lambda d: d[1]["checkpoint_id"]
    )
    writes: dict[tuple[str, str], list[Document]] = {}
    for doc in docs:
        if doc[0] == WRITES:
            writes.setdefault((doc[1]["checkpoint_ns"], doc[1]["checkpoint_id"]), []).append(doc)
    ordered = list(values)
    for doc in checkpoints:
        ordered.append(doc)
        ordered.extend(
            sorted(
                writes.pop((doc[1]["checkpoint_ns"], doc[1]["checkpoint_id"]), []),
                key=lambda w: (w[1]["task_id"], w[1]["index"]),
            )
        )
    ordered.extend(w for group in writes.values() for w in group)
    return ordered
