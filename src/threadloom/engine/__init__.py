"""The embedded SQLite engine (apsw): one file, typed tables, one transaction per put.

Imports point downward: this package uses `protocol` and `core`, never the
LangGraph adapters above it. All SQL of threadloom lives in this package.
"""

from threadloom.engine.checkpoints import CheckpointStore
from threadloom.engine.file import File

__all__ = ["CheckpointStore", "File"]
