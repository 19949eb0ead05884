"""Trainings of the vector lists that never stop writers (engine/items/vector_training.py).

`VectorIndex.train` runs each step in a transaction of its own and asks `stop()` between
steps; the tests use that call to act between steps (puts, searches, a second training)
without threads, and one test runs a real writer thread next to a background training.
The oracle is `VectorIndex.exact` (held to brute force by test_vectors.py).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import apsw
import pytest

from threadloom.core.similarity import pack
from threadloom.engine.file import File
from threadloom.engine.items import BackgroundTraining, Items, Reindex, vector_training
from threadloom.engine.items.vectors import LIST_BITS, VectorIndex
from threadloom.engine.sql import fetchall

DIMS = 16


@pytest.fixture(autouse=True)
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Move 100 rows per step (the batch adapts to the lock's hold time below that), so a
    training of a few thousand vectors has many steps."""
    monkeypatch.setattr(vector_training, "BATCH", 100)
    monkeypatch.setattr(vector_training, "BATCH_MAX", 100)


def _index() -> VectorIndex:
    return VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0)


def _vectors(rng: random.Random, count: int, first: int) -> dict[int, list[float]]:
    centers = [[rng.gauss(0, 1) for _ in range(DIMS)] for _ in range(6)]
    return {first + i: [c + rng.gauss(0, 0.3) for c in rng.choice(centers)] for i in range(count)}


def _put(conn: apsw.Connection, index: VectorIndex, vectors: dict[int, Sequence[float]]) -> None:
    for item, vector in vectors.items():
        conn.execute(
            "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, "
            "updated_at) VALUES (?, 1, ?, x'', x'', 0, 0, 0) ON CONFLICT DO NOTHING",
            (item, f"k{item}"),
        )
        index.replace(conn, item, [("$", vector)])


def _trained(
    file: File, index: VectorIndex, count: int = 1200, *, due: bool = True
) -> dict[int, list[float]]:
    """`count` vectors, trained once in one transaction, then as many again (due, unless
    the exact scan serves them: then the training was forced, as `compact` does)."""
    rng = random.Random(3)
    first = _vectors(rng, count, 1)
    with file.write() as conn:
        _put(conn, index, first)
        if due:
            assert index.maintain(conn)
        else:
            index.retrain(conn)
    more = _vectors(rng, count, count + 1)
    with file.write() as conn:
        _put(conn, index, more)
        assert (index.due(conn) is not None) == due
    return first | more


def _every_list(file: File, index: VectorIndex, query: Sequence[float]) -> list[int]:
    with file.read() as conn:
        return [item for item, _ in index.probe(conn, pack(query), 10, None, 10**6)]


def _exact(file: File, index: VectorIndex, query: Sequence[float]) -> list[int]:
    with file.read() as conn:
        return [item for item, _ in index.exact(conn, query, 10)]


def _moving(file: File) -> str | None:
    with file.read() as conn:
        found = fetchall(conn, "SELECT value FROM meta WHERE key = 'vector_moving'")
    return None if not found else str(found[0][0])


def _steps(file: File, act: Callable[[int], bool]) -> Callable[[], bool]:
    """A `stop` that calls `act(step)` between the training's moving steps (k-means asks
    too, between its iterations: those calls are not counted)."""
    counter = [0]

    def stop() -> bool:
        if _moving(file) is None:
            return False
        counter[0] += 1
        return act(counter[0])

    return stop


def test_a_put_during_a_training_is_found_by_the_next_search(file: File) -> None:
    """Between the training's steps a put commits at once, into a new list, and the very
    next search (by the lists, old and new together) finds it; after the swap every vector
    is in a new list."""
    index = _index()
    vectors = _trained(file, index)
    rng = random.Random(9)
    during: dict[int, list[float]] = {}

    def put_and_find(step: int) -> bool:
        if step % 3 == 0:
            item = 10_000 + step
            vector = _vectors(rng, 1, item)[item]
            with file.write() as conn:
                _put(conn, index, {item: vector})
            during[item] = vector
            record = _moving(file)
            assert record is not None
            with file.read() as conn:
                found = "SELECT id >> 32 FROM store_vectors WHERE item = ?"
                (held,) = fetchall(conn, found, (item,))
            assert held[0] >= int(record.split()[0])  # in a new list: nothing left to move
            assert item in _every_list(file, index, vector)[:1]
        return False

    assert index.train(file, _steps(file, put_and_find))
    assert len(during) >= 5
    assert _moving(file) is None
    with file.read() as conn:
        assert index.problems(conn) == []
        rows = fetchall(conn, "SELECT item, id >> ? FROM store_vectors", (LIST_BITS,))
        lists = {row[0] for row in fetchall(conn, "SELECT id FROM store_lists WHERE id != 0")}
    assert {item for item, _ in rows} == set(vectors) | set(during)
    assert {list_id for _, list_id in rows} <= lists
    for vector in list(during.values())[:5]:
        assert _every_list(file, index, vector) == _exact(file, index, vector)


def test_a_training_leaves_the_wal_checkpoints_to_their_own_thread(file: File) -> None:
    """While a training moves vectors, a writer's commit does not checkpoint the WAL
    (engine/wal_fold.py: the checkpoints run outside the write lock); once it ends, commits
    checkpoint as SQLite does again."""
    index = _index()
    _trained(file, index)
    seen: list[int] = []

    def put(step: int) -> bool:
        with file.write() as conn:
            seen.append(int(fetchall(conn, "PRAGMA wal_autocheckpoint")[0][0]))
        return False

    assert index.train(file, _steps(file, put))
    assert seen and set(seen) == {0}
    assert not file.folding.active
    with file.write() as conn:
        assert fetchall(conn, "PRAGMA wal_autocheckpoint")[0][0] == 1000


def test_a_stopped_training_leaves_a_sound_index_and_the_next_one_finishes_it(
    file: File,
) -> None:
    """A training stopped halfway leaves vectors in old and new lists, every one found;
    the next training (here `maintain`) takes it over and finishes the move."""
    index = _index()
    vectors = _trained(file, index)
    assert not index.train(file, _steps(file, lambda step: step > 6))
    record = _moving(file)
    assert record is not None
    first = int(record.split()[0])
    with file.read() as conn:
        assert index.problems(conn) == []
        spread = {row[0] >= first for row in fetchall(conn, "SELECT id >> 32 FROM store_vectors")}
    assert spread == {True, False}
    query = vectors[7]
    assert _every_list(file, index, query) == _exact(file, index, query)
    with file.write() as conn:
        assert index.maintain(conn)
    assert _moving(file) is None
    with file.read() as conn:
        assert index.problems(conn) == []
        lowest = fetchall(conn, "SELECT min(id) FROM store_lists WHERE id != 0")[0][0]
        assert lowest == first
        assert fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0] == len(vectors)


def test_a_stopped_training_is_finished_though_the_exact_scan_serves(file: File) -> None:
    """Below `exact_up_to` no training is due, except one left halfway (a `compact`
    stopped, say): its vectors sit in old and new lists, so it stays due until a
    training finishes the move, and searches stay exact meanwhile."""
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=10**6)
    vectors = _trained(file, index, due=False)
    assert not index.train(file, _steps(file, lambda step: step > 3), force=True)
    assert _moving(file) is not None
    with file.read() as conn:
        assert index.due(conn, training=True) == len(vectors)
        query = vectors[5]
        assert index.search(conn, query, 10) == index.exact(conn, query, 10)
    assert index.train(file)
    assert _moving(file) is None
    with file.read() as conn:
        assert index.due(conn) is None
        assert index.problems(conn) == []


def test_a_training_taken_over_stops_at_its_next_step(file: File) -> None:
    """When another training takes a running one over (its token changes), the first
    writes nothing more and returns False; the index stays sound and complete."""
    index = _index()
    vectors = _trained(file, index)
    other = _index()

    def take_over(step: int) -> bool:
        if step == 3:
            with file.write() as conn:
                assert other.maintain(conn)
        return False

    assert not index.train(file, _steps(file, take_over))
    assert _moving(file) is None
    with file.read() as conn:
        assert index.problems(conn) == []
        assert fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0] == len(vectors)


def test_the_exact_scan_keeps_its_codes_across_a_training(file: File) -> None:
    """A training moves vectors without changing them: the scan's codes stay in memory
    (no reload) and its results stay exact. `exact_up_to` is given: the pure-Python
    backend's default scans exactly only up to `train_from` vectors."""
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=10**6)
    vectors = _trained(file, index, due=False)
    query = vectors[11]
    with file.read() as conn:
        index.search(conn, query, 10)
    held = index.scan.held()
    assert held is not None
    assert index.train(file, force=True)
    with file.read() as conn:
        found = [item for item, _ in index.search(conn, query, 10)]
    assert index.scan.held() is held
    assert found == _exact(file, index, query)


def test_a_writer_thread_runs_through_a_background_training(file: File) -> None:
    """Puts from another thread commit while a background training runs; afterwards every
    item is indexed once, in the new lists, and found."""
    index = _index()
    vectors = _trained(file, index, 2000)
    training = BackgroundTraining(index, file)
    rng = random.Random(5)
    written: dict[int, list[float]] = {}
    done = threading.Event()

    def writer() -> None:
        item = 50_000
        while not done.is_set() or len(written) < 20:
            batch = _vectors(rng, 5, item)
            with file.write() as conn:
                _put(conn, index, batch)
            written.update(batch)
            item += 5
            time.sleep(0.005)  # a writer that puts as agents do, not one that spins

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert training.start()
        training.wait(600)  # the bound of a hung training, not a speed (on a loaded machine)
    finally:
        done.set()
        thread.join(600)
    assert _moving(file) is None
    with file.read() as conn:
        assert index.problems(conn) == []
        items = [row[0] for row in fetchall(conn, "SELECT item FROM store_vectors")]
    assert sorted(items) == sorted(set(vectors) | set(written))
    for vector in list(written.values())[-3:]:
        assert _every_list(file, index, vector) == _exact(file, index, vector)


def test_dropping_the_vectors_stops_a_training(file: File) -> None:
    """`Reindex.drop_vectors` (a re-embedding with other dims) during a training makes the
    training stop at its next step: it records no training over the dropped vectors."""
    index = _index()
    _trained(file, index)
    reindex = Reindex(Items(file, index))

    def drop(step: int) -> bool:
        if step == 2:
            with file.write() as conn:
                reindex.drop_vectors(conn)
        return False

    assert not index.train(file, _steps(file, drop))
    assert _moving(file) is None
    with file.read() as conn:
        assert index.problems(conn) == []
        kept = fetchall(conn, "SELECT key FROM meta WHERE key LIKE 'vector@_%' ESCAPE '@'")
        assert {"vector_trained", "vector_generation"}.isdisjoint({row[0] for row in kept})


def test_verify_names_a_training_whose_new_lists_are_gone(file: File) -> None:
    """A stopped training is sound (verify finds nothing); one whose `vector_moving` names
    lists that do not exist is reported."""
    index = _index()
    _trained(file, index)
    assert not index.train(file, _steps(file, lambda step: step > 2))
    with file.read() as conn:
        assert index.problems(conn) == []
    with file.write() as conn:
        conn.execute("UPDATE meta SET value = '999999 x 1 0' WHERE key = 'vector_moving'")
    with file.read() as conn:
        found = index.problems(conn)
    assert any("training in progress" in line for line in found)


@pytest.mark.parametrize(
    ("hold", "expected"),
    [(0.0, [100, 50, 25, 12, 8, 8]), (60.0, [100, 125, 156, 195, 243, 300])],
)
def test_steps_follow_the_write_locks_measured_hold(
    file: File, monkeypatch: pytest.MonkeyPatch, hold: float, expected: list[int]
) -> None:
    """A step that held the write lock longer than HOLD halves the next (down to
    BATCH_MIN); one under half of it makes the next a quarter larger (up to BATCH_MAX)."""
    monkeypatch.setattr(vector_training, "HOLD", hold)
    monkeypatch.setattr(vector_training, "BATCH_MAX", 300)
    monkeypatch.setattr(vector_training, "PAUSE_MAX", 0.0)
    index = _index()
    _trained(file, index)
    sizes: list[int] = []
    move = vector_training.Training._move

    def counted(self: Any, conn: Any, state: Any, rows: list[Any], targets: list[int]) -> bool:
        sizes.append(len(rows))
        return move(self, conn, state, rows, targets)

    monkeypatch.setattr(vector_training.Training, "_move", counted)
    assert index.train(file)
    assert sizes[: len(expected)] == expected
    with file.read() as conn:
        assert index.problems(conn) == []
