"""Namespace heads: how a read notices a checkpoint it cannot find (format 4, engine layer).

A row seal (`seal.py`) proves that a row found is the row asked for; it cannot prove
that a row not found does not exist. `heads` keeps, per thread and checkpoint namespace,
the newest checkpoint id, the count and the census of the namespace's ids, maintained by
triggers on `checkpoints` (schema.py, FORMAT_4), so no write path can forget them:

- a read of the latest checkpoint checks that it found the head (a damaged index or
  changed id that hides the newest row would otherwise return an older one);
- a read that finds nothing in a namespace the file holds recomputes the namespace's
  census from the index it searched and compares (a damaged index entry or a changed
  checkpoint id then raises instead of reading as "no such checkpoint").

Cost: one primary-key lookup joined into the latest read; a scan of one namespace's ids
only when a named checkpoint is not found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import apsw

from threadloom.engine.seal import EMPTY, census
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import CorruptionError

#: The head of the row's namespace, as a column joined into a checkpoint query (`c`).
HEAD_COLUMN: Final = (
    "(SELECT h.checkpoint_id FROM heads h WHERE h.thread = c.thread "
    "AND h.checkpoint_ns = c.checkpoint_ns)"
)


def check_latest(thread_id: str, ns: str, found: str, head: Any) -> None:
    """Raise unless `found`, the newest checkpoint a read found, is the namespace's head."""
    if head != found:
        raise CorruptionError(
            f"thread {thread_id!r} namespace {ns!r}: the newest checkpoint found is {found}, "
            f"but the file's head is {head}; the file is damaged (run `threadloom verify`) "
            "- restore it from a backup"
        )


def check_absent(
    conn: apsw.Connection, scope: int | None, thread_id: str, ns: str, wanted: str | None
) -> None:
    """Raise if a read that found no checkpoint (`wanted`, or the latest when None) in
    `thread_id`/`ns` missed one the file holds."""
    rows = fetchall(
        conn,
        "SELECT h.thread, h.checkpoint_id, h.checkpoints, h.census FROM heads h "
        "JOIN threads t ON t.id = h.thread WHERE t.scope = ? AND t.thread_id = ? "
        "AND h.checkpoint_ns = ?",
        (scope, thread_id, ns),
    )
    if not rows:
        return  # the namespace holds no checkpoint
    thread, head, count, stored = rows[0]
    if wanted is None:
        check_latest(thread_id, ns, "nothing", head)
    ids = [
        r[0]
        for r in fetchall(
            conn,
            "SELECT checkpoint_id FROM checkpoints WHERE thread = ? AND checkpoint_ns = ?",
            (thread, ns),
        )
    ]
    if len(ids) != count or census(("census", i) for i in ids) != bytes(stored):
        raise CorruptionError(
            f"thread {thread_id!r} namespace {ns!r}: checkpoint {wanted} is not found, and "
            f"the namespace's {len(ids)} checkpoints do not match its census ({count} "
            "recorded); the file is damaged (run `threadloom verify`) - restore it from a "
            "backup"
        )


def check_listed(
    conn: apsw.Connection, scope: int | None, thread_id: str | None, ns: str | None
) -> None:
    """Raise unless every namespace a complete listing covered (the scope's, or one
    thread's, or one namespace's) holds exactly the checkpoints its head row counts."""
    where = "t.scope = ?"
    args: list[Any] = [scope]
    if thread_id is not None:
        where += " AND t.thread_id = ?"
        args.append(thread_id)
    for thread_name, namespace, what in _compare(conn, where, args, ns):
        raise CorruptionError(
            f"thread {thread_name!r} namespace {namespace!r}: {what}; a checkpoint was "
            "hidden or moved by damage (run `threadloom verify`) - restore the file from a "
            "backup"
        )


def check_pending(
    conn: apsw.Connection,
    owners: Mapping[int, tuple[str, str, str]],
    found: Mapping[int, Sequence[tuple[str, int]]],
) -> None:
    """Raise unless the pending writes read for each checkpoint row (`found`: row id ->
    (task id, index) of each write) are what its `pending` row counts.

    `owners`: row id -> (thread id, namespace, checkpoint id), to name the damage.
    """
    recorded = {
        owner: (count, bytes(value))
        for owner, count, value in conn.execute(
            "SELECT c.id, p.writes, p.census FROM checkpoints c JOIN pending p "
            "ON p.thread = c.thread AND p.checkpoint_ns = c.checkpoint_ns "
            "AND p.checkpoint_id = c.checkpoint_id WHERE c.id IN carray(?)",
            (ids(owners),),
        )
    }
    for owner, writes in found.items():
        want = recorded.get(owner, (0, EMPTY))
        have = (len(writes), census(("pending", t, i) for t, i in writes) if writes else EMPTY)
        if have != want:
            thread_id, ns, checkpoint_id = owners[owner]
            raise CorruptionError(
                f"checkpoint {checkpoint_id} of thread {thread_id!r} namespace {ns!r}: "
                f"{len(writes)} pending writes found, {want[0]} recorded (or other ones); a "
                "write was moved or hidden by damage (run `threadloom verify`) - restore the "
                "file from a backup"
            )


def mismatches(conn: apsw.Connection) -> Sequence[tuple[Any, ...]]:
    """(thread id, namespace, what differs) for every namespace of the file whose head row
    is not what its checkpoints say, and every checkpoint whose pending row is not what its
    writes say (for `verify`)."""
    found = _compare(conn, "1", [], None)
    actual = {
        key[:3]: (key[3], bytes(key[4]))
        for key in conn.execute(
            "SELECT thread, checkpoint_ns, checkpoint_id, count(*), "
            "tl_census('pending', task_id, idx) FROM writes "
            "GROUP BY thread, checkpoint_ns, checkpoint_id"
        )
    }
    recorded = {
        key[:3]: (key[3], bytes(key[4]))
        for key in conn.execute(
            "SELECT thread, checkpoint_ns, checkpoint_id, writes, census FROM pending"
        )
    }
    if actual != recorded:
        names: dict[int, str] = dict(fetchall(conn, "SELECT id, thread_id FROM threads"))
        for key in sorted(actual.keys() | recorded.keys(), key=repr):
            have, want = actual.get(key), recorded.get(key)
            if have != want:
                found.append(
                    (
                        names.get(key[0], f"row {key[0]}"),
                        key[1],
                        f"checkpoint {key[2]} holds {have[0] if have else 0} pending writes, "
                        f"its pending row counts {want[0] if want else 0} (or other ones)",
                    )
                )
    return found


def _compare(
    conn: apsw.Connection, where: str, args: Sequence[Any], ns: str | None
) -> list[tuple[Any, ...]]:
    """Head rows against the checkpoints of the threads `where` selects (`t` = threads)."""
    narrow = " AND c.checkpoint_ns = ?" if ns is not None else ""
    extra = [ns] if ns is not None else []
    actual = {
        (thread, namespace): (head, count, bytes(value))
        for thread, namespace, head, count, value in conn.execute(
            "SELECT c.thread, c.checkpoint_ns, max(c.checkpoint_id), count(*), "
            "tl_census('census', c.checkpoint_id) FROM checkpoints c "
            f"LEFT JOIN threads t ON t.id = c.thread WHERE ({where}){narrow} "
            "GROUP BY c.thread, c.checkpoint_ns",
            (*args, *extra),
        )
    }
    recorded = {
        (thread, namespace): (head, count, bytes(value))
        for thread, namespace, head, count, value in conn.execute(
            "SELECT h.thread, h.checkpoint_ns, h.checkpoint_id, h.checkpoints, h.census "
            f"FROM heads h LEFT JOIN threads t ON t.id = h.thread WHERE ({where})"
            + narrow.replace("c.", "h."),
            (*args, *extra),
        )
    }
    found: list[tuple[Any, ...]] = []
    if actual == recorded:
        return found
    names: dict[int, str] = dict(fetchall(conn, "SELECT id, thread_id FROM threads"))
    for key in sorted(actual.keys() | recorded.keys(), key=repr):
        have, want = actual.get(key), recorded.get(key)
        if have == want:
            continue
        thread, namespace = key
        if want is None:
            what = "its checkpoints have no head row"
        elif have is None:
            what = f"its head row counts {want[1]} checkpoints, the file holds none"
        elif have[0] != want[0]:
            what = f"its head row says {want[0]}, the newest checkpoint is {have[0]}"
        else:
            what = f"its head row counts {want[1]} checkpoints with another census, found {have[1]}"
        found.append((names.get(thread, f"row {thread}"), namespace, what))
    return found
