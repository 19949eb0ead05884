"""Fixtures every test directory may use: the machine's PostgreSQL, started for the session;
and `--backend-only`, the option of the README's pure-Python pass (tests/_backend.py says
which modules it keeps and why).

Hypothesis runs without its per-example deadline: these are correctness tests, and a
deadline is a timed assertion that fails on a loaded machine (speed is measured in
bench/, never asserted here).

Without PostgreSQL binaries a test that asks for it skips outside CI and fails in CI
(`tests.helpers.unavailable`); binaries that are there but fail to start fail the test
everywhere, since that is a broken machine, not a missing component.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests import _backend
from tests._postgres import PostgresServer
from tests.helpers import unavailable

settings.register_profile("threadloom", deadline=None)
settings.load_profile("threadloom")


def pytest_addoption(parser: pytest.Parser) -> None:
    """`--backend-only`: collect only the test modules that depend on THREADLOOM_BACKEND."""
    parser.addoption(
        "--backend-only",
        action="store_true",
        help="collect only the test modules that depend on the core's backend "
        "(tests/_backend.py): the README's second, THREADLOOM_BACKEND=python, pass",
    )


@functools.cache
def _backend_modules() -> frozenset[Path]:
    return frozenset(_backend.selected())


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With `--backend-only`, skip every test module `tests._backend.selected` leaves out
    (skipped whole, so its imports and parametrization cost nothing)."""
    if (
        config.getoption("backend_only")
        and _backend.is_test_module(collection_path)
        and collection_path.resolve() not in _backend_modules()
    ):
        return True
    return None


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
