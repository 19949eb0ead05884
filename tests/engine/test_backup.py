"""`threadloom.backup` and `threadloom backup`: online copies while another process writes,
verified before they are renamed into place; rotation; refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint

import threadloom
from threadloom import Saver
from threadloom.cli import main
from threadloom.engine.checks.backup import backup_name, backups
from threadloom.errors import EngineError, InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]


def write(path: Path, threads: int = 2, steps: int = 3) -> None:
    """Put `steps` checkpoints on each of `threads` threads of `path`."""
    with Saver.from_conn_string(str(path)) as saver:
        for n in range(threads):
            config: Any = {"configurable": {"thread_id": f"t{n}", "checkpoint_ns": ""}}
            for step in range(1, steps + 1):
                made = empty_checkpoint()
                made["channel_values"] = {"step": step}
                made["channel_versions"] = {"step": step}
                config = saver.put(config, made, {"step": step}, made["channel_versions"])


def history(path: Path) -> list[tuple[str, str, Any, Any]]:
    """Every checkpoint of the file: (checkpoint id, thread, values, metadata), by id."""
    with Saver.from_conn_string(str(path)) as saver:
        return sorted(
            (
                found.checkpoint["id"],
                found.config["configurable"]["thread_id"],
                found.checkpoint["channel_values"],
                found.metadata,
            )
            for found in saver.list(None)
        )


def test_backups_taken_while_another_process_writes_hold_a_state_the_source_had(
    tmp_path: Path,
) -> None:
    """Backups taken while a writer process puts checkpoints verify sound and each holds
    exactly the checkpoints the source had at one moment (a prefix of its put order)."""
    source = tmp_path / "live.db"
    write(source, threads=1, steps=1)
    stop = tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-m", "tests.engine._backup_writer", str(source), str(stop)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline().strip() == "ready"
        reports = []
        for n in range(3):
            time.sleep(0.2)
            for method in ("pages", "vacuum"):
                reports.append(
                    threadloom.backup(source, tmp_path / f"copy-{n}-{method}.db", method=method)
                )
        time.sleep(0.2)
    finally:
        stop.touch()
        out, err = writer.communicate(timeout=60)
    assert writer.returncode == 0, err
    assert all(r.verified for r in reports)
    everything = history(source)
    counts = [r.checkpoints for r in reports]
    assert counts == sorted(counts) and counts[-1] < len(everything), "no write during backups"
    for report in reports:
        copied = history(Path(report.path))
        assert len(copied) == report.checkpoints
        assert copied == everything[: len(copied)]


def test_backup_reports_what_it_wrote(tmp_path: Path) -> None:
    """The report names the copy, its size and pages, and what it holds."""
    source = tmp_path / "a.db"
    write(source)
    report = threadloom.backup(source, tmp_path / "b.db")
    assert report.as_dict()["verified"] is True
    assert (report.threads, report.checkpoints) == (2, 6)
    assert report.bytes == os.path.getsize(tmp_path / "b.db") == report.pages * report.page_size
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_backup_replaces_an_earlier_backup(tmp_path: Path) -> None:
    """A destination holding an earlier backup is replaced by the new one."""
    source = tmp_path / "a.db"
    write(source, threads=1)
    threadloom.backup(source, tmp_path / "b.db")
    write(source, threads=3)
    assert threadloom.backup(source, tmp_path / "b.db").threads == 3
    assert len(history(tmp_path / "b.db")) == len(history(source))


def test_rotation_keeps_the_newest_backups_in_a_folder(tmp_path: Path) -> None:
    """With a folder and keep N, backups are named by their UTC time and only the newest
    N of this file remain; other files of the folder are left alone."""
    source = tmp_path / "memory.db"
    write(source)
    folder = tmp_path / "backups"
    folder.mkdir()
    stranger = folder / "memory-20000101T000000.000Z.db"
    stranger.write_bytes(b"not ours")
    other = folder / "notes.txt"
    other.write_text("keep me")
    made = []
    for _ in range(4):
        made.append(threadloom.backup(source, folder, keep=2).path)
        time.sleep(0.002)
    left = backups(folder, str(source))
    assert [str(p) for p in left] == [str(stranger), *made[-2:]]
    assert stranger.read_bytes() == b"not ours" and other.read_text() == "keep me"
    assert Path(made[0]).name.startswith("memory-") and made[0].endswith("Z.db")


def test_a_destination_ending_with_a_slash_is_a_folder_made_if_missing(tmp_path: Path) -> None:
    """`backups/` names a folder: made when missing, the backup named inside it; without
    the slash a missing folder is refused for `keep` (it would be a file)."""
    source = tmp_path / "memory.db"
    write(source)
    report = threadloom.backup(source, f"{tmp_path / 'backups'}/", keep=3)
    assert Path(report.path).parent == tmp_path / "backups"
    assert len(backups(tmp_path / "backups", str(source))) == 1
    with pytest.raises(InvalidArgumentError, match="keep needs a folder"):
        threadloom.backup(source, tmp_path / "elsewhere", keep=3)
    assert not (tmp_path / "elsewhere").exists()


def test_backup_names_sort_by_time() -> None:
    """Backup names sort in the order they were taken."""
    import datetime

    early = datetime.datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=datetime.timezone.utc)
    late = early + datetime.timedelta(milliseconds=1)
    assert backup_name("/x/memory.db", early) == "memory-20260102T030405.006Z.db"
    assert backup_name("/x/memory.db", early) < backup_name("/x/memory.db", late)


def test_backup_refuses_to_overwrite_the_source(tmp_path: Path) -> None:
    """The source itself (or its WAL) is never a destination."""
    source = tmp_path / "a.db"
    write(source)
    before = source.read_bytes()
    with pytest.raises(EngineError, match="the file being backed up"):
        threadloom.backup(source, source)
    with pytest.raises(EngineError, match="the file being backed up"):
        threadloom.backup(source, tmp_path / "." / "a.db")
    assert source.read_bytes() == before


def test_backup_refuses_a_destination_that_is_not_a_threadloom_file(tmp_path: Path) -> None:
    """An existing destination that is not a threadloom file stays byte for byte."""
    source = tmp_path / "a.db"
    write(source)
    dest = tmp_path / "precious.txt"
    dest.write_bytes(b"precious")
    with pytest.raises(EngineError, match="not a threadloom backup"):
        threadloom.backup(source, dest)
    assert dest.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "precious.txt"]


def test_backup_refuses_bad_options(tmp_path: Path) -> None:
    """keep without a folder or below 1, a missing folder, and a source that holds nothing
    are refused before anything is written."""
    source = tmp_path / "a.db"
    write(source)
    with pytest.raises(InvalidArgumentError, match="needs a folder"):
        threadloom.backup(source, tmp_path / "b.db", keep=2)
    with pytest.raises(InvalidArgumentError, match="1 or more"):
        threadloom.backup(source, tmp_path, keep=0)
    with pytest.raises(EngineError, match="does not exist"):
        threadloom.backup(source, tmp_path / "nowhere" / "b.db")
    with pytest.raises(EngineError, match="not a file"):
        threadloom.backup(tmp_path / "missing.db", tmp_path / "b.db")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db"]


def test_cli_backup_prints_the_json_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`threadloom backup FILE DEST --json` prints the report of a verified copy."""
    source = tmp_path / "a.db"
    write(source)
    assert main(["backup", str(source), str(tmp_path / "b.db"), "--json"]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["verified"] is True and found["path"] == str(tmp_path / "b.db")
    assert {"bytes", "pages", "seconds", "threads", "checkpoints"} <= set(found)
    assert main(["backup", "--db", str(source), str(tmp_path), "--keep", "1"]) == 0
    assert "threads" in capsys.readouterr().out


def test_cli_backup_errors_say_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A refused destination exits 1 with `error:` and `hint:` lines."""
    source = tmp_path / "a.db"
    write(source)
    assert main(["backup", str(source), str(source)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and err[1].startswith("hint: ")
    with pytest.raises(SystemExit) as usage:
        main(["backup", str(source)])
    assert usage.value.code == 2
