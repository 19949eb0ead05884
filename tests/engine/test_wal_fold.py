"""Checkpoints outside the write lock while a long job writes (engine/wal_fold.py).

The WAL's state is read from its index (`-shm`, SQLite's documented wal-index format:
the last frame at byte 16 of the header, the frames copied into the database at byte 96)
so that looking does not checkpoint. The folding thread's connection is opened through a
gate the test holds, so "the checkpoint has not run yet" is a state, not a race.
"""

from __future__ import annotations

import struct
import sys
import threading
import time
from pathlib import Path

import apsw

from threadloom.engine.file import WAL_LIMIT, File
from threadloom.engine.wal_fold import AUTO, RESTART, Folding


def _wal(file: File) -> tuple[int, int]:
    """The WAL's last frame and the frames copied into the database (0, 0 after a restart)."""
    head = Path(file.path + "-shm").read_bytes()[:100]
    word = "<I" if sys.byteorder == "little" else ">I"
    return struct.unpack_from(word, head, 16)[0], struct.unpack_from(word, head, 96)[0]


def _grow(file: File, pages: int) -> apsw.Connection:
    """One write transaction of about `pages` pages of WAL; returns its connection."""
    with file.write() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS filler(body BLOB)")
        conn.executemany("INSERT INTO filler VALUES (randomblob(4000))", [()] * pages)
    return conn


def _autocheckpoint(conn: apsw.Connection) -> int:
    """SQLite's automatic checkpoint of `conn` in pages (0: off or replaced by a hook)."""
    return int(conn.execute("PRAGMA wal_autocheckpoint").fetchall()[0][0])


def _gated(file: File) -> threading.Event:
    """Give `file` a Folding whose thread waits for the returned gate before it may
    checkpoint (its connection opens only then)."""
    gate = threading.Event()

    def connect() -> apsw.Connection:
        gate.wait()
        return file.own_connection()

    file.folding = Folding(connect, file.retire, file._writer_lock, WAL_LIMIT)
    return gate


def test_a_commit_past_the_threshold_leaves_its_checkpoint_to_the_thread(tmp_path: Path) -> None:
    """Inside `checkpoints_aside` a commit that grows the WAL past AUTO pages returns with
    its frames not copied, a second writer commits after it all the same, and the thread
    copies them once it may, while the aside is still held."""
    file = File(tmp_path / "fold.db")
    try:
        gate = _gated(file)
        with file.checkpoints_aside():
            try:
                assert file.folding.active
                conn = _grow(file, AUTO + 200)
                assert _autocheckpoint(conn) == 0
                frames, copied = _wal(file)
                assert frames > AUTO and copied < frames  # SQLite's would have copied all
                _grow(file, 10)  # the next writer does not wait for the pending checkpoint
                assert _wal(file)[0] > frames
            finally:
                gate.set()  # the aside's end waits for the thread
            deadline = time.monotonic() + 30
            while file.folding.folds == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert file.folding.folds >= 1
            assert _wal(file)[1] >= frames
        assert not file.folding.active
    finally:
        file.close()


def test_outside_aside_commits_checkpoint_as_sqlite_does(tmp_path: Path) -> None:
    """Once the last aside ends (nested ones share the thread), a write's connection has
    SQLite's automatic checkpoint again and a commit past AUTO pages copies its frames."""
    file = File(tmp_path / "fold.db")
    try:
        with file.checkpoints_aside():
            with file.checkpoints_aside():
                assert _autocheckpoint(_grow(file, 1)) == 0
            assert file.folding.active  # the outer one still holds it
        assert not file.folding.active
        conn = _grow(file, AUTO + 200)
        assert _autocheckpoint(conn) == AUTO
        frames, copied = _wal(file)
        assert frames > AUTO and copied == frames
    finally:
        file.close()


def test_no_checkpoint_runs_while_a_step_of_the_job_is_held(tmp_path: Path) -> None:
    """A commit past AUTO pages inside `between_checkpoints` leaves its frames uncopied
    until the step ends (the thread waits for it), and the thread copies them after."""
    file = File(tmp_path / "fold.db")
    try:
        with file.checkpoints_aside():
            with file.between_checkpoints():
                _grow(file, AUTO + 200)
                frames, _ = _wal(file)
                time.sleep(0.5)  # ample for the thread to have copied them, were it free
                assert _wal(file)[1] == 0 and file.folding.folds == 0
            deadline = time.monotonic() + 30
            while _wal(file)[1] < frames and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _wal(file)[1] >= frames
    finally:
        file.close()


def test_a_step_outside_aside_waits_for_nothing(tmp_path: Path) -> None:
    """Without `checkpoints_aside`, `between_checkpoints` takes no lock: steps nest and a
    commit past AUTO pages checkpoints in the commit, as SQLite's does."""
    file = File(tmp_path / "fold.db")
    try:
        with file.between_checkpoints(), file.between_checkpoints():
            _grow(file, AUTO + 200)
            frames, copied = _wal(file)
            assert frames > AUTO and copied == frames
    finally:
        file.close()


def test_past_restart_pages_a_quiet_wal_starts_over(tmp_path: Path) -> None:
    """Once the WAL holds RESTART pages and no writer commits while the thread copies
    them, the next writer starts the WAL over: its frames are the WAL's first, and the
    file keeps its size (no truncation inside `aside`)."""
    file = File(tmp_path / "fold.db")
    try:
        with file.checkpoints_aside():
            _grow(file, RESTART + 100)
            frames, _ = _wal(file)
            assert frames > RESTART
            deadline = time.monotonic() + 60
            while _wal(file)[1] < frames and time.monotonic() < deadline:
                time.sleep(0.01)
            assert _wal(file) == (frames, frames)
            size = Path(file.path + "-wal").stat().st_size
            _grow(file, 10)
            assert _wal(file)[0] < 20
            assert Path(file.path + "-wal").stat().st_size == size
    finally:
        file.close()
