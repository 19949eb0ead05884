"""threadloom.langgraph_server without a running server: which file, which versions, which
TTL, and what the server's saver stores (metadata, copies, keep_latest)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from threadloom.langgraph_server import (
    PER_REQUEST_KEYS,
    ServerConfigError,
    ServerSaver,
    check_versions,
    database_path,
)

pytest.importorskip("langgraph.graph")

from langgraph.graph import START, MessagesState, StateGraph  # noqa: E402

from threadloom.langgraph.server import _store_settings, _ttl_policy  # noqa: E402

PROJECT = Path(__file__).parent / "project"


def _echo_graph(saver: Any) -> Any:
    def chat(state: MessagesState) -> dict[str, Any]:
        return {"messages": [("ai", f"echo: {state['messages'][-1].content}")]}

    return StateGraph(MessagesState).add_node(chat).add_edge(START, "chat").compile(saver)


def test_the_file_is_threadloom_db_unless_threadloom_db_names_one(tmp_path: Path) -> None:
    """`THREADLOOM_DB` wins (relative to the server's folder); else `threadloom.db` beside
    the folder's langgraph.json; with neither, an error that says to set THREADLOOM_DB."""
    given = database_path({"THREADLOOM_DB": "data/memory.db"}, cwd=tmp_path)
    assert given == (tmp_path / "data" / "memory.db").resolve()
    with pytest.raises(ServerConfigError, match="set THREADLOOM_DB="):
        database_path({}, cwd=tmp_path)
    (tmp_path / "langgraph.json").write_text("{}")
    assert database_path({}, cwd=tmp_path) == (tmp_path / "threadloom.db").resolve()


def test_server_packages_outside_the_tested_range_are_refused() -> None:
    """A langgraph-api release outside the tested range, or a missing runtime, is refused
    with the range to install; the installed ones pass."""
    with pytest.raises(ServerConfigError, match=r"langgraph-api>=0\.16\.7,<0\.17"):
        check_versions({"langgraph-api": "0.17.0", "langgraph-runtime-inmem": "0.36.7"})
    with pytest.raises(ServerConfigError, match="langgraph-runtime-inmem is not installed"):
        check_versions({"langgraph-api": "0.16.9", "langgraph-runtime-inmem": None})
    check_versions({"langgraph-api": "0.16.12", "langgraph-runtime-inmem": "0.36.7"})


def test_the_ttl_strategies_become_sweeps_and_others_are_refused() -> None:
    """`checkpointer.ttl` becomes (strategy, idle seconds, sweep seconds), `delete` being
    the server's default strategy; a strategy threadloom does not know is refused."""
    assert _ttl_policy({"default_ttl": 60}) == ("delete", 3600.0, 300.0)
    keep = {"strategy": "keep_latest", "default_ttl": 60, "sweep_interval_minutes": 2}
    assert _ttl_policy(keep) == ("keep_latest", 3600.0, 120.0)
    with pytest.raises(ServerConfigError, match='"delete" .* or "keep_latest"'):
        _ttl_policy({"strategy": "archive", "default_ttl": 60})
    assert _ttl_policy(None) is None and _ttl_policy({"strategy": "delete"}) is None


#: What `langgraph dev` sets before the server's config is read (langgraph_api.cli).
SERVER_ENV = {"REDIS_URI": "fake", "DATABASE_URI": ":memory:", "MIGRATIONS_PATH": "__inmem"}


def _served(saver: ServerSaver, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`saver` behind the Agent Server's own adapter (it adds the config's keys, the
    thread id among them, to each checkpoint's metadata, as under `langgraph dev`)."""
    for key, value in SERVER_ENV.items():
        monkeypatch.setenv(key, value)
    adapter = pytest.importorskip("langgraph_api._checkpointer._adapter")
    capabilities = adapter.CheckpointerCapabilities.from_type(type(saver))
    return adapter._CustomCheckpointerAdapter(saver, capabilities)


def test_per_request_keys_are_not_stored_but_the_owner_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint written through the server's saver keeps no per-request key in its
    metadata (the server drops them from the metadata it passes, LangGraph's merge would
    add them back from the config), while the thread's owner is still taken from
    `langgraph_auth_user_id`."""
    request = {key: "r-1" for key in PER_REQUEST_KEYS}
    saver = ServerSaver(tmp_path / "memory.db")
    try:
        graph = _echo_graph(_served(saver, monkeypatch))
        config = {"configurable": {"thread_id": "t", **request}}
        asyncio.run(graph.ainvoke({"messages": [("user", "hi")]}, config))
        stored = list(saver.list({"configurable": {"thread_id": "t"}}))
        assert stored and all(PER_REQUEST_KEYS.isdisjoint(t.metadata) for t in stored)
        assert all(t.metadata["thread_id"] == "t" for t in stored)
        info = saver.thread("t")
        assert info is not None and info.owner == "r-1"
    finally:
        saver.close()


def test_a_copied_thread_names_the_copy_in_its_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`acopy_thread` gives every copied checkpoint the copy's `thread_id` in its metadata
    and the same values, pending writes included; the source is unchanged."""
    saver = ServerSaver(tmp_path / "memory.db")
    try:
        served = _served(saver, monkeypatch)
        graph = _echo_graph(served)
        source = {"configurable": {"thread_id": "a"}}

        async def drive() -> None:
            await graph.ainvoke({"messages": [("user", "one")]}, source)
            await graph.ainvoke({"messages": [("user", "two")]}, source)
            await graph.aupdate_state(source, {"messages": [("user", "x")]})
            await served.acopy_thread("a", "b")

        asyncio.run(drive())
        origin = list(saver.list({"configurable": {"thread_id": "a"}}))
        copied = list(saver.list({"configurable": {"thread_id": "b"}}))
        assert [t.checkpoint["id"] for t in copied] == [t.checkpoint["id"] for t in origin]
        assert {t.metadata.get("thread_id") for t in copied} == {"b"}
        assert {t.metadata.get("thread_id") for t in origin} == {"a"}
        assert [t.pending_writes for t in copied] == [t.pending_writes for t in origin]
        plain = _echo_graph(saver)
        state = plain.get_state({"configurable": {"thread_id": "b"}}).values
        assert state == plain.get_state(source).values
        assert [m.content for m in state["messages"]][-1] == "x"
    finally:
        saver.close()


def test_keep_latest_prunes_only_threads_idle_past_the_ttl(tmp_path: Path) -> None:
    """`keep_latest(idle)` leaves an idle thread its latest checkpoint (state intact) and
    does not touch a thread written within `idle` seconds."""
    saver = ServerSaver(tmp_path / "memory.db")
    try:
        graph = _echo_graph(saver)
        for thread in ("old", "new"):
            config = {"configurable": {"thread_id": thread}}
            for text in ("one", "two", "three"):
                graph.invoke({"messages": [("user", text)]}, config)
            if thread == "old":
                time.sleep(0.4)
        before = graph.get_state({"configurable": {"thread_id": "old"}}).values
        assert saver.idle_threads(0.2) == ["old"]
        assert saver.keep_latest(0.2) == 1
        assert len(list(saver.list({"configurable": {"thread_id": "old"}}))) == 1
        assert len(list(saver.list({"configurable": {"thread_id": "new"}}))) == 9
        assert graph.get_state({"configurable": {"thread_id": "old"}}).values == before
    finally:
        saver.close()


def test_the_store_index_embeds_the_servers_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's `store.index.embed` ("./embed.py:embed") is resolved as the server
    resolves it, and `ttl` passes through."""
    pytest.importorskip("langgraph_api", reason="the server extra is not installed")
    monkeypatch.chdir(PROJECT)
    index, ttl = _store_settings(
        {"index": {"dims": 4, "embed": "./embed.py:embed"}, "ttl": {"default_ttl": 5}}
    )
    assert index["dims"] == 4 and index["embed"].embed_query("aa") == [2.01, 0.01, 0.01, 0.01]
    assert ttl == {"default_ttl": 5}
    assert _store_settings(None) == (None, None)


@pytest.fixture
def server_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """`langgraph_api.config` as `langgraph dev` leaves it, with THREADLOOM_DB in
    `tmp_path` (each test sets the TTL and store settings it needs)."""
    for key, value in SERVER_ENV.items():
        monkeypatch.setenv(key, value)
    config = pytest.importorskip("langgraph_api.config")
    monkeypatch.setenv("THREADLOOM_DB", str(tmp_path / "memory.db"))
    monkeypatch.setattr(config, "THREAD_TTL", None)
    monkeypatch.setattr(config, "STORE_CONFIG", None)
    return config


def test_the_checkpointer_uses_the_servers_serializer_and_ttl(
    server_config: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`checkpointer()` opens THREADLOOM_DB with the server's serializer, runs one
    keep_latest sweeper for `checkpointer.ttl`, and refuses a delete TTL before opening
    outside the in-memory runtime (whose thread list it could not keep true)."""
    from langgraph_api.serde import Serializer

    from threadloom.langgraph_server import checkpointer

    keep = {"strategy": "keep_latest", "default_ttl": 1, "sweep_interval_minutes": 1}
    monkeypatch.setattr(server_config, "THREAD_TTL", keep)

    async def opened() -> tuple[Any, int]:
        async with checkpointer() as saver, checkpointer():
            sweepers = [t for t in asyncio.all_tasks() if "_keep_latest_loop" in repr(t)]
            return saver, len(sweepers)

    saver, sweepers = asyncio.run(opened())
    assert isinstance(saver, ServerSaver) and isinstance(saver.serde, Serializer)
    assert Path(saver.file.path) == tmp_path / "memory.db" and sweepers == 1
    monkeypatch.setattr(server_config, "THREAD_TTL", {"strategy": "delete", "default_ttl": 1})
    monkeypatch.setenv("THREADLOOM_DB", str(tmp_path / "other.db"))

    async def refused() -> None:
        async with checkpointer():
            pass

    with pytest.raises(ServerConfigError, match="needs LangGraph's in-memory runtime"):
        asyncio.run(refused())
    assert not (tmp_path / "other.db").exists()


def test_the_checkpointer_makes_the_file_with_the_pages_the_store_index_wants(
    server_config: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The checkpointer usually opens THREADLOOM_DB first: with a 384-dim store index
    configured it creates the file with the store's 8 KiB pages (docs/FORMAT.md)."""
    import apsw

    from threadloom.langgraph_server import checkpointer

    monkeypatch.setattr(server_config, "STORE_CONFIG", {"index": {"dims": 384}})

    async def opened() -> None:
        async with checkpointer():
            pass

    asyncio.run(opened())
    conn = apsw.Connection(str(tmp_path / "memory.db"))
    try:
        assert conn.execute("PRAGMA page_size").fetchall()[0][0] == 8192
    finally:
        conn.close()


def test_the_store_takes_the_servers_index_and_ttl(
    server_config: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`store()` embeds with langgraph.json's `store.index` and keeps its `ttl`, starting
    one sweeper per file when `sweep_interval_minutes` is set."""
    from threadloom.langgraph_server import store

    monkeypatch.chdir(PROJECT)
    settings = {
        "index": {"dims": 4, "embed": "./embed.py:embed", "fields": ["text"]},
        "ttl": {"default_ttl": 10, "sweep_interval_minutes": 1},
    }
    monkeypatch.setattr(server_config, "STORE_CONFIG", settings)

    def sweeping(opened: Any) -> bool:
        return opened._task_sweeper is not None and not opened._task_sweeper.done()

    async def used() -> tuple[list[str], Any, list[bool]]:
        async with store() as opened, store() as second:
            await opened.aput(("notes",), "a", {"text": "aaaa"})
            await opened.aput(("notes",), "o", {"text": "oooo"})
            found = await opened.asearch(("notes",), query="aa")
            return [i.key for i in found], opened.ttl_config, [sweeping(opened), sweeping(second)]

    keys, ttl, running = asyncio.run(used())
    assert keys == ["a", "o"] and ttl == settings["ttl"]
    assert running == [True, False]  # one sweeper per file, however often it is entered


def test_the_documented_langgraph_json_lines_are_the_tested_ones() -> None:
    """The langgraph.json lines README.md and docs/agent-server.md show load the same
    checkpointer and store as the test project's langgraph.json."""
    import json
    import re

    root = Path(__file__).resolve().parents[2]
    tested = json.loads((PROJECT / "langgraph.json").read_text())
    wanted = {"checkpointer": tested["checkpointer"]["path"], "store": tested["store"]["path"]}
    for doc in (root / "README.md", root / "docs" / "agent-server.md"):
        blocks = re.findall(r"```json\n(.*?)```", doc.read_text(), re.S)
        # A block is a whole langgraph.json or the lines to add to one.
        shown = [json.loads(b if b.lstrip().startswith("{") else "{" + b + "}") for b in blocks]
        paths = [{k: v["path"] for k, v in b.items() if k in wanted} for b in shown]
        assert wanted in paths, doc.name
