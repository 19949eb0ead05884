"""The exact vector search: a scan of int8 codes, re-ranked in float32 (engine layer).

Every vector of the file is held in memory as int8 codes (`core.vector_quantize`), charged
to a budget of their own (`codes_budget()`: 64 MiB unless THREADLOOM_VECTOR_BUDGET says
otherwise, apart from the caches' THREADLOOM_MEMORY_BUDGET, so that 100k x 384 is
searched exactly by default while the savers' caches keep their 32 MiB). A search computes, from the
codes alone, an upper bound of every vector's exact score (`core.vector_bounds`), reads the
float32 vectors of the best bounds from `store_vectors` and scores them exactly
(`core.vector_scores`), widening fourfold until the `want`-th best exact score is above
every bound not read yet. So the result is exactly `VectorIndex.exact`'s, and the scan
reads only a few vectors per search from the file.

Invariants:
- the codes are those of the file's vectors when its `vector_version` (meta) was
  `Codes.version`: every vector then present has an entry whose code is its own;
- entries may be stale (a vector deleted or replaced since): a stale entry is only ever
  a wasted candidate, because a candidate's item has all its vectors read again and
  scored exactly, and each live vector has its own entry (an item scores by its best);
- a training moves vectors to other ids without changing them, so it keeps the codes
  valid (entries are re-ranked by item, never by vector id);
- a write through `written` adds the vectors it inserted while the codes are current, so
  a writer's own puts do not reload the codes; any other change reloads them.
"""

from __future__ import annotations

import os
import threading
from array import array
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final

import apsw

from threadloom import core
from threadloom.core.lru import Budget, Lru, MiB, parse_bytes
from threadloom.core.similarity import PARAMS, Metric
from threadloom.engine.sql import fetchall, ids
from threadloom.errors import CorruptionError, InvalidArgumentError

__all__ = [
    "CODES_BUDGET",
    "CODES_BUDGET_ENV",
    "VERSION_KEY",
    "Bounded",
    "Codes",
    "ExactScan",
    "codes_budget",
    "rerank",
]

#: The `meta` key whose value changes with every write that inserts vectors.
VERSION_KEY: Final = "vector_version"
#: Bytes the exact scan's codes may take in a process by default: the codes of
#: EXACT_CODE_BYTES (vectors.py: 40 MiB, 109,226 x 384) with their ids and params
#: (`dims + 40` bytes a vector: 44 MiB at 384 dims) fit.
CODES_BUDGET: Final = 64 * MiB
#: The environment variable that sets it (bytes, or with a K/M/G suffix; 0: no codes).
CODES_BUDGET_ENV: Final = "THREADLOOM_VECTOR_BUDGET"
#: Segments of codes held before they are joined into one (puts add one each).
_SEGMENTS: Final = 16
#: Entries from which a segment's scan is cut across threads (below, one thread's scan
#: takes about a millisecond: handing it out would cost more than it saves).
PARALLEL_AT: Final = 32768
#: At most this many threads scan one query's codes (the scan is memory-bound: more
#: threads than memory channels only queue).
MAX_SCAN_THREADS: Final = 4
#: The environment variable that sets the scan threads (`scan_threads()`).
SCAN_THREADS_ENV: Final = "THREADLOOM_SCAN_THREADS"
#: Rows read and quantized at a time while loading.
_BATCH: Final = 4096


@dataclass(frozen=True)
class Codes:
    """The quantized vectors of one file at one `vector_version` (never changed in place).

    Attributes:
        version: the file's `vector_version` these codes hold (None: never written).
        ids: the vector id of each entry; items: its item.
        codes: int8 codes, in segments (entries in order); params: PARAMS doubles each.
    """

    version: str | None
    ids: array[int]
    items: array[int]
    codes: tuple[bytes, ...]
    params: tuple[array[float], ...]

    @property
    def nbytes(self) -> int:
        """Estimated bytes held (codes, ids, items and params)."""
        held = 8 * (len(self.ids) + len(self.items)) + sum(map(len, self.codes))
        return held + sum(8 * len(part) for part in self.params)


class ExactScan:
    """The quantized exact search over one file's `store_vectors`, for `dims` and `metric`."""

    def __init__(self, dims: int, metric: Metric) -> None:
        self.dims = dims
        self.metric: Metric = metric
        self._lock = threading.Lock()
        self._held: Lru[str, Codes] = Lru(1, budget=codes_budget(), cost=_cost)

    def fits(self, count: int) -> bool:
        """Whether the codes of `count` vectors fit the codes' budget (`codes_budget()`)."""
        return count * (self.dims + 8 * (2 + PARAMS)) <= codes_budget().capacity

    def held(self) -> Codes | None:
        """The codes in memory, if any (whatever their version)."""
        return self._held.get("codes")

    # -- reading -----------------------------------------------------------------------------

    def codes(self, conn: apsw.Connection, count: int) -> Codes | None:
        """The codes of the file as `conn` sees it (loaded when missing or out of date);
        None when `count` vectors do not fit the budget."""
        if not self.fits(count):
            return None
        version = read_version(conn)
        held = self.held()
        if held is not None and held.version == version:
            return held
        with self._lock:
            held = self.held()
            if held is not None and held.version == version:
                return held
            loaded = self._load(conn, version)
            self._held.put("codes", loaded)
            return loaded

    def _load(self, conn: apsw.Connection, version: str | None) -> Codes:
        cursor = conn.execute("SELECT id, item, vector FROM store_vectors")
        vector_ids, items = array("q"), array("q")
        codes: list[bytes] = []
        params: list[array[float]] = []
        while True:
            rows = list(islice(cursor, _BATCH))
            if not rows:
                break
            for vector_id, item, _ in rows:
                vector_ids.append(vector_id)
                items.append(item)
            code, param = core.vector_quantize(_matrix(rows, self.dims), self.dims)
            codes.append(code)
            params.append(param)
        joined = array("d")
        for part in params:
            joined.extend(part)
        return Codes(version, vector_ids, items, (b"".join(codes),), (joined,))

    # -- writing -----------------------------------------------------------------------------

    def written(
        self,
        before: str | None,
        after: str,
        rows: Sequence[tuple[int, int, str, bytes]],
        quantized: tuple[bytes, array[float]] | None = None,
    ) -> None:
        """Record a write that moved the file from version `before` to `after` by inserting
        `rows` (id, item, field, vector): the codes gain them if they held `before`, else
        they stay as they are (out of date: the next search reloads them). `quantized`:
        `core.vector_quantize` of the rows' vectors in order, when the writer made it."""
        with self._lock:
            held = self.held()
            if held is None or held.version != before:
                return
            if quantized is None:
                quantized = core.vector_quantize(b"".join(row[3] for row in rows), self.dims)
            code, param = quantized
            segments, params = (*held.codes, code), (*held.params, param)
            if len(segments) > _SEGMENTS:
                joined = array("d")
                for part in params:
                    joined.extend(part)
                segments, params = (b"".join(segments),), (joined,)
            vector_ids = array("q", held.ids)
            vector_ids.extend(row[0] for row in rows)
            items = array("q", held.items)
            items.extend(row[1] for row in rows)
            self._held.put("codes", Codes(after, vector_ids, items, segments, params))

    def forget(self) -> None:
        """Drop the codes (a training renumbered every vector)."""
        self._held.pop("codes")

    # -- search ------------------------------------------------------------------------------

    def search(
        self,
        conn: apsw.Connection,
        codes: Codes,
        query: bytes,
        want: int,
        accept: Callable[[Sequence[int]], Collection[int]] | None,
    ) -> list[tuple[int, float]]:
        """The exact top `want` accepted `(item, score)`, best first (score, then item); an
        item scores by its best vector. `accept` sees each item at most once."""
        bounds = self.bounds(codes, query)
        return rerank(conn, Bounded(codes.items, bounds), query, want, accept, {}, self.metric)

    def bounds(self, codes: Codes, query: bytes) -> array[float]:
        """An upper bound of each entry's exact score, in entry order. On the native
        backend a scan of PARALLEL_AT entries or more is cut into one slice per scan
        thread (`scan_threads()`): the C kernel releases the GIL, so the slices run on
        as many cores; the slices are views of the codes, nothing is copied."""
        query_codes, query_params = core.vector_quantize(query, self.dims)
        jobs = _slices(codes, self.dims)
        pool = _pool() if len(jobs) > 1 else None

        def scan(job: tuple[memoryview, memoryview]) -> array[float]:
            return core.vector_bounds(
                query_codes, query_params, job[0], job[1], self.dims, self.metric
            )

        bounds = array("d")
        for part in pool.map(scan, jobs) if pool is not None else map(scan, jobs):
            bounds.extend(part)
        return bounds


@dataclass
class Bounded:
    """Candidates of a search: per vector its item and an upper bound of its exact score
    (or the score itself). `lists`: the lists whose vectors may score an item (None: all)."""

    items: array[int]
    bounds: array[float]
    lists: frozenset[int] | None = None
    ranked: Collection[int] = ()


def rerank(
    conn: apsw.Connection,
    found: Bounded,
    query: bytes,
    want: int,
    accept: Callable[[Sequence[int]], Collection[int]] | None,
    decided: dict[int, bool],
    metric: Metric,
) -> list[tuple[int, float]]:
    """The exact top `want` accepted `(item, score)` of `found`, best first (score, then
    item), items in `found.ranked` aside; an item scores by its best vector (in
    `found.lists`). Candidates are scored exactly (their items' float32 vectors read by
    item) best bound first, widening fourfold until the `want`-th exact score is above
    every bound not read. `accept` sees each item at most once (`decided` remembers)."""
    bounds, items = found.bounds, found.items
    total = len(bounds)
    best: dict[int, float] = {}
    done = 0
    k = min(total, max(4 * want, 64))
    while True:
        order = core.vector_top(bounds, None, k + 1)
        fresh = [i for i in order[done:k] if items[i] not in found.ranked]
        if accept is not None:
            fresh = _accepted(items, fresh, accept, decided)
        _rescore(conn, items, fresh, query, metric, found.lists, best)
        done = k
        ranked = sorted(best.items(), key=_rank)[:want]
        if k >= total:
            return ranked
        if len(ranked) >= want and bounds[order[k]] < ranked[-1][1]:
            return ranked
        k = min(total, 4 * k)


def _accepted(
    items: array[int],
    entries: list[int],
    accept: Callable[[Sequence[int]], Collection[int]],
    decided: dict[int, bool],
) -> list[int]:
    asked = list(dict.fromkeys(items[i] for i in entries if items[i] not in decided))
    if asked:
        passed = accept(asked)
        passing = passed if isinstance(passed, (set, frozenset, dict)) else set(passed)
        for item in asked:
            decided[item] = item in passing
    return [i for i in entries if decided[items[i]]]


def _rescore(
    conn: apsw.Connection,
    items: array[int],
    entries: list[int],
    query: bytes,
    metric: Metric,
    lists: frozenset[int] | None,
    best: dict[int, float],
) -> None:
    """Score exactly every vector of the entries' items not scored yet (read by item:
    a training moves vectors to other ids without changing them or their codes)."""
    wanted = sorted({items[i] for i in entries} - best.keys())
    if not wanted:
        return
    rows = fetchall(
        conn,
        "SELECT id, item, vector FROM store_vectors WHERE item IN carray(?)",
        (ids(wanted),),
    )
    if lists is not None:
        rows = [row for row in rows if row[0] >> _LIST_BITS in lists]
    if not rows:
        return
    dims = len(query) // 4
    scores = core.vector_scores(query, _matrix(rows, dims), dims, metric)
    for row, score in zip(rows, scores, strict=True):
        item = row[1]
        if score > best.get(item, -_INF):
            best[item] = score


_codes_budget: Budget | None = None
_codes_lock = threading.Lock()


def codes_budget() -> Budget:
    """The budget the exact scans' codes of this process draw on (made on first use):
    THREADLOOM_VECTOR_BUDGET when set, else CODES_BUDGET; `resize` changes it.

    Raises:
        InvalidArgumentError: THREADLOOM_VECTOR_BUDGET is not a size.
    """
    global _codes_budget
    with _codes_lock:
        if _codes_budget is None:
            text = os.environ.get(CODES_BUDGET_ENV, "").strip()
            _codes_budget = Budget(parse_bytes(text) if text else CODES_BUDGET)
        return _codes_budget


def read_version(conn: apsw.Connection) -> str | None:
    """The file's `vector_version` (None before any write recorded one)."""
    found = fetchall(conn, "SELECT value FROM meta WHERE key = ?", (VERSION_KEY,))
    return None if not found else str(found[0][0])


_INF: Final = float("inf")
#: A vector id's list is `id >> _LIST_BITS` (vectors.LIST_BITS).
_LIST_BITS: Final = 32


def _matrix(rows: Sequence[tuple[Any, ...]], dims: int) -> bytes:
    """The vectors of `rows` (id, item, vector) as one float32 matrix."""
    matrix = b"".join(row[2] for row in rows)
    if len(matrix) != 4 * dims * len(rows):
        bad = sorted({row[1] for row in rows if len(row[2]) != 4 * dims})
        raise CorruptionError(
            f"the vectors of items {bad[:5]} are not {dims} float32; run `threadloom "
            "verify`, and put those items again"
        )
    return matrix


def scan_threads() -> int:
    """Threads an exact scan of PARALLEL_AT entries or more is cut across: the number in
    SCAN_THREADS_ENV if set (1: one thread), else the cores this process may use, at most
    MAX_SCAN_THREADS; 1 on the pure-Python backend, whose kernel holds the GIL.

    Raises:
        InvalidArgumentError: SCAN_THREADS_ENV is not a positive integer.
    """
    if core.backend() != "native":
        return 1
    setting = os.environ.get(SCAN_THREADS_ENV, "").strip()
    if setting:
        if not setting.isdigit() or int(setting) < 1:
            raise InvalidArgumentError(
                f"{SCAN_THREADS_ENV}={setting!r} is not a positive number of threads; set it "
                "to 1 for one thread per search, or unset it to use the cores"
            )
        return int(setting)
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(MAX_SCAN_THREADS, usable or 1))


def _slices(codes: Codes, dims: int) -> list[tuple[memoryview, memoryview]]:
    """Each segment's codes and params as views, a segment of PARALLEL_AT entries or more
    cut into `scan_threads()` slices of nearly equal size."""
    threads = scan_threads()
    jobs: list[tuple[memoryview, memoryview]] = []
    for segment, param in zip(codes.codes, codes.params, strict=True):
        code_view, param_view = memoryview(segment), memoryview(param)
        count = len(param) // PARAMS
        if count == 0:
            continue
        cuts = threads if count >= PARALLEL_AT else 1
        step = -(-count // cuts)
        for start in range(0, count, step):
            end = min(count, start + step)
            jobs.append(
                (code_view[start * dims : end * dims], param_view[start * PARAMS : end * PARAMS])
            )
    return jobs


_scan_pool: ThreadPoolExecutor | None = None
_scan_pool_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _scan_pool
    with _scan_pool_lock:
        if _scan_pool is None:
            # The slices of one search run at once whatever SCAN_THREADS_ENV says later.
            workers = max(MAX_SCAN_THREADS, scan_threads())
            _scan_pool = ThreadPoolExecutor(workers, thread_name_prefix="threadloom-scan")
        return _scan_pool


def _forget_pool() -> None:
    """In a forked child the parent's scan threads do not exist: start a new pool."""
    global _scan_pool
    _scan_pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _rank(entry: tuple[int, float]) -> tuple[float, int]:
    return (-entry[1], entry[0])


def _cost(codes: Codes) -> int:
    return codes.nbytes
