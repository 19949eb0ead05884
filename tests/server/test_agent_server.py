"""threadloom under LangGraph's real Agent Server (`langgraph dev`), driven by
langgraph-sdk: runs, streams, interrupts, history, state updates, copies, deletes and the
store go to the threadloom file, and a `kill -9` loses no acknowledged run. One server
start for the module (plus the restart)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server._agent_server import AgentServer, require_server
from threadloom import Saver, Store
from threadloom.langgraph_server import PER_REQUEST_KEYS


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """The module's server on a copy of the test project (threadloom.db beside its
    langgraph.json)."""
    require_server()
    running = AgentServer(tmp_path_factory.mktemp("agent-server") / "project")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def client(server: AgentServer) -> Any:
    """A langgraph-sdk client of the module's server."""
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=server.url, api_key=None)


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _texts(values: dict[str, Any]) -> list[str]:
    return [m["content"] for m in values["messages"]]


def _stored(db: Path, thread_id: str) -> list[Any]:
    """The thread's checkpoints as threadloom reads them from the file, every namespace
    (pickled values read as the server's serializer reads them)."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    with Saver.from_conn_string(str(db), serde=JsonPlusSerializer(pickle_fallback=True)) as saver:
        return list(saver.list({"configurable": {"thread_id": thread_id}}))


def test_runs_wait_and_stream_into_the_file(client: Any, server: AgentServer) -> None:
    """`runs.wait` and `runs.stream` answer through threadloom's checkpointer; the file
    holds the thread's checkpoints with its `thread_id` and no per-request key."""
    thread = client.threads.create()["thread_id"]
    done = client.runs.wait(thread, "agent", input=_say("hello"))
    assert _texts(done) == ["hello", "echo: hello"]
    parts = list(client.runs.stream(thread, "agent", input=_say("again"), stream_mode="values"))
    values = [p.data for p in parts if p.event == "values"]
    assert _texts(values[-1])[-2:] == ["again", "echo: again"]
    stored = _stored(server.db, thread)
    assert len(stored) >= 6
    assert all(t.metadata.get("thread_id") == thread for t in stored)
    assert all(PER_REQUEST_KEYS.isdisjoint(t.metadata) for t in stored)
    assert [m.content for m in stored[0].checkpoint["channel_values"]["messages"]][-1] == (
        "echo: again"
    )


def test_the_servers_serializer_stores_what_msgpack_cannot(
    client: Any, server: AgentServer
) -> None:
    """A state value msgpack cannot encode (a complex number) is stored with the server's
    own serializer (`checkpointer.serde`), as under the default checkpointer."""
    thread = client.threads.create()["thread_id"]
    run = client.runs.create(thread, "agent", input=_say("odd"))
    client.runs.join(thread, run["run_id"])
    assert client.runs.get(thread, run["run_id"])["status"] == "success"
    assert _texts(client.threads.get_state(thread)["values"])[-1] == "odd kept"
    odd = {t.checkpoint["channel_values"].get("odd") for t in _stored(server.db, thread)}
    assert complex(1, 2) in odd


def test_an_interrupt_is_resumed(client: Any) -> None:
    """A run that stops on `interrupt()` shows it in the thread's state and resumes with
    `Command(resume=...)`."""
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "agent", input=_say("please approve"))
    state = client.threads.get_state(thread)
    assert state["next"] == ["chat"]
    assert state["tasks"][0]["interrupts"][0]["value"] == {"question": "approve?"}
    done = client.runs.wait(thread, "agent", command={"resume": "yes"})
    assert _texts(done) == ["please approve", "approved: yes"]
    assert client.threads.get_state(thread)["next"] == []


def test_history_and_update_state(client: Any) -> None:
    """`get_history` lists the thread's checkpoints newest first and `update_state`
    writes a new one the next read sees."""
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "agent", input=_say("one"))
    client.runs.wait(thread, "agent", input=_say("two"))
    history = client.threads.get_history(thread, limit=20)
    assert _texts(history[0]["values"]) == ["one", "echo: one", "two", "echo: two"]
    steps = [h["metadata"]["step"] for h in history]
    assert steps == sorted(steps, reverse=True) and len(history) >= 6
    client.threads.update_state(thread, {"messages": [{"role": "user", "content": "edited"}]})
    assert _texts(client.threads.get_state(thread)["values"])[-1] == "edited"
    assert len(client.threads.get_history(thread, limit=20)) == len(history) + 1


def test_copy_names_the_copy_and_delete_empties_the_file(client: Any, server: AgentServer) -> None:
    """A copied thread has the source's state and its checkpoints name the copy's
    `thread_id` in the file; a deleted thread leaves no checkpoint there."""
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "agent", input=_say("copy me"))
    copied = client.threads.copy(thread)
    copy_id = copied["thread_id"]
    assert copy_id != thread
    assert client.threads.get_state(copy_id)["values"] == client.threads.get_state(thread)["values"]
    in_file = _stored(server.db, copy_id)
    assert in_file and {t.metadata["thread_id"] for t in in_file} == {copy_id}
    client.threads.delete(thread)
    assert _stored(server.db, thread) == []
    assert _stored(server.db, copy_id) != []


def test_the_store_searches_by_the_servers_index(client: Any, server: AgentServer) -> None:
    """Items put through the API are searched by meaning with langgraph.json's index
    (./embed.py:embed) and sit in the threadloom file; a run's store writes too."""
    client.store.put_item(["notes"], "a", {"text": "aaaa banana"})
    client.store.put_item(["notes"], "o", {"text": "oooo  moon"})
    found = client.store.search_items(["notes"], query="a a a a")["items"]
    assert [item["key"] for item in found] == ["a", "o"]
    assert found[0]["score"] > found[1]["score"]
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "agent", input=_say("remember"))
    with Store.from_conn_string(str(server.db)) as store:
        assert store.get(("notes",), "a").value == {"text": "aaaa banana"}
        assert any(i.value == {"text": "remember"} for i in store.search(("turns",)))


def test_kill_9_loses_no_acknowledged_run(client: Any, server: AgentServer) -> None:
    """After SIGKILL right after acknowledged runs, every checkpoint the API showed is in
    the file, and the server starts again on it and runs."""
    shown: dict[str, set[str]] = {}
    for n in range(3):
        thread = client.threads.create()["thread_id"]
        for text in (f"first {n}", f"second {n}"):
            client.runs.wait(thread, "agent", input=_say(text))
        history = client.threads.get_history(thread, limit=50)
        shown[thread] = {h["checkpoint"]["checkpoint_id"] for h in history}
    server.kill()
    for thread, ids in shown.items():
        assert {t.checkpoint["id"] for t in _stored(server.db, thread)} >= ids
    server.start()
    from langgraph_sdk import get_sync_client

    again = get_sync_client(url=server.url, api_key=None)
    thread = again.threads.create()["thread_id"]
    assert _texts(again.runs.wait(thread, "agent", input=_say("back")))[-1] == "echo: back"


def test_a_delete_ttl_deletes_idle_threads_everywhere(tmp_path: Path) -> None:
    """langgraph.json's `checkpointer.ttl` with `strategy: delete` deletes each thread idle
    past `default_ttl`, run or not (here at the sweep a start makes): gone from the API,
    its checkpoints and its records from the file; a fresh thread stays."""
    require_server()
    from langgraph_sdk import get_sync_client

    from threadloom.engine.conversations import ServerRecords

    expiring = AgentServer(tmp_path / "project")
    config = json.loads((expiring.folder / "langgraph.json").read_text())
    ttl = {"strategy": "delete", "default_ttl": 0.02, "sweep_interval_minutes": 1}
    config["checkpointer"]["ttl"] = ttl
    (expiring.folder / "langgraph.json").write_text(json.dumps(config))
    expiring.start()
    try:
        client = get_sync_client(url=expiring.url, api_key=None)
        ran, empty = (client.threads.create()["thread_id"] for _ in range(2))
        client.runs.wait(ran, "agent", input=_say("soon gone"))
        # The sweep runs at start and every minute (the shortest langgraph.json allows):
        # a restart past the TTL (1.2 s) sweeps at once.
        expiring.stop()
        time.sleep(1.5)
        expiring.start()
        client = get_sync_client(url=expiring.url, api_key=None)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            listed = {t["thread_id"] for t in client.threads.search(limit=100)}
            if not listed & {ran, empty}:
                break
            time.sleep(0.5)
        assert not listed & {ran, empty}
        fresh = client.threads.create()["thread_id"]
        assert client.threads.get(fresh)["thread_id"] == fresh
        assert _stored(expiring.db, ran) == []
        with Saver.from_conn_string(str(expiring.db)) as saver:
            records = ServerRecords(saver.checkpoints.file, saver.checkpoints.scope)
            named = {r.thread_id for r in records.load()}
        assert not named & {ran, empty}
    finally:
        expiring.stop()
