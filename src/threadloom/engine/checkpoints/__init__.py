"""Checkpoints of one scope (namespace + agent id): the scope and its caches, the writer,
the reader and value resolution, the document view, maintenance and liveness.

`engine.CheckpointStore` (engine/checkpoint_store.py) wires these parts, and the
conversation features, over one `Scope`. Outer layers use the names below; those of the
document view, the intake and the sync state load their modules on first use (PEP 562),
since a Saver's put and get never need them.
"""

from typing import TYPE_CHECKING

from threadloom.core.lazy import lazy_exports
from threadloom.engine.checkpoints.scope import ThreadSeq, agent_ids, namespaces, thread_seqs

if TYPE_CHECKING:
    from threadloom.engine.checkpoints.intake import ImportCount
    from threadloom.engine.checkpoints.syncstate import LocalThread, Synced, SyncState
    from threadloom.engine.checkpoints.view import CheckpointHead, StoredDocument, WritePlace

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

#: Each name loaded on first use, and the module of this room that holds it.
_LAZY = {
    "ImportCount": "intake",
    "LocalThread": "syncstate",
    "Synced": "syncstate",
    "SyncState": "syncstate",
    "CheckpointHead": "view",
    "StoredDocument": "view",
    "WritePlace": "view",
}

__getattr__ = lazy_exports(__name__, {k: (f"{__name__}.{m}", k) for k, m in _LAZY.items()})
