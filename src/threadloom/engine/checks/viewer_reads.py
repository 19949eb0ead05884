"""Reads the viewer needs beyond the savers' and the Store's own: the Store's namespace
tree, a namespace's items by key, and where a file's bytes are.

Engine layer, read-only: every function runs inside the caller's read transaction and
writes nothing. Each reads what its page shows: the tree groups namespace names in SQL
(one row per child label), items come from the `(ns, key)` index a page at a time, the
file's summary from its header, its counters and the thread index (`summary`, `scopes`,
`thread_totals`, `store_totals`); only `measure` reads the whole file (`dbstat`, the content store's
tables), for a page that asks for it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import apsw

from threadloom.engine.items.reads import ITEM_COLUMNS
from threadloom.engine.items.records import Stored, namespace_name
from threadloom.engine.items.rows import Items
from threadloom.engine.sql import fetchall
from threadloom.protocol import MAX_PAGE


@dataclass(frozen=True)
class Child:
    """One label under a namespace prefix.

    Attributes:
        label: the label.
        namespaces: namespaces holding items at or under prefix + label.
        items: items they hold.
        leaf: prefix + label itself holds items.
    """

    label: str
    namespaces: int
    items: int
    leaf: bool

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def _check_limit(limit: int) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")


def namespace_children(
    conn: apsw.Connection, prefix: Sequence[str], *, after: str | None = None, limit: int = 200
) -> list[Child]:
    """The labels one level under `prefix` (in label order, after `after`), with the
    namespaces and items at or under each."""
    _check_limit(limit)
    if prefix:
        name = namespace_name(prefix)
        start = len(name) + 2  # 1-based, past the prefix and its dot
        where, args = "name > ?2 AND name < ?3", [name + ".", name + "/"]
    else:
        start, where, args = 1, "1", ["", ""]
    rows = fetchall(
        conn,
        "SELECT label, count(*), total(items), max(rest = '') FROM ("
        " SELECT substr(tail, 1, instr(tail || '.', '.') - 1) AS label,"
        " substr(tail, instr(tail || '.', '.') + 1) AS rest, items FROM ("
        f"  SELECT substr(name, ?1) AS tail, items FROM store_namespaces WHERE {where}))"
        " WHERE label > ?4 GROUP BY label ORDER BY label LIMIT ?5",
        (start, *args, after or "", limit),
    )
    return [Child(str(r[0]), int(r[1]), int(r[2]), bool(r[3])) for r in rows]


def namespace_items(
    items: Items,
    conn: apsw.Connection,
    namespace: Sequence[str],
    *,
    after: str | None = None,
    limit: int = 50,
) -> list[Stored]:
    """The items of exactly `namespace`, by key, after key `after` (each body checked)."""
    _check_limit(limit)
    rows = fetchall(
        conn,
        f"SELECT {ITEM_COLUMNS} FROM store_items x JOIN store_namespaces n ON n.id = x.ns "
        "WHERE n.name = ? AND x.key > ? ORDER BY x.key LIMIT ?",
        (namespace_name(namespace), after or "", limit),
    )
    return items.decode(conn, rows)


def namespace_count(conn: apsw.Connection, namespace: Sequence[str]) -> int:
    """How many items exactly `namespace` holds."""
    rows = fetchall(
        conn, "SELECT items FROM store_namespaces WHERE name = ?", (namespace_name(namespace),)
    )
    return int(rows[0][0]) if rows else 0


def summary(conn: apsw.Connection) -> dict[str, Any]:
    """What the file's header and a few rows say, whatever the file's size: its format,
    pages, free pages, the newest dictionary, the content store's counters and the
    thread index's state (`ready`, or `pending` until a writable open fills it)."""
    page_size = int(fetchall(conn, "PRAGMA page_size")[0][0])
    pages = int(fetchall(conn, "PRAGMA page_count")[0][0])
    free = int(fetchall(conn, "PRAGMA freelist_count")[0][0])
    dictionary = fetchall(
        conn, "SELECT id, length(data), samples, created_at FROM dicts ORDER BY id DESC LIMIT 1"
    )
    meta: dict[str, Any] = dict(
        fetchall(
            conn,
            "SELECT key, value FROM meta WHERE key IN "
            "('dict_next', 'inline_bytes', 'thread_index')",
        )
    )
    return {
        "file_format": int(fetchall(conn, "PRAGMA user_version")[0][0]),
        "page_size": page_size,
        "pages": pages,
        "free_pages": free,
        "dictionary": (
            {
                "id": int(dictionary[0][0]),
                "bytes": int(dictionary[0][1]),
                "samples": int(dictionary[0][2]),
                "trained_at": float(dictionary[0][3]),
            }
            if dictionary
            else None
        ),
        "inline_bytes": int(meta.get("inline_bytes") or 0),
        "next_training_at": int(meta.get("dict_next") or 0),
        "thread_index": meta.get("thread_index"),
    }


def scopes(conn: apsw.Connection) -> list[dict[str, Any]]:
    """The file's scopes with their thread counts (each scope's own counter)."""
    return [
        {"namespace": str(ns), "agent_id": str(agent), "threads": int(count)}
        for ns, agent, count in fetchall(
            conn, "SELECT namespace, agent_id, threads FROM scopes ORDER BY namespace, agent_id"
        )
    ]


def thread_totals(conn: apsw.Connection) -> dict[str, int]:
    """The thread index's totals over the file: threads (the scopes' counters),
    checkpoints (the heads' counters: one row per thread and namespace), messages and
    bytes (the threads' index columns: one pass over the `threads` table, which no index
    covers). The cost grows with the number of threads, never with what they hold."""
    threads = fetchall(conn, "SELECT total(threads) FROM scopes")[0][0]
    checkpoints = fetchall(conn, "SELECT total(checkpoints) FROM heads")[0][0]
    messages, size = fetchall(conn, "SELECT total(messages), total(bytes) FROM threads")[0]
    return {
        "threads": int(threads),
        "checkpoints": int(checkpoints),
        "messages": int(messages),
        "bytes": int(size),
    }


def store_totals(conn: apsw.Connection) -> dict[str, int]:
    """The Store's namespaces and items, from its namespace rows (which count their
    items): one row per namespace read."""
    namespaces, items = fetchall(conn, "SELECT count(*), total(items) FROM store_namespaces")[0]
    return {"namespaces": int(namespaces), "items": int(items)}


def measure(conn: apsw.Connection) -> dict[str, Any]:
    """What only reading the whole file tells: the bytes of each table and index
    (`dbstat` walks every page), the content store's extents and the bytes of blocks no
    row uses (sums over `extents` and `blocks`).

    `reclaimable` = free pages + extent bytes no live block uses (dead blocks wait in
    their extent until `compact` copies the live ones out).
    """
    page_size = int(fetchall(conn, "PRAGMA page_size")[0][0])
    free = int(fetchall(conn, "PRAGMA freelist_count")[0][0])
    tables: dict[str, int] = {}
    try:
        for name, size in fetchall(
            conn, "SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE ORDER BY pgsize DESC"
        ):
            tables[str(name)] = int(size or 0)
    except apsw.SQLError:  # an SQLite built without dbstat: the totals still show
        tables = {}
    extents, extent_bytes = fetchall(conn, "SELECT count(*), total(length(body)) FROM extents")[0]
    live = fetchall(conn, "SELECT total(length) FROM blocks WHERE refs > 0")[0][0]
    dead = max(int(extent_bytes) - int(live), 0)
    return {
        "tables": tables,
        "extents": int(extents),
        "extent_bytes": int(extent_bytes),
        "dead_block_bytes": dead,
        "reclaimable": free * page_size + dead,
    }
