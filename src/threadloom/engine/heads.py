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

from collections.abc import Sequence
from typing import Any, Final

import apsw

from threadloom.engine.seal import census
from threadloom.engine.sql import fetchall
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
    if len(ids) != count or census(ids) != bytes(stored):
        raise CorruptionError(
            f"thread {thread_id!r} namespace {ns!r}: checkpoint {wanted} is not found, and "
            f"the namespace's {len(ids)} checkpoints do not match its census ({count} "
            "recorded); the file is damaged (run `threadloom verify`) - restore it from a "
            "backup"
        )


def mismatches(conn: apsw.Connection) -> Sequence[tuple[Any, ...]]:
    """(thread id, namespace, what differs) for every namespace whose head row is not
    what its checkpoints say (for `verify`)."""
    found: list[tuple[Any, ...]] = []
    actual = {
        (thread, ns): (head, count, bytes(value))
        for thread, ns, head, count, value in conn.execute(
            "SELECT thread, checkpoint_ns, max(checkpoint_id), count(*), tl_census(checkpoint_id) "
            "FROM checkpoints GROUP BY thread, checkpoint_ns"
        )
    }
    recorded = {
        (thread, ns): (head, count, bytes(value))
        for thread, ns, head, count, value in conn.execute(
            "SELECT thread, checkpoint_ns, checkpoint_id, checkpoints, census FROM heads"
        )
    }
    names: dict[int, str] = dict(fetchall(conn, "SELECT id, thread_id FROM threads"))
    for key in sorted(actual.keys() | recorded.keys(), key=repr):
        have, want = actual.get(key), recorded.get(key)
        if have == want:
            continue
        thread, ns = key
        if want is None:
            what = "its checkpoints have no head row"
        elif have is None:
            what = f"its head row counts {want[1]} checkpoints, the file holds none"
        elif have[0] != want[0]:
            what = f"its head row says {want[0]}, the newest checkpoint is {have[0]}"
        else:
            what = f"its head row counts {want[1]} checkpoints with another census, found {have[1]}"
        found.append((names.get(thread, f"row {thread}"), ns, what))
    return found
