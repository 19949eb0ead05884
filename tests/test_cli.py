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
