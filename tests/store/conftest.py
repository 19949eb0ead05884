"""Fixtures for the Store tests: one fresh store per test, for each store under test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from langgraph.store.base import BaseStore
from langgraph.store.memory import InMemoryStore


@pytest.fixture(params=["memory", "threadloom"])
def store(request: pytest.FixtureRequest) -> Iterator[BaseStore]:
    """A fresh, empty store: LangGraph's InMemoryStore ("memory") or threadloom's Store
    on a new file ("threadloom")."""
    if request.param == "memory":
        yield InMemoryStore()
    elif request.param == "threadloom":
        from threadloom import Store

        path = request.getfixturevalue("tmp_path") / "memory.db"
        with Store.from_conn_string(path) as opened:
            yield opened
    else:  # pragma: no cover - a param without a store is a fixture bug
        raise AssertionError(f"no store for {request.param!r}")
