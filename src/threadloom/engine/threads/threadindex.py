"""The thread index: one row per thread, kept in the transaction of every write to it.

Engine layer (docs/FORMAT.md, format 6). A conversation list must not scan checkpoints:
each `threads` row carries its owner, title, summary, tags, message count and the bytes
its rows take, and four indexes answer a page by last activity or creation, of
everyone or of one owner, in time proportional to the page. Checkpoint counts, the
head and the namespaces of a thread are read from `heads` (kept by triggers), for the
page's threads only.

Who keeps what:
- a checkpoint put (`note_checkpoint`): the message count of the newest root
  checkpoint, the title (the first human message, unless one was set) and the owner
  (the first of `owner_keys` in the run's `configurable`, unless one is known), in the
  put's transaction; `Scope.reserve` adds the bytes of every row a write inserts;
- writes that arrive as documents (serve, import, migration), deletions of checkpoints
  and prunes (`threadfacts.refresh`): the same facts read again from the thread's rows,
  class-free (`protocol.plain`), in the deleting or importing transaction;
- `set_thread`: title, summary, tags, owner, as given;
- triggers (format 7): the stored status (`idle`, `interrupted`, `error`: what the
  newest root checkpoint's pending writes say), on every insert and delete of a root
  checkpoint or of an `__interrupt__`/`__error__` root write. `running` is not stored: a
  live lease (`running.live`), read with the page.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final

import apsw

from threadloom.engine.sql import fetchall, ids
from threadloom.engine.threads.running import live
from threadloom.errors import InvalidArgumentError
from threadloom.protocol import MAX_PAGE
from threadloom.protocol.plain import title

#: The `configurable` keys a thread's owner is taken from, first present wins.
OWNER_KEYS: Final = ("user_id", "langgraph_auth_user_id")
#: The channel whose length is a thread's message count and whose first human message
#: is its title.
MESSAGES: Final = "messages"
#: Characters of a derived title (cut at a word, with an ellipsis).
TITLE_CHARS: Final = 80
#: The orders a page of threads can be read in.
ORDERS: Final = ("updated", "created")
#: Elements of a messages list read to find the first human message.
TITLE_SCAN: Final = 16
#: The longest text a thread search takes (SQLite refuses LIKE patterns past 50,000
#: bytes; a longer text could match only an id that long).
SEARCH_CHARS: Final = 1000
#: SQLite's index of `threads`' UNIQUE(scope, thread_id) (format 1): threads by id.
BY_ID: Final = "sqlite_autoindex_threads_1"
#: What a thread is doing, as the index says: a live run holds its lease (`running`); its
#: newest root checkpoint holds a failed task's error (`error`) or waits on an
#: `interrupt()` (`interrupted`); else `idle`. Only the last three are stored.
STATUSES: Final = ("idle", "interrupted", "running", "error")


@dataclass(frozen=True)
class ThreadInfo:
    """One thread of the index.

    Attributes:
        thread_id: the thread.
        owner: whose conversation it is (None when no run named one).
        title: the first human message (truncated) or the title set.
        summary: free text set by the application (None until set).
        tags: strings set by the application.
        created_at: when the thread was first written (a timezone-aware UTC datetime).
        updated_at: when it was last written, a put or pending writes (UTC datetime).
        checkpoints: checkpoints it holds, every namespace.
        messages: the length of the messages channel of its newest root checkpoint.
        bytes: what its rows take as stored (inline bodies at their stored length,
            block bodies at the raw size of the blocks they list, shared or not).
        head: the id of its newest root checkpoint (None without one).
        namespaces: its checkpoint namespaces (`""` is the root), sorted.
        cursor: pass as `before=` to read the page after this thread.
        status: one of `STATUSES`: "running" while a live run holds the thread's lease
            (`Saver.lease`, `Saver.run`), else "error" when its newest root checkpoint
            holds a failed task's error, "interrupted" when it waits on an `interrupt()`
            (resume it with `Command(resume=...)`), else "idle". A run without a lease
            is not seen; a static breakpoint (`interrupt_before`) records no interrupt.
    """

    thread_id: str
    owner: str | None
    title: str | None
    summary: str | None
    tags: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    checkpoints: int
    messages: int
    bytes: int
    head: str | None
    namespaces: tuple[str, ...]
    cursor: str
    status: str = "idle"

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (times as ISO-8601 UTC strings)."""
        return {
            "thread_id": self.thread_id,
            "owner": self.owner,
            "title": self.title,
            "summary": self.summary,
            "tags": list(self.tags),
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "checkpoints": self.checkpoints,
            "messages": self.messages,
            "bytes": self.bytes,
            "head": self.head,
            "namespaces": list(self.namespaces),
            "cursor": self.cursor,
            "status": self.status,
        }


def iso(moment: float) -> str:
    """Unix time as ISO-8601 in UTC."""
    return utc(moment).isoformat()


def utc(moment: float) -> datetime:
    """Unix time as a timezone-aware UTC datetime (what the Python API gives)."""
    return datetime.fromtimestamp(moment, timezone.utc)


# -- reading a page ----------------------------------------------------------------------

_COLUMNS: Final = (
    "t.id, t.thread_id, t.owner, t.title, t.summary, t.tags, t.created_at, t.updated_at, "
    "t.messages, t.bytes, t.status"
)


def page(
    conn: apsw.Connection,
    scope: int,
    *,
    owner: str | None = None,
    limit: int = 20,
    before: str | None = None,
    order: str = "updated",
    status: str | None = None,
) -> list[ThreadInfo]:
    """A page of the scope's threads, newest first by `order` (then by row id), only
    those whose `status` is the one given (see `ThreadInfo.status`) when one is.

    Raises:
        InvalidArgumentError: a bad `order`, `limit`, `status` or cursor.
    """
    if order not in ORDERS:
        raise InvalidArgumentError(f"order must be one of {ORDERS}, not {order!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
    if owner is not None and not isinstance(owner, str):
        raise InvalidArgumentError(f"owner must be a str, not {type(owner).__name__}")
    _check_status(status)
    running = live(conn, scope) if status is not None else set()
    if status == "running" and not running:
        return []
    sql, args = page_query(
        scope,
        owner,
        order,
        _cursor(before, order) if before else None,
        status=status,
        running=running,
    )
    return _infos(conn, scope, fetchall(conn, sql, (*args, limit)), order)


def page_query(
    scope: int,
    owner: str | None,
    order: str,
    after: tuple[float, int] | None,
    *,
    status: str | None = None,
    running: set[str] | frozenset[str] = frozenset(),
) -> tuple[str, list[Any]]:
    """The SQL of a page (its LIMIT bound last) and its arguments: read in the order of
    the index of `order` (and `owner`), so a page costs its rows. With a `status`, the
    threads `running` names are those running: a page of a stored status leaves them
    out; one of "interrupted" or "error" by last activity reads `threads_by_status`; one
    of "running" looks its few threads up by id and sorts them."""
    column = f"t.{order}_at"
    where = ["t.scope = ?"]
    args: list[Any] = [scope]
    index = f"threads_by_{order}"
    if owner is not None:
        where.append("t.owner = ?")
        args.append(owner)
        index = "threads_by_owner" if order == "updated" else "threads_by_owner_created"
    if status is not None:
        clause, extra = _status_clause(status, running)
        where.append(clause)
        args += extra
        if status in ("interrupted", "error") and owner is None and order == "updated":
            index = "threads_by_status"
        elif status == "running":
            index = BY_ID
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
    found = _infos(conn, scope, rows, "updated")
    return found[0] if found else None


def matching(
    conn: apsw.Connection,
    scope: int,
    text: str,
    *,
    owner: str | None = None,
    limit: int = 20,
    before: str | None = None,
    status: str | None = None,
) -> list[ThreadInfo]:
    """A page of the scope's threads whose id or title holds `text` (case-insensitive for
    ASCII), newest activity first, of one `status` when given; paged like `page` (pass
    the last `cursor` as `before`).

    Walks the last-activity index and tests each row: a page of frequent matches stops
    early, a rare text reads the scope's rows once (no per-row body is read).
    """
    if not isinstance(text, str) or not text:
        raise InvalidArgumentError("the text to search for must be a non-empty str")
    if len(text) > SEARCH_CHARS:
        raise InvalidArgumentError(
            f"a thread search takes at most {SEARCH_CHARS} characters, not {len(text)}: "
            "search for a shorter part of the id or title"
        )
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
    _check_status(status)
    if status is not None:
        running = live(conn, scope)
        if status == "running" and not running:
            return []
        clause, extra = _status_clause(status, running)
        where.append(clause.replace("?", f"?{len(args) + 1}"))
        args += extra
    if before is not None:
        moment, row = _cursor(before, "updated")
        where.append(f"(t.updated_at, t.id) < (?{len(args) + 1}, ?{len(args) + 2})")
        args += [moment, row]
    # Without an owner, walk activity order (the planner would read the (scope, thread_id)
    # index and sort the scope's every row); running threads are few: look them up by id.
    hint = " INDEXED BY threads_by_updated" if owner is None else ""
    if status == "running":
        hint = f" INDEXED BY {BY_ID}"
    rows = fetchall(
        conn,
        f"SELECT {_COLUMNS} FROM threads t{hint} "
        f"WHERE {' AND '.join(where)} ORDER BY t.updated_at DESC, t.id DESC LIMIT ?{len(args) + 1}",
        (*args, limit),
    )
    return _infos(conn, scope, rows, "updated")


def _check_status(status: str | None) -> None:
    if status is not None and status not in STATUSES:
        raise InvalidArgumentError(f"status must be one of {STATUSES}, not {status!r}")


def _status_clause(status: str, running: set[str] | frozenset[str]) -> tuple[str, list[Any]]:
    """The condition a page of `status` adds (at most one `?`), and its argument."""
    if status == "running":
        return "t.thread_id IN carray(?)", [ids(running)]
    # Literals, not a bound value, and the partial index's own term: SQLite uses a partial
    # index only when the query holds its WHERE term as written.
    clause = f"t.status = '{status}'" + (" AND t.status <> 'idle'" if status != "idle" else "")
    if not running:
        return clause, []
    return clause + " AND t.thread_id NOT IN carray(?)", [ids(running)]


def _infos(conn: apsw.Connection, scope: int, rows: Sequence[Any], order: str) -> list[ThreadInfo]:
    heads: dict[int, list[tuple[str, str, int]]] = {row[0]: [] for row in rows}
    if heads:
        for thread, ns, checkpoint_id, count in conn.execute(
            "SELECT thread, checkpoint_ns, checkpoint_id, checkpoints FROM heads "
            "WHERE thread IN carray(?)",
            (ids(heads),),
        ):
            heads[thread].append((ns, checkpoint_id, count))
    running = live(conn, scope, [row[1] for row in rows])
    found = []
    for (
        row,
        thread_id,
        owner,
        name,
        summary,
        tags,
        created,
        updated,
        messages,
        size,
        stored,
    ) in rows:
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
                created_at=utc(created),
                updated_at=utc(updated),
                checkpoints=sum(count for _, _, count in mine),
                messages=messages,
                bytes=size,
                head=root[0] if root else None,
                namespaces=tuple(sorted(ns for ns, _, _ in mine)),
                cursor=f"{order[0]}{moment!r}/{row}",
                status="running" if thread_id in running else stored,
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
