"""The tables' descriptors: identity columns, named rows and statements, declared once.

Engine layer. Every module that reads or writes `checkpoints`, `writes` or `vals`
takes its column lists and statements from here, and reads rows by name
(`CheckpointRow.checkpoint_id`), never by position.

`BODY_TABLES` is the registry of every table whose rows hold bodies encoded by the
content store (`body`, `digest` and `blocks` columns): a dictionary retraining, `verify`
and `compact` cover exactly these tables, so a table added later registers here.

Every body row is sealed (`seal.py`): its stored `digest` binds the row's scope, thread
id and `BodyTable.sealed` columns. Statements here read the digest unsealed (the
`tl_seal` expression of `BodyTable.unsealed`), so what a caller gets as `digest` is the
blake3 of the msgpack only when the row is the one its columns say it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import apsw

from threadloom.engine.format import idkeys, refkeys
from threadloom.engine.format.seal import SQL_FUNCTION
from threadloom.engine.sql import ids
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    CHECKPOINTS_V1,
    ITEMS,
    PARTS,
    WRITES,
    WRITES_V1,
)

#: Thread and scope of a body row `x` (the identity its seal is checked against).
OWNERS: Final = " JOIN threads t ON t.id = x.thread JOIN scopes s ON s.id = t.scope"
#: The same, keeping rows whose thread or scope is missing (their seal then fails).
LEFT_OWNERS: Final = " LEFT JOIN threads t ON t.id = x.thread LEFT JOIN scopes s ON s.id = t.scope"


@dataclass(frozen=True)
class BodyTable:
    """A table whose rows hold encoded bodies.

    Attributes:
        name: the table.
        identity: the columns that identify a row within its thread (with `thread`).
        naming: how an error names a row, formatted with the row's columns by name.
        sealed: the columns bound into the row's seal, in order (after the table name,
            the scope's namespace and agent id and the thread id).
        owners: SQL joining a row `x` to what its seal binds beyond its own columns,
            keeping rows whose owner is missing (their seal then fails).
        scope: SQL for the seal's two scope parts, over `owners`.
        thread: SQL for the seal's thread part, over `owners`.
        threaded: rows belong to a thread (`x.thread`); the store's items do not.
        dependents: other rows hang on these (foreign keys, triggers), so a re-encoding
            updates them in place instead of deleting and inserting them again.
    """

    name: str
    identity: tuple[str, ...]
    naming: str
    sealed: tuple[str, ...]
    owners: str = LEFT_OWNERS
    scope: str = "s.namespace, s.agent_id"
    thread: str = "t.thread_id"
    threaded: bool = True
    dependents: bool = False

    def unsealed(
        self,
        alias: str,
        scope: str | None = None,
        thread: str | None = None,
        digest: str | None = None,
    ) -> str:
        """SQL for the row's body digest: its stored digest with the identity removed.

        `scope` and `thread` are the SQL giving the namespace, agent id and thread id
        the row must belong to (by default from `threads t` and `scopes s` joined).
        Applied to an unsealed `digest` expression instead, it seals that digest (the
        XOR is its own inverse): how a row is bound to another thread without decoding.
        """
        columns = "".join(f", {alias}.{column}" for column in self.sealed)
        source = digest or f"{alias}.digest"
        scope = self.scope if scope is None else scope
        thread = self.thread if thread is None else thread
        return f"{SQL_FUNCTION}({source}, '{self.name}', {scope}, {thread}{columns})"

    def rebound(self, alias: str, scope: str, old_thread: str, new_thread: str) -> str:
        """SQL for the digest of a copy of row `alias` in another thread of the scope."""
        return self.unsealed(alias, scope, new_thread, self.unsealed(alias, scope, old_thread))

    def name_row(self, row: dict[str, Any]) -> str:
        """How an error names `row` (a mapping of column names to values; a ref as
        `vals` stores it, or a task id as `writes` does, is named by its text)."""
        if self.name == "vals" and isinstance(row.get("ref_key"), bytes):
            row = {**row, "ref_key": refkeys.text(row["ref_key"])}
        if self.name == "writes" and isinstance(row.get("task_key"), bytes):
            row = {**row, "task_key": idkeys.text(row["task_key"])}
        return self.naming.format_map(row)


#: The body-table registry (see the module docstring).
BODY_TABLES: Final[dict[str, BodyTable]] = {}


def register(table: BodyTable) -> BodyTable:
    """Add a body table to the registry (idempotent for the same descriptor)."""
    found = BODY_TABLES.setdefault(table.name, table)
    if found != table:
        raise ValueError(f"body table {table.name!r} is already registered differently")
    return table


VALS = register(BodyTable("vals", ("ref_key",), "value {ref_key}", ("ref_key",)))
CHECKPOINT_ROWS = register(
    BodyTable(
        "checkpoints",
        ("checkpoint_ns", "checkpoint_id"),
        "checkpoint {checkpoint_id}",
        ("checkpoint_ns", "checkpoint_id", "parent_id", "schema", "keyed"),
    )
)
WRITE_ROWS = register(
    BodyTable(
        "writes",
        ("checkpoint_ns", "checkpoint_id", "task_key", "idx"),
        "pending write {task_key}/{idx}",
        ("checkpoint_ns", "checkpoint_id", "task_key", "idx", "task_path", "channel", "schema"),
    )
)
#: Long-term memory items (engine/items/rows.py): sealed to their namespace's name and key.
STORE_ITEMS = register(
    BodyTable(
        "store_items",
        ("ns", "key"),
        "store item {key}",
        (),
        owners=" LEFT JOIN store_namespaces n ON n.id = x.ns",
        scope="n.name, ''",
        thread="x.key",
        threaded=False,
        dependents=True,
    )
)

#: Table of each LangGraph collection.
TABLE_OF: Final = {
    CHECKPOINTS: "checkpoints",
    CHECKPOINTS_V1: "checkpoints",
    WRITES: "writes",
    WRITES_V1: "writes",
    BLOBS: "vals",
    ITEMS: "vals",
    PARTS: "vals",
}

#: The fields of each table's documents that live in columns (not in the body).
DOCUMENT_FIELDS: Final = {
    "vals": frozenset({"agent_id", "thread_id", "ref", "_schema"}),
    "checkpoints": frozenset(
        {"agent_id", "thread_id", "checkpoint_ns", "_schema", "checkpoint_id", "parent_id"}
    ),
    "writes": frozenset(
        {
            "agent_id",
            "thread_id",
            "checkpoint_ns",
            "_schema",
            "checkpoint_id",
            "task_id",
            "task_path",
            "index",
            "channel",
        }
    ),
}

#: The body fields of a checkpoint document.
CHECKPOINT_BODY: Final = ("checkpoint", "metadata", "channels")


class CheckpointRow(NamedTuple):
    """A checkpoint row with its thread id (`SELECT_CHECKPOINT`); `digest` is as stored
    (sealed: `Scope.body_digest` removes the identity)."""

    id: int
    thread: int
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    parent_id: str | None
    schema: int
    body: bytes
    digest: bytes
    keyed: int
    writes: int
    census: bytes


#: The columns of a `CheckpointRow` (`c` = checkpoints, `t` = threads).
CHECKPOINT_COLUMNS: Final = (
    "c.id, c.thread, t.thread_id, c.checkpoint_ns, c.checkpoint_id, c.parent_id, c.schema, "
    "c.body, c.digest, c.keyed, c.writes, c.census"
)
#: Where a `CheckpointRow` is read from.
CHECKPOINT_FROM: Final = " FROM checkpoints c JOIN threads t ON c.thread = t.id"
SELECT_CHECKPOINT: Final = "SELECT " + CHECKPOINT_COLUMNS + CHECKPOINT_FROM


class PendingRow(NamedTuple):
    """A pending write of a checkpoint row (`SELECT_PENDING`); `digest` is as stored."""

    owner: int
    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    idx: int
    task_path: str
    channel: str
    schema: int
    body: bytes
    digest: bytes


SELECT_PENDING: Final = (
    "SELECT c.id, t.thread_id, w.checkpoint_ns, w.checkpoint_id, tl_task_id(w.task_key), w.idx, "
    "w.task_path, "
    "w.channel, w.schema, w.body, w.digest FROM checkpoints c JOIN writes w "
    "ON w.thread = c.thread AND w.checkpoint_ns = c.checkpoint_ns "
    "AND w.checkpoint_id = c.checkpoint_id JOIN threads t ON t.id = c.thread "
    "WHERE c.id IN carray(?)"
)

#: The value rows of a thread among some refs: ref key, body, digest unsealed.
SELECT_VALUES: Final = (
    f"SELECT x.ref_key, x.body, {VALS.unsealed('x')} FROM vals x{OWNERS} "
    "WHERE x.thread = ? AND x.ref_key IN carray(?)"
)


def value_rows(
    conn: apsw.Connection, thread: int, refs: Iterable[str]
) -> list[tuple[str, bytes, bytes]]:
    """`(ref, body, digest)` of the value rows of `thread` among `refs`, in no order, the
    digest unsealed (`SELECT_VALUES`) and each ref as text (refkeys.py)."""
    # A row's key is one of these; a ref that is not text names nothing stored.
    wanted = {refkeys.key(ref): ref for ref in refs if type(ref) is str}
    rows = conn.execute(SELECT_VALUES, (thread, ids(wanted)))
    return [(wanted[stored], body, digest) for stored, body, digest in rows]


INSERT_VALUE: Final = (
    "INSERT INTO vals(thread, ref_key, seq, body, digest, created_at, blocks) "
    "VALUES(?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
)

INSERT_CHECKPOINT: Final = (
    "INSERT INTO checkpoints(thread, checkpoint_ns, checkpoint_id, parent_id, schema, seq, "
    "body, digest, created_at, blocks, keyed) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT DO NOTHING"
)

_WRITE_COLUMNS: Final = (
    "INSERT INTO writes(thread, checkpoint_ns, checkpoint_id, task_key, idx, task_path, channel, "
    "schema, seq, body, digest, created_at, blocks) VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
)
#: Insert a pending write; the first write of a (task, index) wins.
INSERT_WRITE: Final = _WRITE_COLUMNS + "ON CONFLICT DO NOTHING"
#: Insert a pending write or replace the stored one (special writes), counting its version.
REPLACE_WRITE: Final = (
    _WRITE_COLUMNS + "ON CONFLICT DO UPDATE SET task_path = excluded.task_path, "
    "channel = excluded.channel, seq = excluded.seq, body = excluded.body, "
    "digest = excluded.digest, blocks = excluded.blocks, version = version + 1 RETURNING version"
)
#: One pending write by its identity (its task id bound as `idkeys.key`).
WRITE_KEY: Final = (
    "thread = ? AND checkpoint_ns = ? AND checkpoint_id = ? AND task_key = ? AND idx = ?"
)
#: A pending write's task id as text, for a statement's columns (format 12 stores a
#: UUID as a key: idkeys.py).
TASK_ID: Final = "tl_task_id(x.task_key)"

#: Metadata keys of a checkpoint, for filters decided in SQL (format 3).
INSERT_KEY: Final = (
    "INSERT INTO checkpoint_keys(checkpoint, key, value) VALUES(?, ?, ?) ON CONFLICT DO NOTHING"
)
