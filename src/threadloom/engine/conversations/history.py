"""A thread's checkpoint history and its pending interrupts, read class-free.

Engine layer. What `threadloom history` and `threadloom show` print, read without the
application's classes (`protocol.plain`: nothing a value names is imported, no pickle
is loaded). A page costs what it shows: ids, parents and child counts come from row
columns, and only the page's checkpoint bodies are decoded (their metadata for `step`
and `source`, their checkpoint value for `ts`).

Which nodes produced a checkpoint is not stored with it: LangGraph stores the writes of
the tasks of a step as pending writes of the step's input checkpoint, the parent, each
with its task's path. A pull task's path names its node (`~__pregel_pull, agent`); a
push task's (`Send`) does not, so its node is read from the `Send`s the grandparent's
pending writes put on the tasks channel. Only a checkpoint a step of the graph made
(`source` "loop") has nodes; input, update and fork checkpoints ran none, unless an
older LangGraph recorded them in the metadata's `writes`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import apsw

from threadloom.engine.checkpoints.reader import Reader
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.format.tables import (
    CHECKPOINT_COLUMNS,
    CHECKPOINT_FROM,
    OWNERS,
    TASK_ID,
    WRITE_ROWS,
    CheckpointRow,
)
from threadloom.engine.sql import fetchall, ids
from threadloom.engine.threads.threadindex import iso
from threadloom.errors import InvalidArgumentError, ProtocolError
from threadloom.protocol import MAX_PAGE, raw_value
from threadloom.protocol.plain import plain

#: LangGraph's task path prefixes (`pregel._algo.task_path_str` of PULL and PUSH paths).
PULL: Final = "~__pregel_pull, "
PUSH: Final = "~__pregel_push"
#: LangGraph's channels of pending sends, of interrupts and of a failed task's error.
TASKS: Final = "__pregel_tasks"
INTERRUPT: Final = "__interrupt__"
ERROR: Final = "__error__"
_SEND: Final = "langgraph.types.Send"


@dataclass(frozen=True)
class Step:
    """One checkpoint of a thread's history.

    Attributes:
        checkpoint_id: the checkpoint.
        checkpoint_ns: its namespace (`""` is the root, a subgraph's is `node:task`).
        parent_id: the checkpoint it follows (None for the first).
        step: LangGraph's step number (metadata `step`; None when not recorded).
        source: how it was made (metadata `source`: input, loop, update, fork).
        nodes: the nodes whose step made it, sorted (see the module docstring).
        time: when it was made, ISO-8601 (the checkpoint's `ts`, else the row's time).
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
class History:
    """A page of a thread's checkpoints, newest first.

    Attributes:
        thread_id: the thread.
        found: the thread exists in the scope.
        steps: the page.
        next: pass as `before=` for the next (older) page; None on the last page.
    """

    thread_id: str
    found: bool
    steps: list[Step]
    next: str | None
    #: Checkpoints of the namespace asked for (every namespace without one).
    total: int = 0
    #: The newest checkpoint of the namespace asked for (the root's without one).
    head: str | None = None

    def as_json(self) -> dict[str, Any]:
        """`{"thread_id", "checkpoints": [Step.as_json()...], "next"}`."""
        return {
            "thread_id": self.thread_id,
            "checkpoints": [step.as_json() for step in self.steps],
            "next": self.next,
        }


@dataclass(frozen=True)
class Interrupt:
    """A pending interrupt of a checkpoint (a write on `__interrupt__`), in plain form.

    Attributes:
        id: the interrupt's id (None when the stored value has none).
        node: the node that raised it (from its task's path; None for a push task).
        value: what it asks, in plain form (`protocol.plain`).
    """

    id: str | None
    node: str | None
    value: Any

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"id": self.id, "node": self.node, "value": self.value}


@dataclass(frozen=True)
class Failure:
    """A failed task's error pending on a checkpoint (a write on `__error__`).

    Attributes:
        node: the node whose task failed (None for a push task).
        error: what LangGraph recorded of the exception (its repr, `ValueError('boom')`).
    """

    node: str | None
    error: Any

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"node": self.node, "error": self.error}


class Histories:
    """Reads the checkpoint histories and pending interrupts of one scope's threads.

    Args:
        reader: the scope's checkpoint reader.
        values: the scope's value resolution (cache first).
    """

    def __init__(self, reader: Reader, values: Values) -> None:
        self.reader = reader
        self.values = values
        self.scope = reader.scope

    def history(
        self,
        thread_id: str,
        *,
        ns: str | None = None,
        limit: int = 20,
        before: str | None = None,
    ) -> History:
        """The thread's checkpoints newest first (every namespace, or only `ns`).

        Args:
            before: a checkpoint id (the page holds older ones, every namespace) or the
                `next` of the page before.

        Raises:
            InvalidArgumentError: a bad limit, namespace or cursor (one that names no
                checkpoint of the thread).
        """
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidArgumentError(f"limit must be an int from 1 to {MAX_PAGE}, not {limit!r}")
        if ns is not None and not isinstance(ns, str):
            raise InvalidArgumentError(f"ns must be a str, not {type(ns).__name__}")
        cursor = _cursor(before)
        scope = self.scope
        with scope.file.read() as conn:
            thread = scope.thread(conn, thread_id) if scope.id is not None else None
            if thread is None:
                scope.check_threads(conn)
                return History(thread_id, False, [], None)
            where = "c.thread = ?"
            args: list[Any] = [thread]
            if ns is not None:
                where += " AND c.checkpoint_ns = ?"
                args.append(ns)
            if cursor is not None:
                # A cursor names a checkpoint of the thread; any other text would compare
                # as a position among ids and page from somewhere arbitrary.
                if not fetchall(
                    conn,
                    "SELECT 1 FROM checkpoints WHERE thread = ? AND checkpoint_id = ? LIMIT 1",
                    (thread, cursor[0]),
                ):
                    raise InvalidArgumentError(
                        f"before={before!r} names no checkpoint of thread {thread_id!r}; pass "
                        "a checkpoint id of the thread, or the `next` of the previous page"
                    )
                where += " AND (c.checkpoint_id, c.checkpoint_ns) < (?, ?)"
                args += list(cursor)
            found = fetchall(
                conn,
                f"SELECT {CHECKPOINT_COLUMNS}, c.created_at{CHECKPOINT_FROM} WHERE {where} "
                "ORDER BY c.checkpoint_id DESC, c.checkpoint_ns DESC LIMIT ?",
                (*args, limit + 1),
            )
            more = len(found) > limit
            rows = [CheckpointRow(*row[:-1]) for row in found[:limit]]
            created = [float(row[-1]) for row in found[:limit]]
            heads = fetchall(
                conn,
                "SELECT checkpoint_ns, checkpoint_id, checkpoints FROM heads WHERE thread = ?",
                (thread,),
            )
            children = self._children(conn, thread, rows)
            metadata, moments = self._bodies(conn, rows)
            ran = self._nodes(conn, thread, rows)
        steps = []
        for row, made, meta, moment in zip(rows, created, metadata, moments, strict=True):
            source = meta.get("source")
            step = meta.get("step")
            recorded = meta.get("writes")
            if isinstance(recorded, Mapping):
                nodes = tuple(sorted(recorded))
            elif source in ("loop", None) and row.parent_id is not None:
                nodes = ran.get((row.checkpoint_ns, row.parent_id), ())
            else:
                nodes = ()
            steps.append(
                Step(
                    checkpoint_id=row.checkpoint_id,
                    checkpoint_ns=row.checkpoint_ns,
                    parent_id=row.parent_id,
                    step=step if isinstance(step, int) and not isinstance(step, bool) else None,
                    source=source if isinstance(source, str) else None,
                    nodes=nodes,
                    time=moment if moment is not None else iso(made),
                    forks=children.get((row.checkpoint_ns, row.checkpoint_id), 0),
                    writes=row.writes,
                )
            )
        last = rows[-1] if rows and more else None
        following = None
        if last is not None:
            following = last.checkpoint_id + (
                f"/{last.checkpoint_ns}" if last.checkpoint_ns else ""
            )
        wanted = "" if ns is None else ns
        total = sum(int(n) for name, _, n in heads if ns is None or name == ns)
        head = next((str(cid) for name, cid, _ in heads if name == wanted), None)
        return History(thread_id, True, steps, following, total, head)

    def interrupts(self, thread_id: str, checkpoint_id: str) -> list[Interrupt]:
        """The interrupts pending on a root checkpoint of the thread (its writes on
        `__interrupt__`), in LangGraph's write order; [] when it has none."""
        found = []
        for node, value in self._pending(thread_id, checkpoint_id, INTERRUPT):
            for item in value if isinstance(value, list) else [value]:
                found.append(_interrupt(item, node))
        return found

    def failures(self, thread_id: str, checkpoint_id: str) -> list[Failure]:
        """The errors of failed tasks pending on a root checkpoint of the thread (its
        writes on `__error__`: the run stopped there); [] when it has none."""
        return [
            Failure(node, value) for node, value in self._pending(thread_id, checkpoint_id, ERROR)
        ]

    def _pending(
        self, thread_id: str, checkpoint_id: str, channel: str
    ) -> list[tuple[str | None, Any]]:
        """The node and plain value of each write of a root checkpoint on `channel`."""
        scope = self.scope
        if scope.id is None:
            return []
        with scope.file.read() as conn:
            thread = scope.thread(conn, thread_id)
            if thread is None:
                return []
            rows = fetchall(
                conn,
                f"SELECT {TASK_ID} AS task, x.idx, x.task_path, x.body, "
                f"{WRITE_ROWS.unsealed('x')} FROM writes x{OWNERS} WHERE x.thread = ? "
                "AND x.checkpoint_ns = '' AND x.checkpoint_id = ? AND x.channel = ? "
                "ORDER BY x.task_path, task, x.idx",
                (thread, checkpoint_id, channel),
            )
            bodies = scope.content.unpack_many(
                conn,
                [
                    (body, digest, f"pending write {task}/{idx}")
                    for task, idx, _, body, digest in rows
                ],
            )
            return [
                (_pulled(path), self._plain(conn, thread, data.get("value")))
                for (_, _, path, _, _), data in zip(rows, bodies, strict=True)
            ]

    # -- the page's parts ------------------------------------------------------------------

    def _children(
        self, conn: apsw.Connection, thread: int, rows: Sequence[CheckpointRow]
    ) -> dict[tuple[str, str], int]:
        """How many checkpoints have each of the page's as their parent (columns only)."""
        if not rows:
            return {}
        return {
            (ns, parent): int(count)
            for ns, parent, count in fetchall(
                conn,
                "SELECT checkpoint_ns, parent_id, count(*) FROM checkpoints WHERE thread = ? "
                "AND parent_id IN carray(?) GROUP BY checkpoint_ns, parent_id",
                (thread, ids({row.checkpoint_id for row in rows})),
            )
        }

    def _bodies(
        self, conn: apsw.Connection, rows: Sequence[CheckpointRow]
    ) -> tuple[list[Mapping[str, Any]], list[str | None]]:
        """Each page checkpoint's metadata and `ts`, decoded class-free (seals checked)."""
        metadata: list[Mapping[str, Any]] = []
        moments: list[str | None] = []
        for row in rows:
            doc = self.reader.document(conn, row)
            meta = self._plain(conn, row.thread, doc.get("metadata"))
            metadata.append(meta if isinstance(meta, Mapping) else {})
            whole = self._plain(conn, row.thread, doc.get("checkpoint"))
            moment = whole.get("ts") if isinstance(whole, Mapping) else None
            moments.append(moment if isinstance(moment, str) else None)
        return metadata, moments

    def _nodes(
        self, conn: apsw.Connection, thread: int, rows: Sequence[CheckpointRow]
    ) -> dict[tuple[str, str], tuple[str, ...]]:
        """The nodes of the tasks whose writes each parent of the page holds, by parent."""
        parents: dict[str, set[str]] = {}
        for row in rows:
            if row.parent_id is not None:
                parents.setdefault(row.checkpoint_ns, set()).add(row.parent_id)
        ran: dict[tuple[str, str], set[str]] = {}
        pushed: dict[str, set[str]] = {}
        for ns, wanted in parents.items():
            for checkpoint_id, path in fetchall(
                conn,
                "SELECT DISTINCT checkpoint_id, task_path FROM writes WHERE thread = ? "
                "AND checkpoint_ns = ? AND checkpoint_id IN carray(?)",
                (thread, ns, ids(wanted)),
            ):
                node = _pulled(path)
                if node is not None:
                    ran.setdefault((ns, checkpoint_id), set()).add(node)
                elif path.startswith(PUSH):
                    pushed.setdefault(ns, set()).add(checkpoint_id)
        for ns, wanted in pushed.items():
            for parent, nodes in self._sent(conn, thread, ns, wanted).items():
                ran.setdefault((ns, parent), set()).update(nodes)
        return {key: tuple(sorted(nodes)) for key, nodes in ran.items()}

    def _sent(
        self, conn: apsw.Connection, thread: int, ns: str, parents: set[str]
    ) -> dict[str, set[str]]:
        """The nodes the `Send`s on each parent's tasks channel target (the sends are
        pending writes of the parent's parent)."""
        above: dict[str, str] = dict(
            fetchall(
                conn,
                "SELECT checkpoint_id, parent_id FROM checkpoints WHERE thread = ? "
                "AND checkpoint_ns = ? AND checkpoint_id IN carray(?) AND parent_id IS NOT NULL",
                (thread, ns, ids(parents)),
            )
        )
        if not above:
            return {}
        rows = fetchall(
            conn,
            f"SELECT x.checkpoint_id, {TASK_ID}, x.idx, x.body, {WRITE_ROWS.unsealed('x')} "
            f"FROM writes x{OWNERS} WHERE x.thread = ? AND x.checkpoint_ns = ? "
            "AND x.checkpoint_id IN carray(?) AND x.channel = ?",
            (thread, ns, ids(set(above.values())), TASKS),
        )
        bodies = self.scope.content.unpack_many(
            conn,
            [(body, digest, f"pending write {task}/{idx}") for _, task, idx, body, digest in rows],
        )
        targets: dict[str, set[str]] = {}
        for (grandparent, *_), data in zip(rows, bodies, strict=True):
            sent = self._plain(conn, thread, data.get("value"))
            if (
                isinstance(sent, Mapping)
                and sent.get("$type") == _SEND
                and isinstance(sent.get("$args"), list)
                and sent["$args"]
                and isinstance(sent["$args"][0], str)
            ):
                targets.setdefault(grandparent, set()).add(sent["$args"][0])
        return {
            parent: targets[grandparent]
            for parent, grandparent in above.items()
            if grandparent in targets
        }

    def _plain(self, conn: apsw.Connection, thread: int, stored: Any) -> Any:
        """A stored value (inline or in parts) decoded class-free; None when it cannot be
        read that way (a damaged or unknown payload is shown as absent, not raised)."""
        if not isinstance(stored, Mapping):
            return None
        parts = stored.get("parts") or []
        fetched = self.values.values(conn, thread, list(parts)) if parts else {}
        try:
            return plain(*raw_value(stored, fetched))
        except (ProtocolError, InvalidArgumentError, KeyError):
            return None


def _cursor(before: str | None) -> tuple[str, str] | None:
    if before is None:
        return None
    if not isinstance(before, str) or not before:
        raise InvalidArgumentError(
            "before must be a checkpoint id or the `next` of the previous page"
        )
    checkpoint_id, _, ns = before.partition("/")
    return checkpoint_id, ns


def _pulled(path: str) -> str | None:
    """The node a pull task's path names (`~__pregel_pull, agent` -> agent), or None."""
    if not path.startswith(PULL):
        return None
    node = path[len(PULL) :]
    return node if node and "," not in node else None


def _interrupt(item: Any, node: str | None) -> Interrupt:
    fields = item.get("$kwargs") if isinstance(item, Mapping) else None
    if isinstance(fields, Mapping) and str(item.get("$type", "")).endswith(".Interrupt"):
        found = fields.get("id", fields.get("interrupt_id"))
        return Interrupt(found if isinstance(found, str) else None, node, fields.get("value"))
    return Interrupt(None, node, item)
