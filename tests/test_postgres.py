"""The PostgreSQL fixture: a real server on 127.0.0.1, a database per test; skip or fail."""

from __future__ import annotations

import psycopg
import pytest

from tests import _postgres
from tests._postgres import PostgresServer
from tests.helpers import unavailable


def test_server_answers_on_loopback(postgres_url: str) -> None:
    """The session server accepts SQL at its URL, on 127.0.0.1, as a PostgreSQL server."""
    assert postgres_url.startswith("postgresql://postgres@127.0.0.1:")
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT inet_server_addr()::text, version()").fetchone()
    assert row is not None
    assert row[0].startswith("127.0.0.1")
    assert row[1].startswith("PostgreSQL ")


def test_database_is_fresh(postgres_database: str, postgres_url: str) -> None:
    """Each test's database is new and empty, apart from the server's own database."""
    assert postgres_database != postgres_url
    with psycopg.connect(postgres_database) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
        ).fetchone()
        conn.execute("CREATE TABLE t (x int)")
    assert row == (0,)


def test_missing_binaries_are_reported_as_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without initdb/pg_ctl, start() returns False, flags `missing` and names the package."""
    monkeypatch.setattr(_postgres, "pg_bindir", lambda: None)
    server = PostgresServer()
    assert server.start() is False
    assert server.missing
    assert "apt-get install -y postgresql" in server.reason
    assert server.tmp is None and server.dsn is None


def test_unavailable_fails_in_ci_and_skips_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    """A missing component skips a test outside CI and fails it when CI is set."""
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        unavailable("no server")
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception, match="no server"):
        unavailable("no server")
