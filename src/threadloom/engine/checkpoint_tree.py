"""A page of a thread's checkpoint tree, read class-free: what the viewer's history shows.

Engine layer. One namespace of one thread, newest checkpoint first, paged by id. A page
costs what it shows: its rows come from the `(thread, checkpoint_ns, checkpoint_id)`
index, only the page's bodies are decoded (metadata for `step` and `source`, the
checkpoint value for `ts`; `protocol.plain`, so nothing a value names is imported), and
child counts and the nodes of each step are read from columns only.

The nodes that made a checkpoint are not stored with it: LangGraph stores the writes of
a step's tasks as pending writes of the step's input checkpoint (the parent), each with
its task's path, and a pull task's path names its node (`~__pregel_pull, agent`). So a
checkpoint made by a step (`source` "loop") lists the nodes of its parent's pending
writes; a push task (`Send`) shows as `send`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from threadloom.engine.sql import fetchall, ids
from threadloom.engine.tables import CHECKPOINT_COLUMNS, CHECKPOINT_FROM, CheckpointRow
from threadloom.engine.threadindex import iso
from threadloom.errors import InvalidArgumentError, ThreadloomError
from threadloom.protocol import raw_value
from threadloom.protocol.plain import plain

if TYPE_CHECKING:
    from threadloom.engine.checkpoints import CheckpointStore

#: Most checkpoints one page returns.
MAX_PAGE: Final = 1000
_PULL: Final = "~__pregel_pull, "
_PUSH: Final = "~__pregel_push"


@dataclass(frozen=True)
class TreeNode:
    """One checkpoint of the tree.

    Attributes:
        checkpoint_id: the checkpoint.
        checkpoint_ns: its namespace (`""` is the root).
        parent_id: the checkpoint it follows (None for the first).
        step: LangGraph's step number (metadata `step`; None when not recorded).
        source: how it was made (metadata `source`: input, loop, update, fork).
        nodes: the nodes whose step made it, sorted (see the module docstring).
        time: when it was made, ISO-8601 UTC (its `ts`, else when the row was written).
        forks: how many checkpoints have it as their parent (over 1: history branched).
        writes: the pending writes stored on it.
    """

    checkpoint_id: str
    checkpoint_ns: str
    parent_id: str | None
    step: int | None
    source: str | None
    nodes: tuple[str, ...]
    time: str
    forks: int
    writes: int

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {
            "checkpoint_id": self.checkpoint_id,
            "checkpoint_ns": self.checkpoint_ns,
            "parent_id": self.parent_id,
            "step": self.step,
            "source": self.source,
            "nodes": list(self.nodes),
            "time": self.time,
            "forks": self.forks,
            "writes": self.writes,
        }


@dataclass(frozen=True)
class Tree:
    """A page of one namespace's checkpoints, newest first.

    Attributes:
        thread_id: the thread.
        checkpoint_ns: the namespace read.
        found: the thread exists in the scope.
        total: checkpoints the namespace holds.
        head: its newest checkpoint (None when it holds none).
        nodes: the page.
        next: pass as `before=` for the next (older) page; None on the last page.
    """

    thread_id: str
    checkpoint_ns: str
    found: bool
    total: int
    head: str | None
    nodes: list[TreeNode]
    next: str | None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict (`checkpoints`: the page's nodes)."""
        return {
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
            "total": self.total,
            "head": self.head,
            "checkpoints": [node.as_json() for node in self.nodes],
            "next": self.next,
        }


def checkpoint_tree(
    store: CheckpointStore,
    thread_id: str,
    *,
    ns: str = "",
    limit: int = 50,
    before: str | None = None,
) -> Tree:
    """A page of the checkpoints of `thread_id` in namespace `ns`, newest first, before
    checkpoint id `before` (exclusive).

    Raises:
        InvalidArgumentError: a bad `limit`.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
    scope = store.scope
    empty = Tree(thread_id, ns, False, 0, None, [], None)
    if scope.id is None:
        return empty
    with scope.file.read() as conn:
        thread = scope.thread(conn, thread_id)
        if thread is None:
            return empty
        head = fetchall(
            conn,
            "SELECT checkpoint_id, checkpoints FROM heads WHERE thread = ? AND checkpoint_ns = ?",
            (thread, ns),
        )
        sql = f"SELECT {CHECKPOINT_COLUMNS}, c.created_at{CHECKPOINT_FROM} WHERE c.thread = ? "
        sql += "AND c.checkpoint_ns = ?"
        args: list[Any] = [thread, ns]
        if before is not None:
            sql += " AND c.checkpoint_id < ?"
            args.append(before)
        found = fetchall(conn, sql + " ORDER BY c.checkpoint_id DESC LIMIT ?", (*args, limit + 1))
        more = len(found) > limit
        rows = [(CheckpointRow(*row[:-1]), float(row[-1])) for row in found[:limit]]
        page = [row.checkpoint_id for row, _ in rows]
        forks: dict[str, int] = dict(
            fetchall(
                conn,
                "SELECT parent_id, count(*) FROM checkpoints WHERE thread = ? AND "
                "checkpoint_ns = ? AND parent_id IN carray(?) GROUP BY parent_id",
                (thread, ns, ids(page)),
            )
        )
        parents = sorted({row.parent_id for row, _ in rows if row.parent_id})
        tasks: dict[str, set[str]] = {}
        for checkpoint_id, path in fetchall(
            conn,
            "SELECT checkpoint_id, task_path FROM writes WHERE thread = ? AND "
            "checkpoint_ns = ? AND checkpoint_id IN carray(?)",
            (thread, ns, ids(parents)),
        ):
            tasks.setdefault(checkpoint_id, set()).add(_node(str(path)))
        nodes = []
        for row, written in rows:
            doc = store.reader.document(conn, row)
            # Only the parts of these two values, if split: never the channels' values.
            fields: dict[str, Any] = {k: doc[k] for k in ("metadata", "checkpoint") if k in doc}
            fetched = store.reader.values.reachable(conn, thread, [fields])
            metadata = _plain(doc.get("metadata"), fetched)
            stamp = _plain(doc.get("checkpoint"), fetched) if row.schema == 2 else None
            meta = metadata if isinstance(metadata, Mapping) else {}
            step, source = meta.get("step"), meta.get("source")
            ts = stamp.get("ts") if isinstance(stamp, Mapping) else None
            made = tasks.get(row.parent_id or "", set()) if source == "loop" else set()
            nodes.append(
                TreeNode(
                    checkpoint_id=row.checkpoint_id,
                    checkpoint_ns=ns,
                    parent_id=row.parent_id,
                    step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                    source=source if isinstance(source, str) else None,
                    nodes=tuple(sorted(made)),
                    time=ts if isinstance(ts, str) else iso(written),
                    forks=int(forks.get(row.checkpoint_id, 0)),
                    writes=int(row.writes),
                )
            )
    return Tree(
        thread_id,
        ns,
        True,
        int(head[0][1]) if head else 0,
        str(head[0][0]) if head else None,
        nodes,
        page[-1] if more else None,
    )


def _node(path: str) -> str:
    """The node a task path names (`send` for a push task)."""
    if path.startswith(_PULL):
        return path[len(_PULL) :].split(", ")[0]
    if path.startswith(_PUSH):
        return "send"
    return path or "?"


def _plain(stored: Any, fetched: Mapping[str, Any]) -> Any:
    """A stored value class-free, or None when it cannot be read that way."""
    if not isinstance(stored, Mapping):
        return None
    try:
        return plain(*raw_value(stored, fetched))
    except ThreadloomError:
        return None
