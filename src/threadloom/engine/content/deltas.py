"""Chunk documents stored as deltas of an earlier version of the chunk (format 10).

Engine layer. A list channel's tail chunk (`c-`) is written again at every step with
one more entry; stored whole, a 32-entry chunk is kept 32 times at growing sizes. A
writer that stored a version of the chunk whole may store the next versions as a zstd
frame made with that version's msgpack as its dictionary (`codec.DELTA`), in a row whose
`blocks` column is `DELTA_ROW`.

Invariants:
- a delta's base is a row of the same thread that is not a delta itself, so a read
  decodes at most two bodies; the delta's own digest is checked on what it decodes to;
- no transaction deletes a base and keeps a delta of it: every deletion of value rows
  settles the thread's deltas first (`settle`: a delta whose base goes is stored whole
  again, from the base still at hand), and so does a copy of a thread (`copy_thread`),
  whose target may hold the base as a delta of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Final

import apsw

from threadloom.engine.format import refkeys
from threadloom.engine.format.codec import DELTA, delta_base, frame, undelta
from threadloom.engine.format.tables import OWNERS, VALS, value_rows
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import CorruptionError

#: The `blocks` column of a delta row (a whole inline body has 0, a block list its count).
DELTA_ROW: Final = -1
#: A delta is kept only when it takes at most this share of the body stored whole: past
#: it the chunk has grown enough since its base that the next base pays.
DELTA_SHARE: Final = 0.5

#: `raw(conn, items, threads)`: the checked msgpack of stored bodies (`BlockStore.raw_many`).
RawMany = Callable[
    [apsw.Connection, Sequence[tuple[bytes, bytes, str]], "int | Sequence[int] | None"],
    list[bytes],
]


def blocks_column(body: bytes, keys: int) -> int:
    """The `blocks` column of a value row holding `body` (listing `keys` blocks)."""
    return DELTA_ROW if body[:1] == bytes((DELTA,)) else keys


def bases(
    conn: apsw.Connection,
    raw: RawMany,
    wanted: dict[int, set[str]],
) -> dict[tuple[int, str], bytes]:
    """The msgpack of the base chunks `wanted` names (thread row id -> refs), checked.

    Raises:
        CorruptionError: a base is missing or is a delta itself (a broken chain).
    """
    items: list[tuple[bytes, bytes, str]] = []
    keys: list[tuple[int, str]] = []
    for thread, refs in wanted.items():
        rows = fetchall(
            conn,
            f"SELECT x.ref_key, x.body, {VALS.unsealed('x')}, x.blocks FROM vals x{OWNERS} "
            "WHERE x.thread = ? AND x.ref_key IN carray(?)",
            (thread, ids(refkeys.keys(refs))),
        )
        found = {refkeys.text(r[0]): r for r in rows}
        for ref in refs:
            row = found.get(ref)
            if row is None or row[3] == DELTA_ROW or bytes(row[1][:1]) == bytes((DELTA,)):
                what = "missing" if row is None else "a delta itself"
                raise CorruptionError(
                    f"value {ref}, the base of a stored chunk, is {what}; "
                    "restore the file from a backup"
                )
            items.append((bytes(row[1]), bytes(row[2]), f"value {ref}"))
            keys.append((thread, ref))
    return dict(zip(keys, raw(conn, items, None), strict=True))


def decode_all(
    conn: apsw.Connection,
    raw: RawMany,
    items: Sequence[tuple[bytes, bytes, str]],
    threads: int | Sequence[int] | None,
    out: dict[int, bytes],
) -> None:
    """Fill `out[i]` with the msgpack of every DELTA body of `items` (unchecked: the
    caller checks each against its own digest)."""
    wanted: dict[int, set[str]] = {}
    at: dict[int, tuple[int, str]] = {}
    for i, (body, _, name) in enumerate(items):
        if not body or body[0] != DELTA:
            continue
        if threads is None:
            raise CorruptionError(
                f"{name} is stored as a delta where no value row may be; "
                "restore the file from a backup"
            )
        thread = threads if isinstance(threads, int) else threads[i]
        ref = delta_base(body)
        wanted.setdefault(thread, set()).add(ref)
        at[i] = (thread, ref)
    if not at:
        return
    found = bases(conn, raw, wanted)
    for i, key in at.items():
        out[i] = undelta(items[i][0], found[key], items[i][2])


#: A delta stored whole again: (new body, thread, ref, bytes it grows by).
Change = tuple[bytes, int, str, int]


def settle(
    conn: apsw.Connection,
    raw: RawMany,
    thread: int,
    doomed: Collection[str] = (),
    source: int | None = None,
) -> int:
    """Store whole again, in the caller's write transaction, every delta of `thread`
    that is not `doomed` and whose base is doomed, missing or a delta itself (`plan`,
    then `write`). Returns how many were rewritten. Call it before deleting `doomed`,
    and after copying rows from thread `source`. The thread index's `bytes` is left to
    the caller (a recount, or `Drops`, which counts the growth against what goes)."""
    changes = plan(conn, raw, thread, doomed, source)
    write(conn, changes)
    return len(changes)


def write(conn: apsw.Connection, changes: Sequence[Change]) -> None:
    """Replace the delta rows `changes` names by their whole bodies."""
    conn.executemany(
        "UPDATE vals SET body = ?, blocks = 0 WHERE thread = ? AND ref_key = ?",
        [(body, thread, refkeys.key(ref)) for body, thread, ref, _ in changes],
    )


def plan(
    conn: apsw.Connection,
    raw: RawMany,
    thread: int,
    doomed: Collection[str] = (),
    source: int | None = None,
) -> list[Change]:
    """The deltas of `thread` to store whole before `doomed` goes: those not doomed
    whose base is doomed, missing or a delta itself. Reads only. With `source` (after a
    copy from that thread), each is decoded from the source's row of the same ref, whose
    chain holds: a copy adds rows, it never changes the target's.

    The whole bodies take no dictionary (zstd alone): one written here never names a
    dictionary another process may be retiring meanwhile.
    """
    rows = [
        (refkeys.text(ref), body)
        for ref, body in fetchall(
            conn,
            "SELECT ref_key, body FROM vals WHERE thread = ? AND blocks = ?",
            (thread, DELTA_ROW),
        )
    ]
    if not rows:
        return []
    gone = set(doomed)
    live = [r for r in rows if r[0] not in gone]
    deltas = {r[0] for r in rows}
    present = {
        refkeys.text(r[0])
        for r in fetchall(
            conn,
            "SELECT ref_key FROM vals WHERE thread = ? AND ref_key IN carray(?) AND blocks <> ?",
            (thread, ids(refkeys.keys({delta_base(r[1]) for r in live})), DELTA_ROW),
        )
    }
    broken = [
        r[0]
        for r in live
        if (base := delta_base(r[1])) in gone or base in deltas or base not in present
    ]
    if not broken:
        return []
    origin = thread if source is None else source
    found = value_rows(conn, origin, broken)
    items = [(bytes(r[1]), bytes(r[2]), f"value {r[0]}") for r in found]
    decoded = raw(conn, items, origin)
    old = {r[0]: len(r[1]) for r in rows}
    changes: list[Change] = []
    for (ref, _, _), msgpack in zip(found, decoded, strict=True):
        body = frame(msgpack, None)
        changes.append((body, thread, ref, len(body) - old[ref]))
    return changes


def outgrown(conn: apsw.Connection, raw: RawMany, whole: Callable[[bytes], bytes]) -> int:
    """Store whole every delta of the file that `whole` (a new dictionary's framing) makes
    no larger; returns how many. A training calls it before re-encoding the whole rows:
    a dictionary trained on a small file's chunks holds their refs, and then beats the
    delta. Runs in the caller's write transaction."""
    rows = fetchall(
        conn,
        f"SELECT x.thread, x.ref_key, x.body, {VALS.unsealed('x')} FROM vals x{OWNERS} "
        "WHERE x.blocks = ?",
        (DELTA_ROW,),
    )
    if not rows:
        return 0
    items = [(bytes(r[2]), bytes(r[3]), f"value {refkeys.text(r[1])}") for r in rows]
    decoded = raw(conn, items, [int(r[0]) for r in rows])
    changes = []
    grown: dict[int, int] = {}
    for row, msgpack in zip(rows, decoded, strict=True):
        body = whole(msgpack)
        if len(body) <= len(row[2]):
            changes.append((body, row[0], row[1]))
            grown[row[0]] = grown.get(row[0], 0) + len(body) - len(row[2])
    conn.executemany(
        "UPDATE vals SET body = ?, blocks = 0 WHERE thread = ? AND ref_key = ?", changes
    )
    conn.executemany(
        "UPDATE threads SET bytes = bytes + ? WHERE id = ?", [(n, t) for t, n in grown.items()]
    )
    return len(changes)
