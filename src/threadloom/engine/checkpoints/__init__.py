"""Checkpoints of one scope (namespace + agent id): the scope and its caches, the writer,
the reader and value resolution, the document view, maintenance and liveness.

`engine.CheckpointStore` (engine/checkpoint_store.py) wires these parts, and the
conversation features, over one `Scope`. Outer layers use the names below.
"""

from threadloom.engine.checkpoints.intake import ImportCount
from threadloom.engine.checkpoints.scope import ThreadSeq, agent_ids, namespaces, thread_seqs
from threadloom.engine.checkpoints.syncstate import LocalThread, Synced, SyncState
from threadloom.engine.checkpoints.view import (
    CheckpointHead,
    StoredDocument,
    WritePlace,
)

__all__ = [
    "CheckpointHead",
    "ImportCount",
    "LocalThread",
    "StoredDocument",
    "SyncState",
    "Synced",
    "ThreadSeq",
    "WritePlace",
    "agent_ids",
    "namespaces",
    "thread_seqs",
]
