"""The schema-2 document protocol (SPEC §1–§6): plan puts, keys and refs, restore, retention.

Pure and I/O-free; every store (the SQLite engine, NATS export, serve) plans its
writes and decodes its reads here, so compatibility with the shared engine is
decided in this package. It imports nothing from naas packages. Tools that show
stored values read them with `plain` (no class they name is imported).
"""

from threadloom.protocol.constants import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    COLLECTIONS,
    DEFAULT_AGENT_ID,
    DEFAULT_NAMESPACE,
    ITEMS,
    MAX_IN_VALUES,
    MAX_PAGE,
    PART_SIZE,
    PARTS,
    WRITES,
    WRITES_IDX_MAP,
    WRITES_V1,
)
from threadloom.protocol.memory import KnownReferences, read_entries
from threadloom.protocol.plain import message, plain, title
from threadloom.protocol.plan import Planner
from threadloom.protocol.read import references
from threadloom.protocol.redact import RedactingSerializer, Serializer, redact_secrets
from threadloom.protocol.refs import collection_of, document_key
from threadloom.protocol.restore import Restored, Undecoded, raw_value, restore
from threadloom.protocol.retention import Retained, created_before, kept_checkpoints, root_parent
from threadloom.protocol.shapes import (
    NOTHING_KNOWN,
    CheckpointPlan,
    Known,
    Put,
    Serialization,
    WritePlan,
    configurable,
)
from threadloom.protocol.versions import next_version

__all__ = [
    "BLOBS",
    "CHECKPOINTS",
    "CHECKPOINTS_V1",
    "COLLECTIONS",
    "DEFAULT_AGENT_ID",
    "DEFAULT_NAMESPACE",
    "ITEMS",
    "MAX_IN_VALUES",
    "MAX_PAGE",
    "NOTHING_KNOWN",
    "PARTS",
    "PART_SIZE",
    "WRITES",
    "WRITES_IDX_MAP",
    "WRITES_V1",
    "CheckpointPlan",
    "Known",
    "KnownReferences",
    "Planner",
    "Put",
    "RedactingSerializer",
    "Restored",
    "Undecoded",
    "Serialization",
    "Serializer",
    "Retained",
    "WritePlan",
    "collection_of",
    "configurable",
    "created_before",
    "document_key",
    "kept_checkpoints",
    "message",
    "next_version",
    "plain",
    "raw_value",
    "read_entries",
    "redact_secrets",
    "references",
    "restore",
    "root_parent",
    "title",
]
