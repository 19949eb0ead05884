"""The Store's vector codes end to end: `threadloom verify` names a damaged code chunk,
`threadloom compact` rebuilds the codes, `doctor` reports them (engine/items/vector_codes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from langgraph.store.base import PutOp

from tests.store._random_store import DIMS, random_store, stored_docs
from threadloom.cli import main
from threadloom.engine.file import File
from threadloom.engine.items import vectors
from threadloom.engine.sql import fetchall


def test_verify_names_a_damaged_code_chunk_and_compact_rebuilds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A code chunk with a changed byte makes `verify` exit 3 naming it; after `compact`
    verify is clean, doctor reports the codes, and a search reaches every item."""
    # The exact scan serves up to 100 vectors here, so the lists of 300 are coded.
    monkeypatch.setattr(vectors, "EXACT_CODE_BYTES", 100 * DIMS)
    path = tmp_path / "store.db"
    store = random_store(path)
    try:
        store.batch([PutOp(("docs",), f"d{n}", {"text": f"doc {n}"}) for n in range(300)])
        store.delete(("docs",), "d7")
    finally:
        store.close()
    assert main(["compact", str(path)]) == 0  # trains the lists: every list coded
    file = File.open(path)
    try:
        with file.write() as conn:
            key, body = fetchall(conn, "SELECT id, body FROM store_codes ORDER BY id LIMIT 1")[0]
            damaged = bytes(body[:-1]) + bytes([(body[-1] + 1) % 256])
            conn.execute("UPDATE store_codes SET body = ? WHERE id = ?", (damaged, key))
    finally:
        file.close()
    capsys.readouterr()
    assert main(["verify", str(path)]) == 3
    assert "codes differ from their vectors" in capsys.readouterr().out
    assert main(["compact", str(path)]) == 0
    assert main(["verify", str(path)]) == 0
    capsys.readouterr()
    assert main(["doctor", str(path), "--json"]) == 0
    doctor = json.loads(capsys.readouterr().out)
    assert json.dumps(doctor).count("store_vector_codes_complete") == 1
    store = random_store(path)
    try:
        found = store.search(("docs",), query="anything", limit=400)
        assert len({item.key for item in found}) == 299
    finally:
        store.close()


def test_a_put_on_a_file_trained_before_packing_packs_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file whose lists were trained without packing them (no `vector_codes_packed`)
    gets packed by the Store's background thread after the next put, verify still clean."""
    monkeypatch.setattr(vectors, "EXACT_CODE_BYTES", 100 * DIMS)  # lists of 300 are coded
    path = tmp_path / "store.db"
    stored_docs(path)
    assert main(["compact", str(path)]) == 0
    file = File.open(path)
    try:
        with file.write() as conn:
            conn.execute("DELETE FROM meta WHERE key = 'vector_codes_packed'")
    finally:
        file.close()
    store = random_store(path)
    try:
        store.put(("docs",), "late", {"text": "one more"})
        assert store.training is not None
        store.training.wait(60)
    finally:
        store.close()
    file = File.open(path)
    try:
        with file.read() as conn:
            packed = fetchall(conn, "SELECT value FROM meta WHERE key = 'vector_codes_packed'")
            generation = fetchall(conn, "SELECT value FROM meta WHERE key = 'vector_generation'")
        assert packed and packed == generation
    finally:
        file.close()
    assert main(["verify", str(path)]) == 0


def test_an_index_the_exact_scan_serves_has_no_codes_until_it_outgrows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Up to the exact scan's size the file holds no codes (a search never reads them);
    the training that finds the index beyond it codes every list (tests/engine: due)."""
    path = tmp_path / "store.db"
    stored_docs(path)
    assert main(["compact", str(path)]) == 0  # trains the lists
    figures = _doctor(path)
    assert figures["store_vector_codes_bytes"] == 0
    assert figures["store_vector_codes_complete"] is None
    monkeypatch.setattr(vectors, "EXACT_CODE_BYTES", 100 * DIMS)  # now beyond it
    assert _doctor(path)["store_vector_codes_complete"] is False  # a training is due
    assert main(["compact", str(path)]) == 0  # its training codes every list
    figures = _doctor(path)
    assert figures["store_vector_codes_complete"] is True
    assert int(str(figures["store_vector_codes_bytes"])) > 0
    assert main(["verify", str(path)]) == 0


def _doctor(path: Path) -> dict[str, object]:
    from threadloom.engine.checks.figures import figures

    return figures(str(path))
