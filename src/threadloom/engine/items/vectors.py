"""The Store's vector index: inverted lists (IVF) over `store_lists` and `store_vectors`.

Engine layer; the index's SQL lives here, its arithmetic in `threadloom.core` (C, or the
Python specification). A vector row's id is `list << 32 | n`, so each inverted list is one
range of the table's b-tree: probing a list reads its rows in key order, without an index.
Until the first training every vector is in list 0 and a search reads them all (exact);
a training (`train` over a file in short steps, writers going on, or `maintain` in the
caller's transaction: vector_training.py) makes `~sqrt(N)` lists by k-means on a sample
once there are `train_from` vectors, and again whenever the count doubles, moves every
vector to its nearest list, and records the lists' recall@10 on held-out vectors in `meta`
(`vector_recall.py`). Up to `exact_up_to` vectors a search is the exact quantized scan
(`scan.py`) while it fits the memory budget, and so is a search of lists never trained
(list 0 holds them all) at any count whose codes fit; no training is due while the
exact scan serves this process's searches (`compact` trains anyway), since none of them
would read the lists.

Invariants:
- `store_lists.size` is the number of rows in the list's id range (triggers keep it, also
  for deletes cascaded from `store_items`);
- a vector is in list 0 or in a list of the current training (it was nearest to the
  vector's centroid when written or last trained), or, while a training moves vectors
  (`meta.vector_moving`), in a list of the training before; searches and puts use the
  lists of both then;
- a search returns exactly what `exact` would once it has probed every list, and it stops
  probing early only when `want` accepted items were found.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any, Final, cast

import apsw

from threadloom import core
from threadloom.core.similarity import Metric, check_metric
from threadloom.engine.items import (
    vector_checks,
    vector_codes,
    vector_packing,
    vector_probe,
    vector_values,
)
from threadloom.engine.items.candidates import Candidates
from threadloom.engine.items.rerank import scored
from threadloom.engine.items.scan import VERSION_KEY, ExactScan
from threadloom.engine.items.vector_recall import FLOOR as RECALL_FLOOR
from threadloom.engine.items.vector_training import Training, moving, resumable
from threadloom.engine.sql import Transactions, fetchall, ids, insert_values
from threadloom.errors import CorruptionError, EngineError, InvalidValueError, VectorConfigError

__all__ = ["LIST_BITS", "Metric", "VectorIndex"]

#: A vector's id is `list << LIST_BITS | n`, 1 <= n < 2**LIST_BITS.
LIST_BITS = 32
#: Vectors before the first training (fewer are searched exactly, which is as fast).
TRAIN_FROM = 4096
#: Retrain when the count reached this multiple of the last training's (or fell to its inverse
#: squared: lists far too many and small).
GROWTH = 2
#: Lists probed first (more follow, doubling, while fewer than `want` items are accepted).
PROBES = 16
#: Rows read and rewritten at a time while reassigning.
_BATCH = 2048
#: Code bytes (vectors x dims) up to which a search is the exact scan: ~5 ms (bench/README.md).
EXACT_CODE_BYTES = 40 * 2**20


@dataclass(frozen=True)
class _Lists:
    """The trained lists of one generation: their ids and centroids (float32, in id order)."""

    generation: int
    ids: list[int]
    centroids: bytes
    #: `since(first)` results, made once per generation.
    views: dict[int, _Lists] = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def since(self, first: int) -> _Lists:
        """The lists from id `first` on (a training's new lists while it moves vectors)."""
        view = self.views.get(first)
        if view is None:
            at = next((i for i, list_id in enumerate(self.ids) if list_id >= first), len(self.ids))
            size = len(self.centroids) // max(len(self.ids), 1)
            view = _Lists(self.generation, self.ids[at:], self.centroids[at * size :])
            self.views[first] = view
        return view


Accept = Callable[[Sequence[int]], Collection[int]] | None


@dataclass(frozen=True)
class _Meta:
    dims: int | None
    metric: str | None
    trained: int
    generation: int
    #: recall@10 of the default probes at the last training; the probes reaching the floor.
    recall: float | None = None
    probes: int = 0
    #: Fewer probes than the default whose held-out recall held the floor (0: none).
    fewer: int = 0
    #: While a training moves vectors: its first new list (puts go to the new lists).
    moving: int | None = None


class VectorIndex:
    """An IVF index over the file's `store_vectors`, for vectors of `dims` float32.

    Every method takes the caller's connection: `replace`, `remove` and `maintain` inside
    its write transaction, `search` and `exact` inside a read (or write) transaction.

    Args:
        dims: the length of every vector and query.
        metric: `cosine`, `l2` or `inner_product` (scores as LangGraph's PostgresStore
            reports them: cosine similarity, minus the euclidean distance, dot product).
        probes: lists probed before any is added for a short result (recall vs speed).
        train_from: vectors needed before the first training (which waits, past it, as
            long as the exact scan serves every search: `due`).
        exact_up_to: vectors up to which a search is the exact quantized scan (0: never;
            None: EXACT_CODE_BYTES // dims, or `train_from` on the pure-Python core).

    Raises:
        ValueError: dims below 1, an unknown metric, or probes/train_from below 1.
    """

    def __init__(
        self,
        dims: int,
        metric: Metric = "cosine",
        *,
        probes: int = PROBES,
        train_from: int = TRAIN_FROM,
        exact_up_to: int | None = None,
    ) -> None:
        if not isinstance(dims, int) or isinstance(dims, bool) or dims < 1:
            raise InvalidValueError(f"index dims must be a positive integer, not {dims!r}")
        if probes < 1 or train_from < 1:
            raise InvalidValueError(
                f"probes and train_from must be at least 1 ({probes}, {train_from})"
            )
        self.dims = dims
        self.metric: Metric = check_metric(metric)
        self.probes = probes
        self.train_from = train_from
        # The pure-Python core scans ~100x slower: there, only as far as list 0 is scanned.
        default = EXACT_CODE_BYTES // dims
        if core.backend() != "native":
            default = min(default, train_from)
        self.exact_up_to = default if exact_up_to is None else exact_up_to
        self.scan = ExactScan(dims, self.metric)
        # Lists are partitions of space: for inner product they are trained and assigned by
        # euclidean distance (the dot product would crowd everything into the longest centroid).
        self._assign = "l2" if self.metric == "inner_product" else self.metric
        self._cache: _Lists | None = None

    # -- configuration ---------------------------------------------------------------------

    def check_config(self, conn: apsw.Connection) -> None:
        """Raise VectorConfigError if the file's index holds vectors of other dims."""
        held = self._meta(conn).dims
        if held is None:
            found = fetchall(conn, "SELECT length(vector) FROM store_vectors LIMIT 1")
            held = found[0][0] // 4 if found else None
        if held is not None and held != self.dims and self._count(conn):
            raise VectorConfigError(
                f"the file's vector index holds vectors of {held} dimensions, and the Store's "
                f"index config says {self.dims}; open the Store with dims={held}, or re-embed "
                "every item with the new embedder (`threadloom reembed FILE --all`, or "
                "threadloom.langgraph.reembed.reembed_file(path, index, every=True))"
            )
        meta = self._meta(conn)
        if meta.generation and meta.metric and meta.metric != self.metric:
            # Two stores with different metrics would retrain the lists at every batch.
            raise VectorConfigError(
                f"the file's vector index is trained for distance_type={meta.metric!r}, and "
                f"the Store's index config says {self.metric!r}; open the Store with "
                f"distance_type={meta.metric!r} (every store on the file must agree), or "
                "re-embed every item (`threadloom reembed FILE --all`)"
            )

    def settings(self, conn: apsw.Connection) -> dict[str, Any]:
        """The index's `meta` rows (`vector_*`), read in one query for the helpers that
        take them (`_meta`, `moving`, `coded_from`, the scan's version, packing)."""
        return dict(
            fetchall(conn, "SELECT key, value FROM meta WHERE key LIKE 'vector@_%' ESCAPE '@'")
        )

    def _meta(self, conn: apsw.Connection, rows: dict[str, Any] | None = None) -> _Meta:
        rows = self.settings(conn) if rows is None else rows
        dims = rows.get("vector_dims")
        return _Meta(
            dims=None if dims is None else int(dims),
            metric=rows.get("vector_metric"),
            trained=int(rows.get("vector_trained", 0)),
            generation=int(rows.get("vector_generation", 0)),
            recall=None if rows.get("vector_recall") is None else float(rows["vector_recall"]),
            probes=int(rows.get("vector_probes", 0)),
            fewer=int(rows.get("vector_fewer_probes", 0)),
            moving=_first_new_list(rows.get("vector_moving")),
        )

    def _count(self, conn: apsw.Connection) -> int:
        return int(fetchall(conn, "SELECT coalesce(sum(size), 0) FROM store_lists")[0][0])

    def _set_meta(self, conn: apsw.Connection, values: dict[str, Any]) -> None:
        conn.executemany(
            "INSERT INTO meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            list(values.items()),
        )

    def _claim(self, conn: apsw.Connection, settings: dict[str, Any]) -> dict[str, Any]:
        """Record this index's dims in a file; an empty index of other dims starts over.
        Return the index's settings as they are then (`settings`: as read before)."""
        if self._meta(conn, settings).dims == self.dims:
            return settings
        self.check_config(conn)
        conn.execute("DELETE FROM store_vectors")  # rows of other dims can only be damage here
        conn.execute("DELETE FROM store_lists WHERE id != 0")
        vector_codes.clear(conn)
        conn.execute(
            "DELETE FROM meta WHERE key IN ('vector_trained', 'vector_generation', "
            "'vector_recall', 'vector_probes', 'vector_moving', 'vector_fewer_probes', "
            "'vector_fewer_recall')"
        )
        self._set_meta(conn, {"vector_dims": self.dims})
        return self.settings(conn)

    # -- values ----------------------------------------------------------------------------

    def _pack(self, values: Sequence[float], what: str) -> bytes:
        return vector_values.pack_one(values, self.dims, what)

    def _lists(self, conn: apsw.Connection, meta: _Meta | None = None) -> _Lists:
        """The trained lists, from the cache while the file's generation is unchanged."""
        generation = (meta or self._meta(conn)).generation
        cached = self._cache
        if cached is not None and cached.generation == generation:
            return cached
        rows = fetchall(conn, "SELECT id, centroid FROM store_lists WHERE id != 0 ORDER BY id")
        size = 4 * self.dims
        bad = [list_id for list_id, centroid in rows if len(centroid) != size]
        if bad:
            raise CorruptionError(
                f"vector lists {bad[:5]} have centroids that are not {self.dims} float32; run "
                "`threadloom verify`, then retrain the index (`maintain` after deleting them)"
            )
        lists = _Lists(generation, [row[0] for row in rows], b"".join(row[1] for row in rows))
        self._cache = lists
        return lists

    def _nearest_lists(self, lists: _Lists, matrix: bytes) -> list[int]:
        if not lists.ids:
            return [0] * (len(matrix) // (4 * self.dims))
        chosen = core.vector_nearest(matrix, lists.centroids, self.dims, self._assign)
        return [lists.ids[index] for index in chosen]

    # -- writes ----------------------------------------------------------------------------

    def replace(
        self, conn: apsw.Connection, item: int, vectors: Sequence[tuple[str, Sequence[float]]]
    ) -> None:
        """Make `item`'s vectors exactly `vectors` (field path, embedding): `replace_many`
        for one item."""
        self.replace_many(conn, [(item, vectors)])

    def replace_many(
        self,
        conn: apsw.Connection,
        entries: Sequence[tuple[int, Sequence[tuple[str, Sequence[float]]]]],
        fresh: Collection[int] = (),
    ) -> list[bytes]:
        """Make each item's vectors exactly the given ones (field path, embedding), in the
        caller's write transaction; each goes to the list of its nearest centroid (one
        kernel call and one settings read for the whole batch). `fresh`: items this
        transaction inserted, which hold no vectors yet (nothing to delete).

        Returns:
            Each vector as stored (float32 bytes), in the order of `entries`.

        Raises:
            ValueError: a vector of the wrong length or with a non-finite value, or a field
                given twice for one item.
            VectorConfigError: the file's index holds vectors of other dims.
        """
        _writing(conn)
        flat, matrix, quantized = vector_values.pack_many(entries, self.dims)
        if not entries:
            return []
        # One read of the index's settings serves the whole write (none of the steps
        # below changes them but `set_coded_from`, noted where it runs).
        settings = self._claim(conn, self.settings(conn))
        vector_codes.drop_items(conn, [item for item, _ in entries if item not in fresh])
        if not flat:
            return []
        meta = self._meta(conn, settings)
        lists = self._lists(conn, meta)
        if meta.moving is not None:  # a training moves vectors: its new lists take puts
            lists = lists.since(meta.moving)
        targets = self._nearest_lists(lists, matrix)
        rows: list[tuple[int, int, str, bytes]] = []
        following: dict[int, int] = {}
        for (item, field, blob), list_id in zip(flat, targets, strict=True):
            vector_id = following.get(list_id) or self._next_id(conn, list_id)
            following[list_id] = vector_id + 1
            rows.append((vector_id, item, field, blob))
        before = settings.get(VERSION_KEY)
        before = None if before is None else str(before)
        after = str(random.SystemRandom().randrange(1, 2**62))
        self._set_meta(conn, {VERSION_KEY: after})
        # Few statements, rows in id order (list by list): 2x faster than one statement
        # a row into lists spread over the table (bench/README.md, "Bulk loads").
        insert_values(conn, "INSERT INTO store_vectors(id, item, field, vector)", sorted(rows))
        if (
            self.coding(len(rows))
            and vector_codes.coded_from(conn, settings) is None
            and self._count(conn) == len(rows)
        ):
            vector_codes.set_coded_from(conn, 0)  # an empty index loaded beyond the exact scan
            settings[vector_codes.FROM_KEY] = 0
        vector_codes.add(conn, [(row[0], row[1], row[3]) for row in rows], self.dims, settings)
        self.scan.written(before, after, rows, quantized)
        return [blob for _, _, blob in flat]

    def _next_id(self, conn: apsw.Connection, list_id: int) -> int:
        low = list_id << LIST_BITS
        last = fetchall(
            conn,
            "SELECT max(id) FROM store_vectors WHERE id >= ? AND id < ?",
            (low, low + (1 << LIST_BITS)),
        )[0][0]
        following = low + 1 if last is None else last + 1
        if following >= low + (1 << LIST_BITS):
            raise EngineError(
                f"vector list {list_id} has used all of its {2**LIST_BITS - 1} ids; retrain the "
                "index (maintain) to renumber it"
            )
        return following

    def remove(self, conn: apsw.Connection, items: Sequence[int]) -> None:
        """Delete the vectors of `items` (in the caller's write transaction; list sizes follow)."""
        _writing(conn)
        vector_codes.drop_items(conn, items)

    # -- search ----------------------------------------------------------------------------

    def search(
        self,
        conn: apsw.Connection,
        query: Sequence[float],
        want: int,
        accept: Callable[[Sequence[int]], Collection[int]] | None = None,
        *,
        probes: int | None = None,
    ) -> list[tuple[int, float]]:
        """Return up to `want` `(item, score)`, best first, one per item (its best field).

        Lists nearest the query are probed first, `probes` of them (the index's default
        when None), then twice as many in total, and so on, while fewer than `want`
        candidates are accepted; `accept(item_ids)` returns those passing the caller's
        filters and is called on batches of candidates, best first, each id at most once.
        Probing every list gives every accepted item, so a selective filter loses nothing.

        The ranking is in tiers: the items of the first lists probed, best first, then
        those the next lists add, best first, and so on. The tiers depend on the query
        only, never on `want`, so pages (`want` = offset + limit) of one query neither
        repeat nor skip an item. Until the index is trained there is one list: exact.

        With `probes` None, up to `exact_up_to` vectors, at any count while the lists were
        never trained, or when the lists' recorded recall cannot reach RECALL_FLOOR, the
        search is the exact scan while it fits the memory budget: one tier, `exact`'s
        order; lists whose recall needed wider probes get them, and lists whose recall
        held the floor at fewer probes than the default (95% confidence, held-out
        queries: vector_recall.py) are probed that many first.

        Raises:
            ValueError: a query of the wrong length or with a non-finite value.
        """
        blob = self._pack(query, "the query")
        if want <= 0:
            return []
        if probes is None:
            settings = self.settings(conn)
            meta = self._meta(conn, settings)
            low = meta.recall is not None and meta.recall < RECALL_FLOOR
            small = self._counted(meta)
            # Lists never trained hold every vector in list 0 (or, while the first training
            # moves them, there and in its new lists): probing them reads every float32
            # row, so the exact scan serves at any count its codes fit the budget.
            untrained = not meta.generation
            # Codes held at the file's version have an entry for every vector it holds:
            # no more entries than exact_up_to means no more vectors (no count to read).
            version = settings.get(VERSION_KEY)  # read with the settings: no query more
            current = self.scan.current(None if version is None else str(version))
            held = current if small and not low else None
            if held is not None and (len(held.ids) <= self.exact_up_to or untrained):
                return self.scan.search(conn, held, blob, want, accept)
            count = self._count(conn) if small or (low and not meta.probes) else None
            if count is not None and (
                count <= self.exact_up_to or untrained or (low and not meta.probes)
            ):
                codes = self.scan.codes(conn, count)  # None: over the memory budget
                if codes is not None:
                    return self.scan.search(conn, codes, blob, want, accept)
            # Lists short of the floor: the probes that reached it, or half of the lists;
            # at or above it, fewer probes when their held-out recall held it too.
            if low:
                probes = meta.probes or len(self._lists(conn).ids) // 2
            elif meta.recall is not None and 0 < meta.fewer < self.probes:
                probes = meta.fewer
        return self.probe(conn, blob, want, accept, probes or self.probes)

    def _counted(self, meta: _Meta) -> bool:
        """Whether `search` counts the vectors to choose the exact scan. Counting reads
        every list's row (0.6 ms at 1M), so it is skipped when the last training was too
        large for the count to be at most exact_up_to now; a shrink that far makes a
        training due (`_due` asks this too, so the two never disagree)."""
        return meta.trained <= GROWTH * GROWTH * self.exact_up_to

    def probe(
        self, conn: apsw.Connection, blob: bytes, want: int, accept: Accept, probes: int
    ) -> list[tuple[int, float]]:
        """`search` by the lists alone, `probes` of them first (the query packed):
        vector_probe.py."""
        return vector_probe.probe(self, conn, blob, want, accept, probes)

    def exact(
        self,
        conn: apsw.Connection,
        query: Sequence[float],
        want: int,
        items: Sequence[int] | None = None,
    ) -> list[tuple[int, float]]:
        """Return the exact top `want` `(item, score)` among `items` (None: every item).

        Raises:
            ValueError: a query of the wrong length or with a non-finite value.
        """
        blob = self._pack(query, "the query")
        if want <= 0 or (items is not None and not items):
            return []
        if items is None:
            cursor = conn.execute("SELECT item, vector FROM store_vectors")
        else:
            cursor = conn.execute(
                "SELECT item, vector FROM store_vectors WHERE item IN carray(?)", (ids(items),)
            )
        candidates = Candidates()
        while True:
            rows = list(islice(cursor, _BATCH))
            if not rows:
                return candidates.best(want, None, {})
            candidates.add(scored(rows, blob, self.dims, self.metric))

    # -- training --------------------------------------------------------------------------

    def maintain(self, conn: apsw.Connection) -> bool:
        """Retrain the lists if the vector count outgrew (or shrank far below) the last
        training, or finish a training left unfinished, all in the caller's write
        transaction; True if it trained. `train` does it without holding the write lock.

        Training: k-means (Lloyd, spherical for cosine) on a sample of `SAMPLE_PER_LIST`
        vectors per list, `sqrt(N)` lists, then every vector is moved to its nearest list
        (vector_training.py).
        """
        _writing(conn)
        total = self.due(conn, training=True)
        if total is None:
            return False
        self.retrain(conn, total)
        return True

    def coding(self, count: int) -> bool:
        """Whether an index of `count` vectors keeps int8 codes of its lists in the file
        (vector_codes.py): from `exact_up_to` on, where a search is about to probe the
        lists. Below it the exact scan quantizes the float32 rows in memory, so codes in
        the file would cost ~28% more bytes a vector and a chunk write per put for
        nothing; the training that finds the index grown past it codes every list (the
        pure-Python core's exact scan stops at the first training, which codes)."""
        return count >= self.exact_up_to

    def retrain(self, conn: apsw.Connection, total: int | None = None) -> None:
        """Train the lists now, due or not, in the caller's write transaction (`compact`)."""
        _writing(conn)
        Training(self).within(conn, self._count(conn) if total is None else total)

    def train(
        self, file: Transactions, stop: Callable[[], bool] = lambda: False, *, force: bool = False
    ) -> bool:
        """Train the lists if due (`force`: due or not), each step its own short transaction
        on `file`, so writers and readers go on meanwhile; `stop()` is asked between steps.
        True if it trained (vector_training.py)."""
        return Training(self).run(file, stop, force=force)

    def due(self, conn: apsw.Connection, *, training: bool = False) -> int | None:
        """The vector count when a training is due (see `maintain`), else None; reads only,
        so a writer can ask inside its own transaction and train after it commits.

        A training in progress is due again only once it may be taken over (its owner is
        gone; `training`: the caller is this process's one training of the file).
        """
        return self._due(conn, self.settings(conn), training)

    def _due(self, conn: apsw.Connection, settings: dict[str, Any], training: bool) -> int | None:
        meta = self._meta(conn, settings)
        if meta.dims is not None and meta.dims != self.dims:
            self.check_config(conn)
            return None
        total = self._count(conn)
        found = moving(conn, settings)
        if found is not None:
            return total if resumable(conn, found, mine=training) else None
        if total < self.train_from:
            return None
        if total < self.exact_up_to and self.scan.fits(total) and self._counted(meta):
            # Every search of this process is the exact scan: lists would go unread, and a
            # training would rewrite every vector row beside the writers for nothing.
            return None
        if vector_codes.coded_from(conn, settings) is None and self.coding(total):
            return total  # grown beyond the exact scan, or upgraded: a training codes them
        if meta.generation and meta.metric == self.metric:
            grown = total >= GROWTH * meta.trained
            shrunk = total * GROWTH * GROWTH <= meta.trained
            if not (grown or shrunk):
                return None
        return total

    def packing_due(self, conn: apsw.Connection) -> bool:
        """Whether the lists' code chunks are due to be packed (a file trained before
        trainings packed them: vector_packing.py); `train`'s background thread packs."""
        return vector_packing.due(conn)

    def work_due(self, conn: apsw.Connection) -> bool:
        """Whether a training (`due`) or a packing (`packing_due`) is due: what a writer
        asks after its batch, with one read of the settings for both."""
        settings = self.settings(conn)
        return self._due(conn, settings, False) is not None or vector_packing.due(conn, settings)

    def _matrix(self, blobs: Iterable[bytes]) -> bytes:
        matrix = b"".join(parts := list(blobs))
        if len(matrix) != 4 * self.dims * len(parts):
            raise CorruptionError(
                f"the vector index holds vectors that are not {self.dims} float32; run "
                "`threadloom verify` to find them, and put their items again"
            )
        return matrix

    # -- verify ----------------------------------------------------------------------------

    def problems(self, conn: apsw.Connection) -> list[str]:
        """What is wrong with the index, one line each (`threadloom verify`); [] when sound.

        See `vector_checks.problems` and `vector_codes.problems` for the checks.
        """
        found = vector_checks.problems(conn, self.dims, self._meta(conn).dims)
        return found + vector_codes.problems(conn, self.dims)


def stored_index(conn: apsw.Connection) -> VectorIndex | None:
    """The index as the file records it (dims and metric), for readers without a Store
    config (`threadloom verify`); None when the file holds no vector settings."""
    rows: dict[str, Any] = dict(
        fetchall(conn, "SELECT key, value FROM meta WHERE key IN (?, ?)", _SETTINGS)
    )
    dims = rows.get(_SETTINGS[0])
    if dims is None:
        return None
    metric = rows.get(_SETTINGS[1]) or "cosine"
    return VectorIndex(int(dims), cast(Metric, str(metric)))


#: The `meta` keys `stored_index` reads.
_SETTINGS: Final = ("vector_dims", "vector_metric")


def _first_new_list(recorded: Any) -> int | None:
    """The first new list of a training in progress (`meta.vector_moving`), if readable."""
    try:
        return None if recorded is None else int(str(recorded).split()[0])
    except (ValueError, IndexError):
        return None


def _writing(conn: apsw.Connection) -> None:
    if not conn.in_transaction:
        raise EngineError("vector index writes run inside the caller's write transaction")
