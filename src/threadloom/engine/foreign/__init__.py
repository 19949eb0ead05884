"""Other applications' files, read for `threadloom.migrate`: the naas document service's
SQLite file (`naas_file.py`) and the few statements run on LangGraph's own saver
databases (`langgraph_databases.py`).

Their SQL lives here because the engine owns every statement threadloom runs; nothing
here writes to another application's file. The migration sources
(`threadloom.langgraph.migration.sources`) use the names below.
"""

from threadloom.engine.foreign.langgraph_databases import (
    POSTGRES_CHECKPOINT_WHERE,
    POSTGRES_SAVER_TABLES,
    POSTGRES_SAVER_THREADS,
    QUICK_CHECK,
    SQLITE_SAVER_CHECKPOINTS,
    SQLITE_SAVER_COLUMNS,
    SQLITE_SAVER_THREADS,
    SQLITE_SAVER_WRITES,
    SQLITE_SAVER_WRITES_PATHLESS,
)
from threadloom.engine.foreign.naas_file import NaasDocumentsFile, decode

__all__ = [
    "POSTGRES_CHECKPOINT_WHERE",
    "POSTGRES_SAVER_TABLES",
    "POSTGRES_SAVER_THREADS",
    "QUICK_CHECK",
    "SQLITE_SAVER_CHECKPOINTS",
    "SQLITE_SAVER_COLUMNS",
    "SQLITE_SAVER_THREADS",
    "SQLITE_SAVER_WRITES",
    "SQLITE_SAVER_WRITES_PATHLESS",
    "NaasDocumentsFile",
    "decode",
]
