"""Chunk documents stored as deltas of an earlier version (format 10, engine/content/deltas.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import apsw
import ormsgpack
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from tests.retention._helpers import age
from threadloom import Saver, Store
from threadloom.engine.checkpoints.scope import KeptCompressor
from threadloom.engine.checkpoints.values import Values
from threadloom.engine.checks.verify import verify
from threadloom.engine.content import deltas
from threadloom.engine.format import refkeys
from threadloom.engine.format.codec import (
    delta,
    delta_base,
    delta_compressor,
    digest,
    frame,
    undelta,
)
from threadloom.engine.format.schema import CODES_FORMAT, FORMAT_VERSION
from threadloom.engine.format.tables import VALS
from threadloom.langgraph.retention import RetentionPolicy
from threadloom.protocol import ITEMS


def _checkpoint(n: int, messages: list[str]) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
    checkpoint["ts"] = f"2026-01-01T00:00:{n:02d}+00:00"
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": n}
    return checkpoint


def _grow(saver: Saver, thread_id: str, steps: int, first: int = 1) -> dict[str, Any]:
    """`steps` puts of a message list growing by one each; returns the last config."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    messages = [f"message {i} of {thread_id}: " + "words " * 20 for i in range(1, first)]
    for n in range(first, first + steps):
        messages = [*messages, f"message {n} of {thread_id}: " + "words " * 20]
        config = saver.put(config, _checkpoint(n, messages), {"step": n}, {})  # type: ignore[arg-type]
    return config


def _messages(saver: Saver, config: dict[str, Any]) -> list[str]:
    found = saver.get_tuple(config)
    assert found is not None
    return list(found.checkpoint["channel_values"]["messages"])


def _deltas(path: Path) -> list[tuple[str, str]]:
    """(ref, base ref) of every delta row of the file."""
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [
            (refkeys.text(ref), delta_base(body))
            for ref, body in conn.execute("SELECT ref_key, body FROM vals WHERE blocks = -1")
        ]
    finally:
        conn.close()


def _fresh(path: Path) -> Saver:
    return Saver(str(path))


def test_a_growing_list_stores_chunk_versions_as_deltas_and_reads_them_back_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A list's tail chunk written again at each step is stored as deltas of a whole
    version; every checkpoint reads back as written, and the documents (what export, sync
    and serve hand out) are those of a file written without deltas."""
    saver = _fresh(tmp_path / "deltas.db")
    try:
        _grow(saver, "t", 20)
        assert len(_deltas(tmp_path / "deltas.db")) >= 10
        saver.checkpoints.scope.release()  # reads from the file, not from memory
        for n in range(1, 21):
            config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
            config["configurable"]["checkpoint_id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
            assert len(_messages(saver, config)) == n
        assert verify(saver.file).sound
        with_deltas = list(saver.documents())
    finally:
        saver.close()
    monkeypatch.setattr("threadloom.engine.checkpoints.writer.DELTA_SHARE", 0.0)
    saver = _fresh(tmp_path / "whole.db")
    try:
        _grow(saver, "t", 20)
        assert _deltas(tmp_path / "whole.db") == []
        whole = list(saver.documents())
    finally:
        saver.close()
    assert with_deltas == whole


def test_a_prune_that_deletes_a_base_stores_its_surviving_deltas_whole(tmp_path: Path) -> None:
    """Retention deletes the old chunk versions, bases among them; a delta that the kept
    checkpoint still reaches is stored whole first, so the thread reads on and verifies."""
    path = tmp_path / "prune.db"
    saver = _fresh(path)
    try:
        config = _grow(saver, "t", 12)
        before = _deltas(path)
        bases = {base for _, base in before}
        assert bases and before
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1))
        assert report.values > 0
        left = {ref for ref, _ in _deltas(path)}
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        stored = {refkeys.text(r[0]) for r in conn.execute("SELECT ref_key FROM vals")}
        conn.close()
        assert bases - stored, "the prune deleted no base: the test proves nothing"
        assert all(base in stored for ref, base in _deltas(path) if ref in left)
        saver.checkpoints.scope.release()
        assert len(_messages(saver, config)) == 12
        assert verify(saver.file).sound
    finally:
        saver.close()


def test_verify_reports_a_delta_whose_base_is_gone(tmp_path: Path) -> None:
    """A base deleted behind threadloom's back (by SQL) breaks the chain: verify names the
    value that cannot be read, and a read raises instead of returning another list."""
    path = tmp_path / "broken.db"
    saver = _fresh(path)
    try:
        _grow(saver, "t", 12)
        ref, base = _deltas(path)[0]
        with saver.file.write() as conn:
            conn.execute("DELETE FROM vals WHERE ref_key = ?", (refkeys.key(base),))
        report = verify(saver.file)
        assert not report.sound
        assert any(base in p.detail and "missing" in p.detail for p in report.problems)
    finally:
        saver.close()


def test_a_copied_thread_settles_deltas_whose_base_the_target_holds_as_a_delta(
    tmp_path: Path,
) -> None:
    """copy_thread into a thread that holds a base as a delta of its own stores the copied
    delta whole: no chain of two."""
    path = tmp_path / "copy.db"
    saver = _fresh(path)
    scope = saver.checkpoints.scope
    try:
        _grow(saver, "a", 40)
        ref, base = _deltas(path)[-1]
        # The target holds `base` as a delta of another whole chunk, as another history of
        # the same list could have stored it.
        with saver.file.write() as conn:
            rows = {
                refkeys.text(r): bytes(b)
                for r, b in conn.execute("SELECT ref_key, body FROM vals WHERE blocks = 0")
            }
            other = next(r for r in rows if r.startswith("c-") and r != base)
            found = Values(scope).values(conn, _row(conn, "a"), [base, other])
            base_raw, other_raw = (ormsgpack.packb(found[r]) for r in (base, other))
            target = scope.ensure_thread(conn, "b", time.time())
            for r, body, msgpack in (
                (other, frame(other_raw, None), other_raw),
                (base, delta(base_raw, other, other_raw), base_raw),
            ):
                conn.execute(
                    "INSERT INTO vals(thread, ref_key, seq, body, digest, created_at, blocks) "
                    "VALUES(?, ?, 0, ?, ?, ?, ?)",
                    (
                        target,
                        refkeys.key(r),
                        body,
                        scope.seal(VALS, digest(msgpack), "b", r),
                        time.time(),
                        deltas.blocks_column(body, 0),
                    ),
                )
        saver.copy_thread("a", "b")
        conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
        copied = {
            refkeys.text(r): blocks
            for r, blocks in conn.execute(
                "SELECT x.ref_key, x.blocks FROM vals x JOIN threads t ON t.id = x.thread "
                "WHERE t.thread_id = 'b'"
            )
        }
        conn.close()
        assert copied[base] == deltas.DELTA_ROW  # the target's own row stays
        assert copied[ref] == 0  # the copied delta of it is stored whole
        assert verify(saver.file).sound
        scope.release()
        config = {"configurable": {"thread_id": "b", "checkpoint_ns": ""}}
        assert len(_messages(saver, config)) == 40
    finally:
        saver.close()


def _row(conn: apsw.Connection, thread_id: str) -> int:
    return int(
        conn.execute("SELECT id FROM threads WHERE thread_id = ?", (thread_id,)).fetchall()[0][0]
    )


def test_a_format_9_file_upgrades_and_later_puts_write_deltas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file of format 9 (threads, a Store, a lease; no delta; `meta` with a rowid) opens
    at the current format with its documents and meta keys unchanged and `meta` its own
    key index, verifies, and its threads then grow by deltas."""
    path = tmp_path / "old.db"
    with monkeypatch.context() as patched:
        patched.setattr("threadloom.engine.checkpoints.writer.DELTA_SHARE", 0.0)
        saver = _fresh(path)
        try:
            config = _grow(saver, "t", 10)
            _grow(saver, "u", 3)
            lease = saver.lease("u", ttl=3600, renew=False)
            lease.acquire()
            before = list(saver.documents())
        finally:
            saver.close()
        store = Store(str(path))
        try:
            store.put(("users", "1"), "profile", {"name": "Ada"})
        finally:
            store.close()
    assert _deltas(path) == []
    conn = apsw.Connection(str(path))
    conn.create_scalar_function("ref_text", refkeys.text)
    conn.execute(
        "CREATE TABLE meta_9(key TEXT PRIMARY KEY, value ANY) STRICT; "
        "INSERT INTO meta_9 SELECT key, value FROM meta; DROP TABLE meta; "
        "ALTER TABLE meta_9 RENAME TO meta; "
        # `vals.ref` as text, as formats before 11 stored it.
        "CREATE TABLE vals_9(thread INTEGER NOT NULL REFERENCES threads(id), ref TEXT NOT NULL, "
        "seq INTEGER NOT NULL, body BLOB NOT NULL, digest BLOB NOT NULL, created_at REAL NOT NULL, "
        "blocks INTEGER NOT NULL DEFAULT 0, PRIMARY KEY(thread, ref)) STRICT, WITHOUT ROWID; "
        "INSERT INTO vals_9 SELECT thread, ref_text(ref_key), seq, body, digest, created_at, "
        "blocks FROM vals; DROP TABLE vals; ALTER TABLE vals_9 RENAME TO vals"
    )
    keys = conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall()
    assert conn.execute("SELECT 1 FROM sqlite_schema WHERE name LIKE '%autoindex_meta%'").fetchall()
    conn.execute(f"PRAGMA user_version = {CODES_FORMAT}")
    conn.close()
    saver = _fresh(path)
    try:
        with saver.file.read() as conn:
            assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
            assert conn.execute("SELECT count(*) FROM leases").fetchall() == [(1,)]
            assert conn.execute("SELECT key, value FROM meta ORDER BY key").fetchall() == keys
            assert not conn.execute(
                "SELECT 1 FROM sqlite_schema WHERE name LIKE '%autoindex_meta%'"
            ).fetchall()
        assert list(saver.documents()) == before
        assert verify(saver.file).sound
        config = _grow(saver, "t", 6, first=11)
        assert _deltas(path)
        assert len(_messages(saver, config)) == 16
        assert verify(saver.file).sound
    finally:
        saver.close()
    store = Store(str(path))
    try:
        item = store.get(("users", "1"), "profile")
        assert item is not None and item.value == {"name": "Ada"}
    finally:
        store.close()


def test_a_base_deleted_as_a_document_leaves_its_deltas_readable(tmp_path: Path) -> None:
    """Deleting a chunk document through the document view (serve, the naas adapter)
    stores the chunk's deltas whole first: the checkpoints that reach them read on."""
    path = tmp_path / "served.db"
    saver = _fresh(path)
    try:
        config = _grow(saver, "t", 12)
        ref, base = _deltas(path)[-1]
        fields = {"thread_id": "t", "ref": base}
        assert saver.checkpoints.view.delete(ITEMS, fields)
        assert base not in {r for r, _ in _deltas(path)} and ref not in dict(_deltas(path))
        saver.checkpoints.scope.release()
        assert len(_messages(saver, config)) == 12
    finally:
        saver.close()


def test_documents_imported_one_by_one_store_chunk_versions_as_deltas(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The document service and the naas adapter hand a thread over one document at a
    time (`import_documents`): its chunk versions are stored as deltas as a put stores
    them, the documents read back as imported, and a base deleted as a document is never
    the base of a later import."""
    monkeypatch.setattr("threadloom.engine.checkpoints.writer.DELTA_SHARE", 0.0)
    source = _fresh(tmp_path / "source.db")
    try:
        _grow(source, "t", 20)
        documents = [(collection, data) for collection, _, data in source.documents()]
    finally:
        source.close()
    assert _deltas(tmp_path / "source.db") == []
    monkeypatch.undo()
    path = tmp_path / "imported.db"
    target = _fresh(path)
    try:
        view = target.checkpoints.view
        half = len(documents) // 2
        for document in documents[:half]:
            view.import_documents([document])
        stored = _deltas(path)
        assert stored
        _, base = stored[-1]
        assert view.delete(ITEMS, {"thread_id": "t", "ref": base})
        for document in documents[half:]:
            view.import_documents([document])
        assert len(_deltas(path)) > len(stored)
        assert base not in {b for _, b in _deltas(path)}
        # The deleted chunk leaves the checkpoints that reached it short of it (what a
        # delete through the document service means), and nothing else.
        problems = verify(target.file).problems
        assert problems
        assert all(p.check == "references" and base in p.detail for p in problems)
        target.checkpoints.scope.release()
        again = [(collection, data) for collection, _, data in target.documents()]
    finally:
        target.close()
    assert again == [d for d in documents if not (d[0] == ITEMS and d[1]["ref"] == base)]


def test_a_kept_delta_compressor_frames_the_bytes_a_new_one_does() -> None:
    """A compressor kept for a base and used for several versions frames each exactly as
    a compressor made for it alone, and every frame reads back against the base."""
    base = ormsgpack.packb({"elements": [[f"e-{i:064x}", 100 + i] for i in range(12)]})
    ref = "c-" + "ab" * 32
    kept = delta_compressor(base)
    for n in range(13, 20):
        raw = ormsgpack.packb({"elements": [[f"e-{i:064x}", 100 + i] for i in range(n)]})
        framed = delta(raw, ref, base, kept)
        assert framed == delta(raw, ref, base)
        assert undelta(framed, base, "chunk") == raw


def test_the_scope_keeps_a_compressor_per_base_in_use_only(tmp_path: Path) -> None:
    """Deltas of a growing list are framed with a compressor kept for their base; once the
    list is stored whole again (a new base) the old base's compressor is let go."""
    saver = _fresh(tmp_path / "kept.db")
    try:
        scope = saver.checkpoints.scope
        _grow(saver, "t", 40)
        bases = {base for _, base in _deltas(tmp_path / "kept.db")}
        assert len(bases) > 1, "one base only: the test proves nothing"
        kept = {key[1] for key in scope.delta_compressors._items}
        current = {ref for ref, _ in scope.chunk_bases.values()}
        assert kept and kept <= current
    finally:
        saver.close()


def test_a_kept_compressor_made_from_other_bytes_is_not_used(tmp_path: Path) -> None:
    """A compressor kept under a base's ref but made from other bytes than the base's
    is replaced, not used: the deltas framed next still read back as written."""
    path = tmp_path / "other.db"
    saver = _fresh(path)
    try:
        scope = saver.checkpoints.scope
        poisoned: set[str] = set()
        config = _grow(saver, "t", 1)
        for n in range(2, 25):
            for key in list(scope.delta_compressors._items):
                # Bytes after the base: a match's distance back names other bytes.
                other = dict(scope.chunk_bases.values())[key[1]] + b"\0" * 7
                scope.delta_compressors.put(key, KeptCompressor(delta_compressor(other), other))
                poisoned.add(key[1])
            config = _grow(saver, "t", 1, first=n)
        assert poisoned & {base for _, base in _deltas(path)}, "no kept one met: proves nothing"
        scope.release()  # reads from the file, not from memory
        for n in range(1, 25):
            config["configurable"]["checkpoint_id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
            assert len(_messages(saver, config)) == n
        assert verify(saver.file).sound
    finally:
        saver.close()


def test_a_kept_compressor_in_use_by_another_thread_is_not_shared(tmp_path: Path) -> None:
    """While a kept compressor's lock is held (another thread framing with it), a put
    frames its deltas with a compressor of its own and leaves the held one untouched."""
    path = tmp_path / "busy.db"
    saver = _fresh(path)
    try:
        scope = saver.checkpoints.scope
        config = _grow(saver, "t", 14)
        held = dict(scope.delta_compressors._items)
        assert held, "no compressor kept: the test proves nothing"
        before = {key: kept.compressor.frame_progression() for key, (kept, *_) in held.items()}
        for kept, *_ in held.values():
            kept.lock.acquire()
        try:
            known = set(_deltas(path))
            config = _grow(saver, "t", 4, first=15)
            framed = {base for ref, base in set(_deltas(path)) - known}
            assert framed & {key[1] for key in held}, "no delta of a held base: proves nothing"
            after = {key: kept.compressor.frame_progression() for key, (kept, *_) in held.items()}
            assert after == before
        finally:
            for kept, *_ in held.values():
                kept.lock.release()
        scope.release()
        assert len(_messages(saver, config)) == 18
        assert verify(saver.file).sound
    finally:
        saver.close()
