"""What a stored document references (SPEC §5.4): the refs a reader fetches next.

Pure, no I/O. `references` lists the value documents one document names, each with
the protocol's fixed size estimate; `threadloom verify` checks stored references with it,
and a remote reader plans its level-by-level `find` batches (within READ_BUDGET and
MAX_IN_VALUES) from these estimates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from threadloom.protocol.constants import CHUNK_BYTES, DOCUMENT_OVERHEAD, PART_SIZE, STORED_BYTES

_STORED_FIELDS = ("checkpoint", "metadata", "value")


def references(data: Mapping[str, Any]) -> list[tuple[str, int]]:
    """Return `(ref, estimated bytes)` for every document `data` references directly."""
    found: list[tuple[str, int]] = []
    for field in _STORED_FIELDS:
        stored = data.get(field)
        if stored is not None and "parts" in stored:
            found.extend((ref, STORED_BYTES) for ref in stored["parts"])
    channels = data.get("channels")
    if channels:
        found.extend(
            (entry["blob"], STORED_BYTES) for entry in channels.values() if "blob" in entry
        )
    chunks = data.get("chunks")
    if chunks:
        found.extend((ref, CHUNK_BYTES) for ref in chunks)
    elements = data.get("elements")
    if elements:
        found.extend((ref, min(size, PART_SIZE) + DOCUMENT_OVERHEAD) for ref, size in elements)
    return found
