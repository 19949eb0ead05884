"""The vector index's int8 codes in the file (engine/items/vector_codes.py).

Every vector of a coded list has exactly its code in `store_codes` after every write path
(puts, replacements, removals, item deletes, trainings in one transaction or in steps);
`problems` (so `threadloom verify`) finds a code that disagrees, `compact` rebuilds them,
and a search by the lists over the codes finds what the float32 rows would.
"""

from __future__ import annotations

import random
from array import array
from collections.abc import Sequence
from pathlib import Path

import apsw
import pytest

from threadloom import core
from threadloom.core import similarity
from threadloom.engine.checks.figures import figures
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.format.schema import CODES_FORMAT, FORMAT_VERSION
from threadloom.engine.items import (
    vector_codes,
    vector_packing,
    vector_probe,
    vector_training,
    vectors,
)
from threadloom.engine.items.vector_training import BackgroundTraining
from threadloom.engine.items.vectors import VectorIndex
from threadloom.engine.sql import fetchall
from threadloom.errors import CorruptionError

DIMS = 8


def _clustered(count: int, seed: int, first: int = 1) -> dict[int, list[float]]:
    rng = random.Random(seed)
    centers = [[rng.gauss(0, 1) for _ in range(DIMS)] for _ in range(12)]
    return {first + i: [c + rng.gauss(0, 0.35) for c in rng.choice(centers)] for i in range(count)}


def _put(file: File, index: VectorIndex, items: dict[int, Sequence[float]]) -> None:
    with file.write() as conn:
        conn.executemany(
            "INSERT INTO store_items(id, ns, key, body, digest, size, created_at, updated_at) "
            "VALUES (?, 1, ?, x'', x'', 0, 0, 0) ON CONFLICT DO NOTHING",
            [(item, f"k{item}") for item in items],
        )
        index.replace_many(conn, [(item, [("$", vector)]) for item, vector in items.items()])


def _coded(conn: apsw.Connection) -> int:
    return int(fetchall(conn, "SELECT coalesce(sum(count), 0) FROM store_codes")[0][0])


def _sound(file: File, index: VectorIndex) -> None:
    with file.read() as conn:
        assert index.problems(conn) == []
        assert _coded(conn) == int(fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0])


def test_no_codes_while_the_exact_scan_serves_the_index_then_a_training_codes_it(
    file: File,
) -> None:
    """Up to `exact_up_to` vectors no code is written (puts, trainings) and no training
    is due (every search is the exact scan); a forced one (`compact`) writes no code
    either. The first put beyond it makes a training due, and that training codes every
    list."""
    index = VectorIndex(DIMS, "cosine", train_from=100, exact_up_to=400)
    _put(file, index, _clustered(300, 1))
    with file.write() as conn:
        assert index.due(conn) is None and not index.maintain(conn)
        index.retrain(conn)
    _put(file, index, _clustered(50, 2, first=301))  # into trained lists
    with file.read() as conn:
        assert _coded(conn) == 0 and vector_codes.coded_from(conn) is None
        assert index.due(conn) is None
        assert index.problems(conn) == []
    _put(file, index, _clustered(100, 3, first=351))  # 450: beyond the exact scan
    with file.read() as conn:
        assert index.due(conn) == 450
    assert index.train(file)
    _sound(file, index)
    with file.read() as conn:
        assert vector_codes.coded_from(conn) == 0
        query = _clustered(1, 9)[1]
        lists = int(fetchall(conn, "SELECT count(*) FROM store_lists")[0][0])
        assert index.probe(conn, index._pack(query, "q"), 10, None, lists) == index.exact(
            conn, query, 10
        )


def test_codes_follow_puts_replacements_removals_and_trainings(file: File) -> None:
    """After each write path every vector has exactly its own code, in its list's chunks."""
    index = VectorIndex(DIMS, "cosine", train_from=400, exact_up_to=0)
    _put(file, index, _clustered(300, 1))  # list 0, before any training
    _sound(file, index)
    _put(file, index, _clustered(300, 2, first=301))
    with file.write() as conn:
        assert index.maintain(conn)  # in one transaction
    _sound(file, index)
    _put(file, index, _clustered(40, 3, first=10))  # replacements, in trained lists
    with file.write() as conn:
        index.remove(conn, list(range(100, 160)))
        index.replace(conn, 200, [("$", [1.0] * DIMS), ("other", [0.5] * DIMS)])
        vector_codes.drop_items(conn, [201, 202])
        conn.execute("DELETE FROM store_items WHERE id IN (201, 202)")
    _sound(file, index)
    _put(file, index, _clustered(700, 4, first=1000))  # many puts: chunks are packed
    with file.read() as conn:
        short = fetchall(
            conn, "SELECT count(*) FROM store_codes WHERE count < ?", (vector_codes.CHUNK,)
        )[0][0]
        lists = fetchall(conn, "SELECT count(*) FROM store_lists")[0][0]
        assert short <= lists * (vector_codes.RUN + 1)
    assert index.train(file, force=True)  # in short steps
    _sound(file, index)
    with file.read() as conn:
        assert vector_codes.coded_from(conn) == 0


def test_a_put_that_forgets_its_code_is_found(file: File, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put whose codes are not written leaves vectors verify names (the check can fail)."""
    index = VectorIndex(DIMS, "l2", train_from=100, exact_up_to=0)
    _put(file, index, _clustered(150, 5))
    with file.write() as conn:
        assert index.maintain(conn)
    monkeypatch.setattr(vector_codes, "add", lambda conn, rows, dims, settings=None: None)
    _put(file, index, _clustered(3, 6, first=500))
    with file.read() as conn:
        found = index.problems(conn)
    assert found and all("vectors have no code" in line for line in found)


def test_problems_name_a_damaged_code_chunk_and_a_training_rebuilds_it(file: File) -> None:
    """A code chunk cut short or with a changed code is a problem (`threadloom verify`:
    tests/store/test_vector_codes.py); a training (`compact`) codes every vector again."""
    index = VectorIndex(DIMS, "cosine", train_from=100, exact_up_to=0)
    _put(file, index, _clustered(400, 7))
    with file.write() as conn:
        assert index.maintain(conn)
        keys = [row[0] for row in conn.execute("SELECT id FROM store_codes ORDER BY id")]
        conn.execute("UPDATE store_codes SET body = substr(body, 1, 100) WHERE id = ?", (keys[0],))
        body = bytes(fetchall(conn, "SELECT body FROM store_codes WHERE id = ?", (keys[1],))[0][0])
        damaged = body[:-1] + bytes([(body[-1] + 1) % 256])
        conn.execute("UPDATE store_codes SET body = ? WHERE id = ?", (damaged, keys[1]))
    with file.read() as conn:
        text = "\n".join(index.problems(conn))
    assert f"code chunk {keys[0]}" in text and "does not hold" in text
    assert "1 codes differ from their vectors" in text
    assert index.train(file, force=True)  # what `compact` does for the vectors
    _sound(file, index)


def test_searches_over_codes_find_what_the_float_rows_find(file: File) -> None:
    """Probing the lists over the codes ranks as probing the float32 rows does, probing
    every list is exact, and recall@10 at the default probes is at least 0.95."""
    index = VectorIndex(DIMS, "cosine", train_from=1000, exact_up_to=0, probes=4)
    drawn = _clustered(3040, 8)
    queries = [drawn.pop(item) for item in range(3001, 3041)]  # held out, same distribution
    _put(file, index, drawn)
    with file.write() as conn:
        assert index.maintain(conn)
    hits = 0
    with file.read() as conn:
        lists = int(fetchall(conn, "SELECT count(*) FROM store_lists")[0][0])
        for query in queries:
            blob = index._pack(query, "query")
            exact = index.exact(conn, query, 10)
            for probes in (1, 4):
                coded = vector_probe.probe(index, conn, blob, 10, None, probes)
                rows = vector_probe.probe(index, conn, blob, 10, None, probes, codes=False)
                assert [item for item, _ in coded] == [item for item, _ in rows]
            assert vector_probe.probe(index, conn, blob, 10, None, lists) == exact
            found = index.search(conn, query, 10)
            hits += len({item for item, _ in exact} & {item for item, _ in found})
    assert hits / 400 >= 0.95


def test_a_selective_filter_over_codes_gets_every_match(file: File) -> None:
    """A filter that accepts few items still gets all of them, with their exact scores
    (ranked by tiers: in exact order once the first tier probes every list)."""
    index = VectorIndex(DIMS, "inner_product", train_from=500, exact_up_to=0)
    items = _clustered(800, 10)
    _put(file, index, items)
    with file.write() as conn:
        assert index.maintain(conn)
    wanted = set(range(1, 801, 97))
    with file.read() as conn:
        query = items[5]
        found = index.search(conn, query, 20, lambda batch: wanted & set(batch))
        exact = index.exact(conn, query, 20, sorted(wanted))
        lists = int(fetchall(conn, "SELECT count(*) FROM store_lists")[0][0])
        every = index.search(conn, query, 20, lambda batch: wanted & set(batch), probes=lists)
    assert sorted(found) == sorted(exact) and every == exact


def test_a_format_8_file_with_vectors_upgrades_and_is_coded_by_its_next_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file from before the codes (format 8: no `store_codes`) opens, searches its float32
    rows, and a training codes every vector; doctor says when the codes are complete."""
    # doctor's index is the file's own (`stored_index`): its exact scan stops at 100 here.
    monkeypatch.setattr(vectors, "EXACT_CODE_BYTES", 100 * DIMS)
    path = tmp_path / "old.db"
    file = File(path)
    index = VectorIndex(DIMS, "cosine", train_from=200, exact_up_to=0)
    try:
        with file.write() as conn:
            file.ensure(conn, features.STORE)
            conn.execute("INSERT INTO store_namespaces(id, name, depth) VALUES (1, 'ns', 1)")
        _put(file, index, _clustered(500, 11))
        with file.write() as conn:
            assert index.maintain(conn)
    finally:
        file.close()
    conn = apsw.Connection(str(path))  # back to format 8, as that threadloom left it
    conn.execute("DROP TABLE store_codes; DELETE FROM meta WHERE key = 'vector_codes_from'")
    conn.execute(f"PRAGMA user_version = {CODES_FORMAT - 1}")
    conn.close()
    file = File(path)
    try:
        with file.read() as conn:
            assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
            assert vector_codes.coded_from(conn) is None
            assert index.problems(conn) == []
            query = _clustered(1, 12)[1]
            exact = index.exact(conn, query, 10)
            lists = int(fetchall(conn, "SELECT count(*) FROM store_lists")[0][0])
            assert index.probe(conn, index._pack(query, "query"), 10, None, lists) == exact
            assert index.due(conn) is not None  # a training is due to code them
        assert figures(str(path))["store_vector_codes_complete"] is False
        _put(file, index, _clustered(5, 13, first=900))  # puts go on meanwhile
        assert index.train(file)
        _sound(file, index)
        assert figures(str(path))["store_vector_codes_complete"] is True
        assert int(str(figures(str(path))["store_vector_codes_bytes"])) > 0
    finally:
        file.close()


def test_bounds_read_in_batches_equal_each_chunks_own_bounds(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading lists' chunks into the batch buffer and bounding them in one native call
    gives every vector its item and the very bound `core.vector_bounds` gives its chunk
    alone, whatever the batch size (a chunk above it is bounded on its own)."""
    index = VectorIndex(DIMS, "l2", train_from=300, exact_up_to=0)
    _put(file, index, _clustered(900, 14))
    with file.write() as conn:
        assert index.maintain(conn)
    query = core.vector_quantize(similarity.pack(_clustered(1, 15)[1]), DIMS)
    with file.read() as conn:
        lists = [int(row[0]) for row in fetchall(conn, "SELECT id FROM store_lists WHERE id > 0")]
        chosen = lists[::2]
        expected_items, expected = array("q"), array("d")
        for list_id in chosen:
            for key, count, body in fetchall(
                conn,
                "SELECT id, count, body FROM store_codes WHERE id >> 32 = ? ORDER BY id",
                (list_id,),
            ):
                chunk = vector_codes.unpack(key, count, body)
                expected_items.extend(chunk.items)
                expected.extend(core.vector_bounds(*query, chunk.codes, chunk.params, DIMS, "l2"))
        size = 8 * 5 + DIMS
        for batch in (vector_probe.BATCH, 3 * size * vector_codes.CHUNK, size):
            monkeypatch.setattr(vector_probe, "BATCH", batch)
            items, bounds = array("q"), array("d")
            vector_probe._read_bounds(conn, chosen, query, DIMS, "l2", items, bounds)
            assert (items, bounds) == (expected_items, expected), batch


def test_a_search_over_a_damaged_code_chunk_says_what_to_run(file: File) -> None:
    """A chunk whose body does not hold its count of vectors stops a search with a
    CorruptionError naming verify and compact, not a wrong result."""
    index = VectorIndex(DIMS, "cosine", train_from=100, exact_up_to=0, probes=1000)
    _put(file, index, _clustered(300, 16))
    with file.write() as conn:
        assert index.maintain(conn)
        conn.execute("UPDATE store_codes SET body = substr(body, 1, length(body) - 1)")
    with file.read() as conn, pytest.raises(CorruptionError, match="threadloom compact"):
        index.search(conn, _clustered(1, 17)[1], 10)


def _loose_training(file: File, monkeypatch: pytest.MonkeyPatch, index: VectorIndex) -> None:
    """Train in many small steps with packing at the end left out, as a format 9 training
    did: every list ends with several short chunks."""
    monkeypatch.setattr(vector_training, "BATCH", 40)
    monkeypatch.setattr(vector_training, "BATCH_MAX", 40)
    monkeypatch.setattr(vector_training, "PAUSE_MAX", 0.0)
    with monkeypatch.context() as inner:
        inner.setattr(vector_packing, "run", lambda file, dims, stop=None: 0)
        assert index.train(file, force=True)
    with file.write() as conn:  # as a file from before packing: no record of it
        conn.execute("DELETE FROM meta WHERE key = ?", (vector_packing.PACKED_KEY,))


def test_packing_keeps_results_and_codes_and_leaves_no_loose_list(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Packing a trained file's short chunks (in steps of one list each) rewrites them as
    full chunks: verify finds nothing, every search gives what it gave before, and the
    packing is recorded so it is not due again."""
    index = VectorIndex(DIMS, "cosine", train_from=500, exact_up_to=0, probes=3)
    _put(file, index, _clustered(2600, 18))
    _loose_training(file, monkeypatch, index)
    queries = list(_clustered(12, 19).values())
    with file.read() as conn:
        chunks = int(fetchall(conn, "SELECT count(*) FROM store_codes")[0][0])
        loose = vector_codes.loose(conn)
        assert loose and vector_packing.due(conn) and index.packing_due(conn)
        before = [index.search(conn, query, 10) for query in queries]
    monkeypatch.setattr(vector_packing, "HOLD", 0.0)  # one list per write transaction
    assert vector_packing.run(file, DIMS) == len(loose)
    _sound(file, index)
    with file.read() as conn:
        assert vector_codes.loose(conn) == []
        assert not vector_packing.due(conn)
        assert int(fetchall(conn, "SELECT count(*) FROM store_codes")[0][0]) < chunks
        assert [index.search(conn, query, 10) for query in queries] == before
    assert vector_packing.run(file, DIMS) == 0


def test_a_training_packs_its_lists_in_steps_and_in_one_transaction(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`train` (steps) and `maintain` (one transaction) both end with every list packed."""
    index = VectorIndex(DIMS, "l2", train_from=500, exact_up_to=0)
    _put(file, index, _clustered(2600, 20))
    monkeypatch.setattr(vector_training, "BATCH", 40)
    monkeypatch.setattr(vector_training, "BATCH_MAX", 40)
    monkeypatch.setattr(vector_training, "PAUSE_MAX", 0.0)
    assert index.train(file, force=True)
    _sound(file, index)
    with file.read() as conn:
        assert vector_codes.loose(conn) == [] and not vector_packing.due(conn)
    _put(file, index, _clustered(3000, 21, first=5000))  # grown past GROWTH: due again
    with file.write() as conn:
        assert index.maintain(conn)
        assert vector_codes.loose(conn) == [] and not vector_packing.due(conn)
    _sound(file, index)


def test_a_damaged_chunk_is_left_for_verify_by_packing(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list holding a chunk that does not unpack is not rewritten (its damage stays
    for verify to name); the other loose lists are."""
    index = VectorIndex(DIMS, "cosine", train_from=500, exact_up_to=0)
    _put(file, index, _clustered(2600, 22))
    _loose_training(file, monkeypatch, index)
    with file.write() as conn:
        list_id = vector_codes.loose(conn)[0]
        conn.execute(
            "UPDATE store_codes SET body = substr(body, 1, 10) WHERE id = "
            "(SELECT max(id) FROM store_codes WHERE id >> 32 = ?)",
            (list_id,),
        )
        rows = "SELECT id, count, body FROM store_codes WHERE id >> 32 = ? ORDER BY id"
        before = fetchall(conn, rows, (list_id,))
        assert not vector_codes.repack(conn, list_id, DIMS)
        assert fetchall(conn, rows, (list_id,)) == before
        assert vector_packing.pack(conn, DIMS) > 0
        assert vector_codes.loose(conn) == [list_id]


def test_the_background_thread_packs_a_file_trained_before_packing(
    file: File, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose lists were trained without packing (no `vector_codes_packed`) says
    packing is due, and the Store's background training thread packs it with no training
    due."""
    index = VectorIndex(DIMS, "cosine", train_from=500, exact_up_to=0)
    _put(file, index, _clustered(2600, 23))
    _loose_training(file, monkeypatch, index)
    with file.read() as conn:
        assert index.due(conn) is None and index.packing_due(conn)
    training = BackgroundTraining(index, file)
    assert training.start()
    training.wait(60)
    with file.read() as conn:
        assert vector_codes.loose(conn) == [] and not index.packing_due(conn)
    _sound(file, index)
