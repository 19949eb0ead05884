"""What the retention tests compare: kept checkpoints as LangGraph shows them, and the
values a thread holds against what its documents reach (an oracle independent of the
engine's marking: the logical documents and the protocol's `references`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.engine.test_graphs import plain
from threadloom import AsyncSaver, Saver
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES, references

#: An hour: past the grace, and past any min_age or max_age below an hour.
LATER = 3600.0


def later() -> float:
    """`now=` an hour ahead. It moves `min_age` and `max_age` only: the grace is measured
    on the real clock, so such a run still sees a value written a moment ago as young
    (`age` makes the file's values old)."""
    return time.time() + LATER


def age(saver: Saver | AsyncSaver, seconds: float = LATER) -> None:
    """`seconds` pass on the file: every value, thread write and released block is that
    much older, on the real clock the grace is measured on."""
    with saver.file.write() as conn:
        conn.execute("UPDATE vals SET created_at = created_at - ?", (seconds,))
        conn.execute(
            "UPDATE threads SET created_at = created_at - ?1, updated_at = updated_at - ?1",
            (seconds,),
        )
        conn.execute(
            "UPDATE blocks SET released = released - ? WHERE released IS NOT NULL", (seconds,)
        )


def snapshots(graph: Any, config: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Every checkpoint of the thread (every namespace LangGraph lists from `config`) as
    `get_state_history` shows it: values, next, tasks with their interrupts and errors,
    metadata, parent; by checkpoint id."""
    out = {}
    for state in graph.get_state_history(config):
        tasks = tuple(
            (t.name, tuple(i.value for i in t.interrupts), repr(t.error), plain(t.result))
            for t in state.tasks
        )
        parent = (
            state.parent_config["configurable"]["checkpoint_id"] if state.parent_config else None
        )
        out[state.config["configurable"]["checkpoint_id"]] = (
            plain(state.values),
            state.next,
            tasks,
            plain(dict(state.metadata or {})),
            parent,
        )
    return out


def value_documents(saver: Saver, thread_id: str) -> tuple[set[str], set[str]]:
    """`(refs the thread stores, refs its checkpoints and pending writes reach)`."""
    stored: dict[str, dict[str, Any]] = {}
    roots = []
    for collection, _, data in saver.documents(thread_id):
        if collection in (BLOBS, ITEMS, PARTS):
            stored[data["ref"]] = data
        elif collection in (CHECKPOINTS, WRITES):
            roots.append(data)
    reached: set[str] = set()
    level = {ref for root in roots for ref, _ in references(root)}
    while level:
        reached |= level
        level = {ref for r in level if r in stored for ref, _ in references(stored[r])} - reached
    return set(stored), reached


def assert_no_orphans(saver: Saver, thread_id: str) -> None:
    """The thread stores exactly the values its rows reach: none missing, none left over."""
    stored, reached = value_documents(saver, thread_id)
    assert reached <= stored, f"missing values: {sorted(reached - stored)[:3]}"
    assert stored == reached, f"orphaned values left: {sorted(stored - reached)[:3]}"


def counts(saver: Saver) -> dict[str, int]:
    """Rows of each table of the file."""
    with saver.file.read() as conn:
        return {
            table: int(conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])
            for table in ("checkpoints", "writes", "vals", "blocks", "extents", "threads")
        }


def released_blocks(saver: Saver) -> int:
    """Blocks no row lists any more, waiting for a sweep."""
    with saver.file.read() as conn:
        return int(conn.execute("SELECT count(*) FROM blocks WHERE refs <= 0").fetchall()[0][0])


def file_state(path: Path) -> tuple[bytes, bytes]:
    """The bytes of the database file and of its WAL (empty when there is none)."""
    wal = Path(f"{path}-wal")
    return path.read_bytes(), wal.read_bytes() if wal.exists() else b""
