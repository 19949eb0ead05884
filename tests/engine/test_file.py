"""The file object: one per path, what a path holds, read-only opens, a tidy file at rest."""

from __future__ import annotations

import gc
import hashlib
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import apsw
import ormsgpack
import pytest
import zstandard
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver

from threadloom import Saver, Store
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.format.schema import FORMAT_VERSION
from threadloom.engine.format.tables import BODY_TABLES
from threadloom.errors import (
    EngineError,
    ForeignDatabaseError,
    FormatError,
    LangGraphFileError,
    NotOurFileError,
    NotSQLiteError,
    ReadOnlyError,
)

FORMAT2 = Path(__file__).resolve().parents[1] / "data" / "format2"


def snapshot(folder: Path) -> dict[str, str]:
    """Every file of a folder with the sha256 of its bytes."""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def put(saver: Saver, thread_id: str, step: int, parent: Any = None, **metadata: Any) -> Any:
    made = empty_checkpoint()
    made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
    made["channel_values"] = {"step": step}
    made["channel_versions"] = {"step": step}
    config = parent or {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, made, {"source": "loop", "step": step, **metadata}, {"step": step})


@pytest.fixture
def folder(tmp_path: Path) -> Iterator[Path]:
    """A folder of its own for the file under test (so side files are seen)."""
    made = tmp_path / "files"
    made.mkdir()
    yield made


def test_a_langgraph_sqlite_saver_file_is_refused_untouched(folder: Path) -> None:
    """A SqliteSaver file (closed, WAL folded in) is refused with LangGraphFileError; no byte
    of it changes and no side file appears."""
    path = folder / "langgraph.db"
    with SqliteSaver.from_conn_string(str(path)) as theirs:
        theirs.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
    before = snapshot(folder)
    with pytest.raises(LangGraphFileError, match="SqliteSaver.*untouched"):
        Saver(path)
    assert snapshot(folder) == before


def test_a_sqlite_saver_file_in_use_is_refused_untouched(folder: Path) -> None:
    """A SqliteSaver file another connection holds open (its WAL not yet folded in) is still
    recognised, and neither it nor its WAL changes."""
    path = folder / "busy.db"
    conn = sqlite3.connect(str(path), check_same_thread=False)
    try:
        theirs = SqliteSaver(conn)
        theirs.setup()
        theirs.put(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
        conn.commit()
        # The -shm is SQLite's shared-memory index, which every reader updates (its read
        # marks); the database and its WAL are what must not change.
        before = {k: v for k, v in snapshot(folder).items() if not k.endswith("-shm")}
        assert "busy.db-wal" in before
        with pytest.raises(LangGraphFileError):
            Saver(path)
        assert {k: v for k, v in snapshot(folder).items() if not k.endswith("-shm")} == before
    finally:
        conn.close()


def test_another_applications_database_is_refused_untouched(folder: Path) -> None:
    """Any other SQLite database is refused with ForeignDatabaseError, byte for byte as it was."""
    path = folder / "app.db"
    conn = apsw.Connection(str(path))
    conn.execute(
        "CREATE TABLE notes(id INTEGER PRIMARY KEY, text TEXT); INSERT INTO notes VALUES(1, 'x')"
    )
    conn.close()
    before = snapshot(folder)
    with pytest.raises(ForeignDatabaseError, match="notes"):
        Saver(path)
    assert snapshot(folder) == before


@pytest.mark.parametrize(
    "content",
    [b"hello, this is a text file\n", b"SQLite format 3\x00" + b"\xff" * 200, os.urandom(4096)],
    ids=["text", "damaged header", "random bytes"],
)
def test_a_file_that_is_not_sqlite_is_refused_untouched(folder: Path, content: bytes) -> None:
    """A text file, a damaged database or random bytes raise NotSQLiteError (a NotOurFileError)
    and stay exactly as they were."""
    path = folder / "notes.txt"
    path.write_bytes(content)
    before = snapshot(folder)
    with pytest.raises(NotSQLiteError, match="untouched"):
        Saver(path)
    assert snapshot(folder) == before
    with pytest.raises(NotOurFileError):
        File(path)


def test_a_header_still_being_written_is_read_again(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first page another process is writing at this moment (zeros where SQLite's
    header will be) is read again before it is called foreign: the open sees the
    threadloom file it becomes. Zeros that stay are refused, untouched."""
    from threadloom.engine.format import recognize

    made = folder / "made.db"
    with Saver.from_conn_string(str(made)) as saver:
        put(saver, "t", 1)
    whole = made.read_bytes()
    path = folder / "arriving.db"
    path.write_bytes(bytes(len(whole)))
    staged, arrived = folder / "staged.db", []
    read_head = recognize._head

    def head_then_arrive(name: str) -> bytes:
        found = read_head(name)
        if name == str(path) and not arrived:  # the zeros were read: the file arrives whole
            arrived.append(found)
            staged.write_bytes(whole)
            os.replace(staged, path)
        return found

    monkeypatch.setattr(recognize, "_head", head_then_arrive)
    with Saver.from_conn_string(str(path)) as saver:
        assert saver.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    assert arrived == [bytes(len(arrived[0]))]
    monkeypatch.undo()
    zeros = folder / "zeros.db"
    zeros.write_bytes(bytes(4096))
    before = snapshot(folder)
    with pytest.raises(NotSQLiteError, match="untouched"):
        Saver(zeros)
    assert snapshot(folder) == before


def test_an_empty_file_becomes_a_threadloom_file(folder: Path) -> None:
    """An empty file (as `touch` leaves it) is taken as new and gets the current format."""
    path = folder / "empty.db"
    path.touch()
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, "t", 1)
    assert apsw.Connection(str(path)).execute("PRAGMA user_version").fetchall()[0][0] == (
        FORMAT_VERSION
    )


def test_sqlite_uri_is_refused_with_what_to_do() -> None:
    """An SQLite URI is not a path (its options would be read from a file name): refused,
    naming ':memory:' for a private database."""
    with pytest.raises(EngineError, match="':memory:'"):
        Saver("file:x.db?mode=memory")


def test_memory_file_is_removed_on_close() -> None:
    """':memory:' lives in a temporary folder of its own, removed when the saver closes."""
    saver = Saver(":memory:")
    folder = saver.file.scratch
    assert folder is not None and os.path.isdir(folder)
    put(saver, "t", 1)
    saver.close()
    assert not os.path.exists(folder)


def test_savers_on_one_path_share_one_file(db_path: Path) -> None:
    """Two savers on one path in one process share the file object (pool, write lock); the
    file stays open until the last one closes."""
    first = Saver(db_path)
    second = Saver(str(db_path.parent / "." / db_path.name))
    assert first.file is second.file
    put(first, "t", 1)
    first.close()
    first.close()  # idempotent: does not give back the second saver's use
    assert second.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    second.close()
    with pytest.raises(EngineError, match="closed"):
        second.get_tuple({"configurable": {"thread_id": "t"}})
    third = Saver(db_path)
    assert third.file is not first.file
    third.close()


def test_a_file_at_rest_has_no_wal(db_path: Path) -> None:
    """After the last saver closes, the WAL is folded into the file: no -wal, no -shm."""
    with Saver.from_conn_string(str(db_path)) as saver:
        for step in range(1, 30):
            put(saver, "t", step)
        assert Path(f"{db_path}-wal").exists()
    assert not Path(f"{db_path}-wal").exists()
    assert not Path(f"{db_path}-shm").exists()


def test_the_wal_is_bounded_while_running(db_path: Path) -> None:
    """Connections cap the WAL with journal_size_limit, so a running file's -wal stays small."""
    with Saver.from_conn_string(str(db_path)) as saver, saver.file.connection() as conn:
        limit = conn.execute("PRAGMA journal_size_limit").fetchall()[0][0]
    assert 0 < limit <= 16 * 1024 * 1024


def test_a_read_only_open_reads_and_refuses_writes(db_path: Path) -> None:
    """readonly=True reads every checkpoint, refuses a put with ReadOnlyError, and changes no
    byte of the file."""
    with Saver.from_conn_string(str(db_path)) as saver:
        stored = put(saver, "t", 1)
        put(saver, "t", 2, parent=stored)
    before = snapshot(db_path.parent)
    with Saver.from_conn_string(str(db_path), readonly=True) as reader:
        assert reader.readonly
        latest = reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert latest is not None and latest.checkpoint["channel_values"] == {"step": 2}
        assert len(list(reader.list({"configurable": {"thread_id": "t"}}))) == 2
        assert reader.get_tuple({"configurable": {"thread_id": "nobody"}}) is None
        with pytest.raises(ReadOnlyError, match="read-only"):
            put(reader, "t", 3)
    assert snapshot(db_path.parent) == before


def test_a_read_only_scope_the_file_never_held_reads_nothing(db_path: Path) -> None:
    """A read-only saver of a namespace the file has no scope for finds nothing, writes nothing."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, "t", 1)
    with Saver.from_conn_string(str(db_path), readonly=True, namespace="elsewhere") as reader:
        assert reader.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert list(reader.list(None)) == []


def test_a_missing_file_cannot_be_opened_read_only(db_path: Path) -> None:
    """A read-only open of a path that does not exist says so instead of creating it."""
    with pytest.raises(ReadOnlyError, match="does not exist"):
        Saver(db_path, readonly=True)
    assert not db_path.exists()


def test_an_older_format_is_not_upgraded_read_only(tmp_path: Path) -> None:
    """A format-2 file opened read-only is refused with a FormatError and left as it was."""
    path = tmp_path / "old.db"
    shutil.copy(FORMAT2 / "format2.db", path)
    before = snapshot(tmp_path)
    with pytest.raises(FormatError, match="writable once"):
        Saver(path, readonly=True)
    assert snapshot(tmp_path) == before


def test_a_format_2_file_upgrades_and_reads_back_equal(tmp_path: Path) -> None:
    """A format-2 file holding real threads upgrades to the current format, yields the same
    documents, and filters and deletes by metadata on its rows that have no metadata keys,
    beside new rows that have them."""
    path = tmp_path / "old.db"
    shutil.copy(FORMAT2 / "format2.db", path)
    raw = zstandard.ZstdDecompressor().decompress((FORMAT2 / "documents.msgpack.zst").read_bytes())
    wanted = ormsgpack.packb(ormsgpack.unpackb(raw))
    with Saver.from_conn_string(str(path)) as saver:
        assert ormsgpack.packb([list(d) for d in saver.documents()]) == wanted
        alpha = {"configurable": {"thread_id": "alpha"}}
        head = saver.get_tuple(alpha)
        assert head is not None and len(head.checkpoint["channel_values"]["messages"]) == 25
        assert len(list(saver.list(alpha, filter={"user": "ada"}))) == 12
        assert len(list(saver.list(None, filter={"user": "bob", "source": "input"}))) == 1
        assert [c.metadata["step"] for c in saver.list(alpha, filter={"step": 3})] == [3]
        # a new checkpoint on the old thread has metadata keys; filters see both kinds
        put(saver, "alpha", 50, parent=head.config, user="ada", run_id="run-new")
        assert len(list(saver.list(alpha, filter={"user": "ada"}))) == 13
        saver.delete_for_runs(["run-alpha-0", "run-new"])
        left = [
            c.metadata["step"]
            for c in saver.list({"configurable": {"thread_id": "alpha", "checkpoint_ns": ""}})
        ]
        assert left == list(range(12, 4, -1))
    assert apsw.Connection(str(path)).execute("PRAGMA user_version").fetchall()[0][0] == (
        FORMAT_VERSION
    )


def test_every_table_with_bodies_is_registered(db_path: Path) -> None:
    """Every table of a file that holds encoded bodies is in the body-table registry, so
    retraining, verify and compact cover it (every feature made, format 8)."""
    file = File.open(str(db_path))
    try:
        with file.write() as conn:
            for feature in features.ALL:
                file.ensure(conn, feature)
    finally:
        file.close()
    conn = apsw.Connection(str(db_path))
    tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")]
    with_bodies = {
        t
        for t in tables
        if {"body", "digest", "blocks"} <= {r[1] for r in conn.execute(f"PRAGMA table_info({t})")}
    }
    assert with_bodies == set(BODY_TABLES)


def _immutable(path: Path, on: bool) -> None:
    """Set or clear the immutable attribute (`chattr`), which even root cannot write through."""
    import subprocess

    subprocess.run(["chattr", "+i" if on else "-i", str(path)], check=True, capture_output=True)


@pytest.fixture
def chattr() -> None:
    """Skip outside CI where the filesystem or the machine has no `chattr +i`."""
    if shutil.which("chattr") is None and not os.environ.get("CI"):
        pytest.skip("chattr (e2fsprogs) is not installed")


@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_file_this_process_may_not_write_opens_read_only(
    folder: Path, what: str, chattr: None
) -> None:
    """Where the file (or its folder) cannot be written, the saver opens it read-only by
    itself: reads work, a put raises ReadOnlyError, and the file keeps its bytes."""
    path = folder / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, "t", 1)
    locked = path if what == "file" else folder
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    _immutable(locked, True)
    try:
        with Saver.from_conn_string(str(path)) as reader:
            assert reader.readonly
            found = reader.get_tuple({"configurable": {"thread_id": "t"}})
            assert found is not None and found.checkpoint["channel_values"] == {"step": 1}
            with pytest.raises(ReadOnlyError):
                put(reader, "t", 2)
    finally:
        _immutable(locked, False)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def _create_and_put(path: str, start: float, index: int) -> None:
    import time as _time

    while _time.time() < start:
        pass
    with Saver.from_conn_string(path) as saver:
        put(saver, f"t{index}", 1)


def test_processes_creating_one_file_at_once_all_succeed(tmp_path: Path) -> None:
    """Four processes opening a file that does not exist yet, at the same instant, all
    create or open it and write (no raw 'database is locked' at the WAL switch)."""
    import multiprocessing
    import time as _time

    context = multiprocessing.get_context("fork")
    for attempt in range(5):
        path = str(tmp_path / f"new-{attempt}.db")
        start = _time.time() + 0.3
        workers = [context.Process(target=_create_and_put, args=(path, start, i)) for i in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [w.exitcode for w in workers] == [0, 0, 0, 0]
        with Saver.from_conn_string(path) as saver:
            assert sorted(saver.checkpoints.scope.thread_ids()) == ["t0", "t1", "t2", "t3"]


def test_a_read_only_open_leaves_a_wal_it_found_as_it_was(tmp_path: Path) -> None:
    """A writer that died left committed pages in the WAL: a read-only open reads them and
    closes without folding them into the file (not a byte of the file changes)."""
    import subprocess
    import sys

    path = tmp_path / "m.db"
    code = (
        "import os, sys\n"
        "from langgraph.checkpoint.base import empty_checkpoint\n"
        "from threadloom import Saver\n"
        "saver = Saver(sys.argv[1])\n"
        "for i in range(20):\n"
        "    made = empty_checkpoint(); made['id'] = f'1f0d0000-0000-6000-8000-{i:012d}'\n"
        "    made['channel_values'] = {'x': 'v' * 3000 + str(i)}\n"
        "    made['channel_versions'] = {'x': i + 1}\n"
        "    saver.put({'configurable': {'thread_id': 't', 'checkpoint_ns': ''}}, made, {}, {})\n"
        "os._exit(0)\n"  # no close: the WAL stays
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    wal = Path(str(path) + "-wal")
    assert wal.stat().st_size > 0
    before = hashlib.sha256(path.read_bytes()).hexdigest(), wal.read_bytes()
    with Saver.from_conn_string(str(path), readonly=True) as saver:
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 20
    assert (hashlib.sha256(path.read_bytes()).hexdigest(), wal.read_bytes()) == before
    with Saver.from_conn_string(str(path)) as saver:  # a writable open folds it in
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 20
    assert not wal.exists()


def test_a_reader_that_may_not_write_leaves_nothing_and_sees_a_writer_appear(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file this process may not write (its permission check answering no, as for
    another user's file) is read with no side file created; once a writer appears (its
    -wal exists), the reader's next read sees what it committed."""
    from threadloom.engine import file as engine_file

    path = folder / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, "t", 1)
    with monkeypatch.context() as patched:
        patched.setattr(engine_file, "writable", lambda _: False)
        reader = Saver(str(path))
    try:
        assert reader.readonly and reader.checkpoints.scope.thread_ids() == ["t"]
        assert sorted(p.name for p in folder.iterdir()) == ["memory.db"]
        writer = Saver(str(path))
        try:
            put(writer, "u", 1)
            assert (folder / "memory.db-wal").exists()
            assert sorted(reader.checkpoints.scope.thread_ids()) == ["t", "u"]
        finally:
            reader.close()
            writer.close()
    finally:
        reader.close()
    assert sorted(p.name for p in folder.iterdir()) == ["memory.db"]


def test_a_writable_open_of_a_file_this_process_may_not_write_is_refused_at_once(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """readonly=False on a file this process may not write raises ReadOnlyError naming
    permissions (not readonly=True) before anything is read or written."""
    from threadloom.engine import file as engine_file

    path = folder / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, "t", 1)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    monkeypatch.setattr(engine_file, "writable", lambda _: False)
    with pytest.raises(ReadOnlyError, match="cannot be written") as raised:
        File(path, readonly=False)
    assert "readonly=True" not in str(raised.value) and "permission" in str(raised.value)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_the_change_watcher_of_an_unwritable_file_sees_a_writer_appear(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`Changes` on a file this process may not write (read immutable) reports a new
    version once a writer appears and commits, and again after its next commit."""
    from threadloom.engine import file as engine_file
    from threadloom.engine.changes import Changes

    path = folder / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        put(saver, "t", 1)
    with monkeypatch.context() as patched:
        patched.setattr(engine_file, "writable", lambda _: False)
        reader = File(path)
    changes = Changes(reader)
    try:
        first = changes.version()
        assert changes.version() == first
        writer = Saver(str(path))
        try:
            put(writer, "u", 1)
            second = changes.version()
            assert second != first
            third = changes.version()
            put(writer, "v", 1)
            assert changes.version() != third
        finally:
            changes.close()
            reader._close()
            writer.close()
    finally:
        changes.close()
        reader._close()


def test_memory_file_dropped_unclosed_is_removed() -> None:
    """A ':memory:' file dropped without close (as tests drop an InMemoryStore) leaves no
    temporary folder behind once collected."""
    store = Store(":memory:")
    store.put(("a",), "k", {"v": 1})
    folder = store.file.scratch
    assert folder is not None and os.path.isdir(folder)
    del store
    gc.collect()
    assert not os.path.exists(folder)
