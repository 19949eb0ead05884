"""Migrating from LangGraph's PostgresSaver on the machine's real PostgreSQL server.

Oracle: the PostgresSaver itself (the same graph compiled with it), as in test_sqlite.py.
The server is the session's (tests/_postgres.py, trust authentication on 127.0.0.1), so
a password in a URL is accepted whatever it is: the redaction tests use one made up at
run time and check it never appears in a report, an error or the command's output.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from langgraph.checkpoint.postgres import PostgresSaver

from tests.migration import _graphs
from threadloom import Saver, migrate
from threadloom.errors import MigrationError
from threadloom.protocol import WRITES


def with_password(url: str, password: str) -> str:
    """`url` (postgresql://postgres@host...) with a password for its user."""
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{password}@", 1)


def write(url: str, *names: str) -> None:
    """Run the scenarios on a PostgresSaver of `url` (set up first, as an app does)."""
    with PostgresSaver.from_conn_string(url) as saver:
        saver.setup()
        for name in names:
            _graphs.run(name, saver, name)


def test_every_scenario_migrates_from_postgres_saver(
    tmp_path: Path, postgres_database: str
) -> None:
    """Each scenario's thread, migrated from PostgresSaver, reads (snapshots, tuples, pending
    writes in order with their task paths) and resumes as on PostgresSaver."""
    write(postgres_database, *_graphs.SCENARIOS)
    target = str(tmp_path / "memory.db")
    report = migrate(postgres_database, target, kind="postgres", apply=True).as_dict()
    assert report["threads"] == len(_graphs.SCENARIOS)
    assert report["copied"] == report["checkpoints"] > 30
    assert report["source"] == {"kind": "postgres", "url": postgres_database}
    with PostgresSaver.from_conn_string(postgres_database) as source:
        with Saver.from_conn_string(target) as saver:
            for name in _graphs.SCENARIOS:
                assert _graphs.snapshots(name, saver, name) == _graphs.snapshots(
                    name, source, name
                ), name
                assert _graphs.tuples(saver, name) == _graphs.tuples(source, name), name
            paths = [d["task_path"] for c, _, d in saver.documents() if c == WRITES]
            assert sum(1 for p in paths if p) > 4
            ours = {name: _graphs.continued(name, saver, name) for name in _graphs.SCENARIOS}
        for name in _graphs.SCENARIOS:
            assert ours[name] == _graphs.continued(name, source, name), name
    again = migrate(postgres_database, target).as_dict()
    # The resumed runs added checkpoints on the source: those are new, the rest present.
    assert again["present"] == report["copied"]
    assert again["missing"] == again["checkpoints"] - report["copied"] > 0


def test_postgres_url_from_the_environment(
    tmp_path: Path, postgres_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With kind "postgres" and no URL, POSTGRES_URL is read; its password is redacted in
    the report's source."""
    write(postgres_database, "review")
    password = secrets.token_urlsafe(12)
    monkeypatch.setenv("POSTGRES_URL", with_password(postgres_database, password))
    report = migrate(None, str(tmp_path / "memory.db"), kind="postgres", apply=True).as_dict()
    assert report["copied"] == 3
    assert password not in json.dumps(report)
    assert report["source"]["url"].startswith("postgresql://postgres:***@127.0.0.1:")


def test_a_wrong_database_is_named_without_its_password(
    postgres_database: str, tmp_path: Path
) -> None:
    """A URL naming a database that does not exist fails with the URL redacted, the
    password absent from the message, and no target file created."""
    password = secrets.token_urlsafe(12)
    url = with_password(postgres_database, password).replace("/db_", "/nope_", 1)
    target = tmp_path / "memory.db"
    with pytest.raises(MigrationError) as failed:
        migrate(url, str(target), apply=True)
    text = str(failed.value)
    assert password not in text and "postgres:***@" in text and "does not exist" in text
    assert not target.exists()
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "migrate", "--source-url", url, "--db",
         str(target), "--apply", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1
    assert password not in done.stdout + done.stderr
    assert done.stderr.startswith("error: cannot read the PostgreSQL database")
    assert not target.exists()


def test_a_database_without_saver_tables_is_refused(postgres_database: str, tmp_path: Path) -> None:
    """An empty database is named as holding no PostgresSaver tables; nothing is created."""
    with pytest.raises(MigrationError, match="holds no LangGraph PostgresSaver tables"):
        migrate(postgres_database, str(tmp_path / "memory.db"), apply=True)
    assert not (tmp_path / "memory.db").exists()


def test_the_wrong_kind_for_a_url_is_refused(postgres_database: str, tmp_path: Path) -> None:
    """A PostgreSQL URL given as an `sqlite` source is refused, naming what it is."""
    password = secrets.token_urlsafe(12)
    url = with_password(postgres_database, password)
    with pytest.raises(MigrationError, match="is a PostgreSQL URL, not a LangGraph Sqlite") as e:
        migrate(url, str(tmp_path / "memory.db"), kind="sqlite")
    assert password not in str(e.value)
