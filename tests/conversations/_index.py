"""The thread index recomputed from scratch, to compare with what the engine kept."""

from __future__ import annotations

from typing import Any

from threadloom import Saver
from threadloom.engine.threads import threadfacts


def expected(saver: Saver, thread_id: str) -> dict[str, Any]:
    """What the index row of `thread_id` must say, read from the thread's checkpoints."""
    config = {"configurable": {"thread_id": thread_id}}
    listed = list(saver.list(config))
    latest = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    messages = latest.checkpoint["channel_values"].get("messages") if latest else None
    with saver.file.read() as conn:
        row = saver.checkpoints.scope.thread(conn, thread_id)
        size = threadfacts.stored_bytes(conn, saver.file.content, row) if row else 0
    return {
        "checkpoints": len(listed),
        "messages": len(messages) if isinstance(messages, list) else 0,
        "head": latest.config["configurable"]["checkpoint_id"] if latest else None,
        "namespaces": tuple(sorted({t.config["configurable"]["checkpoint_ns"] for t in listed})),
        "bytes": size,
    }


def kept(saver: Saver, thread_id: str) -> dict[str, Any]:
    """What the index row of `thread_id` says, in the shape of `expected`."""
    info = saver.thread(thread_id)
    assert info is not None, f"thread {thread_id!r} is not in the index"
    return {
        "checkpoints": info.checkpoints,
        "messages": info.messages,
        "head": info.head,
        "namespaces": info.namespaces,
        "bytes": info.bytes,
    }


def check_all(saver: Saver) -> None:
    """Every thread of the saver's scope: the index says what the rows say."""
    for thread_id in saver.checkpoints.scope.thread_ids():
        assert kept(saver, thread_id) == expected(saver, thread_id), thread_id
