"""The exact vector search: a scan of 4-bit planes of int8 codes, re-ranked in float32
(engine layer).

Every vector of the file is held in memory as int8 codes (`core.vector_quantize`) split
into two 4-bit planes (`core.vector_planes`: the same bytes as the codes, and 8 more per
vector) and the low nibbles' top bits again (`core.vector_tops`: a bit per dim, 8 more
bytes), charged to a budget of their own (`codes_budget()`: 64 MiB unless
THREADLOOM_VECTOR_BUDGET says otherwise, apart from the caches' THREADLOOM_MEMORY_BUDGET,
so that 100k x 384 is searched exactly by default while the savers' caches keep their
32 MiB). A search computes, from the high plane alone (half the bytes of the codes), a
coarse upper bound of every vector's exact score (`core.vector_coarse_bounds`); then the
int8 bound (`core.vector_bounds`'s, from both planes: `core.vector_refine`) of the best
coarse bounds, widening fourfold until the `want`-th best lower bound of an item is at
least every coarse bound left, then of each entry whose coarse bound reaches it (after
searches where many did, the coarse pass reads the low nibbles' top bits too:
`core.vector_tight_bounds`); then it reads the float32 vectors of the best bounds from
`store_vectors` and scores them exactly (`core.vector_scores`), widening fourfold until
the `want`-th best exact score is above every bound not read yet. Every bound is sound
(at least the exact score), so the result is exactly `VectorIndex.exact`'s, and the scan
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

import heapq
import os
import threading
from array import array
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from typing import Final, TypeVar

import apsw

from threadloom import core
from threadloom.core.lru import Budget, Lru, MiB, parse_bytes
from threadloom.core.planes import half, split, top_bytes
from threadloom.core.similarity import PARAMS, Metric
from threadloom.engine.items.rerank import Bounded, rerank, rescore, vector_matrix
from threadloom.engine.sql import fetchall
from threadloom.errors import InvalidArgumentError

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

_T = TypeVar("_T")

#: The `meta` key whose value changes with every write that inserts vectors.
VERSION_KEY: Final = "vector_version"
#: Bytes the exact scan's codes may take in a process by default: the codes of
#: EXACT_CODE_BYTES (vectors.py: 40 MiB, 109,226 x 384) with their ids, params and
#: spread, top bits and their spread (`2 * ceil(dims / 2) + 32 * ceil(dims / 256) + 56`
#: bytes a vector: 52.5 MiB at 384 dims) fit.
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
#: Entries of the best coarse bounds whose int8 bounds a search computes first, to learn
#: a least score of the top (at least 4 per wanted item; fourfold while fewer items).
REFINE_FIRST: Final = 256
#: Entries whose coarse bounds reach the least score of the top from which their int8
#: bounds are computed on the scan threads (~0.1 us each: below, the hand-off costs more).
PARALLEL_REFINE: Final = 8192
#: Shares of the entries whose coarse bounds reached the top's least score from which the
#: next search reads the top bits too (they halve the slack: on uniform data ~13.5% reach
#: it, ~1.2% with them), and below which (read) it stops: ~0.1 us of refinement an entry
#: against the third more bytes of the tighter pass. Clustered data: ~0.2% either way.
TIGHT_FROM: Final = 0.05
LOOSE_BELOW: Final = 0.005
#: Entries whose bounds reach the least score of the top that an unfiltered search hands
#: the re-rank alone (more: all of them, ranked by their bounds).
_REACHING: Final = 4096


@dataclass(frozen=True)
class Codes:
    """The quantized vectors of one file at one `vector_version` (never changed in place).

    Attributes:
        version: the file's `vector_version` these codes hold (None: never written).
        ids: the vector id of each entry; items: its item.
        high, low: the 4-bit planes of the entries' int8 codes (`core.vector_planes`:
            `half(dims)` bytes an entry each), in segments (entries in order);
        params: PARAMS doubles an entry; spread: one double an entry.
        tops, tight: the low nibbles' top bits (`core.vector_tops`: `top_bytes(dims)` an
            entry) and their spread (one double an entry), in the same segments; both
            empty when the budget holds the planes but not these (`ExactScan.fits`).
    """

    version: str | None
    ids: array[int]
    items: array[int]
    high: tuple[bytes, ...]
    low: tuple[bytes, ...]
    params: tuple[array[float], ...]
    spread: tuple[array[float], ...]
    tops: tuple[bytes, ...]
    tight: tuple[array[float], ...]

    @property
    def nbytes(self) -> int:
        """Estimated bytes held (planes, ids, items, params and spread)."""
        held = 8 * (len(self.ids) + len(self.items)) + 2 * sum(map(len, self.high))
        held += sum(map(len, self.tops))
        return held + sum(8 * len(part) for part in (*self.params, *self.spread, *self.tight))

    def joined(self) -> Codes:
        """The same codes in one segment."""
        return Codes(
            self.version,
            self.ids,
            self.items,
            (b"".join(self.high),),
            (b"".join(self.low),),
            (_joined(self.params),),
            (_joined(self.spread),),
            (b"".join(self.tops),) if self.tops else (),
            (_joined(self.tight),) if self.tight else (),
        )


class ExactScan:
    """The quantized exact search over one file's `store_vectors`, for `dims` and `metric`."""

    def __init__(self, dims: int, metric: Metric) -> None:
        self.dims = dims
        self.metric: Metric = metric
        self._lock = threading.Lock()
        #: Whether the next search's coarse pass reads the top bits too (`_tight_next`).
        self.tight = False
        self._held: Lru[str, Codes] = Lru(1, budget=codes_budget(), cost=_cost)

    def fits(self, count: int, tops: bool = False) -> bool:
        """Whether the codes of `count` vectors fit the codes' budget (`codes_budget()`);
        with `tops`, their top bits too. The exact scan's limit (`exact_up_to`) is set by
        the planes alone: the top bits are held only when they fit as well."""
        each = 2 * half(self.dims) + 8 * (3 + PARAMS)
        if tops:
            each += top_bytes(self.dims) + 8
        return count * each <= codes_budget().capacity

    def held(self) -> Codes | None:
        """The codes in memory, if any (whatever their version)."""
        return self._held.get("codes")

    def current(self, version: str | None) -> Codes | None:
        """The codes in memory when they hold `version` (the file's `vector_version` as
        the caller's transaction sees it)."""
        held = self.held()
        return held if held is not None and held.version == version else None

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
            loaded = self._load(conn, version, self.fits(count, tops=True))
            self._held.put("codes", loaded)
            return loaded

    def _load(self, conn: apsw.Connection, version: str | None, with_tops: bool) -> Codes:
        cursor = conn.execute("SELECT id, item, vector FROM store_vectors")
        vector_ids, items = array("q"), array("q")
        high: list[bytes] = []
        low: list[bytes] = []
        params: list[array[float]] = []
        spread: list[array[float]] = []
        tops: list[bytes] = []
        tight: list[array[float]] = []
        while True:
            rows = list(islice(cursor, _BATCH))
            if not rows:
                break
            for vector_id, item, _ in rows:
                vector_ids.append(vector_id)
                items.append(item)
            code, param = core.vector_quantize(vector_matrix(rows, self.dims), self.dims)
            planes = core.vector_planes(code, self.dims)
            high.append(planes[0])
            low.append(planes[1])
            params.append(param)
            spread.append(planes[2])
            if with_tops:
                bits, loose = core.vector_tops(code, self.dims)
                tops.append(bits)
                tight.append(loose)
        held = Codes(
            version,
            vector_ids,
            items,
            tuple(high),
            tuple(low),
            tuple(params),
            tuple(spread),
            tuple(tops),
            tuple(tight),
        )
        return held.joined()

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
            high, low, spread = core.vector_planes(code, self.dims)
            tops: tuple[bytes, ...] = ()
            tight: tuple[array[float], ...] = ()
            if held.tops and self.fits(len(held.ids) + len(rows), tops=True):
                bits, loose = core.vector_tops(code, self.dims)
                tops, tight = (*held.tops, bits), (*held.tight, loose)
            vector_ids = array("q", held.ids)
            vector_ids.extend(row[0] for row in rows)
            items = array("q", held.items)
            items.extend(row[1] for row in rows)
            codes = Codes(
                after,
                vector_ids,
                items,
                (*held.high, high),
                (*held.low, low),
                (*held.params, param),
                (*held.spread, spread),
                tops,
                tight,
            )
            self._held.put("codes", codes.joined() if len(codes.high) > _SEGMENTS else codes)

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
        scored: dict[int, float] = {}

        def score(entries: list[int]) -> dict[int, float]:
            rescore(conn, codes.items, entries, query, self.metric, None, scored)
            return scored

        # Unfiltered, the exact scores of a few best candidates tell the least score of
        # the top; with a filter only accepted items may tell it (the int8 lower bounds).
        bounds, least = self._bounds(codes, query, want, score if accept is None else None)
        reaching, count = core.vector_above(bounds, least, _REACHING)
        found = Bounded(codes.items, bounds)
        if accept is None and count <= _REACHING:
            # Unfiltered, no other entry can reach the top: its bound is below `least`.
            items = array("q", [codes.items[entry] for entry in reaching])
            found = Bounded(items, array("d", [bounds[entry] for entry in reaching]))
        first = count if count <= _REACHING else 0
        return rerank(conn, found, query, want, accept, {}, self.metric, scored, first)

    def bounds(self, codes: Codes, query: bytes, want: int) -> array[float]:
        """An upper bound of each entry's exact score, in entry order: the int8 bound of
        the entries whose coarse bound could reach the top `want` items, the coarse bound
        of the others (every one is at least the entry's exact score)."""
        return self._bounds(codes, query, want, None)[0]

    def _bounds(
        self,
        codes: Codes,
        query: bytes,
        want: int,
        score: Callable[[list[int]], dict[int, float]] | None,
    ) -> tuple[array[float], float]:
        """`bounds`, and a least score of the top `want` items found (exact when `score`
        is given; -inf when unknown): every entry not refined has a bound below it.
        `score`: scores the items of some entries exactly, returning every item scored
        so far."""
        query_codes, query_params = core.vector_quantize(query, self.dims)
        scan = _Query(
            codes,
            split(query_codes, self.dims),
            query_params,
            _slices(codes),
            self.tight and bool(codes.tops),
        )
        coarse, raw = self._coarse(scan)
        bounds, lows = array("d", coarse), array("d", [-_INF]) * len(coarse)
        arrays = (raw, coarse, bounds, lows)
        # The int8 bounds of the best coarse bounds tell the least score of the top
        # `want` items (their lower bounds); then every entry whose coarse bound reaches
        # it gets its int8 bound, the others cannot reach the top.
        size = max(REFINE_FIRST, 4 * want)
        least, below = -_INF, _INF
        while least == -_INF and below > -_INF:
            at_least = _threshold(coarse, size)
            self._refine(scan, (at_least, below), arrays, threaded=False)
            picked, _ = core.vector_above(coarse, at_least, 4 * size)
            least, below, size = _least_of_top(picked, lows, codes.items, want), at_least, 4 * size
        if score is not None and least > -_INF:
            best = sorted(picked, key=lambda entry: -bounds[entry])[: 2 * want]
            exact = sorted(score(best).values(), reverse=True)
            least = max(least, exact[want - 1] if len(exact) >= want else -_INF)
        _, reaching = core.vector_above(coarse, least, 0)
        if least < below:
            # A few thousand refinements take less than handing them to another thread.
            self._refine(scan, (least, below), arrays, threaded=reaching >= PARALLEL_REFINE)
        self.tight = _tight_next(scan.tight, reaching, len(coarse))
        return bounds, least

    def _coarse(self, scan: _Query) -> tuple[array[float], array[int]]:
        """The coarse bound of each entry and its high nibbles' dot, in entry order. On the
        native backend a scan of PARALLEL_AT entries or more is cut into one slice per
        scan thread (`scan_threads()`): the C kernel releases the GIL, so the slices run
        on as many cores; the slices are views of the planes, nothing is copied."""
        width = half(self.dims)

        def run(job: tuple[int, int, int]) -> tuple[array[float], array[int]]:
            segment, start, end = job
            high = memoryview(scan.codes.high[segment])[start * width : end * width]
            params = memoryview(scan.codes.params[segment])[start * PARAMS : end * PARAMS]
            if scan.tight:
                stride = top_bytes(self.dims)
                return core.vector_tight_bounds(
                    scan.split,
                    scan.params,
                    high,
                    memoryview(scan.codes.tops[segment])[start * stride : end * stride],
                    params,
                    memoryview(scan.codes.tight[segment])[start:end],
                    self.dims,
                    self.metric,
                )
            return core.vector_coarse_bounds(
                scan.split,
                scan.params,
                high,
                params,
                memoryview(scan.codes.spread[segment])[start:end],
                self.dims,
                self.metric,
            )

        parts = _run(run, scan.jobs)
        if len(parts) == 1:
            return parts[0]
        bounds, raw = array("d"), array("q")
        for part, dots in parts:
            bounds.extend(part)
            raw.extend(dots)
        return bounds, raw

    def _refine(
        self,
        scan: _Query,
        span: tuple[float, float],
        arrays: tuple[array[int], array[float], array[float], array[float]],
        threaded: bool,
    ) -> int:
        """Refine the entries whose coarse bound is in `span`, slice by slice (on the scan
        threads if `threaded`: a first refinement is too short to hand out); return how
        many of them have a bound of at least its start."""
        width = half(self.dims)
        views = [memoryview(part) for part in arrays]
        firsts = [0]
        for spread in scan.codes.spread:
            firsts.append(firsts[-1] + len(spread))

        def run(job: tuple[int, int, int]) -> int:
            segment, start, end = job
            first = firsts[segment]
            raw, coarse, bounds, lows = (view[first + start : first + end] for view in views)
            refine = core.vector_refine_tight if scan.tight else core.vector_refine
            return refine(
                scan.split,
                scan.params,
                raw,
                memoryview(scan.codes.low[segment])[start * width : end * width],
                memoryview(scan.codes.params[segment])[start * PARAMS : end * PARAMS],
                self.dims,
                self.metric,
                *span,
                coarse,
                bounds,
                lows,
            )

        if threaded:
            return sum(_run(run, scan.jobs))
        return sum(map(run, scan.jobs))


@dataclass(frozen=True)
class _Query:
    """One search's query (split codes and params) over `codes`, cut into `jobs`."""

    codes: Codes
    split: bytes
    params: array[float]
    jobs: list[tuple[int, int, int]]
    tight: bool = False


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


def _slices(codes: Codes) -> list[tuple[int, int, int]]:
    """(segment, first entry, end) of each slice: a segment of PARALLEL_AT entries or more
    cut into `scan_threads()` slices of nearly equal size."""
    threads = scan_threads()
    jobs: list[tuple[int, int, int]] = []
    for segment, spread in enumerate(codes.spread):
        count = len(spread)
        if count == 0:
            continue
        cuts = threads if count >= PARALLEL_AT else 1
        step = -(-count // cuts)
        jobs.extend((segment, start, min(count, start + step)) for start in range(0, count, step))
    return jobs


def _run(job: Callable[[tuple[int, int, int]], _T], jobs: list[tuple[int, int, int]]) -> list[_T]:
    """`job` of each slice, in order: the first on the calling thread, the others on the
    scan threads (one hand-off fewer, and the caller works while it waits)."""
    if len(jobs) < 2:
        return [job(one) for one in jobs]
    others = [_pool().submit(job, one) for one in jobs[1:]]
    first = job(jobs[0])
    return [first, *(other.result() for other in others)]


def _threshold(values: array[float], size: int) -> float:
    """A value about `size` of `values` are at least (from a sample of about 4 * size of
    them; -inf when there are no more than `size`)."""
    if size >= len(values):
        return -_INF
    stride = max(1, len(values) // (4 * size))
    return heapq.nlargest(size // stride + 1, values[::stride])[-1]


def _tight_next(tight: bool, reaching: int, entries: int) -> bool:
    """Whether the next search reads the top bits, after one that did (`tight`) or not saw
    `reaching` of `entries` coarse bounds reach the top's least score."""
    if not entries:
        return False
    if tight:
        return reaching >= LOOSE_BELOW * entries
    return reaching >= TIGHT_FROM * entries


def _least_of_top(entries: list[int], lows: array[float], items: array[int], want: int) -> float:
    """The `want`-th best item's lower bound among `entries` (an item's by its best entry's;
    -inf when they hold fewer items): at most the `want`-th best item's exact score."""
    best: dict[int, float] = {}
    for entry in entries:
        item, low = items[entry], lows[entry]
        if low > best.get(item, -_INF):
            best[item] = low
    if len(best) < want or want < 1:
        return -_INF if want >= 1 else _INF
    return sorted(best.values(), reverse=True)[want - 1]


def _joined(parts: tuple[array[float], ...]) -> array[float]:
    joined = array("d")
    for part in parts:
        joined.extend(part)
    return joined


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


def _cost(codes: Codes) -> int:
    return codes.nbytes
