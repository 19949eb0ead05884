"""Migrating LangGraph SqliteSaver (and AsyncSqliteSaver) files written by real graphs.

Oracle: the source saver itself. After a migration, every `StateSnapshot` of
`get_state_history` (values, next, config, metadata, tasks with their errors and
interrupts, subgraph namespaces) and every checkpoint tuple (pending writes in order)
that the graph compiled with threadloom's Saver returns equals what the same graph
compiled with the SqliteSaver returns; resuming both gives the same run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from tests.migration import _graphs
from tests.migration._chat import write_chats
from threadloom import Saver, migrate
from threadloom.engine import lock_wait
from threadloom.engine.checks import verify
from threadloom.protocol import WRITES


def files(folder: Path) -> dict[str, bytes]:
    """Every file of `folder` and its bytes."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def same_thread(source: Any, target: Saver, name: str) -> None:
    """The thread reads the same through both checkpointers (snapshots and tuples)."""
    assert _graphs.snapshots(name, target, name) == _graphs.snapshots(name, source, name)
    assert _graphs.tuples(target, name) == _graphs.tuples(source, name)


@pytest.mark.parametrize("name", _graphs.SCENARIOS)
def test_a_migrated_thread_reads_and_resumes_as_on_sqlite_saver(
    tmp_path: Path, sqlite_source: Callable[..., Path], read_sqlite: Any, name: str
) -> None:
    """Each scenario's thread, once migrated, gives SqliteSaver's history, state, tasks,
    interrupts, subgraph namespaces and pending writes, and resumes to the same run."""
    source = sqlite_source(name)
    target = tmp_path / "memory.db"
    report = migrate(str(source), str(target), apply=True).as_dict()
    reader = read_sqlite(source)
    listed = list(reader.list({"configurable": {"thread_id": name}}))
    assert report["threads"] == 1
    assert report["checkpoints"] == report["copied"] == report["missing"] == len(listed)
    assert report["writes"] == report["writes_copied"] == sum(len(t.pending_writes) for t in listed)
    assert report["diverged"] == report["conflicts"] == []
    with Saver.from_conn_string(str(target)) as saver:
        same_thread(reader, saver, name)
        if name == "subgraph":
            children = _graphs.snapshots(name, saver, name)["children"]
            assert children and all(c["history"] for c in children.values())
            assert children[next(iter(children))]["state"]["interrupts"]
        ours = _graphs.continued(name, saver, name)
    assert ours == _graphs.continued(name, reader, name)


@pytest.mark.parametrize("name", ["subgraph", "fanout", "send"])
def test_an_async_sqlite_saver_file_migrates_the_same(
    tmp_path: Path, read_sqlite: Any, name: str
) -> None:
    """A file AsyncSqliteSaver wrote (the same format) migrates to the same thread."""
    source = tmp_path / "async.sqlite"

    async def write() -> None:
        async with AsyncSqliteSaver.from_conn_string(str(source)) as saver:
            # The graph runs its sync API on a worker thread, which AsyncSqliteSaver
            # serves on this loop: every write is the async saver's own.
            await asyncio.to_thread(_graphs.run, name, saver, name)

    asyncio.run(write())
    target = tmp_path / "memory.db"
    report = migrate(str(source), str(target), apply=True)
    assert report.copied == report.checkpoints > 0
    with Saver.from_conn_string(str(target)) as saver:
        same_thread(read_sqlite(source), saver, name)


def test_the_dry_run_changes_nothing_and_reads_the_target(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """A dry run leaves an absent target absent and the source's folder byte for byte as
    it was; on an existing target it counts present and missing without a changed byte."""
    source = sqlite_source("tools", "fork")
    folder = source.parent
    before = files(folder)
    target = tmp_path / "elsewhere" / "memory.db"
    target.parent.mkdir()
    dry = migrate(str(source), str(target)).as_dict()
    assert dry["mode"] == "dry-run" and dry["missing"] == dry["checkpoints"] > 0
    assert dry["copied"] == dry["present"] == dry["writes_copied"] == 0
    assert not target.exists() and list(target.parent.iterdir()) == []
    assert files(folder) == before
    migrate(str(source), str(target), apply=True, threads=["tools"])
    with Saver.from_conn_string(str(target)):
        pass  # a clean close folds the WAL in: the bytes below are all there is
    written = files(target.parent)
    again = migrate(str(source), str(target)).as_dict()
    assert files(target.parent) == written
    assert files(folder) == before
    tools = 10
    assert (again["present"], again["missing"]) == (tools, again["checkpoints"] - tools)


def test_a_rerun_copies_nothing(tmp_path: Path, sqlite_source: Callable[..., Path]) -> None:
    """Applied twice, the second run finds every checkpoint and pending write present."""
    source = sqlite_source(*_graphs.SCENARIOS)
    target = str(tmp_path / "memory.db")
    first = migrate(str(source), target, apply=True).as_dict()
    with Saver.from_conn_string(target) as saver:
        documents = saver.documents()
    second = migrate(str(source), target, apply=True).as_dict()
    assert first["copied"] == second["present"] == second["checkpoints"] > 30
    assert second["copied"] == second["missing"] == second["writes_copied"] == 0
    with Saver.from_conn_string(target) as saver:
        assert saver.documents() == documents


def test_owner_and_task_paths_come_across(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """The thread index records the owner the source's metadata holds, and every pending
    write keeps the task path SqliteSaver stored (the order of a step's writes)."""
    source = sqlite_source("fanout", "send")
    target = str(tmp_path / "memory.db")
    migrate(str(source), target, apply=True)
    with sqlite3.connect(source) as conn:
        stored = {
            (ns, cid, task, idx): path
            for ns, cid, task, idx, path in conn.execute(
                "SELECT checkpoint_ns, checkpoint_id, task_id, idx, task_path FROM writes"
            )
        }
    with Saver.from_conn_string(target) as saver:
        assert [t.thread_id for t in saver.threads(owner="owner-of-send")] == ["send"]
        ours = {
            (d["checkpoint_ns"], d["checkpoint_id"], d["task_id"], d["index"]): d["task_path"]
            for collection, _, d in saver.documents()
            if collection == WRITES
        }
    assert ours == stored
    assert sum(1 for path in stored.values() if path) > 4


def test_a_source_that_went_on_copies_only_what_is_new(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """After the source's thread continued, a rerun copies its new checkpoints only (the
    thread has not diverged: the target's head is on the source's history)."""
    source = sqlite_source("review")
    target = str(tmp_path / "memory.db")
    first = migrate(str(source), target, apply=True)
    with SqliteSaver.from_conn_string(str(source)) as saver:
        _graphs.resume("review", saver, "review")
    second = migrate(str(source), target, apply=True).as_dict()
    assert second["present"] == first.copied
    assert second["copied"] == second["checkpoints"] - first.copied > 0
    assert second["diverged"] == []


def test_a_diverged_thread_is_reported_and_left_alone(
    tmp_path: Path, sqlite_source: Callable[..., Path], read_sqlite: Any
) -> None:
    """When both sides went on from the copied history, the thread is `diverged`; applied
    it is skipped (nothing written) unless include_diverged, which adds the source's
    checkpoints beside the target's."""
    source = sqlite_source("tools")
    target = str(tmp_path / "memory.db")
    migrate(str(source), target, apply=True)
    with Saver.from_conn_string(target) as saver:
        _graphs.resume("tools", saver, "tools")
        ours = len(list(saver.list({"configurable": {"thread_id": "tools"}})))
    with SqliteSaver.from_conn_string(str(source)) as saver:
        _graphs.resume("tools", saver, "tools")
    dry = migrate(str(source), target).as_dict()
    assert dry["diverged"] == ["tools"] and dry["skipped"] == []
    skipped = migrate(str(source), target, apply=True).as_dict()
    assert skipped["diverged"] == skipped["skipped"] == ["tools"] and skipped["copied"] == 0
    with Saver.from_conn_string(target) as saver:
        assert len(list(saver.list({"configurable": {"thread_id": "tools"}}))) == ours
    both = migrate(str(source), target, apply=True, include_diverged=True).as_dict()
    assert both["skipped"] == [] and both["copied"] == both["missing"] > 0
    with Saver.from_conn_string(target) as saver:
        listed = list(saver.list({"configurable": {"thread_id": "tools"}}))
    assert len(listed) == ours + both["copied"]


def test_threads_given_are_the_only_ones_copied(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """`threads` copies those threads only; one the source lacks is listed in not_found."""
    source = sqlite_source("tools", "send", "fork")
    target = str(tmp_path / "memory.db")
    report = migrate(str(source), target, apply=True, threads=["send", "nobody"]).as_dict()
    assert report["threads"] == 1 and report["not_found"] == ["nobody"]
    with Saver.from_conn_string(target) as saver:
        assert saver.checkpoints.scope.thread_ids() == ["send"]


def test_the_json_report_has_naas_shape(
    tmp_path: Path, sqlite_source: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`threadloom migrate --json` prints naas's migrate-memory keys, then threadloom's, and
    the human report says a dry run wrote nothing."""
    from threadloom.cli import main

    source = sqlite_source("fork")
    target = tmp_path / "memory.db"
    assert main(["migrate", str(source), "--db", str(target), "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert list(dry) == [
        "mode", "source", "target", "threads", "checkpoints", "writes", "copied", "present",
        "missing", "diverged", "writes_copied", "skipped", "conflicts", "not_found",
    ]  # fmt: skip
    assert dry["source"] == {"kind": "sqlite", "path": str(source)}
    assert dry["target"] == {
        "path": str(target),
        "namespace": "naas_abi_core.services.agent",
        "agent_id": "engine.v1",
        "schema": 2,
    }
    assert main(["migrate", str(source), "--db", str(target)]) == 0
    assert "nothing was written: rerun with --apply" in capsys.readouterr().out
    assert not target.exists()
    assert main(["migrate", str(source), "--from", "sqlite", "--db", str(target), "--apply"]) == 0
    assert "8 copied" in capsys.readouterr().out
    assert os.path.exists(target)


def test_a_migrated_thread_keeps_its_source_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A migrated thread is created and last active when its checkpoints say (their
    `ts`), not at the migration, so `prune --older-than 30d` expires a months-old chat
    at once and keeps one from today."""
    from datetime import datetime

    from threadloom.cli import main

    source = tmp_path / "checkpoints.sqlite"
    with SqliteSaver.from_conn_string(str(source)) as stock:
        stamps = _graphs.dated_thread(stock, "old", [4, 5, 9])
        _graphs.run("tools", stock, "new")
    target = str(tmp_path / "memory.db")
    assert main(["migrate", str(source), "--db", target, "--apply"]) == 0
    with Saver.from_conn_string(target) as saver:
        old = saver.checkpoints.thread("old")
        assert old is not None
        assert old.created_at == datetime.fromisoformat(stamps[0])
        assert old.updated_at == datetime.fromisoformat(stamps[-1])
        new = saver.checkpoints.thread("new")
        head = saver.get_tuple({"configurable": {"thread_id": "new"}})
        assert new is not None and head is not None
        assert new.updated_at == datetime.fromisoformat(head.checkpoint["ts"])
    capsys.readouterr()
    assert main(["threads", target, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["threads"]
    assert [(t["thread_id"], t["updated_at"]) for t in rows][-1] == ("old", stamps[-1])
    assert main(["prune", target, "--older-than", "30d", "--keep-last", "all", "--apply"]) == 0
    with Saver.from_conn_string(target) as saver:
        assert saver.checkpoints.scope.thread_ids() == ["new"]


def test_a_file_from_before_task_paths_migrates(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """A SqliteSaver file whose `writes` table predates `task_path` is read as SqliteSaver
    reads it (every path empty): every checkpoint and pending write is copied."""
    source = sqlite_source("fanout")
    conn = sqlite3.connect(source)
    conn.execute("ALTER TABLE writes DROP COLUMN task_path")
    conn.commit()
    conn.close()
    report = migrate(str(source), str(tmp_path / "memory.db"), apply=True).as_dict()
    assert report["copied"] == report["checkpoints"] > 0
    assert report["writes_copied"] == report["writes"] > 0
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        paths = {d["task_path"] for _, _, d in saver.documents("fanout") if "task_path" in d}
    assert paths <= {""}


def test_a_migration_into_a_new_file_ends_dense(tmp_path: Path) -> None:
    """A run that creates the target ends with VACUUM: the same documents in fewer pages,
    none free. `vacuum=False` leaves the file as written; a file that existed before the
    run (a rerun here) is never rewritten."""
    source = tmp_path / "chats.sqlite"
    write_chats(source, 12, 24)
    dense, loose = tmp_path / "dense.db", tmp_path / "loose.db"
    report = migrate(str(source), str(dense), apply=True).as_dict()
    kept = migrate(str(source), str(loose), apply=True, vacuum=False).as_dict()
    assert "vacuumed" not in kept
    before, after = report["vacuumed"]["bytes_before"], report["vacuumed"]["bytes_after"]
    assert after == dense.stat().st_size < before
    assert not Path(f"{dense}-wal").exists() or Path(f"{dense}-wal").stat().st_size == 0

    def pages(path: Path) -> tuple[int, int]:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            count = conn.execute("PRAGMA page_count").fetchone()[0]
            return int(count), int(conn.execute("PRAGMA freelist_count").fetchone()[0])
        finally:
            conn.close()

    assert pages(dense)[1] == 0
    assert pages(dense)[0] < pages(loose)[0]
    with Saver.from_conn_string(str(dense)) as a, Saver.from_conn_string(str(loose)) as b:
        assert a.documents() == b.documents()
        assert verify(a.file).sound
    again = migrate(str(source), str(dense), apply=True).as_dict()
    assert again["copied"] == 0 and "vacuumed" not in again


def test_a_vacuum_that_cannot_run_leaves_the_migration_complete(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process writing to the new file when the run ends keeps VACUUM out: the
    migration still returns its report, with `vacuum_error` saying why, and the file
    holds every thread as written (a rerun copies nothing)."""
    source = tmp_path / "chats.sqlite"
    write_chats(source, 3, 4)
    target = tmp_path / "memory.db"
    monkeypatch.setattr(lock_wait, "BUSY_TIMEOUT_MS", 200)
    hold = (
        "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('BEGIN IMMEDIATE'); "
        "print('held', flush=True); sys.stdin.read()"
    )
    holders: list[subprocess.Popen[str]] = []

    def progress(done: int, total: int) -> None:
        if done == total:  # the last thread is in: another process takes the write lock
            holder = subprocess.Popen(
                [sys.executable, "-c", hold, str(target)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            holders.append(holder)
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"

    try:
        report = migrate(str(source), str(target), apply=True, progress=progress).as_dict()
    finally:
        for holder in holders:
            assert holder.stdin is not None
            holder.stdin.close()
            holder.wait(30)
    assert "vacuumed" not in report and "while another connection uses it" in report["vacuum_error"]
    assert report["copied"] == report["checkpoints"] == 12
    again = migrate(str(source), str(target), apply=True).as_dict()
    assert again["copied"] == 0 and again["present"] == 12
