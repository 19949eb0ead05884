"""The long-term memory and file pages' data: the Store's namespace tree, items and text
search, and where the file's bytes are.

Outer layer, read through the engine (`engine/items/rows.py`, `engine/items/recall.py`,
`engine/checks/viewer_reads.py`, `engine/checks/figures.py`): nothing here decodes more than
the page
shows, and nothing reads the whole file unless the page asks (`/file?detail=1`).
Search is the Store's full-text search (FTS5; the score is the token-set cosine of
docs/store.md): vector search needs the application's embedder, which the viewer has
not got.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any, Final

import apsw

from threadloom import __version__, core
from threadloom.engine.checks import counts
from threadloom.engine.checks import viewer_reads as inspect_view
from threadloom.engine.format import FORMAT_VERSION
from threadloom.engine.items import MINUTE, Stored
from threadloom.errors import InvalidArgumentError
from threadloom.viewer.pages import number, text
from threadloom.viewer.source import BadRequest, NotFound, Source
from threadloom.viewer.values import iso, shorten

#: Labels of a namespace in a URL: the stored name, labels joined by `.` (which no label
#: holds), so `?ns=acme.user.ada` is `("acme", "user", "ada")`.
SEPARATOR: Final = "."
SEARCH_NOTE: Final = (
    "Text search (FTS5): the score is the token-set cosine (1.0 = the same words). "
    "Vector search needs the application's embedder; the viewer has none."
)


def namespace(params: Mapping[str, str]) -> tuple[str, ...]:
    """The `ns` parameter as labels (`()` for the root)."""
    name = params.get("ns") or ""
    labels = tuple(name.split(SEPARATOR)) if name else ()
    if any(not label for label in labels):
        raise BadRequest(f"ns={name!r} has an empty label; labels are joined by '.'")
    return labels


def item(stored: Stored, *, full: bool = False, now: int | None = None) -> dict[str, Any]:
    """An item as JSON (times ISO-8601 UTC; `ttl_minutes` None without a TTL)."""
    moment = time.time_ns() // 1000 if now is None else now
    out: dict[str, Any] = {
        "namespace": list(stored.namespace),
        "key": stored.key,
        "value": stored.value if full else shorten(stored.value),
        "created_at": iso(stored.created_at / 1e6),
        "updated_at": iso(stored.updated_at / 1e6),
        "ttl_minutes": stored.ttl,
        "expires_at": iso(stored.expires_at / 1e6) if stored.expires_at is not None else None,
        "expired": stored.expires_at is not None and stored.expires_at <= moment,
        "expires_in_minutes": (
            round((stored.expires_at - moment) / MINUTE, 1)
            if stored.expires_at is not None
            else None
        ),
    }
    if stored.score is not None:
        out["score"] = stored.score
    return out


def store(source: Source, params: Mapping[str, str]) -> dict[str, Any]:
    """A namespace of the Store: the labels under it, its own items by key, and a text
    search under it when `q` is given."""
    labels = namespace(params)
    limit = number(params, "limit", 50, 1, 500)
    after, after_key = text(params, "after"), text(params, "after_key")
    query = text(params, "q")
    offset = number(params, "offset", 0, 0, 100_000)
    with source.file.read() as conn:
        children = inspect_view.namespace_children(conn, labels, after=after, limit=201)
        own = inspect_view.namespace_items(
            source.items, conn, labels, after=after_key, limit=limit + 1
        )
        count = inspect_view.namespace_count(conn, labels)
        search = None
        if query:
            try:
                found = source.recall.text(conn, labels, query, None, limit + 1, offset, None)
            except (InvalidArgumentError, apsw.SQLError) as exc:
                raise BadRequest(f"the search {query!r} failed: {exc}") from None
            search = {
                "q": query,
                "offset": offset,
                "results": [item(s) for s in found[:limit]],
                "next_offset": offset + limit if len(found) > limit else None,
            }
    return {
        "page": "store",
        "namespace": list(labels),
        "children": [child.as_json() for child in children[:200]],
        "children_next": children[199].label if len(children) > 200 else None,
        "items_total": count,
        "items": [item(s) for s in own[:limit]],
        "items_next": own[limit - 1].key if len(own) > limit else None,
        "search": search,
        "search_note": SEARCH_NOTE,
    }


def store_item(source: Source, params: Mapping[str, str]) -> dict[str, Any]:
    """One item of the Store, whole."""
    labels = namespace(params)
    key = params.get("key")
    if not labels or not key:
        raise BadRequest("an item is named by ns (its namespace) and key")
    with source.file.read() as conn:
        stored = source.items.get(conn, labels, key, None)
    if stored is None:
        raise NotFound(f"the Store has no item {key!r} in {labels!r}")
    return {"page": "item", "item": item(stored, full=True)}


def file(source: Source, params: Mapping[str, str]) -> dict[str, Any]:
    """The file: format, backend, pages, free pages, dictionary, the thread index's and
    the Store's totals and the scopes, read from the header, counters and index rows, so
    the page costs the same on a file of any size. With `detail=1`, also what only
    reading the whole file measures (`measured`): rows per table, bytes per table and
    index, how the content store shares and compresses, what `compact` could give back."""
    detail = number(params, "detail", 0, 0, 1) == 1
    with source.file.read() as conn:
        space = inspect_view.summary(conn)
        scopes = inspect_view.scopes(conn)
        totals = inspect_view.thread_totals(conn)
        store = inspect_view.store_totals(conn)
        found = counts(conn, space["file_format"]) if detail else {}
        sizes = inspect_view.measure(conn) if detail else {}
    space["file_bytes"] = sum(
        os.path.getsize(p) for p in (source.path, f"{source.path}-wal") if os.path.exists(p)
    )
    measured = None
    if detail:
        stats = source.file.content.stats().as_dict()
        stored, referenced = found.get("block_bytes_stored"), found.get("block_bytes_referenced")
        measured = {
            "figures": found,
            **sizes,
            "content": stats,
            "dedup": {
                "block_sharing": found.get("block_sharing"),
                "referenced_per_stored": (
                    round(int(referenced) / int(stored), 2)  # type: ignore[call-overload]
                    if stored and referenced
                    else None
                ),
                "inline_rows": stats["inline_rows"],
                "inline_stored": stats["inline_stored"],
                "block_rows": stats["chunked_rows"],
            },
        }
    return {
        "page": "file",
        "path": source.path,
        "threadloom": __version__,
        "sqlite": apsw.sqlite_lib_version(),
        "format_version": FORMAT_VERSION,
        "backend": core.backend(),
        "scope": source.scope,
        "space": space,
        "thread_index": {"state": space.pop("thread_index"), **totals},
        "store": store,
        "scopes": scopes,
        "detail": detail,
        "measured": measured,
    }
