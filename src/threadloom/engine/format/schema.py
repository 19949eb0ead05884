"""The on-disk schema and its migrations (see docs/FORMAT.md).

`MIGRATIONS[i]` upgrades a file from `user_version` i to i+1; a shipped
migration is never edited, only appended to.
"""

from __future__ import annotations

from typing import Final

import apsw

from threadloom.engine.format.schema_early import (
    FORMAT_1,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
    PENDING_TRIGGERS,
)

FORMAT_5: Final = """
CREATE TABLE store_namespaces(
    id INTEGER PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    depth INTEGER NOT NULL,
    items INTEGER NOT NULL DEFAULT 0
) STRICT;

CREATE TABLE store_items(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    ns INTEGER NOT NULL REFERENCES store_namespaces(id),
    key TEXT NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    blocks INTEGER NOT NULL DEFAULT 0,
    size INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    expires_at INTEGER,
    ttl REAL,
    partial INTEGER NOT NULL DEFAULT 0,
    terms INTEGER,
    UNIQUE(ns, key)
) STRICT;
CREATE INDEX store_items_updated ON store_items(updated_at, id);
CREATE INDEX store_items_expiry ON store_items(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX store_items_partial ON store_items(id) WHERE partial = 1;

CREATE TABLE store_paths(
    id INTEGER PRIMARY KEY,
    path TEXT NOT NULL UNIQUE
) STRICT;

CREATE TABLE store_fields(
    path INTEGER NOT NULL,
    value BLOB NOT NULL,
    item INTEGER NOT NULL,
    PRIMARY KEY(path, value, item)
) STRICT, WITHOUT ROWID;

CREATE VIRTUAL TABLE store_text USING fts5(
    text, content='', contentless_delete=1, tokenize='unicode61 remove_diacritics 2'
);

CREATE TABLE store_lists(
    id INTEGER PRIMARY KEY,
    centroid BLOB NOT NULL,
    size INTEGER NOT NULL DEFAULT 0
) STRICT;
INSERT INTO store_lists(id, centroid, size) VALUES (0, x'', 0);

CREATE TABLE store_vectors(
    id INTEGER PRIMARY KEY,
    item INTEGER NOT NULL REFERENCES store_items(id) ON DELETE CASCADE,
    field TEXT NOT NULL,
    vector BLOB NOT NULL,
    list INTEGER GENERATED ALWAYS AS (id >> 32) VIRTUAL,
    UNIQUE(item, field)
) STRICT;

CREATE TRIGGER store_vectors_insert AFTER INSERT ON store_vectors BEGIN
    UPDATE store_lists SET size = size + 1 WHERE id = new.id >> 32;
END;

CREATE TRIGGER store_vectors_delete AFTER DELETE ON store_vectors BEGIN
    UPDATE store_lists SET size = size - 1 WHERE id = old.id >> 32;
END;

CREATE TRIGGER store_items_insert AFTER INSERT ON store_items BEGIN
    UPDATE store_namespaces SET items = items + 1 WHERE id = new.ns;
END;

CREATE TRIGGER store_items_delete AFTER DELETE ON store_items BEGIN
    UPDATE store_namespaces SET items = items - 1 WHERE id = old.ns;
    DELETE FROM store_text WHERE rowid = old.id;
    DELETE FROM store_namespaces WHERE id = old.ns AND items <= 0;
END;
"""
"""Format 5: long-term memory (a LangGraph Store) in the same file (engine/items/rows.py).

`store_namespaces`: one row per namespace holding items, named by its labels joined
with `.` (a label never holds one), so a prefix is a range of names; `items` counts its
items (triggers), and the row goes with its last item.

`store_items`: one row per item. The value is JSON text encoded as a body by the content
store (inline and compressed, or shared blocks from 4 KiB), sealed like every body row:
`digest` = blake3(JSON)[:16] XOR blake3('store_items', namespace name, '', key)[:16].
Times are integer microseconds since the epoch (UTC); `expires_at`/`ttl` (minutes) are
NULL without a TTL. `partial` = 1 when the filter index below does not hold every field
of the value (too many), so filters re-check the value; `terms` = how many distinct
tokens the item's text index holds (the text score's denominator).

`store_paths`: the field paths the filter index has met (the keys from the top, as a
JSON array), numbered once. `store_fields`: the filter index, one row per field of a
value reachable through objects only: its path's number, its order-preserving typed key
(engine/items/fieldkeys.py) and the item. It has no index by item, which would double its
size: an item's rows are found again from its value when it is replaced or deleted, and
item ids are never reused (AUTOINCREMENT), so a row left behind by a damaged item can
never be taken for another item's (verify reports it).

`store_text`: FTS5, contentless, rowid = item id, over the item's indexed text.

`store_lists`, `store_vectors`: the vector index (engine/items/vectors.py), one float32
little-endian vector per indexed field of an item, each in the inverted list of its
nearest centroid. A vector's row id is `list << 32 | n`, so a list is one range of the
table's b-tree (a probe reads its pages in key order, no index); `list` is that id's high
part. List 0 (empty centroid, always present) holds the vectors of an index not trained
yet; `size` counts a list's vectors (triggers, cascaded deletes included). Settings in
`meta`: `vector_dims`, `vector_metric` (what the lists were trained for),
`vector_trained` (vectors at the last training), `vector_generation` (changes with
every training; caches of the centroids are keyed by it).
"""

FORMAT_6: Final = """
ALTER TABLE threads ADD COLUMN owner TEXT;
ALTER TABLE threads ADD COLUMN title TEXT;
ALTER TABLE threads ADD COLUMN titled INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN summary TEXT;
ALTER TABLE threads ADD COLUMN tags TEXT;
ALTER TABLE threads ADD COLUMN messages INTEGER NOT NULL DEFAULT 0;
ALTER TABLE threads ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
CREATE INDEX threads_by_updated ON threads(scope, updated_at, id);
CREATE INDEX threads_by_created ON threads(scope, created_at, id);
CREATE INDEX threads_by_owner ON threads(scope, owner, updated_at, id) WHERE owner IS NOT NULL;
CREATE INDEX threads_by_owner_created ON threads(scope, owner, created_at, id)
    WHERE owner IS NOT NULL;

CREATE TABLE leases(
    scope INTEGER NOT NULL REFERENCES scopes(id),
    thread_id TEXT NOT NULL,
    holder TEXT NOT NULL,
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL,
    PRIMARY KEY(scope, thread_id)
) STRICT, WITHOUT ROWID;

INSERT INTO meta(key, value)
    VALUES('thread_index', CASE WHEN EXISTS (SELECT 1 FROM threads) THEN 'pending' ELSE 'ready' END)
    ON CONFLICT(key) DO UPDATE SET value = excluded.value;
"""
"""Format 6: conversations as records (engine/threads/threadindex.py,
engine/conversations/leases.py).

`threads` gains the thread index, kept in the transaction of each write: `owner` (from
the run's `configurable`, or set), `title` (the first human message, truncated, unless
set: `titled` = 1), `summary`, `tags` (a JSON array of strings), `messages` (the length
of the messages channel of the newest root checkpoint) and `bytes` (what the thread's
rows take as stored: inline bodies at their stored length, block bodies at the raw size
of the blocks they list). Checkpoint counts, heads and namespaces come from `heads`.
Four indexes answer a page of threads by last activity or creation, of everyone or of
an owner, in time proportional to the page.

`leases`: at most one run per thread (scope and thread id; the thread need not exist
yet): the holder's token, host and pid, and when the lease runs out.

The migration adds the columns and tables and marks `meta.thread_index` 'pending' when
the file holds threads ('ready' otherwise); the first writable open of a scope
afterwards (a saver) fills the index from each thread's rows (one write transaction; a
crash before it commits leaves it pending, and the next open does it).
"""

_STATUS_OF: Final = """coalesce((SELECT CASE WHEN max(w.channel = '__error__') = 1 THEN 'error'
        WHEN count(*) > 0 THEN 'interrupted' END
    FROM writes w WHERE w.thread = {thread} AND w.checkpoint_ns = ''
        AND w.channel IN ('__error__', '__interrupt__')
        AND w.checkpoint_id = (SELECT max(c.checkpoint_id) FROM checkpoints c
            WHERE c.thread = {thread} AND c.checkpoint_ns = '')), 'idle')"""

STATUS_WRITE_TRIGGERS: Final = f"""
CREATE TRIGGER status_write_insert AFTER INSERT ON writes
    WHEN new.checkpoint_ns = '' AND new.channel IN ('__error__', '__interrupt__')
BEGIN
    UPDATE threads SET status = {_STATUS_OF.format(thread="new.thread")} WHERE id = new.thread;
END;

CREATE TRIGGER status_write_update AFTER UPDATE OF channel ON writes
    WHEN old.checkpoint_ns = '' AND (old.channel IN ('__error__', '__interrupt__')
        OR new.channel IN ('__error__', '__interrupt__'))
BEGIN
    UPDATE threads SET status = {_STATUS_OF.format(thread="new.thread")} WHERE id = new.thread;
END;

CREATE TRIGGER status_write_delete AFTER DELETE ON writes
    WHEN old.checkpoint_ns = '' AND old.channel IN ('__error__', '__interrupt__')
BEGIN
    UPDATE threads SET status = {_STATUS_OF.format(thread="old.thread")} WHERE id = old.thread;
END;
"""
"""The triggers on `writes` keeping `threads.status` (format 7; a rebuild of the table
makes them again)."""

FORMAT_7: Final = f"""
ALTER TABLE threads ADD COLUMN status TEXT NOT NULL DEFAULT 'idle'
    CHECK (status IN ('idle', 'interrupted', 'error'));
UPDATE threads SET status = {_STATUS_OF.format(thread="threads.id")};
CREATE INDEX threads_by_status ON threads(scope, status, updated_at, id) WHERE status <> 'idle';

CREATE TRIGGER status_checkpoint_insert AFTER INSERT ON checkpoints
    WHEN new.checkpoint_ns = ''
BEGIN
    UPDATE threads SET status = {_STATUS_OF.format(thread="new.thread")} WHERE id = new.thread;
END;

CREATE TRIGGER status_checkpoint_delete AFTER DELETE ON checkpoints
    WHEN old.checkpoint_ns = ''
BEGIN
    UPDATE threads SET status = {_STATUS_OF.format(thread="old.thread")} WHERE id = old.thread;
END;

{STATUS_WRITE_TRIGGERS}"""
"""Format 7: a thread's status in the thread index (engine/threads/threadindex.py).

`threads.status` says what the thread's newest root checkpoint (its head) waits on:
'error' when a pending write of the head is on LangGraph's `__error__` channel (a task
failed and the run stopped), else 'interrupted' when one is on `__interrupt__` (a node
called `interrupt()` and the run waits to be resumed), else 'idle'. It is derived data,
kept by triggers on every insert and delete of a root checkpoint (which changes the head)
and of a root pending write on those two channels, so every path that writes or deletes
rows (a put, serve, import, migration, prune, delete) keeps it; `verify` checks it. The
upgrade computes it for every thread. `threads_by_status` pages the threads that are not
idle by last activity.

Whether a run is going on ('running' in the index) is not stored: it is a live lease
(`leases`), decided when the index is read.
"""

FORMAT_8: Final = """
INSERT INTO meta(key, value) VALUES('file_kind', 'threadloom') ON CONFLICT(key) DO NOTHING;

CREATE TABLE sync_peers(
    scope INTEGER NOT NULL REFERENCES scopes(id),
    peer TEXT NOT NULL,
    high_water TEXT NOT NULL,
    synced_at REAL NOT NULL,
    PRIMARY KEY(scope, peer)
) STRICT, WITHOUT ROWID;

CREATE TABLE sync_threads(
    scope INTEGER NOT NULL REFERENCES scopes(id),
    peer TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    thread INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    head TEXT,
    diverged INTEGER NOT NULL CHECK (diverged IN (0, 1)),
    PRIMARY KEY(scope, peer, thread_id)
) STRICT, WITHOUT ROWID;

CREATE TABLE store_embedded(
    key BLOB PRIMARY KEY,
    item INTEGER NOT NULL,
    field TEXT NOT NULL,
    vector_digest BLOB NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX store_embedded_item ON store_embedded(item);

CREATE TRIGGER store_embedded_delete AFTER DELETE ON store_items BEGIN
    DELETE FROM store_embedded WHERE item = old.id;
END;

CREATE TABLE server_records(
    scope INTEGER NOT NULL REFERENCES scopes(id),
    kind TEXT NOT NULL
        CHECK (kind IN ('assistant', 'assistant_version', 'thread', 'run', 'cron')),
    id TEXT NOT NULL,
    thread_id TEXT,
    codec TEXT NOT NULL,
    body BLOB NOT NULL,
    PRIMARY KEY(scope, kind, id)
) STRICT, WITHOUT ROWID;
CREATE INDEX server_records_by_thread ON server_records(scope, thread_id)
    WHERE thread_id IS NOT NULL;
CREATE TRIGGER server_records_thread_delete AFTER DELETE ON threads
BEGIN
    DELETE FROM server_records WHERE scope = old.scope AND thread_id = old.thread_id;
END;
"""
"""Format 8: tables made when a feature first writes; where `threadloom sync` left off.

A new file holds `meta` alone; the content, checkpoint, Store, lease and sync tables are
made, each feature's as a whole, in the write transaction that first needs them, from the
schema these migrations give an empty database (engine/format/features.py). An older
threadloom would read such a file as damaged, hence the new format. Files of earlier
formats keep every table they have; the upgrade adds the `meta` row `file_kind` =
'threadloom', which names a threadloom file whatever tables it holds (`recognize`), the
sync tables, the embedding cache and the Agent Server's registry.

`sync_peers.high_water`: the highest checkpoint id the peer held after the last complete
sync (FORMAT.md, nats/sync.py). `sync_threads`: per thread, its row id and `seq` when
last synced, the root head both sides then shared, and whether it `diverged`. Made by the
first `sync --apply`.

The embedding cache (engine/items/embedded.py, a table of the Store's feature):
`store_embedded` says which stored vector holds the embedding of a text, so a text put
again (the same item unchanged, or the same text in another item, in this process or after a
re-open) is not embedded twice. `key` = blake3(embedder identity, text)[:16] (the
identity the Store forms from its embedder, docs/store.md); `item` and `field` name the
`store_vectors` row written for that text, `vector_digest` = blake3(its vector)[:8], so
a row whose vector was since replaced is never used. It holds no vector of its own, and
its rows go with their item (the trigger) or when the item's vectors are written again:
at most one row per stored vector, and the hash of an erased text leaves with its item.

The Agent Server's registry (engine/conversations/server_records.py, the `server`
feature): `server_records`: the assistants, assistant versions, threads, runs and crons of
LangGraph's in-memory runtime, one row per record (`kind`; `id`, a version's being
`assistant_id:version`; `thread_id`, the thread a thread, run or cron record names), the
body encoded by the adapter's serializer (`codec` its type). A thread's values are not
kept (they are its newest checkpoint's). Records are written as a server connection ends,
in one transaction; deleting a `threads` row deletes the records naming that thread (the
trigger). Empty until a server writes; `meta.server_registry` marks that one did.
"""

FORMAT_9: Final = """
CREATE TABLE store_codes(
    id INTEGER PRIMARY KEY,
    count INTEGER NOT NULL,
    body BLOB NOT NULL
) STRICT;
"""
"""The vector index's int8 codes, packed per inverted list (engine/items/vector_codes.py,
the `codes` feature, made with the Store's tables).

`store_codes`: one row per chunk of up to 256 vectors of one list; `id` = `list << 32 |
n`, the chunk covering the list's vector ids from `id` up to the next chunk's `id`, so a
list's chunks are one range of the b-tree, as its vectors are in `store_vectors`. `count`
vectors; `body` = their vector ids (int64), items (int64), quantization params (3 float64
each: scale, norm, residual norm) and int8 codes (`dims` each, `core.vector_quantize`),
all little-endian, in ascending vector id order. `meta.vector_codes_from`: the lowest list
whose vectors are all coded (absent: none, as in a file upgraded with vectors until its
next training); every vector of a list from there has exactly its code here, written
in the transaction that writes or deletes the vector. No table references it: it is
emptied and refilled whole when the index is (a training writes each list's codes as
it moves the vectors).
"""

FORMAT_10: Final = """
CREATE TABLE meta_2(
    key TEXT PRIMARY KEY,
    value ANY
) STRICT, WITHOUT ROWID;
INSERT INTO meta_2(key, value) SELECT key, value FROM meta ORDER BY key;
DROP TABLE meta;
ALTER TABLE meta_2 RENAME TO meta;
"""
"""Format 10: chunk documents stored as deltas, and `meta` as its own key index.

Chunk deltas (engine/content/deltas.py): a `vals` row whose `blocks` is -1 holds a `c-`
chunk as body mode 5, a zstd frame made with the msgpack of another chunk of the same
thread (its base, named in the body; never a delta itself) as its dictionary. No table
changes for them: the version moves so that an older threadloom, which would read such a
body as damage, refuses the file. Rows of older files stay as they are.

`meta` becomes WITHOUT ROWID: the table is its key index, one b-tree (one page in a small
file) instead of two. Same columns, same rows.
"""

FORMAT_11: Final = """
CREATE TABLE vals_2(
    thread INTEGER NOT NULL REFERENCES threads(id),
    ref_key BLOB NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    blocks INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(thread, ref_key)
) STRICT, WITHOUT ROWID;
INSERT INTO vals_2(thread, ref_key, seq, body, digest, created_at, blocks)
    SELECT thread, CASE typeof(ref) WHEN 'blob' THEN ref ELSE tl_ref_key(CAST(ref AS BLOB)) END,
        seq, body, digest, created_at, blocks
    FROM vals ORDER BY 1, 2;
DROP TABLE vals;
ALTER TABLE vals_2 RENAME TO vals;
"""
"""Format 11: a value row's ref stored as a binary key (engine/format/refkeys.py).

`vals.ref` (text) becomes `vals.ref_key` (a BLOB): a canonical ref (a letter, `-`, 64
lowercase hex digits, a part's `.N`) is stored as its letter, the 32 bytes of its digest
and the suffix, 33 bytes instead of 66 in every row and in the table's key; any other ref
as a NUL byte then its UTF-8 (a damaged text, as its bytes: the row's seal then fails);
a ref that is a blob already is a key and is copied as it is.
Keys of canonical refs sort as their text. Documents, exports and seals see the text: a
row's `digest` is bound to the ref's text as before, so the migration copies digests
unchanged. The column is renamed so that an older threadloom still holding the file
fails on it ("no such column") instead of comparing keys with text.

Runs only on a file whose `vals` lacks `ref_key` (`ONLY_WITH`): a file whose checkpoint
tables are not made yet gets them in this shape when they are; a `vals` an older
threadloom made in its own shape after the upgrade is rebuilt at the next writable open.
"""

FORMAT_12: Final = f"""
PRAGMA legacy_alter_table = ON;
CREATE TABLE writes_2(
    thread INTEGER NOT NULL REFERENCES threads(id),
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    task_key ANY NOT NULL,
    idx INTEGER NOT NULL,
    task_path TEXT NOT NULL,
    channel TEXT NOT NULL,
    schema INTEGER NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    blocks INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY(thread, checkpoint_ns, checkpoint_id, task_key, idx)
) STRICT, WITHOUT ROWID;
INSERT INTO writes_2(thread, checkpoint_ns, checkpoint_id, task_key, idx, task_path, channel,
        schema, seq, body, digest, created_at, blocks, version)
    SELECT thread, checkpoint_ns, checkpoint_id,
        tl_task_key(CASE typeof(task_id) WHEN 'text' THEN CAST(task_id AS BLOB) ELSE task_id END),
        idx, task_path, channel, schema, seq, body, digest, created_at, blocks, version
    FROM writes ORDER BY 1, 2, 3, 4, 5;
DROP TABLE writes;
ALTER TABLE writes_2 RENAME TO writes;
PRAGMA legacy_alter_table = OFF;
{PENDING_TRIGGERS}
{STATUS_WRITE_TRIGGERS}"""
"""Format 12: task ids of pending writes stored as keys, zstd frames without magic.

`writes.task_id` (text) becomes `writes.task_key` (`engine/format/idkeys.py`): a task id
that is a UUID in its canonical text (LangGraph's) is stored as 17 bytes, `\\x01` then
the 16 bytes its hex digits spell, instead of 36 characters in the row and in the
table's key; any other id stays text in the same column (`ANY`). Readers see the text;
seals bind the text, so the rebuild copies digests unchanged. The table is rebuilt in
one transaction (`PRAGMA legacy_alter_table` for the rename: triggers on `checkpoints`
name `writes`), and its triggers (format 4's census, format 7's status) are made again.
The column is renamed so that an older threadloom still holding the file fails on it
("no such column") instead of comparing keys with text. Runs on any file whose `writes`
lacks `task_key` (`ONLY_WITH`), as format 11 does for `vals`. A task id whose bytes are not
UTF-8 (damage) is kept as those bytes, so the upgrade goes through and `verify` names
the row (its seal fails).

Every zstd frame written from format 12 on (an inline body's, with or without the
file's dictionary; a chunk delta's; a content block's) is zstd's magicless format with
no dictionary id in its header: the body's mode byte says it is zstd and a mode-2 body
names its dictionary before the frame, so the 4-byte magic and the 4-byte id said it
again. 8 bytes less in every body framed with a dictionary (a chat message, a
checkpoint, a pending write, a Store item), 4 in the others. A magicless frame starts
with its header's descriptor, whose reserved bit (0x08) is clear, so it never starts
with the magic's first byte (0x28): readers take frames of both kinds, and rows of older
files stay as they are (a training, which `compact` runs, re-encodes the whole bodies;
chunk deltas and content blocks keep their frames). An older threadloom refuses the file.
"""

FORMAT_13: Final = """
ALTER TABLE store_items RENAME COLUMN terms TO text_terms;
ALTER TABLE store_items ADD COLUMN text_digest BLOB;
"""
"""Format 13: each Store item records a digest of the text its text index holds.

`store_items.text_digest`: blake3 of the item's indexed text (its texts joined by
newlines, as `store_text` holds it), 8 bytes (`engine/format/text.py`, `digest`); NULL
when the item has no text entry or was written before format 13. A put whose text has
the digest stored leaves the item's `store_text` row and `text_terms` as they are: the
contentless FTS5 table cannot say what text a row holds, and deleting a row and
inserting the same text again was most of the time of a put of an unchanged item.

`terms` is renamed `text_terms`, so that an older threadloom still holding the file
fails on its first statement that writes a text entry ("no such column: terms") instead
of replacing an item's text and leaving the digest of the one before, which a later put
of that text would then take for the entry's.

Runs on a file whose `store_items` lacks the column (`ONLY_WITH`), whatever its version:
a file without the Store's tables gets them in this shape when they are made. Rows of
older files keep NULL, so their first put writes their text entry again and records it.
"""

#: Migrations that rebuild or alter one feature's table, by the format they reach: the
#: table and a column only the new shape has. Each runs on a file whose `main` holds that table
#: without the column, whatever its version: a file of format 8 on makes a feature's
#: tables when it first writes (engine/format/features.py), and an older threadloom that
#: had the file open before the upgrade makes them in its own shape.
ONLY_WITH: Final[dict[int, tuple[str, str]]] = {
    11: ("vals", "ref_key"),
    12: ("writes", "task_key"),
    13: ("store_items", "text_digest"),
}


def rebuild_due(conn: apsw.Connection, reached: int) -> bool:
    """Whether the `ONLY_WITH` migration reaching format `reached` is due on `conn`'s file."""
    table, column = ONLY_WITH[reached]
    columns = {str(row[1]) for row in conn.execute(f"PRAGMA main.table_info({table})")}
    return bool(columns) and column not in columns


def rebuilds_due(conn: apsw.Connection) -> list[int]:
    """The formats whose `ONLY_WITH` rebuild is due on `conn`'s file."""
    return [reached for reached in ONLY_WITH if rebuild_due(conn, reached)]


#: Ordered migrations; the position of each is the `user_version` it upgrades from.
MIGRATIONS: Final[list[str]] = [
    FORMAT_1,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
    FORMAT_5,
    FORMAT_6,
    FORMAT_7,
    FORMAT_8,
    FORMAT_9,
    FORMAT_10,
    FORMAT_11,
    FORMAT_12,
    FORMAT_13,
]

FORMAT_VERSION: Final = len(MIGRATIONS)
#: The first format storing refs as binary keys (`vals.ref`, refkeys.py).
REFKEYS_FORMAT: Final = MIGRATIONS.index(FORMAT_11) + 1
#: The first format storing task ids as keys (idkeys.py) and writing zstd frames without
#: magic and dictionary id (codec.py).
TASKKEYS_FORMAT: Final = MIGRATIONS.index(FORMAT_12) + 1
#: The first format recording each Store item's text digest (`store_items.text_digest`).
TEXT_DIGEST_FORMAT: Final = MIGRATIONS.index(FORMAT_13) + 1
#: The first format with the vector index's codes (`store_codes`).
CODES_FORMAT: Final = MIGRATIONS.index(FORMAT_9) + 1
