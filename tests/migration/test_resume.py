"""An applied migration killed mid-run (SIGKILL) and run again completes, whole.

The run is `threadloom migrate --apply` in a process of its own, killed once the target
holds part of the source; the target must then hold whole checkpoints only (`verify`
sound, each thread an oldest-first part of the source's), and a rerun must make it equal
to the source with nothing twice.
"""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.migration._chat import write_chats
from threadloom import Saver, migrate
from threadloom.cli import main as cli

THREADS, CHECKPOINTS = 80, 25
LAST = f"chat-{THREADS - 1:05d}"


def stored(path: Path) -> int:
    """How many checkpoints the target holds right now (0 before it has its tables)."""
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as conn:
            return int(conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0])
    except sqlite3.Error:
        return 0


def ids(saver: Saver, thread_id: str) -> list[str]:
    """A thread's checkpoint ids, oldest first."""
    found = saver.list({"configurable": {"thread_id": thread_id}})
    return sorted(t.config["configurable"]["checkpoint_id"] for t in found)


def test_a_killed_migration_resumes_and_completes(tmp_path: Path) -> None:
    """SIGKILL during `migrate --apply` leaves whole checkpoints, each thread an oldest-first
    prefix of the source's; the rerun copies the rest, and the target equals the source."""
    source = tmp_path / "source.sqlite"
    writes = write_chats(source, THREADS, CHECKPOINTS)
    target = tmp_path / "memory.db"
    command = [sys.executable, "-m", "threadloom", "migrate", str(source), "--db", str(target)]
    run = subprocess.Popen([*command, "--apply"], stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while stored(target) < THREADS * CHECKPOINTS // 10:
        assert run.poll() is None, "the migration ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.02)
    run.send_signal(signal.SIGKILL)
    assert run.wait() == -signal.SIGKILL
    assert cli(["verify", "--db", str(target)]) == 0
    partial = migrate(str(source), str(target)).as_dict()
    assert 0 < partial["present"] < THREADS * CHECKPOINTS
    assert partial["diverged"] == []
    all_ids = {
        f"chat-{t:05d}": [f"1f0e{t:04x}-0000-6000-8000-{s:012d}" for s in range(CHECKPOINTS)]
        for t in range(THREADS)
    }
    with Saver.from_conn_string(str(target), readonly=True) as saver:
        for thread_id in saver.checkpoints.scope.thread_ids():
            held = ids(saver, thread_id)
            assert held == all_ids[thread_id][: len(held)]
    done = migrate(str(source), str(target), apply=True).as_dict()
    assert done["copied"] == partial["missing"]
    assert done["present"] == partial["present"]
    assert cli(["verify", "--db", str(target)]) == 0
    again = migrate(str(source), str(target), apply=True).as_dict()
    assert again["copied"] == again["writes_copied"] == 0
    with sqlite3.connect(source) as conn:
        expected = conn.execute("SELECT count(*) FROM checkpoints").fetchone()[0]
    assert stored(target) == expected == THREADS * CHECKPOINTS
    with Saver.from_conn_string(str(target)) as saver:
        assert sum(len(ids(saver, t)) for t in all_ids) == THREADS * CHECKPOINTS
        pending = sum(
            len(t.pending_writes)
            for thread_id in ("chat-00000", LAST)
            for t in saver.list({"configurable": {"thread_id": thread_id}})
        )
        last = saver.get_tuple({"configurable": {"thread_id": LAST}})
    assert pending == 2 * CHECKPOINTS == 2 * writes // THREADS
    assert last is not None and len(last.checkpoint["channel_values"]["messages"]) == 50
