"""The vector index's int8 codes in the file, packed per inverted list (engine layer).

`store_codes` (FORMAT_9, format/schema.py) holds the codes (`core.vector_quantize`:
`dims` int8 and PARAMS doubles a vector) of every vector of a coded list, in chunks of up
to CHUNK vectors: a search probing lists reads their few chunk rows and bounds every
vector's score from them with one C call per buffer of chunks (vector_probe.py),
instead of reading one float32 row per vector scattered in the file.

Writes, each in the caller's write transaction beside the vector rows it follows:
- `add`: vectors inserted with ids above every id of their list (puts, a training's
  moves: `VectorIndex._next_id`) go in as a new chunk per list; when a list ends with more
  than RUN chunks short of CHUNK vectors, those are packed into full ones (each vector is
  rewritten a few times over its life, never on every put);
- `drop`: vectors about to be deleted leave their chunks (a chunk left empty goes);
- `clear`: every code (the index emptied; a list's codes go with its vectors).

Lists from `meta.vector_codes_from` up are coded; below it (a file upgraded with vectors,
until a training moved them to new lists) a search reads the float32 rows as before.
An index the exact scan serves (`VectorIndex.coding`: up to `exact_up_to` vectors) has
no codes at all: the first load or training beyond it codes every list.

Invariant: for every coded list, the ids in its chunks are exactly its ids in
`store_vectors`, each with the code of its vector; chunk ids ascend and each is at most
the first id it holds, so the chunk holding a vector is the one with the greatest id not
above the vector's. `problems` checks all of it (`threadloom verify`).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any, Final, NamedTuple

import apsw

from threadloom import core
from threadloom.core.similarity import PARAMS
from threadloom.engine.sql import fetchall, ids

__all__ = [
    "CHUNK",
    "FIXED",
    "FROM_KEY",
    "RUN",
    "Chunk",
    "add",
    "clear",
    "coded",
    "coded_from",
    "drop",
    "drop_items",
    "loose",
    "problems",
    "repack",
    "set_coded_from",
]

#: Vectors in a full chunk (about 106 KiB at 384 dims).
CHUNK: Final = 256
#: Chunks short of CHUNK a list may end with before they are packed together.
RUN: Final = 16
#: The `meta` key naming the lowest coded list.
FROM_KEY: Final = "vector_codes_from"
#: A vector id's list is `id >> _LIST_BITS` (vectors.LIST_BITS).
_LIST_BITS: Final = 32
#: Bytes per vector besides its codes: id, item (int64) and params (float64).
FIXED: Final = 8 * (2 + PARAMS)
_LITTLE: Final = sys.byteorder == "little"
#: Problems of one kind listed before they are only counted (vector_checks.MOST).
_MOST: Final = 20


class Chunk(NamedTuple):
    """One `store_codes` row, unpacked: its id and, per vector, id, item, params and codes."""

    key: int
    ids: array[int]
    items: array[int]
    params: array[float]
    codes: bytes

    def body(self) -> bytes:
        parts: list[array[Any]] = [
            array("q", self.ids),
            array("q", self.items),
            array("d", self.params),
        ]
        if not _LITTLE:
            for part in parts:
                part.byteswap()
        return b"".join(part.tobytes() for part in parts) + self.codes


class _Damaged(Exception):
    """A chunk whose body does not hold its count of vectors."""


def _dims_of(count: int, body: bytes) -> int:
    if count < 1 or len(body) <= FIXED * count or (len(body) - FIXED * count) % count:
        raise _Damaged
    return (len(body) - FIXED * count) // count


def unpack(key: int, count: int, body: bytes) -> Chunk:
    """A chunk row as stored (raises _Damaged when the body does not hold `count` vectors)."""
    dims = _dims_of(count, body)
    view = memoryview(body)
    parts: list[Any] = [array("q"), array("q"), array("d")]
    for part, start, end in zip(parts, (0, 8, 16), (8, 16, FIXED), strict=True):
        part.frombytes(view[start * count : end * count])
        if not _LITTLE:
            part.byteswap()
    return Chunk(key, parts[0], parts[1], parts[2], bytes(view[FIXED * count :][: dims * count]))


# -- which lists are coded ---------------------------------------------------------------


def coded_from(conn: apsw.Connection, settings: Mapping[str, Any] | None = None) -> int | None:
    """The lowest coded list (`meta.vector_codes_from`); None: no list is coded.
    `settings`: the `vector_*` meta rows as this transaction read them (no query)."""
    if settings is None:
        found = fetchall(conn, "SELECT value FROM meta WHERE key = ?", (FROM_KEY,))
        recorded = found[0][0] if found else None
    else:
        recorded = settings.get(FROM_KEY)
    try:
        return None if recorded is None else int(str(recorded))
    except ValueError:
        return None  # unreadable: read the float32 rows until a training codes them


def set_coded_from(conn: apsw.Connection, first: int) -> None:
    """Record that every list from `first` on is coded."""
    conn.execute(
        "INSERT INTO meta(key, value) VALUES (?, ?) "
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (FROM_KEY, first),
    )


def coded(first: int | None, list_id: int) -> bool:
    """Whether `list_id` is coded when `first` is the lowest coded list."""
    return first is not None and list_id >= first


def _range(list_id: int) -> tuple[int, int]:
    low = list_id << _LIST_BITS
    return low, low + (1 << _LIST_BITS)


# -- writes ------------------------------------------------------------------------------


def add(
    conn: apsw.Connection,
    rows: Sequence[tuple[int, int, bytes]],
    dims: int,
    settings: Mapping[str, Any] | None = None,
) -> None:
    """Code `rows` (vector id, item, float32 vector) just inserted into coded lists, each
    id above every other of its list (rows of lists not coded are left out); `settings`
    as `coded_from` takes them."""
    first = coded_from(conn, settings)
    mine = sorted((row for row in rows if coded(first, row[0] >> _LIST_BITS)), key=_first)
    if not mine:
        return
    codes, params = core.vector_quantize(b"".join(row[2] for row in mine), dims)
    fresh: list[Chunk] = []
    start = 0
    while start < len(mine):
        list_id = mine[start][0] >> _LIST_BITS
        end = start
        while end < len(mine) and mine[end][0] >> _LIST_BITS == list_id:
            end += 1
        fresh.append(
            Chunk(
                mine[start][0],
                array("q", (row[0] for row in mine[start:end])),
                array("q", (row[1] for row in mine[start:end])),
                params[PARAMS * start : PARAMS * end],
                codes[dims * start : dims * end],
            )
        )
        start = end
    tails = _tails(conn, [chunk.key >> _LIST_BITS for chunk in fresh])
    pieces: list[Chunk] = []
    runs: list[list[int]] = []
    for chunk in fresh:
        tail = tails.get(chunk.key >> _LIST_BITS, [])
        if tail and tail[0][0] >= chunk.key:
            # Not above the list's last chunk (only a damaged index gets here): merge it in.
            _rewrite(conn, [key for key, _ in tail if key >= chunk.key], chunk, dims)
            continue
        split = _split(chunk, dims)
        pieces.extend(split)
        if len(split) == 1 and len(chunk.ids) < CHUNK:
            run = [chunk.key]
            for key, count in tail:
                if count >= CHUNK:
                    break
                run.append(key)
            if len(run) > RUN:
                runs.append(sorted(run))
    _insert(conn, pieces)
    for run in runs:
        _rewrite(conn, run, None, dims)


def _tails(conn: apsw.Connection, lists: list[int]) -> dict[int, list[tuple[int, int]]]:
    """Per list, its last RUN + 1 chunks (id, count), last first (one query for all)."""
    found: dict[int, list[tuple[int, int]]] = {}
    for list_id, key, count in fetchall(
        conn,
        # CROSS JOIN: each list's range of the b-tree from its (RUN + 1)-th last chunk.
        "SELECT l.value, c.id, c.count FROM carray(?) l CROSS JOIN store_codes c "
        "ON c.id >= (SELECT coalesce(min(id), l.value << 32) FROM (SELECT id FROM "
        "store_codes WHERE id >= l.value << 32 AND id < (l.value + 1) << 32 "
        "ORDER BY id DESC LIMIT ?)) AND c.id < (l.value + 1) << 32",
        (ids(lists), RUN + 1),
    ):
        found.setdefault(int(list_id), []).append((int(key), int(count)))
    for tail in found.values():
        tail.sort(reverse=True)
    return found


def _rewrite(conn: apsw.Connection, keys: list[int], fresh: Chunk | None, dims: int) -> None:
    """Pack the chunks `keys` (ascending, adjacent) and `fresh` into full chunks."""
    rows = fetchall(
        conn,
        "SELECT id, count, body FROM store_codes WHERE id IN carray(?) ORDER BY id",
        (ids(keys),),
    )
    chunks = [_unpacked(row) for row in rows]
    if fresh is not None:
        chunks.append(fresh)
    whole = _joined([chunk for chunk in chunks if chunk is not None], dims)
    conn.execute("DELETE FROM store_codes WHERE id IN carray(?)", (ids(keys),))
    if whole is not None:
        _insert(conn, _split(whole._replace(key=min([whole.key, *keys])), dims))


def _unpacked(row: tuple[Any, ...]) -> Chunk | None:
    try:
        return unpack(int(row[0]), int(row[1]), bytes(row[2]))
    except _Damaged:
        return None  # its vectors go uncoded: `verify` reports them, `compact` codes them


def _joined(chunks: list[Chunk], dims: int) -> Chunk | None:
    """One chunk of every vector of `chunks`, in id order (the first chunk's key)."""
    if not chunks:
        return None
    chunks = sorted(chunks, key=lambda chunk: chunk.ids[0])
    if all(a.ids[-1] < b.ids[0] for a, b in pairwise(chunks)):  # adjacent: joined as they are
        vector_ids, items, params = array("q"), array("q"), array("d")
        for chunk in chunks:
            vector_ids.extend(chunk.ids)
            items.extend(chunk.items)
            params.extend(chunk.params)
        codes = b"".join(chunk.codes for chunk in chunks)
        return Chunk(min(chunk.key for chunk in chunks), vector_ids, items, params, codes)
    entries = sorted(
        (
            chunk.ids[i],
            chunk.items[i],
            chunk.params[PARAMS * i : PARAMS * (i + 1)],
            chunk.codes[dims * i : dims * (i + 1)],
        )
        for chunk in chunks
        for i in range(len(chunk.ids))
    )
    params = array("d")
    for entry in entries:
        params.extend(entry[2])
    return Chunk(
        min(chunk.key for chunk in chunks),
        array("q", (entry[0] for entry in entries)),
        array("q", (entry[1] for entry in entries)),
        params,
        b"".join(entry[3] for entry in entries),
    )


def _split(chunk: Chunk, dims: int) -> list[Chunk]:
    """`chunk` as chunks of CHUNK vectors (the first keeps its key, the others their first
    id)."""
    count = len(chunk.ids)
    if count <= CHUNK:
        return [chunk]
    return [
        Chunk(
            chunk.key if start == 0 else chunk.ids[start],
            chunk.ids[start : start + CHUNK],
            chunk.items[start : start + CHUNK],
            chunk.params[PARAMS * start : PARAMS * (start + CHUNK)],
            chunk.codes[dims * start : dims * (start + CHUNK)],
        )
        for start in range(0, count, CHUNK)
    ]


def _insert(conn: apsw.Connection, chunks: list[Chunk]) -> None:
    conn.executemany(
        "INSERT INTO store_codes(id, count, body) VALUES (?, ?, ?)",
        [(chunk.key, len(chunk.ids), chunk.body()) for chunk in chunks],
    )


def repack(conn: apsw.Connection, list_id: int, dims: int) -> bool:
    """Rewrite the chunks of list `list_id` as full chunks (the last one the rest), in the
    caller's write transaction; False when they are already as few as can be, or one does
    not unpack (left as it is for `verify` to name and `compact` to rebuild)."""
    low, high = _range(list_id)
    counts = fetchall(
        conn, "SELECT id, count FROM store_codes WHERE id >= ? AND id < ? ORDER BY id", (low, high)
    )
    total = sum(int(row[1]) for row in counts)
    if len(counts) <= -(-total // CHUNK):
        return False
    chunks = [
        _unpacked(row)
        for row in fetchall(
            conn,
            "SELECT id, count, body FROM store_codes WHERE id >= ? AND id < ? ORDER BY id",
            (low, high),
        )
    ]
    whole = _joined([chunk for chunk in chunks if chunk is not None], dims)
    if whole is None or None in chunks or len(whole.codes) != dims * len(whole.ids):
        return False
    conn.execute("DELETE FROM store_codes WHERE id >= ? AND id < ?", (low, high))
    _insert(conn, _split(whole._replace(key=int(counts[0][0])), dims))
    return True


def loose(conn: apsw.Connection) -> list[int]:
    """The lists whose codes would fit in fewer chunks (`repack` them), in id order."""
    return [
        int(row[0])
        for row in fetchall(
            conn,
            "SELECT id >> 32 FROM store_codes GROUP BY id >> 32 "
            "HAVING count(*) > (sum(count) + ? - 1) / ? ORDER BY 1",
            (CHUNK, CHUNK),
        )
    ]


def drop(conn: apsw.Connection, vector_ids: Sequence[int]) -> None:
    """Take the vectors `vector_ids` (about to be deleted) out of their chunks."""
    first = coded_from(conn)
    gone = sorted({int(v) for v in vector_ids if coded(first, int(v) >> _LIST_BITS)})
    if not gone:
        return
    keys = [
        int(row[0])
        for row in fetchall(
            conn,
            "SELECT DISTINCT (SELECT max(c.id) FROM store_codes c WHERE c.id <= v.value "
            "AND c.id >= (v.value >> 32) << 32) FROM carray(?) v",
            (ids(gone),),
        )
        if row[0] is not None
    ]
    if not keys:
        return
    leaving = set(gone)
    for row in fetchall(
        conn, "SELECT id, count, body FROM store_codes WHERE id IN carray(?)", (ids(keys),)
    ):
        chunk = _unpacked(row)
        if chunk is None:
            continue
        dims = len(chunk.codes) // len(chunk.ids)
        keep = [i for i, vector_id in enumerate(chunk.ids) if vector_id not in leaving]
        if len(keep) == len(chunk.ids):
            continue
        if not keep:
            conn.execute("DELETE FROM store_codes WHERE id = ?", (chunk.key,))
            continue
        params = array("d")
        for i in keep:
            params.extend(chunk.params[PARAMS * i : PARAMS * (i + 1)])
        kept = Chunk(
            chunk.key,
            array("q", (chunk.ids[i] for i in keep)),
            array("q", (chunk.items[i] for i in keep)),
            params,
            b"".join(chunk.codes[dims * i : dims * (i + 1)] for i in keep),
        )
        conn.execute(
            "UPDATE store_codes SET count = ?, body = ? WHERE id = ?",
            (len(kept.ids), kept.body(), kept.key),
        )


def drop_items(conn: apsw.Connection, items: Sequence[int]) -> None:
    """Delete every vector of `items`, codes first (the one way vectors leave with their
    items: `store_vectors` rows cascading from `store_items` would leave their codes)."""
    if not items:
        return
    found = fetchall(conn, "SELECT id FROM store_vectors WHERE item IN carray(?)", (ids(items),))
    drop(conn, [row[0] for row in found])
    conn.execute("DELETE FROM store_vectors WHERE item IN carray(?)", (ids(items),))


def clear(conn: apsw.Connection) -> None:
    """Drop every code, and no list is coded (the index was emptied or is rebuilt: the
    first load beyond the exact scan, or the training that finds it there, codes it)."""
    conn.execute("DELETE FROM store_codes")
    conn.execute("DELETE FROM meta WHERE key = ?", (FROM_KEY,))


# -- checks ------------------------------------------------------------------------------


def problems(conn: apsw.Connection, dims: int) -> list[str]:
    """What is wrong with the codes, one line each ([] when sound): chunks that do not
    unpack or hold ids out of their place, codes of lists not coded, and every coded
    list's chunks against its vectors (ids, items, and each code quantized again)."""
    found: list[str] = []
    first = coded_from(conn)
    below = fetchall(
        conn,
        "SELECT c.id FROM store_codes c WHERE ? IS NULL OR c.id >> 32 < ? OR NOT EXISTS "
        "(SELECT 1 FROM store_lists l WHERE l.id = c.id >> 32) ORDER BY c.id",
        (first, first),
    )
    found.extend(
        f"code chunk {row[0]} is in vector list {row[0] >> _LIST_BITS}, which is not coded "
        "or does not exist"
        for row in below[:_MOST]
    )
    if first is None:
        return found
    for (list_id,) in fetchall(
        conn, "SELECT id FROM store_lists WHERE id >= ? ORDER BY id", (first,)
    ):
        found.extend(_list_problems(conn, int(list_id), dims))
        if len(found) > _MOST:
            return [*found[:_MOST], "... and more problems of the vector codes"]
    return found


def _list_problems(conn: apsw.Connection, list_id: int, dims: int) -> list[str]:
    low, high = _range(list_id)
    found: list[str] = []
    entries: list[tuple[int, int, bytes]] = []  # id, item, code + params
    rows = fetchall(
        conn,
        "SELECT id, count, body FROM store_codes WHERE id >= ? AND id < ? ORDER BY id",
        (low, high),
    )
    for index, row in enumerate(rows):
        key = int(row[0])
        try:
            chunk = unpack(key, int(row[1]), bytes(row[2]))
            if len(chunk.codes) != dims * len(chunk.ids):
                raise _Damaged
        except _Damaged:
            found.append(
                f"code chunk {key} (vector list {list_id}) does not hold {row[1]} codes "
                f"of {dims} dimensions"
            )
            continue
        end = int(rows[index + 1][0]) if index + 1 < len(rows) else high
        if list(chunk.ids) != sorted(chunk.ids) or chunk.ids[0] < key or chunk.ids[-1] >= end:
            found.append(f"code chunk {key} (vector list {list_id}) holds ids out of its range")
        for i, vector_id in enumerate(chunk.ids):
            code = chunk.codes[dims * i : dims * (i + 1)]
            param = chunk.params[PARAMS * i : PARAMS * (i + 1)].tobytes()
            entries.append((vector_id, chunk.items[i], code + param))
    vectors = fetchall(
        conn,
        "SELECT id, item, vector FROM store_vectors WHERE id >= ? AND id < ? ORDER BY id",
        (low, high),
    )
    good = [row for row in vectors if len(row[2]) == 4 * dims]  # wrong sizes: vector_checks
    expected: dict[int, tuple[int, bytes]] = {}
    if good:
        codes, params = core.vector_quantize(b"".join(row[2] for row in good), dims)
        for i, row in enumerate(good):
            param = params[PARAMS * i : PARAMS * (i + 1)].tobytes()
            expected[int(row[0])] = (int(row[1]), codes[dims * i : dims * (i + 1)] + param)
    held = {entry[0]: entry for entry in entries}
    missing = sorted(set(expected) - held.keys())
    extra = sorted(held.keys() - {int(row[0]) for row in vectors})
    wrong = sorted(
        vector_id
        for vector_id, (item, code) in expected.items()
        if vector_id in held and held[vector_id][1:] != (item, code)
    )
    if missing:
        found.append(
            f"vector list {list_id}: {len(missing)} vectors have no code (first {missing[0]})"
        )
    if extra:
        found.append(
            f"vector list {list_id}: {len(extra)} codes of vectors that do not exist "
            f"(first {extra[0]})"
        )
    if wrong:
        found.append(
            f"vector list {list_id}: {len(wrong)} codes differ from their vectors "
            f"(first {wrong[0]})"
        )
    return found


def _first(row: tuple[int, int, bytes]) -> int:
    return row[0]
