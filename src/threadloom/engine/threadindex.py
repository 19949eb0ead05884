"""The thread index: one row per thread, kept in the transaction of every write to it.

Engine layer (docs/FORMAT.md, format 6). A conversation list must not scan checkpoints:
each `threads` row carries its owner, title, summary, tags, message count and the bytes
its rows take, and three indexes answer a page by last activity, creation or owner in
time proportional to the page. Checkpoint counts, the head and the namespaces of a
thread are read from `heads` (kept by triggers), for the page's threads only.

Who keeps what:
- a checkpoint put (`note_checkpoint`): the message count of the newest root
  checkpoint, the title (the first human message, unless one was set) and the owner
  (the first of `owner_keys` in the run's `configurable`, unless one is known), in the
  put's transaction; `Scope.reserve` adds the bytes of every row a write inserts;
- writes that arrive as documents (serve, import, migration), deletions of checkpoints
  and prunes (`refresh`): the same facts read again from the thread's rows, class-free
  (`protocol.plain`), in the deleting or importing transaction;
- `set_thread`: title, summary, tags, owner, as given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

import apsw

from threadloom.engine.blocks import BlockStore, Packed
from threadloom.engine.sql import fetchall, ids
from threadloom.engine.tables import CHECKPOINT_ROWS, OWNERS, VALS
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import raw_value
from threadloom.protocol.plain import plain, title

#: The `configurable` keys a thread's owner is taken from, first present wins.
OWNER_KEYS: Final = ("user_id", "langgraph_auth_user_id")
#: The channel whose length is a thread's message count and whose first human message
#: is its title.
MESSAGES: Final = "messages"
#: Characters of a derived title (cut at a word, with an ellipsis).
TITLE_CHARS: Final = 80
#: The orders a page of threads can be read in.
ORDERS: Final = ("updated", "created")
#: Most threads one page returns.
MAX_PAGE: Final = 1000
#: Elements of a messages list read to find the first human message.
TITLE_SCAN: Final = 16

_BODY_TABLES: Final = ("vals", "checkpoints", "writes")


@dataclass(frozen=True)
class ThreadInfo:
    """One thread of the index.

    Attributes:
        thread_id: the thread.
        owner: whose conversation it is (None when no run named one).
        title: the first human message (truncated) or the title set.
        summary: free text set by the application (None until set).
        tags: strings set by the application.
        created_at: Unix time of the thread's first write.
        updated_at: Unix time of its last write (a put or pending writes).
        checkpoints: checkpoints it holds, every namespace.
        messages: the length of the messages channel of its newest root checkpoint.
        bytes: what its rows take as stored (inline bodies at their stored length,
            block bodies at the raw size of the blocks they list, shared or not).
        head: the id of its newest root checkpoint (None without one).
        namespaces: its checkpoint namespaces (`""` is the root), sorted.
        cursor: pass as `before=` to read the page after this thread.
    """

    thread_id: str
    owner: str | None
    title: str | None
    summary: str | None
    tags: tuple[str, ...]
    created_at: float
    updated_at: float
    checkpoints: int
    messages: int
    bytes: int
    head: str | None
    namespaces: tuple[str, ...]
    cursor: str

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO-8601 UTC strings)."""
        return {
            "thread_id": self.thread_id,
            "owner": self.owner,
            "title": self.title,
            "summary": self.summary,
            "tags": list(self.tags),
            "created_at": iso(self.created_at),
            "updated_at": iso(self.updated_at),
            "checkpoints": self.checkpoints,
            "messages": self.messages,
            "bytes": self.bytes,
            "head": self.head,
            "namespaces": list(self.namespaces),
            "cursor": self.cursor,
        }


def iso(moment: float) -> str:
    """Unix time as ISO-8601 in UTC."""
    return datetime.fromtimestamp(moment, timezone.utc).isoformat()


# -- reading a page ----------------------------------------------------------------------

_COLUMNS: Final = (
    "t.id, t.thread_id, t.owner, t.title, t.summary, t.tags, t.created_at, t.updated_at, "
    "t.messages, t.bytes"
)


def page(
    conn: apsw.Connection,
    scope: int,
    *,
    owner: str | None = None,
    limit: int = 20,
    before: str | None = None,
    order: str = "updated",
) -> list[ThreadInfo]:
    """A page of the scope's threads, newest first by `order` (then by row id).

    Raises:
        InvalidArgumentError: a bad `order`, `limit` or cursor.
    """
    if order not in ORDERS:
        raise InvalidArgumentError(f"order must be one of {ORDERS}, not {order!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
    if owner is not None and not isinstance(owner, str):
        raise InvalidArgumentError(f"owner must be a str, not {type(owner).__name__}")
    sql, args = page_query(scope, owner, order, _cursor(before, order) if before else None)
    return _infos(conn, fetchall(conn, sql, (*args, limit)), order)


def page_query(
    scope: int, owner: str | None, order: str, after: tuple[float, int] | None
) -> tuple[str, list[Any]]:
    """The SQL of a page (its LIMIT bound last) and its arguments: read in the order of
    the index of `order` (and `owner`), so a page costs its rows."""
    column = f"t.{order}_at"
    where = ["t.scope = ?"]
    args: list[Any] = [scope]
    index = f"threads_by_{order}"
    if owner is not None:
        where.append("t.owner = ?")
        args.append(owner)
        index = "threads_by_owner" if order == "updated" else "threads_by_owner_created"
    if after is not None:
        where.append(f"({column}, t.id) < (?, ?)")
        args += list(after)
    sql = (
        f"SELECT {_COLUMNS} FROM threads t INDEXED BY {index} WHERE {' AND '.join(where)} "
        f"ORDER BY {column} DESC, t.id DESC LIMIT ?"
    )
    return sql, args


def one(conn: apsw.Connection, scope: int, thread_id: str) -> ThreadInfo | None:
    """The index row of one thread, or None."""
    rows = fetchall(
        conn,
        f"SELECT {_COLUMNS} FROM threads t WHERE t.scope = ? AND t.thread_id = ?",
        (scope, thread_id),
    )
    found = _infos(conn, rows, "updated")
    return found[0] if found else None


def matching(
    conn: apsw.Connection,
    scope: int,
    text: str,
    *,
    owner: str | None = None,
    limit: int = 20,
    before: str | None = None,
) -> list[ThreadInfo]:
    """A page of the scope's threads whose id or title holds `text` (case-insensitive for
    ASCII), newest activity first; paged like `page` (pass the last `cursor` as `before`).

    Walks the last-activity index and tests each row: a page of frequent matches stops
    early, a rare text reads the scope's rows once (no per-row body is read).
    """
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("the text to search for must be a non-empty str")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
    pattern = "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    where = [
        "t.scope = ?",
        "(t.thread_id LIKE ?2 ESCAPE '\\' OR t.title LIKE ?2 ESCAPE '\\')",
    ]
    args: list[Any] = [scope, pattern]
    if owner is not None:
        where.append(f"t.owner = ?{len(args) + 1}")
        args.append(owner)
    if before is not None:
        moment, row = _cursor(before, "updated")
        where.append(f"(t.updated_at, t.id) < (?{len(args) + 1}, ?{len(args) + 2})")
        args += [moment, row]
    # Without an owner, walk activity order (the planner would read the (scope, thread_id)
    # index and sort the scope's every row).
    hint = " INDEXED BY threads_by_updated" if owner is None else ""
    rows = fetchall(
        conn,
        f"SELECT {_COLUMNS} FROM threads t{hint} "
        f"WHERE {' AND '.join(where)} ORDER BY t.updated_at DESC, t.id DESC LIMIT ?{len(args) + 1}",
        (*args, limit),
    )
    return _infos(conn, rows, "updated")


def _infos(conn: apsw.Connection, rows: Sequence[Any], order: str) -> list[ThreadInfo]:
    heads: dict[int, list[tuple[str, str, int]]] = {row[0]: [] for row in rows}
    if heads:
        for thread, ns, checkpoint_id, count in conn.execute(
            "SELECT thread, checkpoint_ns, checkpoint_id, checkpoints FROM heads "
            "WHERE thread IN carray(?)",
            (ids(heads),),
        ):
            heads[thread].append((ns, checkpoint_id, count))
    found = []
    for row, thread_id, owner, name, summary, tags, created, updated, messages, size in rows:
        mine = heads[row]
        root = [checkpoint_id for ns, checkpoint_id, _ in mine if ns == ""]
        moment = updated if order == "updated" else created
        found.append(
            ThreadInfo(
                thread_id=thread_id,
                owner=owner,
                title=name,
                summary=summary,
                tags=tuple(json.loads(tags)) if tags else (),
                created_at=created,
                updated_at=updated,
                checkpoints=sum(count for _, _, count in mine),
                messages=messages,
                bytes=size,
                head=root[0] if root else None,
                namespaces=tuple(sorted(ns for ns, _, _ in mine)),
                cursor=f"{order[0]}{moment!r}/{row}",
            )
        )
    return found


def _cursor(text: str, order: str) -> tuple[float, int]:
    bad = InvalidArgumentError(
        f"before={text!r} is not a cursor of a page ordered by {order!r}; pass the `cursor` "
        "of the last thread of the previous page"
    )
    if not isinstance(text, str) or not text.startswith(order[0]):
        raise bad
    moment, _, row = text[1:].partition("/")
    try:
        value, number = float(moment), int(row)
    except ValueError:
        raise bad from None
    if not math.isfinite(value):
        raise bad
    return value, number


# -- what a put keeps --------------------------------------------------------------------


def held(packs: Iterable[Packed]) -> int:
    """The bytes rows of these bodies take (the `bytes` of the index)."""
    total = 0
    for packed in packs:
        if packed.keys:
            total += sum(len(packed.pieces[key]) for key in packed.keys)
        else:
            total += len(packed.body)
    return total


def shrink(conn: apsw.Connection, thread: int, size: int) -> None:
    """The thread's rows take `size` bytes less (rows deleted or replaced)."""
    if size:
        conn.execute("UPDATE threads SET bytes = bytes - ? WHERE id = ?", (size, thread))


def owner_of(conf: Mapping[str, Any], keys: Sequence[str]) -> str | None:
    """The owner a run's `configurable` (or a checkpoint's metadata) names, or None."""
    for key in keys:
        value = conf.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


def note_checkpoint(
    conn: apsw.Connection,
    thread: int,
    checkpoint_id: str,
    messages: int,
    named: str | None,
    owner: str | None,
) -> None:
    """Keep the index of a root checkpoint just inserted (in its transaction): its message
    count when it is the newest, a title and an owner when the thread has none yet."""
    conn.execute(
        "UPDATE threads SET messages = CASE WHEN ?2 = (SELECT checkpoint_id FROM heads "
        "WHERE thread = ?1 AND checkpoint_ns = '') THEN ?3 ELSE messages END, "
        "title = CASE WHEN titled = 0 AND title IS NULL THEN ?4 ELSE title END, "
        "owner = coalesce(owner, ?5) WHERE id = ?1",
        (thread, checkpoint_id, messages, named, owner),
    )


def derived_title(messages: Any) -> str | None:
    """The title a messages channel value gives (its first human message), or None."""
    if not isinstance(messages, (list, tuple)):
        return None
    return title(messages[:TITLE_SCAN], limit=TITLE_CHARS)


# -- setting -----------------------------------------------------------------------------

#: A field `set_fields` leaves as it is.
UNSET: Final = object()


def set_fields(
    conn: apsw.Connection,
    thread: int,
    *,
    name: Any = UNSET,
    summary: Any = UNSET,
    tags: Any = UNSET,
    owner: Any = UNSET,
) -> None:
    """Set what the application gives of a thread (None clears a field; a cleared title
    is derived again from the messages)."""
    sets: list[str] = []
    args: list[Any] = []
    if name is not UNSET:
        _text(name, "title")
        sets.append("title = ?, titled = ?")
        args += [name, int(name is not None)]
    if summary is not UNSET:
        _text(summary, "summary")
        sets.append("summary = ?")
        args.append(summary)
    if owner is not UNSET:
        _text(owner, "owner")
        sets.append("owner = ?")
        args.append(owner)
    if tags is not UNSET:
        sets.append("tags = ?")
        args.append(_tags(tags))
    if sets:
        conn.execute(f"UPDATE threads SET {', '.join(sets)} WHERE id = ?", (*args, thread))


def _text(value: Any, what: str) -> None:
    if value is not None and (not isinstance(value, str) or "\0" in value):
        raise InvalidArgumentError(f"{what} must be a str without NUL, or None to clear it")


def _tags(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise InvalidArgumentError("tags must be a list of strings (or None to clear them)")
    tags = list(value)
    if not all(isinstance(tag, str) for tag in tags):
        raise InvalidArgumentError("tags must be a list of strings (or None to clear them)")
    return json.dumps(list(dict.fromkeys(tags)), ensure_ascii=False) if tags else None


# -- reading the facts again from the rows -------------------------------------------------


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
        if blocks:
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
    thread whose bytes are not what its rows take, and one line when the index was never
    filled. (Message counts and titles depend on each saver's `messages_channel` and are
    read again by a prune; they are not checked.)"""
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
    for thread, kept, namespace, agent_id, thread_id in fetchall(
        conn,
        "SELECT t.id, t.bytes, s.namespace, s.agent_id, t.thread_id FROM threads t "
        "JOIN scopes s ON s.id = t.scope ORDER BY t.id",
    ):
        counted = stored_bytes(conn, content, int(thread))
        if kept != counted:
            yield (
                f"{namespace}/{agent_id}",
                str(thread_id),
                f"the index says the thread takes {kept} bytes, its rows take {counted}",
            )


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
        rows = fetchall(
            self.conn,
            f"SELECT x.ref, x.body, {VALS.unsealed('x')} FROM vals x{OWNERS} "
            "WHERE x.thread = ? AND x.ref IN carray(?)",
            (self.thread, ids(refs)),
        )
        decoded = self.content.unpack_many(
            self.conn, [(body, digest, f"value {ref}") for ref, body, digest in rows]
        )
        return {row[0]: data for row, data in zip(rows, decoded, strict=True)}

    def plain(self, stored: Mapping[str, Any]) -> Any:
        """A stored value (inline or in parts) decoded class-free; None when unreadable."""
        parts = stored.get("parts") or []
        fetched = self.values(parts) if parts else {}
        try:
            kind, payload = raw_value(stored, fetched)
        except Exception:  # a missing part: the index leaves the fact unknown
            return None
        try:
            return plain(kind, payload)
        except Exception:  # a value the class-free reader cannot read
            return None
