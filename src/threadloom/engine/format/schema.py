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

FORMAT_2: Final = """
ALTER TABLE checkpoints ADD COLUMN blocks INTEGER NOT NULL DEFAULT 0;
DROP INDEX checkpoints_by_id;

CREATE TABLE vals_2(
    thread INTEGER NOT NULL REFERENCES threads(id),
    ref TEXT NOT NULL,
    seq INTEGER NOT NULL,
    body BLOB NOT NULL,
    digest BLOB NOT NULL,
    created_at REAL NOT NULL,
    blocks INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY(thread, ref)
) STRICT, WITHOUT ROWID;
INSERT INTO vals_2(thread, ref, seq, body, digest, created_at)
    SELECT thread, ref, seq, body, digest, created_at FROM vals ORDER BY thread, ref;
DROP TABLE vals;
ALTER TABLE vals_2 RENAME TO vals;

CREATE TABLE writes_2(
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
    blocks INTEGER NOT NULL DEFAULT 0,
    version INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY(thread, checkpoint_ns, checkpoint_id, task_id, idx)
) STRICT, WITHOUT ROWID;
INSERT INTO writes_2(thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel,
        schema, seq, body, digest, created_at)
    SELECT thread, checkpoint_ns, checkpoint_id, task_id, idx, task_path, channel, schema, seq,
        body, digest, created_at FROM writes ORDER BY thread, checkpoint_ns, checkpoint_id,
        task_id, idx;
DROP TABLE writes;
ALTER TABLE writes_2 RENAME TO writes;

CREATE TABLE extents(
    id INTEGER PRIMARY KEY,
    body BLOB NOT NULL,
    live INTEGER NOT NULL,
    created_at REAL NOT NULL
) STRICT;

CREATE TABLE blocks(
    id INTEGER PRIMARY KEY,
    key BLOB NOT NULL UNIQUE,
    refs INTEGER NOT NULL,
    size INTEGER NOT NULL,
    extent INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    length INTEGER NOT NULL,
    created_at REAL NOT NULL,
    released REAL
) STRICT;
CREATE INDEX blocks_released ON blocks(released) WHERE refs <= 0;

CREATE TABLE dicts(
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    data BLOB NOT NULL,
    digest BLOB NOT NULL,
    samples INTEGER NOT NULL,
    created_at REAL NOT NULL
) STRICT;

INSERT INTO meta(key, value) VALUES('dict_next', 65536) ON CONFLICT(key) DO NOTHING;
INSERT INTO meta(key, value) SELECT 'inline_bytes', CAST(
    (SELECT total(length(body)) FROM vals) + (SELECT total(length(body)) FROM checkpoints)
    + (SELECT total(length(body)) FROM writes) AS INTEGER) WHERE true
ON CONFLICT(key) DO NOTHING;
"""
"""Format 2: the physical content store (engine/content/content_store.py).

- `blocks` (content blocks shared file-wide, their bytes back to back in `extents`) and
  `dicts` (trained zstd dictionaries);
- a `blocks` column on every body table: how many block keys the body lists (0: inline);
- a `version` column on `writes`: the document version (a special write replaced by a
  later one counts up, as the document service does; other documents are create-only);
- `vals` and `writes` become WITHOUT ROWID tables keyed by their identity: the unique
  index that duplicated every key is gone; so is `checkpoints_by_id` (the unique key
  `(thread, checkpoint_ns, checkpoint_id)` serves every lookup; listing a thread across
  namespaces sorts its rows instead).

Format-1 bodies (modes 0 and 1) are valid format-2 inline bodies: rows are copied as
they are. The first dictionary training, due at once on a file holding 64 KiB or more,
re-encodes them and moves the large ones to blocks.
"""

FORMAT_3: Final = """
ALTER TABLE checkpoints ADD COLUMN keyed INTEGER NOT NULL DEFAULT 0;

CREATE TABLE checkpoint_keys(
    checkpoint INTEGER NOT NULL,
    key TEXT NOT NULL,
    value ANY,
    PRIMARY KEY(checkpoint, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX checkpoint_runs ON checkpoint_keys(value, checkpoint) WHERE key = 'run_id';
"""
"""Format 3: metadata keys in SQL (engine/format/keys.py).

- `checkpoint_keys`: the top-level metadata keys of each checkpoint whose metadata is
  stored in plain text (not by an encrypting serializer), one row per key: the value
  itself for a str, an int of 64 bits or less, a finite float, a bool (as 0/1) or None;
  an empty blob for any other value. `list(filter=...)` and `delete_for_runs` decide
  on these rows instead of decoding metadata; `checkpoint_runs` indexes the run ids.
- `checkpoints.keyed`: 1 when the row's keys are in `checkpoint_keys`. Rows written
  before format 3, or with encrypted metadata, keep 0 and are still decided by decoding.
"""

FORMAT_4: Final = """
UPDATE vals SET digest = tl_seal(digest, 'vals', s.namespace, s.agent_id, t.thread_id, vals.ref)
    FROM threads t JOIN scopes s ON s.id = t.scope WHERE t.id = vals.thread;
UPDATE checkpoints SET digest = tl_seal(digest, 'checkpoints', s.namespace, s.agent_id,
        t.thread_id, checkpoints.checkpoint_ns, checkpoints.checkpoint_id,
        checkpoints.parent_id, checkpoints.schema, checkpoints.keyed)
    FROM threads t JOIN scopes s ON s.id = t.scope WHERE t.id = checkpoints.thread;
UPDATE writes SET digest = tl_seal(digest, 'writes', s.namespace, s.agent_id, t.thread_id,
        writes.checkpoint_ns, writes.checkpoint_id, writes.task_id, writes.idx,
        writes.task_path, writes.channel, writes.schema)
    FROM threads t JOIN scopes s ON s.id = t.scope WHERE t.id = writes.thread;

CREATE TABLE heads(
    thread INTEGER NOT NULL,
    checkpoint_ns TEXT NOT NULL,
    checkpoint_id TEXT NOT NULL,
    checkpoints INTEGER NOT NULL,
    census BLOB NOT NULL,
    PRIMARY KEY(thread, checkpoint_ns)
) STRICT, WITHOUT ROWID;
INSERT INTO heads(thread, checkpoint_ns, checkpoint_id, checkpoints, census)
    SELECT thread, checkpoint_ns, max(checkpoint_id), count(*),
        tl_census('census', checkpoint_id)
    FROM checkpoints GROUP BY thread, checkpoint_ns;

CREATE TRIGGER heads_insert AFTER INSERT ON checkpoints BEGIN
    INSERT INTO heads(thread, checkpoint_ns, checkpoint_id, checkpoints, census)
        VALUES(new.thread, new.checkpoint_ns, new.checkpoint_id, 1,
            tl_seal(zeroblob(16), 'census', new.checkpoint_id))
        ON CONFLICT DO UPDATE SET checkpoint_id = max(checkpoint_id, excluded.checkpoint_id),
            checkpoints = checkpoints + 1,
            census = tl_seal(census, 'census', excluded.checkpoint_id);
END;

CREATE TRIGGER heads_delete AFTER DELETE ON checkpoints BEGIN
    UPDATE heads SET checkpoints = checkpoints - 1,
            census = tl_seal(census, 'census', old.checkpoint_id),
            checkpoint_id = coalesce((SELECT max(c.checkpoint_id) FROM checkpoints c
                WHERE c.thread = old.thread AND c.checkpoint_ns = old.checkpoint_ns), '')
        WHERE thread = old.thread AND checkpoint_ns = old.checkpoint_ns;
    DELETE FROM heads
        WHERE thread = old.thread AND checkpoint_ns = old.checkpoint_ns AND checkpoints <= 0;
END;

ALTER TABLE checkpoints ADD COLUMN writes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE checkpoints ADD COLUMN census BLOB NOT NULL
    DEFAULT x'00000000000000000000000000000000';
UPDATE checkpoints SET writes = w.n, census = w.mixed
    FROM (SELECT thread, checkpoint_ns, checkpoint_id, count(*) AS n, tl_mix(digest) AS mixed
          FROM writes GROUP BY thread, checkpoint_ns, checkpoint_id) AS w
    WHERE w.thread = checkpoints.thread AND w.checkpoint_ns = checkpoints.checkpoint_ns
        AND w.checkpoint_id = checkpoints.checkpoint_id;

CREATE TRIGGER pending_insert AFTER INSERT ON writes BEGIN
    UPDATE checkpoints SET writes = writes + 1, census = tl_xor(census, new.digest)
        WHERE thread = new.thread AND checkpoint_ns = new.checkpoint_ns
            AND checkpoint_id = new.checkpoint_id;
END;

CREATE TRIGGER pending_update AFTER UPDATE OF digest ON writes BEGIN
    UPDATE checkpoints SET census = tl_xor(tl_xor(census, old.digest), new.digest)
        WHERE thread = old.thread AND checkpoint_ns = old.checkpoint_ns
            AND checkpoint_id = old.checkpoint_id;
END;

CREATE TRIGGER pending_delete AFTER DELETE ON writes BEGIN
    UPDATE checkpoints SET writes = writes - 1, census = tl_xor(census, old.digest)
        WHERE thread = old.thread AND checkpoint_ns = old.checkpoint_ns
            AND checkpoint_id = old.checkpoint_id;
END;

ALTER TABLE scopes ADD COLUMN seal BLOB NOT NULL DEFAULT x'00000000000000000000000000000000';
ALTER TABLE scopes ADD COLUMN threads INTEGER NOT NULL DEFAULT 0;
ALTER TABLE scopes ADD COLUMN census BLOB NOT NULL
    DEFAULT x'00000000000000000000000000000000';
UPDATE scopes SET seal = tl_seal(zeroblob(16), 'scope', id, namespace, agent_id),
    threads = (SELECT count(*) FROM threads t WHERE t.scope = scopes.id),
    census = coalesce((SELECT tl_census('thread', t.id, t.thread_id) FROM threads t
        WHERE t.scope = scopes.id), zeroblob(16));

CREATE TRIGGER scopes_sealed AFTER INSERT ON scopes BEGIN
    UPDATE scopes
        SET seal = tl_seal(zeroblob(16), 'scope', new.id, new.namespace, new.agent_id)
        WHERE id = new.id;
END;

CREATE TRIGGER threads_insert AFTER INSERT ON threads BEGIN
    UPDATE scopes SET threads = threads + 1,
            census = tl_seal(census, 'thread', new.id, new.thread_id)
        WHERE id = new.scope;
END;

CREATE TRIGGER threads_delete AFTER DELETE ON threads BEGIN
    UPDATE scopes SET threads = threads - 1,
            census = tl_seal(census, 'thread', old.id, old.thread_id)
        WHERE id = old.scope;
END;

CREATE TRIGGER pending_counted AFTER INSERT ON checkpoints
    WHEN EXISTS (SELECT 1 FROM writes w WHERE w.thread = new.thread
        AND w.checkpoint_ns = new.checkpoint_ns AND w.checkpoint_id = new.checkpoint_id)
BEGIN
    UPDATE checkpoints SET
        writes = (SELECT count(*) FROM writes w WHERE w.thread = new.thread
            AND w.checkpoint_ns = new.checkpoint_ns AND w.checkpoint_id = new.checkpoint_id),
        census = (SELECT tl_mix(w.digest) FROM writes w WHERE w.thread = new.thread
            AND w.checkpoint_ns = new.checkpoint_ns AND w.checkpoint_id = new.checkpoint_id)
        WHERE id = new.id;
END;
"""
"""Format 4: row seals (engine/format/seal.py) and namespace heads (engine/format/heads.py).

The `digest` of every body row becomes the blake3 of its msgpack XOR the blake3 of its
identity: the table, scope namespace and agent id, thread id and the row's identifying
and linking columns (`tables.BodyTable.sealed`). Nothing is decoded: the migration
XORs each stored digest with its row's identity (`tl_seal`, registered on every
connection). A row whose thread or scope is missing keeps its old digest, which then
fails its check.

`heads`: per thread and checkpoint namespace, the newest checkpoint id, how many
checkpoints it holds and their census (`seal.census`), kept by triggers on every insert
and delete of a checkpoint. A read of the latest checkpoint checks it found the head; a
read that finds no checkpoint checks the namespace's ids against the census, so a row
hidden by a damaged index or a changed id raises instead of reading as absent.

`checkpoints.writes` and `checkpoints.census`: how many pending writes the checkpoint
holds and the XOR of their sealed digests (which bind each write's identity), kept by
triggers on `writes` (and on a checkpoint inserted after its writes); every read of a
checkpoint's pending writes checks them against it, so a write moved to another
checkpoint or hidden by damage raises instead of changing the checkpoint's tuple.

`scopes.seal`, `scopes.threads`, `scopes.census`: each scope row's own identity digest
(its id, namespace and agent id), and the count and census of its threads (their row
ids and thread ids), kept by triggers on `scopes` and `threads`. A scope is opened only
if every scope row's seal holds; the first time a scope meets a thread it does not hold
(a read that finds nothing, a complete list, a new thread), it checks its threads
against the census once, so a thread renamed or moved away by damage raises.
"""

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

FORMAT_REGISTRY: Final = """
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
"""Format REGISTRY: the Agent Server's registry (engine/conversations/server_records.py).

`server_records`: the assistants, assistant versions, threads, runs and crons of
LangGraph's in-memory runtime, one row per record (`kind`; `id`, a version's being
`assistant_id:version`; `thread_id`, the thread a thread, run or cron record names), the
body encoded by the adapter's serializer (`codec` its type). A thread's values are not
kept (they are its newest checkpoint's). Records are written as a server connection ends,
in one transaction; deleting a `threads` row deletes the records naming that thread (the
trigger). Empty until a server writes; `meta.server_registry` marks that one did.
"""

#: Ordered migrations; the position of each is the `user_version` it upgrades from.
MIGRATIONS: Final[list[str]] = [
    FORMAT_1,
    FORMAT_2,
    FORMAT_3,
    FORMAT_4,
    FORMAT_5,
    FORMAT_6,
    FORMAT_7,
    FORMAT_REGISTRY,
]

FORMAT_VERSION: Final = len(MIGRATIONS)
