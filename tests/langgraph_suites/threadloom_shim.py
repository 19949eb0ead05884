"""A pytest plugin that puts threadloom's classes where LangGraph's tests import theirs.

Loaded by `run.py` (`-p threadloom_shim`) into a run of LangGraph's own test suites:
before any test module is imported it replaces `SqliteSaver`, `AsyncSqliteSaver`,
`SqliteStore`, `AsyncSqliteStore` and `InMemoryStore` in the modules the tests import
them from. Nothing else is changed: every test runs as LangGraph wrote it, so a failure
is a difference between threadloom and the class it stands in for.
"""

from __future__ import annotations

import importlib
import os
from typing import Any

from threadloom import AsyncSaver, AsyncStore, Saver, Store


class MemoryStore(Store):
    """`InMemoryStore(index=..., ttl=...)` as a threadloom Store on `":memory:"`."""

    def __init__(self, *, index: Any = None, ttl: Any = None) -> None:
        super().__init__(":memory:", index=index, ttl=ttl)


#: LangGraph's name -> the threadloom class that stands in for it.
SUBSTITUTES: dict[str, type[Any]] = {
    "SqliteSaver": Saver,
    "AsyncSqliteSaver": AsyncSaver,
    "SqliteStore": Store,
    "AsyncSqliteStore": AsyncStore,
    "InMemoryStore": MemoryStore,
}
#: Every module that defines or re-exports one of those names.
MODULES = (
    "langgraph.checkpoint.sqlite",
    "langgraph.checkpoint.sqlite.aio",
    "langgraph.store.sqlite",
    "langgraph.store.sqlite.base",
    "langgraph.store.sqlite.aio",
    "langgraph.store.memory",
)

for module_name in MODULES:
    module = importlib.import_module(module_name)
    for name, ours in SUBSTITUTES.items():
        if hasattr(module, name):
            setattr(module, name, ours)


def pytest_report_header() -> str:
    return (
        "threadloom_shim: "
        + ", ".join(f"{name} -> threadloom.{ours.__name__}" for name, ours in SUBSTITUTES.items())
        + f" (THREADLOOM_BACKEND={os.environ.get('THREADLOOM_BACKEND', 'auto')})"
    )
