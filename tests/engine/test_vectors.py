"""The Store's vector index (engine/items/vectors.py) on a real threadloom file.

The oracle is brute force written here (the metric's formula over the float32-rounded
vectors); `exact` must match it, and `search` must match `exact` wherever it promises to
(before training, probing every list, a short result, a selective filter).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from threadloom.core import similarity
from threadloom.core.lru import Budget
from threadloom.core.similarity import FLOAT32_NORMAL
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.items import scan, vector_codes
from threadloom.engine.items.vectors import LIST_BITS, VectorIndex
from threadloom.errors import CorruptionError, EngineError, VectorConfigError

METRICS = ["cosine", "l2", "inner_product"]


@pytest.fixture
def lists_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A codes budget too small for the exact scan: this process's searches and trainings
    go by the lists (with the default `exact_up_to`, trained lists without codes, probed
    over their float32 rows; on the pure-Python core, coded from `train_from` on)."""
    monkeypatch.setattr(scan, "codes_budget", lambda: Budget(1))


def _item(conn: apsw.Connection, item: int) -> None:
    conn.execute(
        "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, updated_at) "
        "VALUES (?, 1, ?, x'', x'', 0, 0, 0) ON CONFLICT DO NOTHING",
        (item, f"k{item}"),
    )


def _put(
    file: File, index: VectorIndex, items: dict[int, Sequence[tuple[str, Sequence[float]]]]
) -> None:
    with file.write() as conn:
        for item, vectors in items.items():
            _item(conn, item)
            index.replace(conn, item, vectors)


def _rounded(values: Sequence[float]) -> list[float]:
    return list(similarity.floats(similarity.pack(values), len(values)))


def _score(metric: str, query: Sequence[float], vector: Sequence[float]) -> float:
    q, v = _rounded(query), _rounded(vector)
    dot = sum(a * b for a, b in zip(q, v, strict=True))
    if metric == "inner_product":
        return dot
    if metric == "l2":
        return -math.sqrt(sum((a - b) ** 2 for a, b in zip(q, v, strict=True)))
    norms = math.sqrt(sum(a * a for a in q)) * math.sqrt(sum(b * b for b in v))
    return dot / norms if norms else 0.0


def _brute(
    metric: str,
    query: Sequence[float],
    items: dict[int, Sequence[tuple[str, Sequence[float]]]],
) -> dict[int, float]:
    """Each item's best score over its fields (items without vectors are left out)."""
    return {
        item: max(_score(metric, query, vector) for _, vector in vectors)
        for item, vectors in items.items()
        if vectors
    }


def _normal_or_zero(vector: Sequence[float]) -> bool:
    squares = math.fsum(x * x for x in _rounded(vector))
    return squares == 0.0 or squares >= FLOAT32_NORMAL


def _gauss(rng: random.Random, dims: int) -> list[float]:
    return [rng.gauss(0, 1) for _ in range(dims)]


def _clustered(
    count: int, dims: int, seed: int
) -> dict[int, Sequence[tuple[str, Sequence[float]]]]:
    rng = random.Random(seed)
    centers = [_gauss(rng, dims) for _ in range(6)]
    return {
        item: [("$", [c + rng.gauss(0, 0.3) for c in rng.choice(centers)])]
        for item in range(1, count + 1)
    }


vectors_of = st.lists(st.floats(-100, 100, allow_nan=False, width=32), min_size=4, max_size=4)
item_sets = st.dictionaries(
    st.integers(1, 10_000),
    st.lists(st.tuples(st.sampled_from(["$", "text", "tags.0"]), vectors_of), max_size=3).map(
        lambda fields: list(dict(fields).items())
    ),
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(items=item_sets, query=vectors_of, metric=st.sampled_from(METRICS), want=st.integers(1, 30))
@example(
    items={1: [("$", [0.0, 0.0, 1.0, 0.0])]}, query=[0.0, 0.0, 2.0**-126, 0.0], metric="l2", want=1
)
def test_untrained_search_and_exact_equal_brute_force(
    tmp_path_factory: pytest.TempPathFactory,
    items: dict[int, list[tuple[str, list[float]]]],
    query: list[float],
    metric: str,
    want: int,
) -> None:
    """Before training, search and exact both return the brute-force top `want`, best first,
    one entry per item scored by its best field."""
    if metric == "cosine":  # the core's float32 contract (core.similarity.FLOAT32_NORMAL)
        vectors = [query, *(v for fields in items.values() for _, v in fields)]
        assume(all(_normal_or_zero(v) for v in vectors))
    opened = File(tmp_path_factory.mktemp("prop") / "v.db")
    try:
        with opened.write() as conn:
            opened.ensure(conn, features.STORE)
            conn.execute("INSERT INTO store_namespaces(id, name, depth) VALUES (1, 'ns', 1)")
        index = VectorIndex(4, metric)  # type: ignore[arg-type]
        _put(opened, index, items)
        truth = _brute(metric, query, items)
        with opened.read() as conn:
            found = index.exact(conn, query, want)
            assert index.search(conn, query, want) == found
        assert len(found) == min(want, len(truth))
        assert len({item for item, _ in found}) == len(found)
        scores = [score for _, score in found]
        assert scores == sorted(scores, reverse=True)
        for item, score in found:
            assert score == pytest.approx(truth[item], rel=1e-4, abs=1e-3)
        if len(found) < len(truth):  # nothing left out scores clearly better than the last kept
            kept = {item for item, _ in found}
            floor = found[-1][1]
            assert all(
                s <= floor + 1e-3 * (1 + abs(floor)) for i, s in truth.items() if i not in kept
            )
    finally:
        opened.close()


@pytest.mark.usefixtures("lists_only")
@pytest.mark.parametrize("metric", METRICS)
def test_trained_search_probing_everything_is_exact(file: File, metric: Any) -> None:
    """After training, a search told to probe every list equals exact search, which equals
    brute force; one whose `want` covers every item returns every item (ranked in tiers:
    the first lists' items, then the next ones')."""
    index = VectorIndex(8, metric, train_from=200, probes=1)
    items = _clustered(400, 8, seed=3)
    _put(file, index, items)
    with file.write() as conn:
        assert index.maintain(conn)
    rng = random.Random(4)
    with file.read() as conn:
        lists = conn.execute("SELECT count(*) FROM store_lists WHERE id != 0").fetchall()[0][0]
        assert lists == 20
        for _ in range(5):
            query = _gauss(rng, 8)
            exact = index.exact(conn, query, 10)
            assert index.search(conn, query, 10, probes=lists) == exact
            assert index.search(conn, query, 400, probes=lists) == index.exact(conn, query, 400)
            everything = index.search(conn, query, 400)
            assert sorted(everything) == sorted(index.exact(conn, query, 400))
            truth = sorted(_brute(metric, query, items).items(), key=lambda e: -e[1])
            exact = index.exact(conn, query, 400)
            assert [item for item, _ in exact][:5] == [item for item, _ in truth][:5]


@pytest.mark.usefixtures("lists_only")
@pytest.mark.parametrize("metric", METRICS)
def test_pages_of_a_trained_index_neither_repeat_nor_skip(file: File, metric: Any) -> None:
    """Pages ask for more (`want` = offset + limit) as they go deeper, and the search then
    probes more lists: its tiers keep the earlier ranks where they were, so the pages
    concatenate to one ranking of every item, with and without a filter."""
    index = VectorIndex(8, metric, train_from=200, probes=1)
    items = _clustered(600, 8, seed=5)
    _put(file, index, items)
    with file.write() as conn:
        assert index.maintain(conn)
    rng = random.Random(6)
    odd = lambda found: [i for i in found if i % 2]  # noqa: E731
    with file.read() as conn:
        for accept in (None, odd):
            query = _gauss(rng, 8)
            whole = index.search(conn, query, 600, accept)
            pages: list[tuple[int, float]] = []
            for offset in range(0, 620, 37):
                pages.extend(index.search(conn, query, offset + 37, accept)[offset:])
            assert pages == whole
            keys = [item for item, _ in pages]
            assert len(keys) == len(set(keys)) == (300 if accept else 600)


@pytest.mark.usefixtures("lists_only")
def test_probing_a_quarter_of_the_lists_finds_the_neighbours(file: File) -> None:
    """With clustered data, probing 6 of 24 trained lists finds nearly all of the exact top 10
    (lists that ignored the data, such as random ones, would find about a quarter)."""
    index = VectorIndex(8, "cosine", train_from=200, probes=6)
    items = _clustered(600, 8, seed=5)
    _put(file, index, items)
    with file.write() as conn:
        assert index.maintain(conn)
    hits = 0
    rng = random.Random(6)
    with file.read() as conn:
        assert conn.execute("SELECT count(*) FROM store_lists").fetchall()[0][0] == 1 + 24
        for _ in range(20):
            query = [x + rng.gauss(0, 0.1) for x in items[rng.randrange(1, 601)][0][1]]
            truth = {item for item, _ in index.exact(conn, query, 10)}
            hits += len(truth & {item for item, _ in index.search(conn, query, 10)})
    assert hits >= 180


@pytest.mark.usefixtures("lists_only")
def test_selective_filter_returns_every_match_in_exact_order(file: File) -> None:
    """A filter passing 3 of 800 items returns those 3 in exact order with want=10, and
    accept is asked about each candidate at most once."""
    index = VectorIndex(8, "l2", train_from=200, probes=1)
    items = _clustered(800, 8, seed=7)
    _put(file, index, items)
    with file.write() as conn:
        index.maintain(conn)
    passing = {17, 402, 799}
    asked: list[int] = []

    def accept(batch: Sequence[int]) -> list[int]:
        asked.extend(batch)
        return [item for item in batch if item in passing]

    query = _gauss(random.Random(8), 8)
    with file.read() as conn:
        found = index.search(conn, query, 10, accept)
        assert found == index.exact(conn, query, 10, items=sorted(passing))
    assert [item for item, _ in found] == [
        item for item, _ in sorted(_brute("l2", query, {i: items[i] for i in passing}).items(),
                                   key=lambda e: -e[1])
    ]  # fmt: skip
    assert len(asked) == len(set(asked)) == 800


@pytest.mark.usefixtures("lists_only")
def test_deep_want_and_offsets_lose_nothing(file: File) -> None:
    """want=150 with probes=1 probes on until 150 items are found, each with its exact score
    (best first within each tier of lists); want=300 returns every item, and the 150 are
    its first 150."""
    index = VectorIndex(8, "inner_product", train_from=200, probes=1)
    _put(file, index, _clustered(300, 8, seed=9))
    with file.write() as conn:
        index.maintain(conn)
    query = _gauss(random.Random(10), 8)
    with file.read() as conn:
        found = index.search(conn, query, 150)
        exact = dict(index.exact(conn, query, 300))
        everything = index.search(conn, query, 300)
        assert sorted(everything) == sorted(index.exact(conn, query, 300))
    assert len(found) == len({item for item, _ in found}) == 150
    assert all(score == exact[item] for item, score in found)
    assert everything[:150] == found


@pytest.mark.usefixtures("lists_only")
def test_replace_and_remove_leave_no_stale_vector(file: File) -> None:
    """Replacing an item's fields drops the old ones, removing or deleting items drops theirs,
    and list sizes stay equal to their members throughout."""
    index = VectorIndex(4, "cosine", train_from=50)
    _put(file, index, {i: [("$", [1, 0, 0, i]), ("text", [0, 1, 0, i])] for i in range(1, 80)})
    with file.write() as conn:
        assert index.maintain(conn)
        index.replace(conn, 5, [("other", [0, 0, 1, 0])])
        index.remove(conn, [6, 7])
        vector_codes.drop_items(conn, [8])  # as the Store deletes an item: codes first
        conn.execute("DELETE FROM store_items WHERE id = 8")
        index.replace(conn, 9, [])
        rows = conn.execute("SELECT field FROM store_vectors WHERE item = 5").fetchall()
        assert rows == [("other",)]
        for gone in (6, 7, 8, 9):
            assert not conn.execute(
                "SELECT 1 FROM store_vectors WHERE item = ?", (gone,)
            ).fetchall()
        assert index.problems(conn) == []
    with file.read() as conn:
        found = index.exact(conn, [0, 0, 1, 0], 100)
        assert found[0] == (5, pytest.approx(1.0))
        assert not {6, 7, 8, 9} & {item for item, _ in found}
        assert len(found) == 79 - 4
        searched = index.search(conn, [0, 0, 1, 0], 100)
        # Every other item ties at 0.0: the lists rank ties tier by tier (fewer probes
        # than lists, the recorded recall allowing), the exact scan by id.
        assert searched[0] == found[0] and sorted(searched) == sorted(found)


@pytest.mark.usefixtures("lists_only")
def test_maintain_trains_when_the_count_doubles(file: File) -> None:
    """maintain trains at train_from, then only once the count doubled; every vector is then
    in a list of the latest training, and results stay right after more inserts."""
    index = VectorIndex(8, "cosine", train_from=100, probes=2)
    items = _clustered(500, 8, seed=11)
    batches = [dict(list(items.items())[start : start + 50]) for start in range(0, 500, 50)]
    trained_at = []
    for batch in batches:
        _put(file, index, batch)
        with file.write() as conn:
            if index.maintain(conn):
                trained_at.append(max(batch))
            assert index.problems(conn) == []
    assert trained_at == [100, 200, 400]
    with file.read() as conn:
        lists = {row[0] for row in conn.execute("SELECT id FROM store_lists WHERE id != 0")}
        held = {row[0] for row in conn.execute("SELECT DISTINCT list FROM store_vectors")}
        assert held <= lists and len(lists) == 20  # round(sqrt(400))
        query = _gauss(random.Random(12), 8)
        everything = index.search(conn, query, 500)
        assert sorted(everything) == sorted(index.exact(conn, query, 500))  # every item
        assert index.search(conn, query, 5, probes=len(lists)) == index.exact(conn, query, 5)


@pytest.mark.usefixtures("lists_only")
def test_a_trained_insert_goes_to_its_nearest_list(file: File) -> None:
    """After training, a new vector lands in the list whose centroid scores best for it."""
    index = VectorIndex(8, "l2", train_from=100)
    _put(file, index, _clustered(200, 8, seed=13))
    with file.write() as conn:
        index.maintain(conn)
    vector = _gauss(random.Random(14), 8)
    _put(file, index, {1000: [("$", vector)]})
    with file.read() as conn:
        (list_id,) = conn.execute("SELECT list FROM store_vectors WHERE item = 1000").fetchall()[0]
        centroids = conn.execute("SELECT id, centroid FROM store_lists WHERE id != 0").fetchall()
    best = max(centroids, key=lambda row: _score("l2", vector, similarity.floats(row[1], 8)))
    assert list_id == best[0]


def test_scores_follow_the_metrics(file: File) -> None:
    """Cosine is the cosine similarity (a zero vector scores 0), l2 minus the distance,
    inner_product the dot product."""
    items = {1: [("$", [3.0, 4.0])], 2: [("$", [0.0, 0.0])], 3: [("$", [-1.0, 0.0])]}
    expected = {
        "cosine": {1: 0.6, 2: 0.0, 3: -1.0},
        "l2": {1: -math.sqrt(4 + 16), 2: -1.0, 3: -2.0},
        "inner_product": {1: 3.0, 2: 0.0, 3: -1.0},
    }
    for metric in METRICS:
        index = VectorIndex(2, metric)  # type: ignore[arg-type]
        _put(file, index, items)
        with file.read() as conn:
            found = dict(index.search(conn, [1.0, 0.0], 3))
        assert found == pytest.approx(expected[metric])


def test_wrong_lengths_and_values_are_refused(file: File) -> None:
    """A query or vector of the wrong length names expected and got; NaN, inf and a field
    given twice are refused; writes outside a transaction are refused."""
    index = VectorIndex(3)
    with file.write() as conn:
        _item(conn, 1)
        with pytest.raises(ValueError, match="has 2 dimensions, expected 3"):
            index.replace(conn, 1, [("$", [1.0, 2.0])])
        with pytest.raises(ValueError, match="finite"):
            index.replace(conn, 1, [("$", [1.0, math.nan, 0.0])])
        with pytest.raises(ValueError, match="finite"):
            index.replace(conn, 1, [("$", [1e39, 0.0, 0.0])])
        with pytest.raises(ValueError, match="twice"):
            index.replace(conn, 1, [("$", [1.0, 0, 0]), ("$", [0, 1.0, 0])])
        with pytest.raises(ValueError, match="has 4 dimensions, expected 3"):
            index.search(conn, [1, 2, 3, 4], 1)
        with pytest.raises(ValueError, match="has 1 dimensions, expected 3"):
            index.exact(conn, [1], 1)
    with file.connection() as conn, pytest.raises(EngineError, match="write transaction"):
        index.replace(conn, 1, [])


def test_dims_mismatch_is_a_config_error(file: File) -> None:
    """An index of 4 dims refuses a file holding 3-dim vectors (check_config, replace,
    maintain); once those vectors are gone the new dims take over."""
    _put(file, VectorIndex(3), {1: [("$", [1, 2, 3])]})
    four = VectorIndex(4)
    with file.read() as conn, pytest.raises(VectorConfigError, match="3 dimensions.*says 4"):
        four.check_config(conn)
    with file.write() as conn:
        with pytest.raises(VectorConfigError):
            four.replace(conn, 1, [("$", [1, 2, 3, 4])])
        with pytest.raises(VectorConfigError):
            four.maintain(conn)
        VectorIndex(3).remove(conn, [1])
        four.check_config(conn)
        four.replace(conn, 1, [("$", [1, 2, 3, 4])])
        assert four.problems(conn) == []
    with file.read() as conn:
        assert four.search(conn, [1, 2, 3, 4], 1) == [(1, pytest.approx(1.0))]
        with pytest.raises(VectorConfigError):
            VectorIndex(3).check_config(conn)


def test_problems_finds_every_kind_of_damage(file: File) -> None:
    """problems() names a vector of the wrong size, a vector in a missing list, a list size
    off by one, a vector of a missing item, a short centroid and a missing list 0; reads of a
    damaged vector raise CorruptionError instead of wrong scores."""
    index = VectorIndex(4, train_from=20, exact_up_to=0)  # coded lists: their checks too
    _put(file, index, {i: [("$", [i, 1, 0, 0])] for i in range(1, 41)})
    with file.write() as conn:
        index.maintain(conn)
        assert index.problems(conn) == []
        ids = [row[0] for row in conn.execute("SELECT id FROM store_vectors ORDER BY id")]
        conn.execute("UPDATE store_vectors SET vector = x'00' WHERE id = ?", (ids[0],))
        conn.execute(
            "UPDATE store_vectors SET id = ? WHERE id = ?", ((999 << LIST_BITS) | 1, ids[1])
        )
        conn.execute(
            "UPDATE store_lists SET size = size + 1 WHERE id = (SELECT max(id) FROM store_lists)"
        )
    with file.connection() as conn:  # foreign keys can only be turned off between transactions
        conn.execute("PRAGMA foreign_keys = OFF")
        conn.execute("DELETE FROM store_items WHERE id = 40")
        conn.execute("PRAGMA foreign_keys = ON")
    with file.write() as conn:
        found = index.problems(conn)
        text = "\n".join(found)
        assert "has 1 bytes, not 16" in text
        assert "is in list 999, which does not exist" in text
        assert "records size" in text
        assert "belongs to item 40, which does not exist" in text
        assert "vector list 1: 1 codes of vectors that do not exist" in text
        # The moved vector also left its own list one short, and its code behind.
        assert len(found) == 4 + 2
        conn.execute(
            "UPDATE store_lists SET centroid = x'0000' "
            "WHERE id = (SELECT min(id) FROM store_lists WHERE id != 0)"
        )
        conn.execute("DELETE FROM store_lists WHERE id = 0")
        text = "\n".join(index.problems(conn))
        assert "centroid of 2 bytes, not 16" in text and "list 0" in text
    with file.read() as conn, pytest.raises(CorruptionError):
        index.exact(conn, [1, 1, 0, 0], 5)


def test_an_index_shrunk_below_the_exact_scan_retrains_and_stays_exact(file: File) -> None:
    """Lists trained at more than four times `exact_up_to` are searched without a count,
    so an index shrunk below `exact_up_to` is due to retrain although the exact scan could
    serve it; once retrained, its searches are exact again."""
    index = VectorIndex(8, "cosine", train_from=10, exact_up_to=100, probes=1)
    items = _clustered(500, 8, seed=5)
    _put(file, index, items)
    with file.write() as conn:
        assert index.maintain(conn)
        index.remove(conn, sorted(items)[80:])
    with file.read() as conn:
        assert index.due(conn) == 80
    with file.write() as conn:
        assert index.maintain(conn)
    rng = random.Random(6)
    with file.read() as conn:
        for _ in range(20):
            query = _gauss(rng, 8)
            assert index.search(conn, query, 10) == index.exact(conn, query, 10)
