"""What a reader of another process's writes relies on: data versions and thread seqs."""

from __future__ import annotations

from pathlib import Path

from threadloom.engine.changes import Changes
from threadloom.engine.checkpoint_store import CheckpointStore
from threadloom.engine.checkpoints.scope import thread_seqs
from threadloom.engine.file import File
from threadloom.protocol import BLOBS


def _blob(thread_id: str, n: int) -> dict[str, object]:
    return {
        "agent_id": "a",
        "thread_id": thread_id,
        "ref": f"b-{n:064x}",
        "_schema": 2,
        "value": {"kind": "msgpack", "payload": bytes([n])},
    }


def test_the_data_version_moves_on_commits_of_this_and_other_processes(tmp_path: Path) -> None:
    """A commit through the shared file's pool and one through a private file (as another
    process) both change the version; reading does not."""
    path = tmp_path / "f.db"
    shared = File.open(path)
    other = File(path)
    changes = Changes(shared)
    try:
        store = CheckpointStore(shared, namespace="ns", agent_id="a")
        first = changes.version()
        store.view.keys()
        assert changes.version() == first
        store.view.import_documents([(BLOBS, _blob("t", 1))])
        second = changes.version()
        assert second != first
        CheckpointStore(other, namespace="ns", agent_id="a").view.import_documents(
            [(BLOBS, _blob("t", 2))]
        )
        assert changes.version() != second
    finally:
        changes.close()
        other.close()
        shared.close()


def test_thread_seqs_move_on_every_insert_also_a_copy_onto_a_thread_ahead(tmp_path: Path) -> None:
    """Imports move the seq of their thread only; copying a thread that is behind onto one
    that is ahead still moves the target's seq; keys can be read per thread."""
    db = File(tmp_path / "f.db")
    try:
        store = CheckpointStore(db, namespace="ns", agent_id="a")
        store.view.import_documents([(BLOBS, _blob("behind", 1))])
        store.view.import_documents([(BLOBS, _blob("ahead", n)) for n in range(2, 8)])
        before = {t.thread_id: t for t in thread_seqs(db, "ns")}
        assert before["ahead"].seq > before["behind"].seq
        store.view.import_documents([(BLOBS, _blob("behind", 9))])
        after = {t.thread_id: t for t in thread_seqs(db, "ns")}
        assert after["behind"].seq > before["behind"].seq
        assert after["ahead"].seq == before["ahead"].seq
        store.maintenance.copy_thread("behind", "ahead")
        copied = {t.thread_id: t for t in thread_seqs(db, "ns")}
        assert copied["ahead"].seq > after["ahead"].seq
        assert len(store.view.keys("behind")) == 2 and len(store.view.keys("ahead")) == 8
        assert thread_seqs(db, "elsewhere") == []

    finally:
        db.close()
