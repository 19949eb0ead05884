"""The embedded SQLite engine (apsw): one file, typed tables, one transaction per put.

Imports point downward: this package uses `protocol` and `core`, never the
LangGraph adapters above it.
"""

from threadloom.engine.checkpoints import CheckpointStore
from threadloom.engine.database import Database

__all__ = ["CheckpointStore", "Database"]
