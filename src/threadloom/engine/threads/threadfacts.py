"""The thread index's facts read again from a thread's rows (engine/threads/threadindex.py).

Engine layer. Where a write did not come through the saver's put (documents imported or
deleted through `serve`/`import`, a migration), after checkpoints were deleted (prune,
`delete_for_runs`) and at the format-6 upgrade, a thread's message count, title, owner
and bytes are read from its rows: the newest root checkpoint decoded class-free
(`protocol.plain`, seals checked), and every body row's stored size. `verify` compares
the kept bytes and status with the rows (`problems`).

A thread copied from elsewhere (`migrate`, `import`) takes its creation and last
activity from its checkpoints' own times (`restamp`: the `ts` LangGraph writes into each
checkpoint), not from the copy's, so retention by age and the viewer see the chat's
real age.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timezone
from typing import Any, Final

import apsw

from threadloom.engine.content.blocks import BlockStore
from threadloom.engine.format.tables import CHECKPOINT_ROWS, value_rows
from threadloom.engine.sql import fetchall, ids
from threadloom.engine.threads.threadindex import (
    MESSAGES,
    OWNER_KEYS,
    TITLE_SCAN,
    derived_title,
    owner_of,
)
from threadloom.errors import MissingDocumentsError, ProtocolError
from threadloom.protocol import raw_value
from threadloom.protocol.plain import plain

_BODY_TABLES: Final = ("vals", "checkpoints", "writes")
#: LangGraph's channels of a failed task's error and of interrupts (format 7's status).
ERROR: Final = "__error__"
INTERRUPT: Final = "__interrupt__"


def refresh(
    conn: apsw.Connection,
    content: BlockStore,
    thread: int,
    *,
    owner_keys: Sequence[str] = OWNER_KEYS,
    channel: str = MESSAGES,
    recount: bool = True,
) -> None:
    """Read a thread's index facts again from its rows (after documents were imported or
    checkpoints deleted), inside the caller's transaction: the message count of its
    newest root checkpoint, a title and an owner when it has none, and (`recount`) its
    bytes, which takes reading every row of the thread."""
    wants = fetchall(
        conn,
        "SELECT title IS NULL AND titled = 0, owner IS NULL FROM threads WHERE id = ?",
        (thread,),
    )
    if not wants:
        return
    facts = _Facts(conn, content, thread, channel)
    count, named = facts.messages(want_title=bool(wants[0][0]))
    owner = facts.owner(owner_keys) if wants[0][1] else None
    sets = (
        "messages = ?, title = CASE WHEN titled = 0 THEN coalesce(title, ?) ELSE title END, "
        "owner = coalesce(owner, ?)"
    )
    args: list[Any] = [count, named, owner]
    if recount:
        sets += ", bytes = ?"
        args.append(stored_bytes(conn, content, thread))
    conn.execute(f"UPDATE threads SET {sets} WHERE id = ?", (*args, thread))


def restamp(conn: apsw.Connection, content: BlockStore, thread: int) -> bool:
    """Set a thread's creation and last activity to the `ts` of its oldest and newest
    checkpoints (by id, every namespace; LangGraph's ids follow time), inside the caller's
    transaction; return whether they were set. A thread whose checkpoints carry no
    readable `ts` keeps its times."""
    rows = fetchall(
        conn,
        f"SELECT c.checkpoint_id, c.body, {CHECKPOINT_ROWS.unsealed('c')} "
        "FROM checkpoints c JOIN threads t ON t.id = c.thread JOIN scopes s ON s.id = t.scope "
        "WHERE c.thread = ?1 AND c.checkpoint_id IN ((SELECT min(checkpoint_id) FROM "
        "checkpoints WHERE thread = ?1), (SELECT max(checkpoint_id) FROM checkpoints "
        "WHERE thread = ?1)) ORDER BY c.checkpoint_id",
        (thread,),
    )
    reader = _Reader(conn, content, thread)
    moments = []
    for checkpoint_id, body, digest in rows:
        stored = content.unpack(conn, body, digest, f"checkpoint {checkpoint_id}")
        whole = reader.plain(stored["checkpoint"]) if "checkpoint" in stored else None
        moment = _unix(whole.get("ts")) if isinstance(whole, Mapping) else None
        if moment is not None:
            moments.append(moment)
    if not moments:
        return False
    conn.execute(
        "UPDATE threads SET created_at = ?, updated_at = ? WHERE id = ?",
        (min(moments), max(moments), thread),
    )
    return True


def _unix(ts: Any) -> float | None:
    """A checkpoint's `ts` (ISO 8601; naive means UTC) as Unix time; None when unreadable."""
    if not isinstance(ts, str):
        return None
    try:
        moment = datetime.fromisoformat(ts[:-1] + "+00:00" if ts.endswith("Z") else ts)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def stored_bytes(conn: apsw.Connection, content: BlockStore, thread: int) -> int:
    """What the thread's rows take as stored (see `ThreadInfo.bytes`), counted from them."""
    return sum(row_bytes(conn, content, table, "thread = ?", (thread,)) for table in _BODY_TABLES)


def row_bytes(
    conn: apsw.Connection, content: BlockStore, table: str, where: str, args: Sequence[Any]
) -> int:
    """What the rows of `table` matching `where` take as stored (see `ThreadInfo.bytes`)."""
    total = 0
    listed: list[bytes] = []
    for body, blocks in conn.execute(f"SELECT body, blocks FROM {table} WHERE {where}", args):
        if blocks > 0:
            listed += content.referenced(conn, bytes(body))
        else:
            total += len(body)
    if listed:
        sizes: dict[bytes, int] = dict(
            fetchall(
                conn,
                "SELECT key, size FROM blocks WHERE key IN carray(?)",
                (ids(set(listed)),),
            )
        )
        total += sum(sizes.get(key, 0) for key in listed)
    return total


def build(
    conn: apsw.Connection,
    content: BlockStore,
    *,
    owner_keys: Sequence[str] = OWNER_KEYS,
    channel: str = MESSAGES,
) -> int:
    """Fill the index of every thread of the file (format 6 upgrade); return how many."""
    threads = [row[0] for row in fetchall(conn, "SELECT id FROM threads ORDER BY id")]
    for thread in threads:
        refresh(conn, content, thread, owner_keys=owner_keys, channel=channel)
    conn.execute("UPDATE meta SET value = 'ready' WHERE key = 'thread_index'")
    return len(threads)


def problems(conn: apsw.Connection, content: BlockStore) -> Iterable[tuple[str, str, str]]:
    """What `verify` finds wrong with the index: `(scope, thread id, detail)` for each
    thread whose bytes are not what its rows take or whose status is not what its newest
    root checkpoint's pending writes say, and one line when the index was never filled.
    (Message counts and titles depend on each saver's `messages_channel` and are read
    again by a prune; they are not checked.)"""
    if pending(conn):
        yield (
            "",
            "",
            (
                "the thread index (format 6) was not filled yet: open the file writable once "
                "with a Saver (threadloom.Saver(path)), which fills it"
            ),
        )
        return
    for thread, kept, namespace, agent_id, thread_id, status in fetchall(
        conn,
        "SELECT t.id, t.bytes, s.namespace, s.agent_id, t.thread_id, t.status FROM threads t "
        "JOIN scopes s ON s.id = t.scope ORDER BY t.id",
    ):
        counted = stored_bytes(conn, content, int(thread))
        if kept != counted:
            yield (
                f"{namespace}/{agent_id}",
                str(thread_id),
                f"the index says the thread takes {kept} bytes, its rows take {counted}",
            )
        found = head_status(conn, int(thread))
        if status != found:
            yield (
                f"{namespace}/{agent_id}",
                str(thread_id),
                f"the index says the thread is {status}, its newest checkpoint says {found}",
            )


def head_status(conn: apsw.Connection, thread: int) -> str:
    """The status a thread's rows give (see `ThreadInfo.status`; a lease is not a row's):
    read from the channels of its newest root checkpoint's pending writes."""
    head = fetchall(
        conn,
        "SELECT max(checkpoint_id) FROM checkpoints WHERE thread = ? AND checkpoint_ns = ''",
        (thread,),
    )[0][0]
    channels = {
        row[0]
        for row in fetchall(
            conn,
            "SELECT DISTINCT channel FROM writes "
            "WHERE thread = ? AND checkpoint_ns = '' AND checkpoint_id = ?",
            (thread, head),
        )
    }
    if ERROR in channels:
        return "error"
    return "interrupted" if INTERRUPT in channels else "idle"


def pending(conn: apsw.Connection) -> bool:
    """True when the file's index was never filled (a format-6 upgrade not finished)."""
    rows = fetchall(conn, "SELECT value FROM meta WHERE key = 'thread_index'")
    return bool(rows) and rows[0][0] == "pending"


class _Facts:
    """What the newest root checkpoint of a thread says, read class-free (seals checked)."""

    def __init__(
        self, conn: apsw.Connection, content: BlockStore, thread: int, channel: str
    ) -> None:
        self.reader = _Reader(conn, content, thread)
        self.channel = channel
        rows = fetchall(
            conn,
            f"SELECT c.checkpoint_id, c.schema, c.body, {CHECKPOINT_ROWS.unsealed('c')} "
            "FROM heads h JOIN checkpoints c ON c.thread = h.thread "
            "AND c.checkpoint_ns = h.checkpoint_ns AND c.checkpoint_id = h.checkpoint_id "
            "JOIN threads t ON t.id = c.thread JOIN scopes s ON s.id = t.scope "
            "WHERE h.thread = ? AND h.checkpoint_ns = ''",
            (thread,),
        )
        self.schema = 0
        self.stored: Mapping[str, Any] = {}
        if rows:
            checkpoint_id, self.schema, body, digest = rows[0]
            self.stored = content.unpack(conn, body, digest, f"checkpoint {checkpoint_id}")

    def owner(self, keys: Sequence[str]) -> str | None:
        """The owner the checkpoint's metadata names (`configurable` keys are copied there)."""
        if not self.stored:
            return None
        metadata = self.reader.plain(self.stored["metadata"])
        return owner_of(metadata, keys) if isinstance(metadata, Mapping) else None

    def messages(self, *, want_title: bool) -> tuple[int, str | None]:
        """The length of the messages channel and (if wanted) the title it gives."""
        if not self.stored:
            return 0, None
        reader = self.reader
        if self.schema != 2:
            whole = reader.plain(self.stored["checkpoint"])
            values = whole.get("channel_values") if isinstance(whole, Mapping) else None
            value = values.get(self.channel) if isinstance(values, Mapping) else None
            return _length(value), derived_title(value) if want_title else None
        entry = (self.stored.get("channels") or {}).get(self.channel)
        if entry is None:
            return 0, None
        if "value" in entry:
            value = reader.plain(entry["value"])
            return _length(value), derived_title(value) if want_title else None
        blob = reader.values([entry["blob"]]).get(entry["blob"], {})
        if "value" in blob:
            value = reader.plain(blob["value"])
            return _length(value), derived_title(value) if want_title else None
        length = int(blob.get("length", 0))
        chunks = blob.get("chunks") or []
        if not want_title or not chunks:
            return length, None
        first = reader.values([chunks[0]]).get(chunks[0], {})
        refs = [ref for ref, _ in (first.get("elements") or [])[:TITLE_SCAN]]
        found = reader.values(refs)
        elements = [reader.plain(found[ref]["value"]) for ref in refs if ref in found]
        return length, derived_title(elements)


def _length(value: Any) -> int:
    return len(value) if isinstance(value, (list, tuple)) else 0


class _Reader:
    """Value documents and class-free values of one thread, any scope (seals checked)."""

    def __init__(self, conn: apsw.Connection, content: BlockStore, thread: int) -> None:
        self.conn = conn
        self.content = content
        self.thread = thread

    def values(self, refs: Sequence[str]) -> dict[str, Any]:
        if not refs:
            return {}
        rows = value_rows(self.conn, self.thread, refs)
        decoded = self.content.unpack_many(
            self.conn, [(body, digest, f"value {ref}") for ref, body, digest in rows], self.thread
        )
        return {row[0]: data for row, data in zip(rows, decoded, strict=True)}

    def plain(self, stored: Mapping[str, Any]) -> Any:
        """A stored value (inline or in parts) decoded class-free; None when unreadable."""
        parts = stored.get("parts") or []
        fetched = self.values(parts) if parts else {}
        try:
            kind, payload = raw_value(stored, fetched)
        except (MissingDocumentsError, ProtocolError, KeyError):  # a missing part: unknown
            return None
        try:
            return plain(kind, payload)
        except ProtocolError:  # a value the class-free reader cannot read
            return None
