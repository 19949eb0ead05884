"""The command line's error contract: `error:` and `hint:` lines, exit codes."""

from __future__ import annotations

from pathlib import Path

import pytest

from threadloom.cli import main


def test_an_error_prints_what_went_wrong_and_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """verify on a text file exits 1 with an `error:` line and a `hint:` line, no traceback."""
    path = tmp_path / "notes.txt"
    path.write_text("not a database\n")
    assert main(["verify", "--db", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: ") and "not an SQLite database" in err[0]
    assert err[1].startswith("hint: ") and "Traceback" not in "".join(err)


def test_doctor_reads_a_file_without_changing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """doctor --db leaves no -wal or -shm beside the file."""
    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    assert main(["doctor", "--db", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def test_compact_leaves_no_side_files(tmp_path: Path) -> None:
    """compact folds the WAL in and closes: only the database file remains."""
    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)):
        pass
    assert main(["compact", "--db", str(path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["memory.db"]


def test_verify_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 sound (with the JSON shape docs/cli.md gives), 3 for a truncated file SQLite
    cannot open, 1 for another application's database."""
    import json
    import sqlite3

    from langgraph.checkpoint.base import empty_checkpoint

    from threadloom import Saver

    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"step": 0}, {})
    assert main(["verify", "--db", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["sound"] and report["problems"] == [] and report["threads"] == 1
    assert report["checks"] == ["sqlite", "owners", "heads", "rows", "index", "store", "blocks"]
    assert main(["verify", "--db", str(path), "--quick"]) == 0
    assert "sound" in capsys.readouterr().out
    truncated = tmp_path / "truncated.db"
    truncated.write_bytes(path.read_bytes()[:5000])
    assert main(["verify", "--db", str(truncated)]) == 3
    assert "problem: [sqlite] the file cannot be opened" in capsys.readouterr().out
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE notes(x)").connection.commit()
    assert main(["verify", "--db", str(other)]) == 1
    assert capsys.readouterr().err.startswith("error: ")
