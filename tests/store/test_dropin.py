"""The stores as drop-ins for LangGraph's: `setup()`, `":memory:"`, coroutines where
AsyncSqliteStore has them, a clear error outside an event loop, `readonly=` in
`from_conn_string`."""

from __future__ import annotations

import asyncio
import inspect
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.sqlite.aio import AsyncSqliteStore

from tests.store._hashing_embedder import HashingEmbedder
from threadloom import AsyncStore, Store
from threadloom.errors import NoEventLoopError, ReadOnlyError
from threadloom.langgraph import store as store_module
from threadloom.langgraph.store_index import Indexing

ROOT = Path(__file__).resolve().parents[2]


def test_setup_is_a_no_op(tmp_path: Path) -> None:
    """`Store.setup()`, `Store.asetup()` and `await AsyncStore.setup()` exist and change nothing."""
    with Store.from_conn_string(tmp_path / "s.db") as store:
        store.put(("a",), "k", {"v": 1})
        assert store.setup() is None
        assert asyncio.run(store.asetup()) is None
        item = store.get(("a",), "k")
        assert item is not None and item.value == {"v": 1}

    async def run() -> None:
        async with AsyncStore.from_conn_string(tmp_path / "s.db") as store:
            await store.setup()
            await store.asetup()
            assert (await store.aget(("a",), "k")) is not None

    asyncio.run(run())


def test_memory_store_is_private_and_shared_by_its_threads() -> None:
    """`Store(":memory:")` is one database per store, seen by every thread using it."""
    with Store.from_conn_string(":memory:") as store, Store.from_conn_string(":memory:") as other:
        store.put(("a",), "k", {"v": "x"})
        seen: list[object] = []
        reader = threading.Thread(target=lambda: seen.append(store.get(("a",), "k")))
        reader.start()
        reader.join()
        assert seen[0] is not None
        assert other.get(("a",), "k") is None
        folder = store.file.scratch
        assert folder is not None
    assert not os.path.exists(folder)


def test_async_memory_store() -> None:
    """`AsyncStore.from_conn_string(":memory:")` works, its items seen by later calls."""

    async def run() -> object:
        async with AsyncStore.from_conn_string(":memory:") as store:
            await store.aput(("a",), "k", {"v": 1})
            return await store.aget(("a",), "k")

    item = asyncio.run(run())
    assert item is not None


def test_async_from_conn_string_builds_the_index_settings_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`AsyncStore.from_conn_string` checks the settings before it opens the file, and
    the store it opens keeps those: its embedder is wrapped and its vector index made once,
    as `Store.from_conn_string`'s and `AsyncStore(...)`'s are."""
    made: list[Indexing] = []

    class Counted(Indexing):
        def __init__(self, index: Any, text: bool | None) -> None:
            super().__init__(index, text)
            made.append(self)

    monkeypatch.setattr(store_module, "Indexing", Counted)
    index: Any = {"dims": 4, "embed": lambda texts: [[1.0, 0.0, 0.0, 0.0] for _ in texts]}

    async def run() -> object:
        async with AsyncStore.from_conn_string(tmp_path / "s.db", index=index) as store:
            await store.aput(("a",), "k", {"text": "tea"})
            assert store.indexing is made[-1]
            return await store.aget(("a",), "k")

    assert asyncio.run(run()) is not None
    assert len(made) == 1
    with Store.from_conn_string(tmp_path / "s.db", index=index):
        assert len(made) == 2


def test_async_from_conn_string_runs_a_subclass_own_init(tmp_path: Path) -> None:
    """A subclass of AsyncStore with an `__init__` of its own gets it run by
    `from_conn_string` (the settings are then built again, by that `__init__`)."""

    class Tagged(AsyncStore):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.tag = "mine"

    async def run() -> str:
        async with Tagged.from_conn_string(tmp_path / "s.db") as store:
            await store.aput(("a",), "k", {"text": "tea"})
            assert await store.aget(("a",), "k") is not None
            return str(getattr(store, "tag", "skipped"))

    assert asyncio.run(run()) == "mine"


#: The public methods of AsyncSqliteStore's own that are coroutines.
_UPSTREAM_COROUTINES = sorted(
    name
    for name, member in vars(AsyncSqliteStore).items()
    if not name.startswith("_") and inspect.iscoroutinefunction(member)
)


def test_async_store_methods_are_coroutines_where_async_sqlite_stores_are() -> None:
    """Every public coroutine method of AsyncSqliteStore (setup, sweep_ttl, the sweeper,
    abatch) is a coroutine method on AsyncStore too, and so is every `a`-prefixed one."""
    assert {"setup", "sweep_ttl", "abatch"} <= set(_UPSTREAM_COROUTINES)
    for name in _UPSTREAM_COROUTINES:
        assert inspect.iscoroutinefunction(getattr(AsyncStore, name)), name
    for name in dir(AsyncStore):
        if name.startswith("a") and callable(getattr(AsyncStore, name)) and name != "abc":
            member = getattr(AsyncStore, name)
            assert inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member), name


def test_await_async_store_sweep_ttl(tmp_path: Path) -> None:
    """`await store.sweep_ttl()` deletes expired items and returns how many."""

    async def run() -> tuple[int, int]:
        async with AsyncStore.from_conn_string(tmp_path / "s.db") as store:
            await store.aput(("a",), "k", {"v": 1}, ttl=0.0001)
            time.sleep(0.05)
            return await store.sweep_ttl(), await store.asweep_ttl()

    assert asyncio.run(run()) == (1, 0)


def test_async_store_outside_a_loop_is_one_clear_error(tmp_path: Path) -> None:
    """`AsyncStore(...)` outside an event loop raises NoEventLoopError saying what to do, and
    creates no file."""
    with pytest.raises(NoEventLoopError, match="event loop; create it inside async code"):
        AsyncStore(tmp_path / "s.db")
    assert list(tmp_path.iterdir()) == []


def test_async_store_outside_a_loop_prints_one_line(tmp_path: Path) -> None:
    """A script constructing AsyncStore at top level ends with the error's one line."""
    code = f"from threadloom import AsyncStore\nAsyncStore({str(tmp_path / 's.db')!r})\n"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("threadloom.errors.NoEventLoopError: AsyncStore needs"), last
    assert "RuntimeError: no running event loop" not in done.stderr


def test_from_conn_string_takes_readonly(tmp_path: Path) -> None:
    """`Store.from_conn_string(path, readonly=True)` opens read-only, as the constructor does."""
    path = tmp_path / "s.db"
    with Store.from_conn_string(path) as store:
        store.put(("a",), "k", {"v": 1})
    with Store.from_conn_string(path, readonly=True) as store:
        assert store.get(("a",), "k") is not None
        with pytest.raises(ReadOnlyError):
            store.put(("a",), "k2", {"v": 2})

    async def run() -> None:
        async with AsyncStore.from_conn_string(path, readonly=True) as store:
            assert (await store.aget(("a",), "k")) is not None
            with pytest.raises(ReadOnlyError):
                await store.aput(("a",), "k2", {"v": 2})

    asyncio.run(run())


def test_index_takes_sqlite_stores_text_fields(tmp_path: Path) -> None:
    """An index config written for SqliteStore (`text_fields`) embeds those fields, as
    `fields` would, not the whole value."""
    embedder = HashingEmbedder()
    index: Any = {"dims": embedder.dims, "embed": embedder, "text_fields": ["title"]}
    with Store.from_conn_string(tmp_path / "s.db", index=index) as store:
        store.put(("d",), "k", {"title": "lisbon tea", "body": "unrelated words here"})
        found = store.search(("d",), query="lisbon tea")
    assert found and found[0].score is not None and found[0].score > 0.99
    assert [text for method, texts in embedder.calls for text in texts][:1] == ["lisbon tea"]


def test_docs_langgraph_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The example of docs/langgraph.md runs as written (sync and async halves)."""
    text = (ROOT / "docs" / "langgraph.md").read_text()
    found = re.search(r"```python\n(.*?)```", text, re.S)
    assert found is not None
    monkeypatch.chdir(tmp_path)
    names: dict[str, Any] = {}
    exec(compile(found.group(1), "docs/langgraph.md", "exec"), names)
    asyncio.run(names["main"]())
    assert (tmp_path / "agent.db").exists()
