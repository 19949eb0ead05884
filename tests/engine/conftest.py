"""Fixtures for the engine tests: a fresh file, a saver and an async saver on it, and a
file holding one Store namespace (the vector tests' `file`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from threadloom import AsyncSaver, Saver
from threadloom.engine.file import File
from threadloom.engine.format import features


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    """A path in a fresh directory where no threadloom file exists yet."""
    return tmp_path / "threadloom.db"


@pytest.fixture
def saver(db_path: Path) -> Iterator[Saver]:
    """A Saver on a fresh file, closed after the test."""
    with Saver.from_conn_string(str(db_path)) as opened:
        yield opened


@pytest.fixture
def async_saver(db_path: Path) -> Iterator[AsyncSaver]:
    """An AsyncSaver on a fresh file, closed after the test.

    Built synchronously so that each test can drive it under its own event loop
    (`asyncio.run`); `AsyncSaver.from_conn_string` has its own test.
    """
    opened = AsyncSaver(db_path)
    try:
        yield opened
    finally:
        opened.close()


@pytest.fixture
def file(tmp_path: Path) -> Iterator[File]:
    """A fresh threadloom file with one Store namespace (id 1, `ns`)."""
    opened = File(tmp_path / "store.db")
    with opened.write() as conn:
        opened.ensure(conn, features.STORE)
        conn.execute("INSERT INTO store_namespaces(id, name, depth) VALUES (1, 'ns', 1)")
    try:
        yield opened
    finally:
        opened.close()
