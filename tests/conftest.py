"""Fixtures every test directory may use: the machine's PostgreSQL, started for the session.

Without PostgreSQL binaries a test that asks for it skips outside CI and fails in CI
(`tests.helpers.unavailable`); binaries that are there but fail to start fail the test
everywhere, since that is a broken machine, not a missing component.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests._postgres import PostgresServer
from tests.helpers import unavailable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A throwaway PostgreSQL server on 127.0.0.1, stopped and removed after the session."""
    server = PostgresServer()
    if not server.start():
        if server.missing:
            unavailable(server.reason)
        pytest.fail(f"PostgreSQL is installed but did not start: {server.reason}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> str:
    """The URL of the session server's `postgres` database."""
    assert postgres_server.dsn is not None
    return postgres_server.dsn


@pytest.fixture
def postgres_database(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a database of its own for one test, dropped afterwards."""
    url = postgres_server.new_database()
    try:
        yield url
    finally:
        postgres_server.drop_database(url)
