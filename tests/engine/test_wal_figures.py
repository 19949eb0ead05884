"""`threadloom doctor`'s WAL figures: size, frames, and why a WAL is large."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import apsw
import pytest
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.cli import main
from threadloom.engine.checks.wal import wal


def put(saver: Saver, thread_id: str, count: int) -> None:
    """Put `count` checkpoints of 16 KiB fresh values on a thread."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for step in range(1, count + 1):
        made = empty_checkpoint()
        made["channel_values"] = {"blob": os.urandom(8192).hex()}
        made["channel_versions"] = {"blob": step}
        config = saver.put(config, made, {"step": step}, made["channel_versions"])


def test_a_reader_holding_an_old_snapshot_is_named_as_the_reason(db_path: Path) -> None:
    """While a reader holds a snapshot and writers go on, the WAL is reported starved,
    with the frame its checkpoints stop at and what to do."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, "a", 2)
        reader = apsw.Connection(str(db_path))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM threads").fetchall()
        put(saver, "b", 200)
        found = wal(str(db_path), large=1024 * 1024)
        reader.execute("COMMIT")
        reader.close()
    assert found["state"] in {"checkpoint-starved", "no-checkpoint"}
    assert int(str(found["checkpointed"])) < int(str(found["frames"]))
    assert "reader" in str(found["reason"]) and "fuser" in str(found["hint"])
    assert int(str(found["bytes"])) > 1024 * 1024


def test_a_wal_that_checkpoints_is_ok(db_path: Path) -> None:
    """With no reader in the way, the running WAL stays small and is reported ok."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, "a", 200)
        found = wal(str(db_path))
    assert found["state"] == "ok"
    assert int(str(found["frames"])) >= int(str(found["checkpointed"]))


def test_doctor_reports_the_wal_of_a_file_at_rest(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A closed file has no WAL, and doctor says so."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, "a", 1)
    assert main(["doctor", "--db", str(db_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["wal"]["state"] == "none"
