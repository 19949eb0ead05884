"""The on-disk schema and its migrations (see docs/FORMAT.md).

`MIGRATIONS[i]` upgrades a file from `user_version` i to i+1; a shipped
migration is never edited, only appended to.
"""

from __future__ import annotations

from typing import Final

FORMAT_1: Final = """
CREATE TABLE meta(
    key TEXT PRIMARY KEY,
    value ANY
) STRICT;

CREATE TABLE scopes(
    id INTEGER PRIMARY KEY,
    namespace TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    UNIQUE(namespace, agent_id)
) STRICT;

CREATE TABLE threads(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    scope INTEGER NOT NULL REFERENCES scopes(id),
    thread_id TEXT NOT NULL,
    seq INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE(scope, thread_id)
) STRICT;

CREATE TABLE checkpoints(
    id INTEGER PRIMARY KEY,
    thread INTEGER NOT NULL REFERENCES threads(id),
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    parent_id TEXT,
    schema INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE(thread, checkpoint_ns, checkpoint_id)
) STRICT;
CREATE INDEX checkpoints_by_id ON checkpoints(thread, checkpoint_id);

CREATE TABLE writes(
    id INTEGER PRIMARY KEY,
    thread INTEGER NOT NULL REFERENCES threads(id),
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    idx INTEGER NOT NULL,
    task_path TEXT NOT NULL,
    channel TEXT NOT NULL,
    schema INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE(thread, checkpoint_ns, checkpoint_id, task_id, idx)
) STRICT;

CREATE TABLE vals(
    id INTEGER PRIMARY KEY,
    thread INTEGER NOT NULL REFERENCES threads(id),
    ref TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    UNIQUE(thread, ref)
) STRICT;
"""

#: Ordered migrations; the position of each is the `user_version` it upgrades from.
MIGRATIONS: Final[list[str]] = [FORMAT_1]

FORMAT_VERSION: Final = len(MIGRATIONS)
