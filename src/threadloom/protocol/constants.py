"""Schema-2 constants, collections and indexed fields (SPEC §1).

Values are facts of the released naas planner; changing one breaks
compatibility with the shared engine.
"""

from __future__ import annotations

from typing import Final

SCHEMA_VERSION: Final = 2
PART_SIZE: Final = 262_144
INLINE_LIMIT: Final = 1024
CHUNK_SIZE: Final = 32
READ_BUDGET: Final = 2_097_152
#: Most values in one `in` or `nin` predicate (the service's MAX_IN_VALUES).
MAX_IN_VALUES: Final = 500
#: Largest `limit` of one page: the service's find limit (naas MAX_PAGE_SIZE), and the bound
#: every page threadloom reads itself (threads, checkpoints, messages, items) shares.
MAX_PAGE: Final = 1000
DOCUMENT_OVERHEAD: Final = 4096
CHECKPOINT_PAGE: Final = READ_BUDGET // (2 * PART_SIZE + 16 * DOCUMENT_OVERHEAD)
WRITE_PAGE: Final = READ_BUDGET // (PART_SIZE + DOCUMENT_OVERHEAD)
LEGACY_PAGE: Final = 1
CHUNK_BYTES: Final = CHUNK_SIZE * 100 + DOCUMENT_OVERHEAD
STORED_BYTES: Final = PART_SIZE + DOCUMENT_OVERHEAD
RETENTION_GRACE_SECONDS: Final = 60.0
REDACTED_SECRET: Final = "[REDACTED: secrets are not stored in checkpoints]"
NEWEST_FIRST: Final = ("checkpoint_id", "desc")
KNOWN_REFS_CAPACITY: Final = 200_000

WRITES_IDX_MAP: Final[dict[str, int]] = {
    "__error__": -1,
    "__scheduled__": -2,
    "__interrupt__": -3,
    "__resume__": -4,
}

DEFAULT_NAMESPACE: Final = "naas_abi_core.services.agent"
DEFAULT_AGENT_ID: Final = "engine.v1"

CHECKPOINTS: Final = "langgraph_checkpoints_v2"
WRITES: Final = "langgraph_writes_v2"
BLOBS: Final = "langgraph_blobs_v2"
ITEMS: Final = "langgraph_items_v2"
PARTS: Final = "langgraph_parts_v2"
CHECKPOINTS_V1: Final = "langgraph_checkpoints_v1"
WRITES_V1: Final = "langgraph_writes_v1"

_CHECKPOINT_FIELDS: Final = ("agent_id", "thread_id", "checkpoint_ns", "checkpoint_id")
_VALUE_FIELDS: Final = ("agent_id", "thread_id", "ref")

#: Schema-2 collections and their declared indexed string fields, in `setup()` order.
COLLECTIONS: Final[dict[str, tuple[str, ...]]] = {
    CHECKPOINTS: _CHECKPOINT_FIELDS,
    WRITES: _CHECKPOINT_FIELDS,
    BLOBS: _VALUE_FIELDS,
    ITEMS: _VALUE_FIELDS,
    PARTS: _VALUE_FIELDS,
}

#: Read-only schema-1 collections (same indexed fields as their v2 twins).
LEGACY_COLLECTIONS: Final[dict[str, tuple[str, ...]]] = {
    CHECKPOINTS_V1: _CHECKPOINT_FIELDS,
    WRITES_V1: _CHECKPOINT_FIELDS,
}
