"""Namespace heads: how a read notices a checkpoint it cannot find (format 4, engine layer).

A row seal (`seal.py`) proves that a row found is the row asked for; it cannot prove
that a row not found does not exist. `heads` keeps, per thread and checkpoint namespace,
the newest checkpoint id, the count and the census of the namespace's ids, maintained by
triggers on `checkpoints` (schema_early.py, FORMAT_4), so no write path can forget them:

- a read of the latest checkpoint checks that it found the head (a damaged index or
  changed id that hides the newest row would otherwise return an older one);
- a read that finds nothing in a namespace the file holds recomputes the namespace's
  census from the index it searched and compares (a damaged index entry or a changed
  checkpoint id then raises instead of reading as "no such checkpoint"); the ids that
  scan walks (in order, page after page) must not hold the one the seek missed (a
  damaged key earlier in the index can misdirect a seek, never an ordered walk).

Cost: one primary-key lookup joined into the latest read; a scan of one namespace's ids
only when a named checkpoint is not found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import apsw

from threadloom.engine.format.seal import EMPTY, census, identity, mix
from threadloom.engine.format.tables import CheckpointRow
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
    if wanted is not None and wanted in ids:
        # The namespace's scan (in index order, not a seek) holds the id the seek for it
        # missed: damage in the index misdirected the search.
        raise CorruptionError(
            f"thread {thread_id!r} namespace {ns!r}: checkpoint {wanted} is in the file, "
            "but its index search does not find it; the index is damaged (run `threadloom "
            "verify`) - restore the file from a backup"
        )
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
    # Counts and heads suffice here: every row the listing covered was read, and its seal
    # proved its identity; a row moved out or in changes a count. (A miss has no row to
    # prove, so `check_absent` recomputes the census.)
    for thread_name, namespace, what in _compare(conn, where, args, ns, census=False):
        raise CorruptionError(
            f"thread {thread_name!r} namespace {namespace!r}: {what}; a checkpoint was "
            "hidden or moved by damage (run `threadloom verify`) - restore the file from a "
            "backup"
        )


def check_pending(rows: Sequence[CheckpointRow], found: Mapping[int, Sequence[bytes]]) -> None:
    """Raise unless the pending writes read for each checkpoint row (`found`: row id ->
    the stored digests of its writes) are what its `writes` and `census` columns count."""
    for row in rows:
        digests = found.get(row.id, ())
        if (len(digests), mix(digests)) != (row.writes, bytes(row.census)):
            raise CorruptionError(
                f"checkpoint {row.checkpoint_id} of thread {row.thread_id!r} namespace "
                f"{row.checkpoint_ns!r}: {len(digests)} pending writes found, {row.writes} "
                "recorded (or other ones); a write was moved or hidden by damage (run "
                "`threadloom verify`) - restore the file from a backup"
            )


def damaged_scopes(conn: apsw.Connection) -> list[str]:
    """What is wrong with the scope rows (each row's seal binds its id, namespace and
    agent id) and their thread censuses (count and census of each scope's threads)."""
    found: list[str] = []
    scopes = fetchall(
        conn, "SELECT id, namespace, agent_id, seal, threads, census FROM scopes NOT INDEXED"
    )
    for ident, namespace, agent_id, stored, _, _ in scopes:
        if not _sealed(ident, namespace, agent_id, stored):
            found.append(f"scope row {ident} ({namespace!r}/{agent_id!r}) fails its seal")
    for ident, namespace, agent_id, _, count, stored in scopes:
        what = _threads_differ(conn, ident, count, stored)
        if what:
            found.append(f"scope {namespace}/{agent_id}: {what}")
    return found


def check_scopes(conn: apsw.Connection) -> None:
    """Raise unless every scope row's seal holds (when a scope is opened)."""
    for ident, namespace, agent_id, stored in fetchall(
        conn, "SELECT id, namespace, agent_id, seal FROM scopes NOT INDEXED"
    ):
        if not _sealed(ident, namespace, agent_id, stored):
            raise CorruptionError(
                f"scope row {ident} ({namespace!r}/{agent_id!r}) is damaged (its seal does not "
                "hold); run `threadloom verify` and restore the file from a backup"
            )


def _sealed(ident: Any, namespace: Any, agent_id: Any, stored: Any) -> bool:
    """Whether a scope row's seal holds (a damaged column may hold any type)."""
    parts = (ident, namespace, agent_id)
    if not all(isinstance(p, (str, int)) for p in parts) or not isinstance(stored, bytes):
        return False
    return stored == identity("scope", *parts)


def check_threads(conn: apsw.Connection, scope: int, name: str) -> None:
    """Raise unless the threads of `scope` are those its count and census record."""
    rows = fetchall(conn, "SELECT threads, census FROM scopes NOT INDEXED WHERE id = ?", (scope,))
    if not rows:
        raise CorruptionError(f"scope {name} has no row; restore the file from a backup")
    what = _threads_differ(conn, scope, *rows[0])
    if what:
        raise CorruptionError(
            f"scope {name}: {what}; a thread was renamed or moved by damage (run "
            "`threadloom verify`) - restore the file from a backup"
        )


def _threads_differ(conn: apsw.Connection, scope: int, count: int, stored: bytes) -> str | None:
    rows = fetchall(conn, "SELECT id, thread_id FROM threads WHERE scope = ?", (scope,))
    if not all(isinstance(t, str) for _, t in rows):
        return "a thread row holds a thread id that is not text"
    if len(rows) == count and census(("thread", *row) for row in rows) == bytes(stored):
        return None
    return f"{len(rows)} threads found, {count} recorded (or other ones)"


def mismatches(conn: apsw.Connection) -> Sequence[tuple[Any, ...]]:
    """(thread id, namespace, what differs) for every namespace of the file whose head row
    is not what its checkpoints say, and every checkpoint whose pending row is not what its
    writes say (for `verify`)."""
    found = _compare(conn, "1", [], None)
    wrong = conn.execute(
        "SELECT t.thread_id, c.checkpoint_ns, c.checkpoint_id, c.writes, "
        "coalesce(w.n, 0) FROM checkpoints c JOIN threads t ON t.id = c.thread "
        "LEFT JOIN (SELECT thread, checkpoint_ns, checkpoint_id, count(*) AS n, "
        "tl_mix(digest) AS mixed FROM writes GROUP BY thread, checkpoint_ns, checkpoint_id) w "
        "ON w.thread = c.thread AND w.checkpoint_ns = c.checkpoint_ns "
        "AND w.checkpoint_id = c.checkpoint_id "
        "WHERE c.writes != coalesce(w.n, 0) OR c.census != coalesce(w.mixed, ?)",
        (EMPTY,),
    ).fetchall()
    for thread_id, ns, checkpoint_id, recorded, held in wrong:
        found.append(
            (
                thread_id,
                ns,
                f"checkpoint {checkpoint_id} holds {held} pending writes, its census counts "
                f"{recorded} (or other ones)",
            )
        )
    return found


def _compare(
    conn: apsw.Connection,
    where: str,
    args: Sequence[Any],
    ns: str | None,
    *,
    census: bool = True,
) -> list[tuple[Any, ...]]:
    """Head rows against the checkpoints of the threads `where` selects (`t` = threads);
    without `census`, only heads and counts."""
    narrow = " AND c.checkpoint_ns = ?" if ns is not None else ""
    extra = [ns] if ns is not None else []
    mixed = "tl_census('census', c.checkpoint_id)" if census else "x''"
    actual = {
        (thread, namespace): (head, count, bytes(value))
        for thread, namespace, head, count, value in conn.execute(
            "SELECT c.thread, c.checkpoint_ns, max(c.checkpoint_id), count(*), "
            f"{mixed} FROM checkpoints c "
            f"LEFT JOIN threads t ON t.id = c.thread WHERE ({where}){narrow} "
            "GROUP BY c.thread, c.checkpoint_ns",
            (*args, *extra),
        )
    }
    recorded = {
        (thread, namespace): (head, count, bytes(value))
        for thread, namespace, head, count, value in conn.execute(
            f"SELECT h.thread, h.checkpoint_ns, h.checkpoint_id, h.checkpoints, "
            f"{'h.census' if census else mixed} "
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
