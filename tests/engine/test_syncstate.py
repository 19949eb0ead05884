"""The sync state of a scope (`engine.checkpoints.syncstate`): what `threadloom sync`
remembers per peer, and the upgrade that adds its tables."""

from __future__ import annotations

from pathlib import Path

import apsw

from tests.engine.test_database import with_seal_functions
from tests.engine.test_durability import put
from threadloom import Saver
from threadloom.engine.checkpoints.syncstate import Synced, SyncState
from threadloom.engine.format.schema import FORMAT_8, FORMAT_VERSION, MIGRATIONS


def test_a_thread_synced_is_unchanged_until_a_row_goes_into_it(tmp_path: Path) -> None:
    """A recorded thread's row id and seq match the file's until a put moves its seq;
    a thread deleted and made again has another row id."""
    with Saver.from_conn_string(str(tmp_path / "a.db")) as saver:
        put(saver, {"x": 1}, thread_id="t")
        state = SyncState(saver.checkpoints.scope)
        now = state.local()["t"]
        assert now.head is not None and now.seq > 0
        state.record("peer", [Synced("t", now.thread, now.seq, now.head, False)])
        assert state.threads("peer")["t"] == Synced("t", now.thread, now.seq, now.head, False)
        assert state.threads("other") == {}
        put(saver, {"x": 2}, thread_id="t", number=2, parent=now.head)
        assert state.local(["t"])["t"].seq > now.seq
        saver.delete_thread("t")
        put(saver, {"x": 1}, thread_id="t")
        assert state.local()["t"].thread != now.thread
        state.forget("peer", "t")
        assert state.threads("peer") == {}


def test_the_high_water_mark_never_goes_back(tmp_path: Path) -> None:
    """A peer's mark is the highest checkpoint id recorded for it, per peer."""
    with Saver.from_conn_string(str(tmp_path / "a.db")) as saver:
        state = SyncState(saver.checkpoints.scope)
        assert state.high_water("peer") is None
        state.record_peer("peer", "b")
        state.record_peer("peer", "a")
        assert state.high_water("peer") == "b"
        assert state.high_water("other") is None


def test_a_file_of_format_7_upgrades_with_empty_sync_tables(tmp_path: Path) -> None:
    """A file at format 7, the format before the sync tables, opens, keeps its thread and
    gains the two tables, empty."""
    path = tmp_path / "old.db"
    raw = apsw.Connection(str(path))
    with_seal_functions(raw)
    before_sync = MIGRATIONS.index(FORMAT_8)
    for step in MIGRATIONS[:before_sync]:
        raw.execute(step)
    raw.execute(f"PRAGMA user_version={before_sync}")
    raw.close()
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, {"x": 1}, thread_id="t")
    with Saver.from_conn_string(str(path)) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
        with saver.file.read() as conn:
            assert conn.execute("PRAGMA user_version").fetchall()[0][0] == FORMAT_VERSION
            for table in ("sync_peers", "sync_threads"):
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0] == 0


def test_an_erasure_leaves_no_sync_state_of_the_owners_threads(tmp_path: Path) -> None:
    """Erasing an owner removes their threads' sync rows, and keeps the others'."""
    with Saver.from_conn_string(str(tmp_path / "a.db")) as saver:
        put(saver, {"x": 1}, thread_id="ada-1")
        put(saver, {"x": 1}, thread_id="bob-1")
        saver.set_thread("ada-1", owner="ada")
        state = SyncState(saver.checkpoints.scope)
        state.record(
            "peer", [Synced(t, n.thread, n.seq, n.head, False) for t, n in state.local().items()]
        )
        saver.erase("ada", store=[])
        assert list(state.threads("peer")) == ["bob-1"]
