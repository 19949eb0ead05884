"""Other applications' files, read for `threadloom.migrate`: the naas document service's
SQLite file (`naas_file.py`) and the few statements run on LangGraph's own saver
databases (`langgraph_databases.py`), sources and the PostgreSQL target of a migration out.

Their SQL lives here because the engine owns every statement threadloom runs; nothing
here writes to another application's file (a migration out writes its PostgreSQL target
through LangGraph's own classes). The migration sources
(`threadloom.langgraph.migration.sources`) and `migration/postgres_target.py` use the
names below.
"""

from threadloom.engine.foreign.langgraph_databases import (
    POSTGRES_CHECKPOINT_WHERE,
    POSTGRES_SAVER_TABLES,
    POSTGRES_SAVER_THREADS,
    POSTGRES_STORE_TABLE,
    POSTGRES_STORE_TIMES,
    POSTGRES_TARGET_CHECKPOINTS,
    POSTGRES_TARGET_WRITE_KEYS,
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
    "POSTGRES_STORE_TABLE",
    "POSTGRES_STORE_TIMES",
    "POSTGRES_TARGET_CHECKPOINTS",
    "POSTGRES_TARGET_WRITE_KEYS",
    "QUICK_CHECK",
    "SQLITE_SAVER_CHECKPOINTS",
    "SQLITE_SAVER_COLUMNS",
    "SQLITE_SAVER_THREADS",
    "SQLITE_SAVER_WRITES",
    "SQLITE_SAVER_WRITES_PATHLESS",
    "NaasDocumentsFile",
    "decode",
]
