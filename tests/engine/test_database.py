"""The file itself: connection settings, format versions and migrations."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import apsw
import pytest

from threadloom.engine.file import File as Database
from threadloom.engine.format import functions
from threadloom.engine.format.schema import FORMAT_VERSION, MIGRATIONS
from threadloom.errors import EngineError, FormatError


def test_new_file_has_current_format_and_wal(db_path: Path) -> None:
    """A new file is created in WAL mode at the current format version."""
    db = Database(db_path)
    with db.connection() as conn:
        assert conn.execute("PRAGMA user_version").fetchall()[0][0] == FORMAT_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchall()[0][0] == "wal"
        assert conn.execute("PRAGMA foreign_keys").fetchall()[0][0] == 1
    db.close()


def test_every_migration_upgrades_an_older_file(db_path: Path) -> None:
    """Each migration step, applied to a file at the previous version, reaches the current one
    (version 0 without tables is a new file: `meta` alone, format 8)."""
    for start in range(len(MIGRATIONS)):
        path = db_path.with_name(f"v{start}.db")
        raw = apsw.Connection(str(path))
        with_seal_functions(raw)  # format 4 re-seals rows through them
        for step in MIGRATIONS[:start]:
            raw.execute(step)
        raw.execute(f"PRAGMA user_version={start}")
        raw.close()
        db = Database(path)
        with db.connection() as conn:
            assert conn.execute("PRAGMA user_version").fetchall()[0][0] == FORMAT_VERSION
            query = "SELECT name FROM sqlite_schema WHERE type='table'"
            tables = {r[0] for r in conn.execute(query)}
        if start:
            assert {"meta", "scopes", "threads", "checkpoints", "writes", "vals"} <= tables
        else:
            assert tables == {"meta"}
        db.close()


def with_seal_functions(conn: apsw.Connection) -> None:
    """The SQL functions migrations call (format 4 re-seals rows, 11 makes ref keys)."""
    functions.install(conn)


def test_newer_format_is_refused(db_path: Path) -> None:
    """A file written by a newer threadloom is refused with a FormatError, not misread."""
    raw = apsw.Connection(str(db_path))
    raw.execute(f"PRAGMA user_version={FORMAT_VERSION + 1}")
    raw.close()
    with pytest.raises(FormatError, match="upgrade threadloom"):
        Database(db_path)


def test_double_quoted_string_literals_are_rejected(db_path: Path) -> None:
    """Our connections refuse double-quoted string literals (a classic SQL typo)."""
    db = Database(db_path)
    with db.connection() as conn, pytest.raises(apsw.SQLError):
        conn.execute('SELECT "not a column"').fetchall()
    db.close()


def test_concurrent_borrowers_get_different_connections(db_path: Path) -> None:
    """Two threads holding connections at once never share one, so transactions never mix."""
    db = Database(db_path)
    seen = []
    with db.connection() as mine:
        worker = threading.Thread(target=lambda: seen.append(_borrow(db)))
        worker.start()
        worker.join()
        assert seen[0] is not mine
    db.close()


def test_connections_are_reused_across_short_lived_threads(db_path: Path) -> None:
    """Threads that come and go reuse pooled connections instead of opening one each."""
    db = Database(db_path)
    seen = []
    for _ in range(20):
        worker = threading.Thread(target=lambda: seen.append(id(_borrow(db))))
        worker.start()
        worker.join()
    assert len(set(seen)) == 1
    db.close()


def test_nested_reads_share_one_snapshot(db_path: Path) -> None:
    """A read inside a read uses the same connection and transaction."""
    db = Database(db_path)
    with db.read() as outer, db.read() as inner:
        assert inner is outer
    db.close()


def test_a_write_inside_a_read_is_refused(db_path: Path) -> None:
    """Upgrading a read transaction to a write is refused instead of deadlocking."""
    db = Database(db_path)
    with db.read(), pytest.raises(EngineError, match="inside another transaction"), db.write():
        pass
    db.close()


def test_a_write_inside_a_write_is_refused_not_deadlocked(db_path: Path) -> None:
    """Writers queue on a lock before they take a connection: a nested write is refused
    before that lock, which its own thread holds."""
    db = Database(db_path)
    outcome: list[BaseException] = []

    def nested() -> None:
        try:
            with db.write(), db.write():
                pass
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    worker = threading.Thread(target=nested, daemon=True)
    worker.start()
    worker.join(10)
    assert not worker.is_alive(), "the nested write deadlocked"
    assert len(outcome) == 1 and isinstance(outcome[0], EngineError)
    assert "inside another transaction" in str(outcome[0])
    db.close()


def test_writers_waiting_their_turn_hold_no_connection(db_path: Path) -> None:
    """While one write is under way, writers queued behind it take no connection: the pool
    grows with concurrent readers, not with queued writers (memory per connection)."""
    db = Database(db_path)
    with db.write():
        pass  # the pool's first connection, now idle

    def mine() -> int:
        return sum(1 for conn in apsw.connections() if conn.filename == str(db_path))

    before = mine()
    assert before >= 1
    entered = threading.Event()
    release = threading.Event()
    done: list[int] = []

    def first() -> None:
        with db.write():
            entered.set()
            release.wait(10)

    def queued() -> None:
        with db.write():
            done.append(1)

    holder = threading.Thread(target=first)
    holder.start()
    assert entered.wait(10)
    waiting = [threading.Thread(target=queued) for _ in range(4)]
    for thread in waiting:
        thread.start()
    threading.Event().wait(0.3)  # long enough for each to reach the lock
    assert mine() == before  # the holder took the idle one; the four hold none
    release.set()
    for thread in (holder, *waiting):
        thread.join(10)
    assert len(done) == 4
    db.close()


def test_a_forked_child_opens_its_own_connection(db_path: Path) -> None:
    """After fork the child does not reuse the parent's pooled connection."""
    db = Database(db_path)
    parent = _borrow(db)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child
        os.close(read)
        with db.connection() as conn:
            ok = conn is not parent and conn.execute("SELECT 1").fetchall() == [(1,)]
        os.write(write, b"1" if ok else b"0")
        os._exit(0)
    os.close(write)
    assert os.read(read, 1) == b"1"
    os.waitpid(pid, 0)
    db.close()


def test_closed_database_says_so(db_path: Path) -> None:
    """Using a closed file raises an EngineError that says what to do."""
    db = Database(db_path)
    db.close()
    with pytest.raises(EngineError, match="closed"), db.connection():
        pass


def _borrow(db: Database) -> apsw.Connection:
    with db.connection() as conn:
        return conn


def test_unknown_synchronous_level_is_refused(db_path: Path) -> None:
    """A typo in the synchronous level is an error, not silently ignored."""
    with pytest.raises(EngineError, match="synchronous"):
        Database(db_path, synchronous="SOMETIMES")
