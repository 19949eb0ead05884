"""The on-disk schema's first migrations, formats 1 to 4 (see docs/FORMAT.md).

`schema.py` lists them with the later ones in `MIGRATIONS`; a shipped migration is never
edited. Formats 1 to 4: the tables of checkpoints, pending writes and values; the
physical content store; metadata keys in SQL; row seals and namespace heads.
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

PENDING_TRIGGERS: Final = """
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
"""
"""The triggers on `writes` keeping each checkpoint's `writes` count and `census` (format
4; a rebuild of the table makes them again)."""

FORMAT_4: Final = f"""
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

{PENDING_TRIGGERS}
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
