"""threadloom: LangGraph agent memory in one SQLite file.

Checkpoints are stored as content-addressed increments in the naas "schema 2"
document protocol, so the documents a thread produces here are byte-identical
to those the shared engine's document service holds.
"""

from threadloom.errors import ThreadloomError

__version__ = "0.1.0"

__all__ = ["ThreadloomError", "__version__"]
