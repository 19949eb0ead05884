"""threadloom: LangGraph agent memory in one SQLite file.

Checkpoints are stored as content-addressed increments in the naas "schema 2"
document protocol, so the documents a thread produces here are byte-identical
to those the shared engine's document service holds.
"""

import logging
from typing import Any

from threadloom.errors import LeaseLostError, ThreadBusyError, ThreadloomError

__version__ = "0.8.0"

__all__ = [
    "AsyncSaver",
    "AsyncStore",
    "Erased",
    "Lease",
    "LeaseLostError",
    "MemoryBudget",
    "OutsideOwnerError",
    "OwnerStore",
    "RetentionPolicy",
    "RetentionReport",
    "Saver",
    "Store",
    "ThreadBusyError",
    "ThreadInfo",
    "ThreadloomError",
    "Transcript",
    "__version__",
    "aupdate_profile",
    "backup",
    "memory_budget",
    "memory_key",
    "merge_profile",
    "migrate",
    "update_profile",
]

#: The memory helpers (`threadloom.langgraph.memories`), loaded on first use: they import LangGraph.
_MEMORIES = {
    "OutsideOwnerError",
    "OwnerStore",
    "aupdate_profile",
    "memory_key",
    "merge_profile",
    "update_profile",
}

# The library logs through "threadloom.*" and never prints; the application decides
# where records go.
logging.getLogger("threadloom").addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    # The savers import LangGraph; load them on first use so `threadloom.protocol`
    # and the CLI's light commands start fast.
    if name in {"Saver", "AsyncSaver"}:
        from threadloom.langgraph import saver

        return getattr(saver, name)
    if name in {"Store", "AsyncStore"}:
        from threadloom.langgraph import store

        return getattr(store, name)
    if name in {"Erased", "Lease", "ThreadInfo", "Transcript"}:
        from threadloom.langgraph import conversations

        return getattr(conversations, name)
    if name in {"RetentionPolicy", "RetentionReport"}:
        from threadloom.langgraph import retention

        return getattr(retention, name)
    if name in {"migrate", "MigrationReport"}:
        from threadloom.langgraph import migration

        return getattr(migration, name)
    if name == "backup":
        # An online, verified copy of a file (engine/checks/backup.py); no LangGraph.
        from threadloom.engine.checks import backup

        return backup
    if name in _MEMORIES:
        from threadloom.langgraph import memories

        return getattr(memories, name)
    if name in {"MemoryBudget", "memory_budget"}:
        # The byte budget every cache draws on (core.lru); importing it selects the backend.
        from threadloom.core import lru

        return lru.Budget if name == "MemoryBudget" else lru.process_budget
    raise AttributeError(f"module 'threadloom' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
