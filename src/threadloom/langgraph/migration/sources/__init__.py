"""Migration sources: one module per kind, each thread's history oldest first.

Adapter layer. `base.py` holds what every source offers the copier (`Source`,
`ThreadHistory`) and the loop the LangGraph savers share; each kind is one module:

- `sqlite.py`: a LangGraph SqliteSaver file (AsyncSqliteSaver writes the same file);
- `postgres.py`: a PostgresSaver database;
- `naas_sqlite.py`: the naas document service's SQLite file.
"""

from __future__ import annotations

from threadloom.langgraph.migration.sources.base import (
    SaverSource,
    Source,
    TaskPaths,
    ThreadHistory,
    paths_if_same,
)
from threadloom.langgraph.migration.sources.naas_sqlite import NaasSqliteSource, history_of
from threadloom.langgraph.migration.sources.postgres import PostgresSaverSource
from threadloom.langgraph.migration.sources.sqlite import SqliteSaverSource

__all__ = [
    "NaasSqliteSource",
    "PostgresSaverSource",
    "SaverSource",
    "Source",
    "SqliteSaverSource",
    "TaskPaths",
    "ThreadHistory",
    "history_of",
    "paths_if_same",
]
