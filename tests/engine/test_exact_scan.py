"""The exact quantized scan (engine/items/scan.py) and the lists' recorded recall.

The oracle is `VectorIndex.exact` (itself held to brute force by test_vectors.py): on
vectors without neighbour structure, where the lists find few true neighbours, the
default search must still return exactly its top 10 for held-out queries.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import apsw
import pytest

from threadloom.core import backend, lru
from threadloom.core.similarity import pack
from threadloom.engine.checks import figures
from threadloom.engine.file import File
from threadloom.engine.items import scan, vector_recall
from threadloom.engine.items.scan import CODES_BUDGET, codes_budget
from threadloom.engine.items.vectors import EXACT_CODE_BYTES, VectorIndex
from threadloom.engine.sql import fetchall
from threadloom.errors import InvalidArgumentError

METRICS = ["cosine", "l2", "inner_product"]
DIMS = 24


def _put(file: File, index: VectorIndex, vectors: dict[int, Sequence[float]]) -> None:
    with file.write() as conn:
        for item, vector in vectors.items():
            conn.execute(
                "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
                "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0) ON CONFLICT DO NOTHING",
                (item, f"k{item}"),
            )
            index.replace(conn, item, [("$", vector)])


def _uniform(rng: random.Random, count: int, first: int = 1) -> dict[int, list[float]]:
    return {first + i: [rng.uniform(-1, 1) for _ in range(DIMS)] for i in range(count)}


def _clustered(rng: random.Random, count: int) -> dict[int, list[float]]:
    centers = [[rng.gauss(0, 1) for _ in range(DIMS)] for _ in range(8)]
    return {1 + i: [c + rng.gauss(0, 0.2) for c in rng.choice(centers)] for i in range(count)}


def _recall(file: File, index: VectorIndex, queries: list[list[float]], want: int = 10) -> float:
    hits = 0
    with file.read() as conn:
        for query in queries:
            found = index.search(conn, query, want)
            expected = index.exact(conn, query, want)
            assert [item for item, _ in found] == [item for item, _ in expected]
            assert [score for _, score in found] == [score for _, score in expected]
            hits += len({i for i, _ in found} & {i for i, _ in expected})
    return hits / (want * len(queries))


@pytest.mark.parametrize("metric", METRICS)
def test_exact_scan_has_full_recall_on_unstructured_vectors(file: File, metric: str) -> None:
    """On uniform random vectors the default search returns exact's top 10, in order."""
    rng = random.Random(7)
    index = VectorIndex(DIMS, metric)  # type: ignore[arg-type]
    _put(file, index, _uniform(rng, 1500))
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(12)]
    assert _recall(file, index, queries) == 1.0


def test_exact_scan_has_full_recall_on_clustered_vectors(file: File) -> None:
    """On clustered vectors (many near ties) the default search equals exact too."""
    rng = random.Random(8)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _clustered(rng, 1500))
    queries = [[rng.gauss(0, 1) for _ in range(DIMS)] for _ in range(12)]
    assert _recall(file, index, queries) == 1.0


def test_exact_scan_sees_every_write(file: File) -> None:
    """Puts, replacements, removals and another index's puts all show in the next search."""
    rng = random.Random(9)
    index = VectorIndex(DIMS, "l2")
    _put(file, index, _uniform(rng, 300))
    query = [0.5] * DIMS
    with file.read() as conn:
        index.search(conn, query, 5)  # the codes are now held
    _put(file, index, {400: query})  # this index's own put
    with file.read() as conn:
        assert index.search(conn, query, 1)[0][0] == 400
    _put(file, index, {400: [-x for x in query]})  # replaced: far away now
    with file.read() as conn:
        assert 400 not in [item for item, _ in index.search(conn, query, 5)]
    other = VectorIndex(DIMS, "l2")  # another store (or process) on the file
    _put(file, other, {401: query})
    with file.read() as conn:
        assert index.search(conn, query, 1)[0][0] == 401
    with file.write() as conn:
        index.remove(conn, [401])
        conn.execute("DELETE FROM store_items WHERE id = 7")  # cascades to its vector
    with file.read() as conn:
        found = [item for item, _ in index.search(conn, query, 400)]
        assert 401 not in found and 7 not in found
        assert found == [item for item, _ in index.exact(conn, query, 400)]


def test_held_codes_spare_the_count_until_the_index_outgrows_the_scan(file: File) -> None:
    """Codes held at the file's version answer without summing the lists' sizes, also past
    exact_up_to while the lists were never trained (probing them would read every row);
    past it with trained lists the count decides (and the lists answer)."""
    rng = random.Random(21)
    index = VectorIndex(DIMS, "cosine", exact_up_to=300)
    _put(file, index, _uniform(rng, 300))
    query = [0.25] * DIMS
    statements: list[str] = []

    def trace(_cursor: apsw.Cursor, sql: str, _bindings: Any) -> bool:
        statements.append(sql)
        return True

    def searched() -> None:
        statements.clear()
        with file.read() as conn:
            conn.exec_trace = trace
            try:
                found = index.search(conn, query, 10)
            finally:
                conn.exec_trace = None
            assert found == index.exact(conn, query, 10)

    searched()  # loads the codes: counts once
    searched()
    assert index.scan.held() is not None
    assert not [sql for sql in statements if "store_lists" in sql]
    _put(file, index, _uniform(rng, 1, first=1000))  # 301 vectors: past the exact scan
    searched()
    assert not [sql for sql in statements if "store_lists" in sql]
    with file.write() as conn:
        index.retrain(conn)
    searched()
    assert [sql for sql in statements if "store_lists" in sql]


def test_a_rolled_back_put_leaves_no_phantom(file: File) -> None:
    """A put whose transaction rolls back is never found, though it updated the codes."""
    rng = random.Random(10)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _uniform(rng, 200))
    query = [1.0] * DIMS
    with file.read() as conn:
        index.search(conn, query, 3)
    with pytest.raises(RuntimeError), file.write() as conn:
        conn.execute(
            "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, updated_at) "
            "VALUES (500, 1, 'k500', x'', x'', 0, 0, 0)"
        )
        index.replace(conn, 500, [("$", query)])
        raise RuntimeError("abort")
    with file.read() as conn:
        assert [i for i, _ in index.search(conn, query, 3)] == [
            i for i, _ in index.exact(conn, query, 3)
        ]
        assert 500 not in [i for i, _ in index.search(conn, query, 3)]


def test_filtered_search_returns_the_exact_accepted_top(file: File) -> None:
    """With an accept filter the scan returns exact's order among accepted items only."""
    rng = random.Random(11)
    index = VectorIndex(DIMS, "inner_product")
    _put(file, index, _uniform(rng, 800))
    query = [rng.uniform(-1, 1) for _ in range(DIMS)]
    asked: list[int] = []

    def accept(items: Sequence[int]) -> set[int]:
        asked.extend(items)
        return {item for item in items if item % 7 == 0}

    with file.read() as conn:
        found = index.search(conn, query, 10, accept)
        expected = index.exact(conn, query, 10, [i for i in range(1, 801) if i % 7 == 0])
    assert found == expected
    assert len(asked) == len(set(asked))


def _adversarial(rng: random.Random) -> dict[int, list[tuple[str, list[float]]]]:
    """Exact duplicates, near ties, constant and zero vectors, spikes, clusters; some items
    with two vectors (an item scores by its best)."""
    base = [rng.gauss(0, 1) for _ in range(DIMS)]
    vectors: dict[int, list[tuple[str, list[float]]]] = {}
    for item in range(1, 601):
        kind = item % 6
        if kind == 0:
            vector = list(base)  # exact ties
        elif kind == 1:
            vector = [x + rng.gauss(0, 1e-6) for x in base]  # near ties
        elif kind == 2:
            vector = [rng.choice([-1.0, 1.0]) * (item % 5)] * DIMS  # constant, some zero
        elif kind == 3:
            vector = [100.0 if d == item % DIMS else 1e-3 * rng.gauss(0, 1) for d in range(DIMS)]
        else:
            vector = [x + rng.gauss(0, 0.3) for x in base]
        fields = [("$", vector)]
        if item % 4 == 0:
            fields.append(("other", [rng.gauss(0, 1) for _ in range(DIMS)]))
        vectors[item] = fields
    return vectors


@pytest.mark.parametrize("refine_first", [1, 256])
@pytest.mark.parametrize("metric", METRICS)
def test_the_planes_scan_is_exact_on_ties_zeros_and_constants(
    file: File, metric: str, refine_first: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever the data, the coarse 4-bit pass, the int8 refinement and the re-rank
    return exactly the float32 scan's top (keys and scores, ties by item), with and
    without a filter, however few entries are refined first."""
    monkeypatch.setattr(scan, "REFINE_FIRST", refine_first)
    rng = random.Random(16)
    index = VectorIndex(DIMS, metric)  # type: ignore[arg-type]
    vectors = _adversarial(rng)
    with file.write() as conn:
        for item, fields in vectors.items():
            conn.execute(
                "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
                "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0)",
                (item, f"k{item}"),
            )
            index.replace(conn, item, fields)
    queries = [vectors[6][0][1], vectors[7][0][1], vectors[8][0][1], [0.0] * DIMS]
    queries.append([rng.gauss(0, 1) for _ in range(DIMS)])
    kept = [item for item in vectors if item % 3 != 0]
    with file.read() as conn:
        count = len(fetchall(conn, "SELECT id FROM store_vectors"))
        codes = index.scan.codes(conn, count)
        assert codes is not None and codes.nbytes == count * (2 * (DIMS // 2) + 32 + 56)
        for query in queries:
            for want in (1, 45):
                assert index.search(conn, query, want) == index.exact(conn, query, want)
                found = index.search(conn, query, want, lambda items: set(items) & set(kept))
                assert found == index.exact(conn, query, want, kept)


def test_over_the_budget_the_lists_answer(file: File) -> None:
    """Codes that do not fit the codes' budget are not built; the lists answer instead."""
    rng = random.Random(12)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _uniform(rng, 300))
    budget = codes_budget()
    capacity = budget.capacity
    budget.resize(1024)
    try:
        with file.read() as conn:
            found = index.search(conn, [1.0] * DIMS, 5)
            assert found == index.exact(conn, [1.0] * DIMS, 5)  # untrained: one list, exact
        assert index.scan.held() is None
    finally:
        budget.resize(capacity)


def _meta(conn: apsw.Connection, key: str) -> float | None:
    rows = fetchall(conn, "SELECT value FROM meta WHERE key = ?", (key,))
    return None if not rows else float(rows[0][0])


def test_training_records_high_recall_on_clustered_vectors(file: File) -> None:
    """A training measures recall@10 on held-out vectors; clustered data reaches the floor."""
    rng = random.Random(13)
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=8)
    _put(file, index, _clustered(rng, 1200))
    with file.write() as conn:
        assert index.maintain(conn)
        assert (_meta(conn, "vector_recall") or 0.0) >= 0.95
        assert _meta(conn, "vector_probes") == 0.0


def test_doctor_figures_show_the_recorded_recall(file: File) -> None:
    """`doctor --db` figures carry the lists' recall: None untrained, the figure after."""
    rng = random.Random(15)
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=1)
    _put(file, index, _uniform(rng, 1100))
    assert figures(file.path)["store_vector_recall"] is None
    assert figures(file.path)["store_vector_fewer_probes"] is None
    with file.write() as conn:
        assert index.maintain(conn)
        recorded = _meta(conn, "vector_recall")
        probes = _meta(conn, "vector_probes")
        fewer = _meta(conn, "vector_fewer_probes")
    found = figures(file.path)
    assert recorded is not None and found["store_vector_recall"] == round(recorded, 3)
    assert found["store_vector_probes"] == probes
    assert fewer is not None and found["store_vector_fewer_probes"] == fewer


def test_low_recorded_recall_makes_the_search_exact(file: File) -> None:
    """On unstructured data the lists' recorded recall is low, and the search, which would
    miss neighbours by the lists alone, returns exact's top 10 instead."""
    rng = random.Random(14)
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=1)
    _put(file, index, _uniform(rng, 1200))
    with file.write() as conn:
        assert index.maintain(conn)
        recall = _meta(conn, "vector_recall")
        assert _meta(conn, "vector_probes") == 0.0  # no wider probe short of half the lists
    assert recall is not None and recall < 0.95
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(8)]
    assert _recall(file, index, queries) == 1.0
    with file.read() as conn:
        probed = [index.probe(conn, pack(q), 10, None, 1) for q in queries]
        exact = [index.exact(conn, q, 10) for q in queries]
    assert probed != exact  # the lists alone would have missed neighbours


def test_the_default_codes_budget_keeps_100k_x_384_exact() -> None:
    """By default the codes of 100,000 (and of the exact limit's 109,226) vectors of 384
    dimensions fit their budget, whatever the caches' memory budget; twice as many do not."""
    scan = VectorIndex(384).scan
    assert codes_budget().capacity == CODES_BUDGET
    assert lru.process_budget().capacity == lru.DEFAULT_BUDGET
    assert scan.fits(100_000) and scan.fits(EXACT_CODE_BYTES // 384)
    assert not scan.fits(2 * EXACT_CODE_BYTES // 384)


@pytest.mark.parametrize("dims", [80, 96, 128, 147, 256, 384, 1024, 1536, 4096])
def test_the_exact_limit_fits_the_budget_whatever_the_dims(dims: int) -> None:
    """From 80 dims (below, the per-vector ids and params alone outgrow the budget at
    `exact_up_to`, as they always did) the planes of `exact_up_to` vectors fit the codes'
    budget: the top bits, held beside them when they fit too, never push the exact limit
    over it, which at 80-147 dims they did (the search fell back to the lists below its
    own exact limit)."""
    # The native core's default limit (the pure-Python core's is its train_from).
    index = VectorIndex(dims, exact_up_to=EXACT_CODE_BYTES // dims)
    assert index.scan.fits(index.exact_up_to)
    assert index.scan.fits(index.exact_up_to, tops=True) == (dims >= 148)


def test_codes_beyond_the_top_bits_budget_search_exactly_without_them(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codes that fit the budget only without their top bits are held without them, and
    the search stays exact (the coarse pass never asks for top bits it lacks)."""
    rng = random.Random(5)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _uniform(rng, 600))
    plain = 2 * ((DIMS + 1) // 2) + 8 * (3 + scan.PARAMS)
    monkeypatch.setattr(scan, "codes_budget", lambda: lru.Budget(650 * plain))
    monkeypatch.setattr(scan, "TIGHT_FROM", 0.0)
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(3)]
    with file.read() as conn:
        for query in queries:
            assert index.search(conn, query, 10) == index.exact(conn, query, 10)
        held = index.scan.held()
        assert held is not None and held.tops == () and held.tight == ()
    _put(file, index, _uniform(rng, 20, first=601))
    with file.read() as conn:
        assert index.search(conn, queries[0], 10) == index.exact(conn, queries[0], 10)


def test_the_coarse_pass_reads_the_top_bits_after_searches_where_many_reached_the_top(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a search where at least TIGHT_FROM of the coarse bounds reached the top's
    least score the next ones read the top bits too, until fewer than LOOSE_BELOW reach
    it; the search is exact in both passes (24 uniform dims: ~1.5% reach it)."""
    rng = random.Random(21)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _uniform(rng, 1500))
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(4)]
    with file.read() as conn:
        for query in queries:
            assert index.search(conn, query, 10) == index.exact(conn, query, 10)
        assert not index.scan.tight
        monkeypatch.setattr(scan, "TIGHT_FROM", 0.01)
        tights = []
        for query in queries:
            assert index.search(conn, query, 10) == index.exact(conn, query, 10)
            tights.append(index.scan.tight)
        assert all(tights)
        monkeypatch.setattr(scan, "LOOSE_BELOW", 0.5)
        assert index.search(conn, queries[0], 10) == index.exact(conn, queries[0], 10)
        assert not index.scan.tight
    assert _recall(file, index, queries) == 1.0


def test_a_scan_cut_across_threads_bounds_every_entry_as_one_thread_does(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scan cut into slices (one per scan thread) gives every entry the bound a single
    scan gives it, in entry order, and the search stays exact."""
    rng = random.Random(15)
    index = VectorIndex(DIMS, "cosine")
    _put(file, index, _uniform(rng, 1540))
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(6)]
    with file.read() as conn:
        loaded = index.scan.codes(conn, 1540)
    assert loaded is not None and len(loaded.high) == 1
    cut, width = 1500, DIMS // 2
    high, low, param, spread = loaded.high[0], loaded.low[0], loaded.params[0], loaded.spread[0]
    tops, tight = loaded.tops[0], loaded.tight[0]
    codes = dataclasses.replace(  # a second segment, as a put adds one
        loaded,
        high=(high[: cut * width], high[cut * width :]),
        low=(low[: cut * width], low[cut * width :]),
        params=(param[: cut * scan.PARAMS], param[cut * scan.PARAMS :]),
        spread=(spread[:cut], spread[cut:]),
        tops=(tops[: cut * 32], tops[cut * 32 :]),
        tight=(tight[:cut], tight[cut:]),
    )
    index.scan.tight = False
    whole = [index.scan.bounds(codes, pack(q), 10) for q in queries]
    index.scan.tight = False
    assert whole == [index.scan.bounds(loaded, pack(q), 10) for q in queries]
    monkeypatch.setattr(scan, "PARALLEL_AT", 100)
    monkeypatch.setattr(scan, "PARALLEL_REFINE", 0)  # tightening and refining on them too
    monkeypatch.setattr(scan, "scan_threads", lambda: 3)
    assert scan._slices(codes) == [(0, 0, 500), (0, 500, 1000), (0, 1000, 1500), (1, 0, 40)]
    index.scan.tight = False
    assert [index.scan.bounds(codes, pack(q), 10) for q in queries] == whole
    for tight in (False, True):  # each pass, cut or not, bounds alike
        # Every query in the mode under test (a search picks the next one's otherwise).
        monkeypatch.setattr(scan, "_tight_next", lambda *_, tight=tight: tight)
        index.scan.tight = tight
        cut_bounds = [index.scan.bounds(codes, pack(q), 10) for q in queries]
        assert index.scan.tight == tight
        assert cut_bounds == [index.scan.bounds(loaded, pack(q), 10) for q in queries]
    assert _recall(file, index, queries) == 1.0


def test_the_scan_threads_setting_is_read_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    """THREADLOOM_SCAN_THREADS sets the threads of a native scan; a bad value says how to
    fix it, and the pure-Python kernel, which holds the GIL, always scans on one."""
    monkeypatch.setenv(scan.SCAN_THREADS_ENV, "1")
    assert scan.scan_threads() == 1
    monkeypatch.setenv(scan.SCAN_THREADS_ENV, "0")
    if backend() == "native":
        with pytest.raises(InvalidArgumentError, match="unset it to use the cores"):
            scan.scan_threads()
        monkeypatch.setenv(scan.SCAN_THREADS_ENV, "6")
        assert scan.scan_threads() == 6
        monkeypatch.delenv(scan.SCAN_THREADS_ENV)
        assert 1 <= scan.scan_threads() <= scan.MAX_SCAN_THREADS
    else:
        assert scan.scan_threads() == 1


def test_fewer_probes_are_recorded_only_when_their_recall_holds_the_floor(file: File) -> None:
    """A training records fewer probes than the default only when their held-out recall
    holds the floor with 95% confidence, records that recall, and a default search then
    probes that many lists first, finding what an explicit probe of that many finds."""
    rng = random.Random(16)
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=16)
    data = _clustered(rng, 1800)
    _put(file, index, data)
    with file.write() as conn:
        assert index.maintain(conn)
        fewer = _meta(conn, "vector_fewer_probes")
        recall = _meta(conn, "vector_fewer_recall")
    assert fewer is not None and 1 <= fewer < 16 and recall is not None and recall >= 0.95
    queries = [[x + rng.gauss(0, 0.05) for x in data[1 + 97 * i]] for i in range(6)]
    asked: list[int] = []
    probe = index.probe

    def spy(conn: apsw.Connection, blob: bytes, want: int, accept: None, probes: int) -> Any:
        asked.append(probes)
        return probe(conn, blob, want, accept, probes)

    with file.read() as conn:
        for query in queries:
            probed = probe(conn, pack(query), 10, None, int(fewer))
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(index, "probe", spy)
                assert index.search(conn, query, 10) == probed
    assert asked == [int(fewer)] * len(queries)


def test_the_confidence_bound_keeps_the_default_probes_on_a_lucky_sample() -> None:
    """A halving whose recall is above the floor on few neighbours, or only just above it
    on many, is not taken (95% lower bound); a clear margin on many neighbours is."""
    assert vector_recall._lower(160, 160) > 0.95 > vector_recall._lower(157, 160)
    assert vector_recall._lower(620, 640) > 0.95 > vector_recall._lower(615, 640)


def test_low_recall_lists_ignore_a_recorded_fewer_probe(file: File) -> None:
    """Lists whose default recall is short of the floor never probe fewer lists: the
    search stays exact (unstructured data), whatever fewer count the file records."""
    rng = random.Random(17)
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=2)
    _put(file, index, _uniform(rng, 1200))
    with file.write() as conn:
        assert index.maintain(conn)
        assert (_meta(conn, "vector_recall") or 1.0) < 0.95
        assert _meta(conn, "vector_fewer_probes") == 0.0
        conn.execute("UPDATE meta SET value = 1 WHERE key = 'vector_fewer_probes'")
    queries = [[rng.uniform(-1, 1) for _ in range(DIMS)] for _ in range(6)]
    assert _recall(file, index, queries) == 1.0
