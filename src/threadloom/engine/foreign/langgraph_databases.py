"""The few statements threadloom runs on LangGraph's own databases (migration sources,
and the PostgreSQL target of a migration out).

Engine layer: SQL text only, run by `threadloom.langgraph.migration` on the source
source's own connection. A PostgresSaver is read through its public API (`list`); a
SqliteSaver file through its documented format (tables `checkpoints` and `writes`, each
value a serializer `(type, blob)` pair, metadata JSON), with the statements SqliteSaver's
`list` runs, so migrating one needs no langgraph-checkpoint-sqlite. LangGraph has no
public way to list a database's threads, so their ids are read from the `checkpoints`
table as naas's `migrate-memory` does (SPEC §8.1: `SELECT DISTINCT thread_id FROM
checkpoints ORDER BY thread_id`).

A migration out (`threadloom migrate FILE --to postgres`) writes with PostgresSaver's and
PostgresStore's own classes and statements; the statements here only read what the target
holds, and give a copied Store item back its own times.
"""

from __future__ import annotations

from typing import Final

#: SQLite's own structural check of a source file, run before anything is copied: a
#: truncated or damaged source is refused whole rather than failing halfway.
QUICK_CHECK: Final = "PRAGMA quick_check"
#: Every thread of a SqliteSaver file (sqlite3 placeholders).
SQLITE_SAVER_THREADS: Final = "SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id"
#: A SqliteSaver thread's checkpoints, newest first (SqliteSaver.list's statement and order).
SQLITE_SAVER_CHECKPOINTS: Final = (
    "SELECT thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, "
    "metadata FROM checkpoints WHERE thread_id = ? ORDER BY checkpoint_id DESC"
)
#: The columns of a table of a SqliteSaver file (the table's name bound): `writes` of a
#: file written before LangGraph added `task_path` lacks it (SqliteSaver then reads every
#: path as '').
SQLITE_SAVER_COLUMNS: Final = "SELECT name FROM pragma_table_info(?)"
#: One checkpoint's pending writes in a SqliteSaver file, unordered (the reader sorts them
#: with LangGraph's `writes_sort_key`, as SqliteSaver does): task id, channel, type,
#: value, task path, index.
SQLITE_SAVER_WRITES: Final = (
    "SELECT task_id, channel, type, value, task_path, idx FROM writes "
    "WHERE thread_id = ? AND checkpoint_ns = ? AND checkpoint_id = ?"
)
#: The same, in a file from before `task_path` existed.
SQLITE_SAVER_WRITES_PATHLESS: Final = SQLITE_SAVER_WRITES.replace("task_path", "''")
#: Every thread of a PostgresSaver database (the same text; psycopg runs it).
POSTGRES_SAVER_THREADS: Final = SQLITE_SAVER_THREADS
#: Whether a PostgresSaver's tables exist (psycopg placeholders): a database without them
#: holds nothing to migrate, and is named as such rather than failing mid-query.
POSTGRES_SAVER_TABLES: Final = (
    "SELECT count(*) AS n FROM information_schema.tables "
    "WHERE table_schema = current_schema() "
    "AND table_name IN ('checkpoints', 'checkpoint_writes', 'checkpoint_blobs')"
)
#: A PostgresSaver checkpoint by id, with its pending writes (the saver's own `SELECT_SQL`
#: is prefixed to this): only to learn the writes' task paths, which `pending_writes`
#: leaves out (`migration/sources.py` checks them against what the public API returned).
POSTGRES_CHECKPOINT_WHERE: Final = (
    " WHERE thread_id = %s AND checkpoint_ns = %s AND checkpoint_id = %s"
)
#: A PostgresSaver thread's checkpoints by their key columns, with the stored checkpoint
#: and metadata JSON (no blob): what a migration out compares its checkpoints with.
POSTGRES_TARGET_CHECKPOINTS: Final = (
    "SELECT checkpoint_ns, checkpoint_id, parent_checkpoint_id, checkpoint, metadata "
    "FROM checkpoints WHERE thread_id = %s"
)
#: A PostgresSaver thread's pending writes by their key columns.
POSTGRES_TARGET_WRITE_KEYS: Final = (
    "SELECT checkpoint_ns, checkpoint_id, task_id, idx FROM checkpoint_writes WHERE thread_id = %s"
)
#: Whether a PostgresStore's table exists.
POSTGRES_STORE_TABLE: Final = (
    "SELECT count(*) AS n FROM information_schema.tables "
    "WHERE table_schema = current_schema() AND table_name = 'store'"
)
#: A copied Store item's own times (PostgresStore's put dates it now); its namespace is
#: the labels joined by ".", as PostgresStore keys it.
POSTGRES_STORE_TIMES: Final = (
    "UPDATE store SET created_at = %s, updated_at = %s WHERE prefix = %s AND key = %s"
)
