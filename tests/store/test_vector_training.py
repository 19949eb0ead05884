"""The Store's vector lists trained on a thread of their own, and again by `compact`.

End to end on a real file: a batch past the training threshold starts a background
training (engine/items/vector_training.py) while the Store goes on, every item stays
searchable, and `compact` trains the lists again; the doctor figures say so.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from langgraph.store.base import PutOp

from tests.store._random_store import random_store, stored_docs
from threadloom.core.lru import Budget
from threadloom.engine.checks import compact, figures
from threadloom.engine.file import File
from threadloom.engine.items import scan
from threadloom.engine.sql import fetchall

#: Past the default training threshold (vectors.TRAIN_FROM: 4,096).
COUNT = 4500


def _meta(path: Path) -> dict[str, object]:
    file = File.open(path)
    try:
        with file.read() as conn:
            rows = fetchall(conn, "SELECT key, value FROM meta WHERE key LIKE 'vector%'")
    finally:
        file.close()
    return {str(key): value for key, value in rows}


def test_no_training_while_the_exact_scan_serves(tmp_path: Path) -> None:
    """Past the threshold, lists no search of this process would read are not trained:
    the batch starts no training, nothing is moved, and the search stays exact. (The
    pure-Python core scans exactly only up to the threshold: there the lists train.)"""
    path = tmp_path / "store.db"
    store = random_store(path)
    try:
        assert store.training is not None
        serves = store.training.index.exact_up_to >= COUNT
        ops = [PutOp(("docs",), f"d{n}", {"text": f"document {n}"}) for n in range(COUNT)]
        store.batch(ops)
        store.training.wait(120)  # returns at once when none started
        found = store.search(("docs",), query="document 17", limit=1)
        assert [item.key for item in found] == ["d17"]
    finally:
        store.close()
    assert ("vector_generation" in _meta(path)) == (not serves)
    assert figures(str(path))["store_vector_training"] is False


def test_a_batch_past_the_threshold_trains_in_the_background(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a process whose vector budget cannot hold the exact scan's codes, the batch
    that makes a training due returns before it ends; puts made meanwhile are found by
    the next search, and the training ends with every item indexed once."""
    monkeypatch.setattr(scan, "codes_budget", lambda: Budget(64 * 1024))
    path = tmp_path / "store.db"
    store = random_store(path)
    try:
        ops = [PutOp(("docs",), f"d{n}", {"text": f"document {n}"}) for n in range(COUNT)]
        store.batch(ops)
        assert store.training is not None
        store.put(("docs",), "late", {"text": "a late document"})
        found = store.search(("docs",), query="a late document", limit=1)
        assert [item.key for item in found] == ["late"]
        store.training.wait(120)
    finally:
        store.close()
    meta = _meta(path)
    assert "vector_moving" not in meta
    assert meta.get("vector_generation") is not None
    assert int(str(meta["vector_trained"])) >= 4096
    file = File.open(path)
    try:
        with file.read() as conn:
            assert fetchall(conn, "SELECT count(*) FROM store_vectors")[0][0] == COUNT + 1
    finally:
        file.close()


def test_compact_trains_the_lists_again_and_doctor_shows_it(tmp_path: Path) -> None:
    """`compact` trains the lists over every vector (a new generation of lists, the recall
    recorded); the doctor figures show the recall and no training in progress."""
    path = tmp_path / "store.db"
    stored_docs(path)
    assert "vector_generation" not in _meta(path)  # 300 vectors: not trained yet
    file = File.open(path)
    try:
        done = compact(file)
    finally:
        file.close()
    assert done.vectors_retrained == 300
    meta = _meta(path)
    assert meta.get("vector_generation") is not None and "vector_moving" not in meta
    found = figures(str(path))
    assert found["store_vector_recall"] is not None
    assert found["store_vector_training"] is False
