"""Bad migration input: a source that is missing, unreadable, of another kind or damaged,
and a bad target, each refused with an error that says what it found, changing nothing.

"Nothing changed" is checked on the bytes of every file in the folders involved: no
target appears, and the source is byte for byte as it was, side files included.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest
from langgraph.checkpoint.sqlite import SqliteSaver

from tests.migration import _graphs
from threadloom import Saver, migrate
from threadloom.cli import main as cli
from threadloom.errors import LangGraphFileError, MigrationError


def files(folder: Path) -> dict[str, bytes]:
    """Every file of `folder` (recursively) and its bytes."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def refused(tmp_path: Path, source: Path | str, match: str, **options: object) -> None:
    """Migrating `source` (applied) raises MigrationError matching `match`; the folder's
    bytes are unchanged, so no target was created; the command line exits 1 with
    `error:` and no traceback."""
    before = files(tmp_path)
    target = tmp_path / "out" / "memory.db"
    with pytest.raises(MigrationError, match=match):
        migrate(str(source), str(target), apply=True, **options)  # type: ignore[arg-type]
    assert files(tmp_path) == before
    kind = options.get("kind")
    argv = ["migrate", str(source), "--db", str(target), "--apply"]
    assert cli([*argv, *(["--from", str(kind)] if kind else [])]) == 1
    assert files(tmp_path) == before


def test_a_missing_source(tmp_path: Path) -> None:
    """A path that does not exist is named as such."""
    refused(tmp_path, tmp_path / "nope.sqlite", "no such file")


def test_a_directory(tmp_path: Path) -> None:
    """A directory is not a source."""
    (tmp_path / "folder").mkdir()
    refused(tmp_path, tmp_path / "folder", "is a directory")


def test_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    """A file that is not an SQLite database is named as such."""
    (tmp_path / "notes.txt").write_text("not a database\n" * 100)
    refused(tmp_path, tmp_path / "notes.txt", "is not an SQLite database")


def test_an_empty_file(tmp_path: Path) -> None:
    """An empty file holds nothing to migrate."""
    (tmp_path / "empty.sqlite").write_bytes(b"")
    refused(tmp_path, tmp_path / "empty.sqlite", "is empty")


def test_another_applications_database(tmp_path: Path) -> None:
    """Another application's SQLite database is named with its tables."""
    with sqlite3.connect(tmp_path / "app.sqlite") as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    refused(
        tmp_path,
        tmp_path / "app.sqlite",
        r"another application's SQLite database \(tables: notes\)",
    )


def test_a_threadloom_file(tmp_path: Path) -> None:
    """A threadloom file is already one: nothing to migrate."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        _graphs.run("fork", saver, "fork")
    refused(tmp_path, tmp_path / "memory.db", "is a threadloom file already")


def test_a_store_only_file(tmp_path: Path) -> None:
    """A SqliteStore file holds items, no checkpoints: the error says how to copy them."""
    from langgraph.store.sqlite import SqliteStore

    conn = sqlite3.connect(tmp_path / "items.sqlite", isolation_level=None)
    SqliteStore(conn).setup()
    conn.close()
    refused(tmp_path, tmp_path / "items.sqlite", "--store --store-source")


def test_the_wrong_kind(tmp_path: Path, sqlite_source: Callable[..., Path]) -> None:
    """A SqliteSaver file given as a naas file is refused, naming what it looks like."""
    source = sqlite_source("fork")
    refused(
        tmp_path,
        source,
        "looks like a LangGraph SqliteSaver database, not a naas document service file",
        kind="naas-sqlite",
    )


def test_a_truncated_source(tmp_path: Path, sqlite_source: Callable[..., Path]) -> None:
    """A SqliteSaver file cut short (an interrupted copy) is refused before anything is
    copied: SQLite's own check runs first."""
    source = sqlite_source(*_graphs.SCENARIOS)
    data = source.read_bytes()
    source.write_bytes(data[: len(data) * 2 // 3])
    refused(tmp_path, source, "cannot be read as one.*left untouched")


def test_a_damaged_source(tmp_path: Path, sqlite_source: Callable[..., Path]) -> None:
    """A SqliteSaver file with damaged pages is refused before anything is copied."""
    source = sqlite_source(*_graphs.SCENARIOS)
    data = bytearray(source.read_bytes())
    for page in range(2, len(data) // 4096):
        data[page * 4096 + 8 : page * 4096 + 40] = b"\xff" * 32
    source.write_bytes(bytes(data))
    refused(tmp_path, source, "cannot be read as a SqliteSaver file")


def test_the_target_is_the_source(tmp_path: Path, sqlite_source: Callable[..., Path]) -> None:
    """A target that is the source file itself is refused."""
    source = sqlite_source("fork")
    before = files(tmp_path)
    with pytest.raises(MigrationError, match="is the source itself"):
        migrate(str(source), str(source), apply=True)
    assert files(tmp_path) == before


def test_a_target_that_is_a_sqlite_saver_file(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """A target holding a SqliteSaver file is refused (LangGraphFileError), both untouched."""
    source = sqlite_source("fork")
    other = tmp_path / "other" / "app.sqlite"
    other.parent.mkdir()
    shutil.copyfile(source, other)
    before = files(tmp_path)
    with pytest.raises(LangGraphFileError):
        migrate(str(source), str(other), apply=True)
    assert files(tmp_path) == before


def test_a_source_left_mid_write_is_read_and_left_as_it_was(tmp_path: Path) -> None:
    """A SqliteSaver file whose writer still holds it (its WAL not folded in) is read as
    committed, and neither the file nor its WAL changes."""
    source = tmp_path / "live.sqlite"
    conn = sqlite3.connect(source, check_same_thread=False)
    try:
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # everything stays in the WAL
        saver = SqliteSaver(conn)
        for name in ("tools", "review"):
            _graphs.run(name, saver, name)
        assert os.path.getsize(str(source) + "-wal") > 0
        before = {k: v for k, v in files(tmp_path).items() if not k.endswith("-shm")}
        report = migrate(str(source), str(tmp_path / "memory.db"), apply=True).as_dict()
        after = {k: v for k, v in files(tmp_path).items() if not k.endswith("-shm")}
        assert {k: after[k] for k in before} == before
        assert report["copied"] == report["checkpoints"] == 13
    finally:
        conn.close()


def test_an_unknown_thread_is_not_an_error(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """Asking for a thread the source lacks copies nothing and lists it in not_found."""
    source = sqlite_source("fork")
    report = migrate(str(source), str(tmp_path / "m.db"), threads=["ghost"]).as_dict()
    assert report["threads"] == 0 and report["not_found"] == ["ghost"]


def test_the_command_line_refuses_a_thread_the_source_lacks(
    tmp_path: Path, sqlite_source: Callable[..., Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """`migrate --thread nope --apply` exits 1 before writing anything (the thread it has
    too is not copied), naming the threads the source holds and what to do."""
    source = sqlite_source("fork", "send")
    before = files(tmp_path)
    argv = ["migrate", str(source), "--db", str(tmp_path / "m.db"), "--apply"]
    assert cli([*argv, "--thread", "send", "--thread", "nope"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"error: thread 'nope' is not in {source}, which holds 2 threads: fork, send",
        "hint: give --thread one of the source's threads, or leave --thread out to migrate "
        "every thread (a dry run without --thread changes nothing)",
    ]
    assert files(tmp_path) == before
    assert cli([*argv, "--thread", "send"]) == 0


def test_a_source_lacking_a_column_saver_reads_is_refused(
    tmp_path: Path, sqlite_source: Callable[..., Path]
) -> None:
    """A `checkpoints` table without a column SqliteSaver's `list` reads (here `metadata`)
    is refused before anything is copied, naming the column."""
    source = sqlite_source("fork")
    conn = sqlite3.connect(source)
    conn.execute("ALTER TABLE checkpoints DROP COLUMN metadata")
    conn.commit()
    conn.close()
    refused(tmp_path, source, "its checkpoints table lacks metadata")


def test_values_the_serializer_cannot_load_are_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A file an EncryptedSerializer wrote, migrated without its key, fails in one line
    saying to give the serializer; with it, the thread migrates."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    source = tmp_path / "sealed.sqlite"
    with SqliteSaver.from_conn_string(str(source)) as saver:
        saver.serde = serde
        _graphs.run("tools", saver, "tools")
    assert cli(["migrate", str(source), "--db", str(tmp_path / "m.db")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("error: a value of thread 'tools' in ") and len(err) == 2
    assert err[1].startswith("hint: give migrate the serializer the application's SqliteSaver")
    report = migrate(str(source), str(tmp_path / "m.db"), apply=True, serde=serde).as_dict()
    assert report["copied"] == report["checkpoints"] > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["--from", "nats", "--source-url", "nats://127.0.0.1:1", "--db", "m.db"],
        ["--to", "postgres", "m.db", "--target-url", "postgresql://127.0.0.1:1/x"],
    ],
    ids=["from-nats", "to-postgres"],
)
def test_no_vacuum_where_nothing_would_vacuum_is_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    """`--no-vacuum` with `--from nats` (an import, never vacuumed) or `--to postgres`
    (no file written) is a usage error before anything is opened, not a setting dropped."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        cli(["migrate", *argv, "--no-vacuum"])
    assert exited.value.code == 2
    assert "--no-vacuum" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
