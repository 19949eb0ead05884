"""Format 8: a feature's tables are made when it first writes, and are the tables an
upgraded file has (engine/format/features.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import apsw
import ormsgpack
import pytest
import zstandard
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver, Store
from threadloom.engine.file import File
from threadloom.engine.format import features, functions
from threadloom.engine.format.recognize import Found, identify
from threadloom.engine.format.schema import FORMAT_VERSION, MIGRATIONS
from threadloom.engine.items import READS, Items, Write, now_us
from threadloom.errors import ThreadBusyError

KiB = 1024


def tables(path: Path) -> set[str]:
    conn = apsw.Connection(str(path))
    try:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type='table'")}
    finally:
        conn.close()


def on_disk(path: Path) -> int:
    return sum(
        os.path.getsize(p) for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists()
    )


def schema_of(conn: apsw.Connection) -> list[tuple[str, str, str, str]]:
    return sorted(
        (str(t), str(n), str(tbl), str(sql))
        for t, n, tbl, sql in conn.execute(
            "SELECT type, name, tbl_name, sql FROM main.sqlite_schema"
        )
    )


def test_a_new_file_holds_meta_alone_and_is_small(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    File.open(str(path)).close()
    assert tables(path) == {"meta"}
    assert on_disk(path) <= 32 * KiB
    assert identify(str(path)).found is Found.THREADLOOM


def test_savers_and_stores_that_only_opened_and_read_leave_meta_alone(tmp_path: Path) -> None:
    path = tmp_path / "opened.db"
    saver = Saver(str(path))
    assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is None
    assert list(saver.list(None)) == []
    saver.close()
    store = Store(str(path))
    assert store.search(("a",)) == []
    store.close()
    assert tables(path) == {"meta"}
    assert on_disk(path) <= 32 * KiB


def test_a_lease_on_a_new_file_makes_its_scope_first(tmp_path: Path) -> None:
    path = tmp_path / "lease.db"
    saver = Saver(str(path))
    try:
        with saver.lease("t", ttl=30):
            other = Saver(str(path))
            try:
                with pytest.raises(ThreadBusyError), other.lease("t", ttl=30):
                    pass
            finally:
                other.close()
        assert {"leases", "scopes"} <= tables(path)
    finally:
        saver.close()


def test_an_unused_store_and_lease_table_cost_nothing(tmp_path: Path) -> None:
    path = tmp_path / "saver.db"
    saver = Saver(str(path))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    assert saver.get_tuple(config) is not None
    saver.close()
    Store(str(path)).close()  # opened, never written
    names = tables(path)
    assert "checkpoints" in names
    assert not {n for n in names if n.startswith("store_") or n == "leases"}


def test_a_connection_holds_copies_of_missing_tables_only(tmp_path: Path) -> None:
    """Every pooled connection attaches the copies: of the features the file lacks and
    the tables their foreign keys name, never of what `main` holds, in pages of 512 bytes
    (memory per connection)."""
    path = tmp_path / "saver.db"
    saver = Saver(str(path))
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    saver.close()
    file = File.open(str(path))
    try:
        with file.read() as conn:
            copies = {
                str(r[0])
                for r in conn.execute(
                    f"SELECT name FROM {features.ABSENT}.sqlite_schema WHERE type = 'table'"
                )
            }
            assert conn.execute("SELECT count(*) FROM leases").fetchall() == [(0,)]
            # One page per empty b-tree, of SQLite's smallest size: each connection holds
            # a copy of the image (peak RSS, bench/README.md "Peak RSS and the delta read").
            size = conn.execute(f"PRAGMA {features.ABSENT}.page_size").fetchall()[0][0]
            pages = conn.execute(f"PRAGMA {features.ABSENT}.page_count").fetchall()[0][0]
    finally:
        file.close()
    assert size == 512
    assert size * pages <= 48 * KiB  # 128 KiB in pages of 4 KiB
    assert {"store_items", "store_codes", "leases"} <= copies
    assert "scopes" in copies  # the parent `leases` names
    assert not copies & {"checkpoints", "vals", "writes", "blocks", "dicts", "meta"}


def test_reads_of_a_feature_not_made_find_nothing(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    File.open(str(path)).close()
    store = Store(str(path))
    assert store.search(("users",)) == []
    assert store.get(("users",), "k") is None
    assert store.list_namespaces() == []
    store.close()
    saver = Saver(str(path), readonly=True)
    assert list(saver.list(None)) == []
    saver.close()
    assert tables(path) == {"meta"}


def test_the_first_write_makes_the_feature_and_another_open_sees_it(tmp_path: Path) -> None:
    path = tmp_path / "late.db"
    reader = Store(str(path))
    try:
        assert reader.get(("a",), "k") is None  # read while the tables are absent
        writer = Store(str(path))
        writer.put(("a",), "k", {"v": 1})
        writer.close()
        item = reader.get(("a",), "k")
        assert item is not None and item.value == {"v": 1}
    finally:
        reader.close()


def test_a_write_that_forgot_its_feature_fails_loudly(tmp_path: Path) -> None:
    path = tmp_path / "loud.db"
    file = File.open(str(path))
    try:
        with (
            pytest.raises(apsw.ConstraintError, match="before its feature was made"),
            file.write() as conn,
        ):
            conn.execute("INSERT INTO leases(scope, thread_id) VALUES(1, 't')")
        assert tables(path) == {"meta"}
    finally:
        file.close()


def test_tables_made_late_are_the_tables_an_upgraded_file_has(tmp_path: Path) -> None:
    upgraded = apsw.Connection(str(tmp_path / "upgraded.db"))
    functions.install(upgraded)
    for step in MIGRATIONS:
        upgraded.execute(step)
    path = tmp_path / "late.db"
    file = File.open(str(path))
    try:
        with file.write() as conn:
            for feature in features.ALL:
                file.ensure(conn, feature)
        with file.read() as conn:
            late = schema_of(conn)
            late_rows = sorted(conn.execute("SELECT * FROM main.store_lists").fetchall())
            late_meta = sorted(conn.execute("SELECT * FROM main.meta").fetchall())
    finally:
        file.close()
    assert late == schema_of(upgraded)
    assert late_rows == sorted(upgraded.execute("SELECT * FROM store_lists").fetchall())
    assert late_meta == sorted(upgraded.execute("SELECT * FROM meta").fetchall())
    assert upgraded.execute("PRAGMA user_version").fetchall() == [(0,)]
    assert len(MIGRATIONS) == FORMAT_VERSION


FORMAT7 = Path(__file__).resolve().parents[1] / "data" / "format7"


def test_a_format_7_file_with_threads_a_store_and_a_lease_upgrades_and_goes_on(
    tmp_path: Path,
) -> None:
    """tests/data/format7/make.py: threads, Store items and a lease written by format 7. The
    upgrade keeps every table and row (and adds the sync tables); documents read back
    equal, and both memories take new writes."""
    path = tmp_path / "old.db"
    shutil.copy(FORMAT7 / "format7.db", path)
    before = tables(path)
    expected = ormsgpack.unpackb(
        zstandard.ZstdDecompressor().decompress((FORMAT7 / "documents.msgpack.zst").read_bytes())
    )
    saver = Saver(str(path))
    try:
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == ormsgpack.packb(expected)
        # The writer that held it is gone: the row is kept, and nobody holds the thread.
        assert saver.checkpoints.leases.holder("gamma") is None
        config = {"configurable": {"thread_id": "new", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        assert saver.get_tuple(config) is not None
    finally:
        saver.close()
    store = Store(str(path))
    try:
        item = store.get(("grace", "facts"), "tea")
        assert item is not None and item.value == {"text": "likes green tea"}
        store.put(("grace", "facts"), "coffee", {"text": "no coffee"})
        assert len(store.search(("grace",))) == 3
    finally:
        store.close()
    conn = apsw.Connection(str(path))
    try:
        assert conn.execute("PRAGMA user_version").fetchall() == [(FORMAT_VERSION,)]
        kind = conn.execute("SELECT value FROM meta WHERE key = 'file_kind'").fetchall()
        assert kind == [("threadloom",)]
        assert [r[0] for r in conn.execute("SELECT thread_id FROM leases")] == ["gamma"]
    finally:
        conn.close()
    assert tables(path) == before | {
        "sync_peers",
        "sync_threads",
        "store_embedded",
        "server_records",
        "store_codes",
    }
    assert identify(str(path)).found is Found.THREADLOOM


def test_another_connections_feature_is_seen_by_cached_statements(tmp_path: Path) -> None:
    """A connection that read a feature's empty copies sees the tables another connection
    (here another File object, as another process) made since: its reads find their rows
    and its writes go to the file, statements cached before included."""
    path = tmp_path / "two.db"
    maker, other = File(str(path)), File(str(path))
    count = "SELECT count(*) FROM scopes"
    try:
        with other.read() as conn:
            assert conn.execute(count).fetchall() == [(0,)]  # the copy, cached
        with maker.write() as conn:
            maker.ensure(conn, features.CHECKPOINTS)
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'a')")
        with other.read() as conn:
            assert conn.execute(count).fetchall() == [(1,)]
        with other.write() as conn:
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'b')")
        with maker.read() as conn:
            assert conn.execute(count).fetchall() == [(2,)]
    finally:
        other.close()
        maker.close()


def test_a_store_read_sees_a_store_made_since_then_skips_the_schema_check(
    tmp_path: Path,
) -> None:
    """A Store get on a connection that read the Store's empty copies finds an item another
    File (as another process) stored since; once the connection saw the Store's tables in
    the file, a get is one statement, without the schema check (`Copies.current`)."""
    path = tmp_path / "two.db"
    reader, writer = File(str(path)), File(str(path))
    items = Items(reader)
    try:
        with reader.connection(READS) as conn:
            assert items.get(conn, ("a",), "k", None) is None  # the copy, cached
        stored = Items(writer)
        with writer.write() as conn:
            stored.write(conn, [Write(("a",), "k", {"v": 1})], now_us())
        stored.committed()
        seen: list[str] = []
        with reader.connection(READS) as conn:
            found = items.get(conn, ("a",), "k", None)
            assert found is not None and found.value == {"v": 1}
            conn.exec_trace = lambda _cursor, sql, _bindings: not seen.append(sql)
        with reader.connection(READS) as conn:
            assert items.get(conn, ("a",), "k", None) is not None
            conn.exec_trace = None
        assert len(seen) == 1 and "store_items" in seen[0], seen
    finally:
        writer.close()
        reader.close()


def _schema_checks(seen: list[str]) -> int:
    return sum("schema_version" in sql for sql in seen)


def test_a_write_sees_a_feature_another_file_made_after_writes_that_skipped_the_check(
    tmp_path: Path,
) -> None:
    """A write whose connection nothing changed since its own last commit skips the
    schema check (`Copies.current` keyed on `data_version`); a feature another File (as
    another process) made since is still seen, by statements cached on the copies too."""
    path = tmp_path / "two.db"
    writer, maker = File(str(path)), File(str(path))
    count = "SELECT count(*) FROM scopes"
    seen: list[str] = []
    try:
        with writer.write() as conn:
            assert conn.execute(count).fetchall() == [(0,)]  # the copy, cached
        with writer.write() as conn:
            conn.exec_trace = lambda _cursor, sql, _bindings: not seen.append(sql)
            assert conn.execute(count).fetchall() == [(0,)]
        with writer.write() as conn:
            assert conn.execute(count).fetchall() == [(0,)]
            conn.exec_trace = None
        assert _schema_checks(seen) == 0, seen
        with maker.write() as conn:
            maker.ensure(conn, features.CHECKPOINTS)
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'a')")
        with writer.write() as conn:
            assert conn.execute(count).fetchall() == [(1,)]
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'b')")
        with maker.read() as conn:
            assert conn.execute(count).fetchall() == [(2,)]
    finally:
        maker.close()
        writer.close()


def test_a_write_that_made_a_feature_leaves_its_connection_to_look_again(
    tmp_path: Path,
) -> None:
    """A connection's own write that made a feature does not expire the statements it
    cached on the copies (SQLite re-prepares only for another connection's change): the
    next write and read on it still check the schema and find the feature's rows. A
    write that made a feature and rolled back leaves the copies in use."""
    path = tmp_path / "own.db"
    file = File(str(path))
    count = "SELECT count(*) FROM scopes"
    seen: list[str] = []
    try:
        with file.write() as conn:
            assert conn.execute(count).fetchall() == [(0,)]  # the copy, cached
        with pytest.raises(RuntimeError), file.write() as conn:
            file.ensure(conn, features.CHECKPOINTS)
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'gone')")
            raise RuntimeError("roll back")
        with file.write() as conn:
            assert conn.execute(count).fetchall() == [(0,)]
        with file.write() as conn:
            file.ensure(conn, features.CHECKPOINTS)
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'a')")
            conn.exec_trace = lambda _cursor, sql, _bindings: not seen.append(sql)
        with file.write() as conn:
            assert conn.execute(count).fetchall() == [(1,)]
            conn.execute("INSERT INTO scopes(namespace, agent_id) VALUES('n', 'b')")
            conn.exec_trace = None
        # SQLite happens to prepare again after the feature's CREATE INDEX; the check
        # does not lean on it.
        assert _schema_checks(seen) >= 1, seen
        with file.read() as conn:
            assert conn.execute(count).fetchall() == [(2,)]
    finally:
        file.close()
