"""The conversation pages' data: the thread list, a transcript, one message, the history.

Outer layer. Each function returns the JSON-ready dict a page shows: the HTML template
renders it and the page's JSON twin is it. Reads are the index (`threads`), tail reads
(`tail`: the last chunks of the messages list) and the checkpoint tree's page; values
are read class-free (`protocol.plain`) and shortened (`values.shorten`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from threadloom.engine.conversations import Tail
from threadloom.engine.threads import STATUSES, threadindex
from threadloom.errors import InvalidArgumentError, ThreadloomError
from threadloom.protocol import PARTS, WRITES
from threadloom.protocol.plain import message, plain
from threadloom.viewer.source import BadRequest, NotFound, Source
from threadloom.viewer.values import (
    cut,
    decoded,
    lanes,
    shorten,
    split,
    split_summary,
    stored_size,
)

#: LangGraph's channel of interrupts.
INTERRUPT: Final = "__interrupt__"
_PULL: Final = "~__pregel_pull, "
#: Characters of a message a transcript shows before "Show all".
MESSAGE_TEXT: Final = 600


def number(params: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    """An integer query parameter within [low, high]."""
    text = params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise BadRequest(f"{name} must be from {low} to {high}, not {value}")
    return value


def flag(params: Mapping[str, str], name: str) -> bool:
    """A 0/1 query parameter (absent: 0)."""
    return number(params, name, 0, 0, 1) == 1


def text(params: Mapping[str, str], name: str) -> str | None:
    """A text query parameter (None when absent or empty)."""
    value = params.get(name)
    return value if value else None


def threads(source: Source, params: Mapping[str, str]) -> dict[str, Any]:
    """The thread index: most recent activity first, searched by id or title, filtered by
    owner and status, paged by cursor."""
    limit = number(params, "limit", 50, 1, 500)
    query, owner, before = text(params, "q"), text(params, "owner"), text(params, "before")
    status = text(params, "status")
    if status is not None and status not in STATUSES:
        raise BadRequest(f"status must be one of {', '.join(STATUSES)}, not {status!r}")
    store = source.store
    try:
        if query is None:
            found = store.threads(owner=owner, limit=limit + 1, before=before, status=status)
        elif store.scope.id is None:
            found = []
        else:
            with source.file.read() as conn:
                found = threadindex.matching(
                    conn,
                    store.scope.id,
                    query,
                    owner=owner,
                    limit=limit + 1,
                    before=before,
                    status=status,
                )
    except InvalidArgumentError as exc:
        raise BadRequest(str(exc)) from None
    more = len(found) > limit
    page = found[:limit]
    return {
        "page": "threads",
        "scope": source.scope,
        "q": query,
        "owner": owner,
        "status": status,
        "before": before,
        "limit": limit,
        "threads": [info.as_json() for info in page],
        "next": page[-1].cursor if more else None,
    }


def thread_info(source: Source, thread_id: str) -> dict[str, Any]:
    info = source.store.thread(thread_id)
    if info is None:
        raise NotFound(f"no thread {thread_id!r} in scope {source.scope}")
    return info.as_json()


def plain_items(tail: Tail) -> list[tuple[Any, int]]:
    """The page's elements in plain form with their payload sizes."""
    if tail.elements is not None:
        out = []
        for kind, payload in tail.elements:
            try:
                value: Any = plain(kind, payload)
            except ThreadloomError as exc:
                value = {"$unreadable": type(exc).__name__}
            out.append((value, len(payload)))
        return out
    if tail.whole is None:
        return []
    try:
        whole: Any = plain(*tail.whole)
    except ThreadloomError:
        whole = None
    for key in tail.path:
        whole = whole.get(key) if isinstance(whole, dict) else None
    listed = whole if isinstance(whole, list) else []
    window = listed[tail.start : tail.start + tail.count]
    return [(item, len(repr(item))) for item in window]


def _message(index: int, value: Any, size: int, *, full: bool) -> dict[str, Any]:
    found = message(value)
    shown: dict[str, Any] = found if found is not None else {"type": "value", "value": value}
    if not full:
        shown = {k: shorten(v, text=MESSAGE_TEXT) for k, v in shown.items()}
    return {"index": index, **shown, "bytes": size, "cut": cut(shown)}


def _tail(source: Source, thread_id: str, **options: Any) -> Tail:
    try:
        return source.store.tail(thread_id, **options)
    except InvalidArgumentError as exc:
        raise BadRequest(str(exc)) from None


def conversation(source: Source, thread_id: str, params: Mapping[str, str]) -> dict[str, Any]:
    """A transcript page from the tail backwards (`before`: the `start` of the page
    after it), and what the head checkpoint waits on (interrupts, pending writes)."""
    info = thread_info(source, thread_id)
    limit = number(params, "limit", 20, 1, 200)
    before = number(params, "before", -1, 0, 2**62)
    checkpoint_id = text(params, "checkpoint")
    tail = _tail(
        source,
        thread_id,
        limit=limit,
        before=None if before < 0 else before,
        checkpoint_id=checkpoint_id,
    )
    messages = [
        _message(tail.start + offset, value, size, full=False)
        for offset, (value, size) in enumerate(plain_items(tail))
    ]
    return {
        "page": "thread",
        "thread": info,
        "transcript": {
            "checkpoint_id": tail.checkpoint_id,
            "total": tail.total,
            "start": tail.start,
            "older": tail.start if tail.start > 0 else None,
            "limit": limit,
            "messages": messages,
        },
        "pending": pending(source, thread_id, "", tail.checkpoint_id) if before < 0 else None,
    }


def one_message(
    source: Source, thread_id: str, index: int, params: Mapping[str, str]
) -> dict[str, Any]:
    """One message of a transcript, whole (what "show all" opens)."""
    thread_info(source, thread_id)
    checkpoint_id = text(params, "checkpoint")
    tail = _tail(source, thread_id, limit=1, before=index + 1, checkpoint_id=checkpoint_id)
    found = plain_items(tail)
    if not found or tail.start != index:
        raise NotFound(f"thread {thread_id!r} has no message {index}")
    value, size = found[0]
    return {
        "page": "message",
        "thread_id": thread_id,
        "checkpoint_id": tail.checkpoint_id,
        "total": tail.total,
        "message": _message(index, value, size, full=True),
    }


def node_of(path: str) -> str | None:
    """The node a task path names (None for a push task)."""
    return path[len(_PULL) :].split(", ")[0] if path.startswith(_PULL) else None


def pending(
    source: Source, thread_id: str, ns: str, checkpoint_id: str | None, *, whole: bool = False
) -> dict[str, Any] | None:
    """The pending writes of a checkpoint: its interrupts (what the run waits for) and the
    other writes (tasks that finished before the run stopped). A value split into parts
    is shown by its size (`split`) unless `whole`."""
    if checkpoint_id is None:
        return None
    store = source.store
    docs = store.view.find(
        WRITES, thread_id=thread_id, checkpoint_ns=ns, checkpoint_ids=[checkpoint_id]
    )
    parts = [ref for doc in docs for ref in split(doc.data["value"])] if whole else []
    fetched = (
        {d.data["ref"]: d.data for d in store.view.find(PARTS, thread_id=thread_id, refs=parts)}
        if parts
        else {}
    )
    interrupts: list[dict[str, Any]] = []
    writes: list[dict[str, Any]] = []
    for doc in sorted(
        docs, key=lambda d: (d.data["task_path"], d.data["task_id"], d.data["index"])
    ):
        data = doc.data
        value = decoded(data["value"], fetched)
        row = {
            "task_id": data["task_id"],
            "task_path": data["task_path"],
            "node": node_of(data["task_path"]),
            "channel": data["channel"],
            "index": data["index"],
            "bytes": stored_size(data["value"]),
        }
        if data["channel"] == INTERRUPT:
            for item in value if isinstance(value, list) else [value]:
                fields = item.get("$kwargs") if isinstance(item, dict) else None
                fields = fields if isinstance(fields, dict) else {"value": item}
                interrupts.append(
                    {**row, "id": fields.get("id"), "value": shorten(fields.get("value"))}
                )
        else:
            writes.append({**row, "value": shorten(value)})
    return {
        "checkpoint_id": checkpoint_id,
        "interrupts": interrupts,
        "writes": writes,
        "split": None if whole else split_summary(d.data["value"] for d in docs),
    }


def history(source: Source, thread_id: str, params: Mapping[str, str]) -> dict[str, Any]:
    """A page of the checkpoint tree of one namespace (default the root), newest first."""
    info = thread_info(source, thread_id)
    ns = params.get("ns", "")
    limit = number(params, "limit", 50, 1, 500)
    found = source.store.histories.history(
        thread_id, ns=ns, limit=limit, before=text(params, "before")
    )
    shown: dict[str, Any] = {
        "thread_id": thread_id,
        "checkpoint_ns": ns,
        "total": found.total,
        "head": found.head,
        "checkpoints": [step.as_json() for step in found.steps],
        "next": found.next,
    }
    shown["lanes"] = lanes(shown["checkpoints"])
    return {"page": "history", "thread": info, "namespaces": info["namespaces"], "tree": shown}
