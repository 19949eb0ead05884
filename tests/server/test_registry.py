"""The Agent Server's registry in the threadloom file, under `threadloom agent-server`:
threads, runs, assistants and their versions come back after `kill -9` at random
moments and after `rm -rf .langgraph_api`, and agree with the checkpoints; threadloom's
commands read the running server's file; a thread deleted in the file leaves the
server's list. One server for the module, restarted in place."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.server._agent_server import SRC, AgentServer, require_server
from threadloom import Saver


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """The module's `threadloom agent-server` on a copy of the test project."""
    require_server()
    running = AgentServer(tmp_path_factory.mktemp("registry") / "project", agent_server=True)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def _client(server: AgentServer) -> Any:
    from langgraph_sdk import get_sync_client

    return get_sync_client(url=server.url, api_key=None)


def _say(text: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": text}]}


def _texts(values: dict[str, Any] | None) -> list[str]:
    return [m["content"] for m in (values or {}).get("messages", [])]


def _threadloom(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "threadloom", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )


def _file_threads(db: Path) -> dict[str, list[str]]:
    """Every thread with checkpoints in the file: its newest messages' texts."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    with Saver.from_conn_string(str(db), serde=JsonPlusSerializer(pickle_fallback=True)) as saver:
        found = {}
        for info in saver.threads(limit=1000):
            latest = saver.get_tuple({"configurable": {"thread_id": info.thread_id}})
            messages = latest.checkpoint["channel_values"].get("messages", []) if latest else []
            found[info.thread_id] = [m.content for m in messages]
        return found


@dataclass
class Acknowledged:
    """What the API answered, to be found again after a crash."""

    threads: dict[str, dict[str, Any]] = field(default_factory=dict)  # id -> metadata
    runs: dict[str, tuple[str, bool]] = field(default_factory=dict)  # id -> (thread, joined)
    assistants: dict[str, int] = field(default_factory=dict)  # id -> version
    deleted: set[str] = field(default_factory=set)


def _busy_round(client: Any, n: int, seen: Acknowledged) -> str:
    """Threads, runs (wait, stream, multitask), an interrupt and its resume, a state
    update, a copy, a delete, an assistant and a new version of it, a store item."""
    thread = client.threads.create(metadata={"round": n})["thread_id"]
    seen.threads[thread] = {"round": n}
    done = client.runs.wait(thread, "agent", input=_say(f"hello {n}"))
    assert _texts(done)[-1] == f"echo: hello {n}"
    list(client.runs.stream(thread, "agent", input=_say(f"stream {n}"), stream_mode="values"))
    client.runs.wait(thread, "agent", input=_say("please approve"))
    client.runs.wait(thread, "agent", command={"resume": "yes"})
    client.threads.update_state(thread, {"messages": [{"role": "user", "content": f"edit {n}"}]})
    first = client.runs.create(thread, "agent", input=_say(f"queued a {n}"))
    second = client.runs.create(
        thread, "agent", input=_say(f"queued b {n}"), multitask_strategy="enqueue"
    )
    for run in (first, second):
        client.runs.join(thread, run["run_id"])
    for run in client.runs.list(thread, limit=100):
        seen.runs[run["run_id"]] = (thread, True)
    copied = client.threads.copy(thread)["thread_id"]
    seen.threads[copied] = {"round": n}
    doomed = client.threads.create()["thread_id"]
    client.runs.wait(doomed, "agent", input=_say("doomed"))
    client.threads.delete(doomed)
    seen.deleted.add(doomed)
    made = client.assistants.create("agent", name=f"helper {n}", config={"tags": ["a"]})
    updated = client.assistants.update(made["assistant_id"], metadata={"round": n})
    seen.assistants[made["assistant_id"]] = updated["version"]
    client.store.put_item(["notes", str(n)], "k", {"text": "aaaa"})
    return thread


def _check(client: Any, db: Path, seen: Acknowledged) -> None:
    """Everything acknowledged is back, and the registry agrees with the checkpoints."""
    listed = {t["thread_id"]: t for t in client.threads.search(limit=1000)}
    for thread, metadata in seen.threads.items():
        assert thread in listed, f"thread {thread} lost"
        assert listed[thread]["metadata"].items() >= metadata.items()
    assert not seen.deleted & listed.keys()
    for run_id, (thread, joined) in seen.runs.items():
        run = client.runs.get(thread, run_id)
        assert run["run_id"] == run_id
        if joined:
            assert run["status"] == "success", run
        else:
            client.runs.join(thread, run_id)
            assert client.runs.get(thread, run_id)["status"] == "success"
    for assistant, version in seen.assistants.items():
        assert client.assistants.get(assistant)["version"] == version
        assert len(client.assistants.get_versions(assistant)) == version
    listed = {t["thread_id"]: t for t in client.threads.search(limit=1000)}
    in_file = _file_threads(db)
    assert not seen.deleted & in_file.keys()
    assert in_file.keys() <= listed.keys(), "a thread with checkpoints is not listed"
    for thread in in_file:
        state = client.threads.get_state(thread)["values"]
        assert _texts(state) == in_file[thread]
        assert _texts(listed[thread]["values"]) == in_file[thread]


def test_kill_9_at_random_moments_and_a_lost_folder_lose_nothing(server: AgentServer) -> None:
    """After each busy round (and a background run acknowledged but maybe unfinished),
    SIGKILL at a random moment, sometimes `rm -rf .langgraph_api` too, then a restart:
    every acknowledged thread, run, assistant version, checkpoint and store item (found
    by meaning) is back and the thread list agrees with the file."""
    rng = random.Random(25)
    seen = Acknowledged()
    for n in range(2):
        client = _client(server)
        thread = _busy_round(client, n, seen)
        background = client.runs.create(thread, "agent", input=_say(f"late {n}"))
        seen.runs[background["run_id"]] = (thread, False)
        time.sleep(rng.uniform(0.0, 0.3))
        server.kill()
        if n == 0:
            shutil.rmtree(server.folder / ".langgraph_api", ignore_errors=True)
        server.start()
        _check(_client(server), server.db, seen)
        found = _client(server).store.search_items(["notes", str(n)], query="aaaa")["items"]
        assert [i["key"] for i in found] == ["k"] and found[0]["score"] is not None


def test_threadloom_commands_read_the_running_servers_file(server: AgentServer) -> None:
    """`threadloom threads`, `show` and `history` read the file the server is writing;
    `show --json` gives the thread's size and its registry records' (a thread and a run)."""
    client = _client(server)
    thread = client.threads.create()["thread_id"]
    client.runs.wait(thread, "agent", input=_say("read me"))
    listed = _threadloom("threads", "--db", str(server.db), "--json", "--limit", "100")
    assert listed.returncode == 0, listed.stderr
    assert thread in {t["thread_id"] for t in json.loads(listed.stdout)["threads"]}
    shown = _threadloom("show", "--db", str(server.db), thread)
    assert shown.returncode == 0 and "read me" in shown.stdout, shown.stderr
    sizes = json.loads(_threadloom("show", "--db", str(server.db), thread, "--json").stdout)
    assert sizes["bytes"] > 0
    assert sizes["server_records"]["records"] >= 2 and sizes["server_records"]["bytes"] > 0
    history = _threadloom("history", "--db", str(server.db), thread, "--json")
    assert history.returncode == 0, history.stderr
    assert json.loads(history.stdout)


def test_a_thread_deleted_in_the_file_leaves_the_servers_list(server: AgentServer) -> None:
    """`threadloom delete` (as retention and erase do) deletes the thread's registry
    records with its checkpoints: after a restart the server no longer lists it or its
    runs, and keeps the others."""
    client = _client(server)
    gone, kept = (client.threads.create()["thread_id"] for _ in range(2))
    for thread in (gone, kept):
        client.runs.wait(thread, "agent", input=_say("hi"))
    server.stop()
    deleted = _threadloom("delete", "--db", str(server.db), gone)
    assert deleted.returncode == 0, deleted.stderr
    server.start()
    client = _client(server)
    listed = {t["thread_id"] for t in client.threads.search(limit=1000)}
    assert kept in listed and gone not in listed
    assert client.runs.list(kept) and _texts(client.threads.get_state(kept)["values"])


def test_agent_server_refuses_a_folder_without_langgraph_json(tmp_path: Path) -> None:
    """Outside a LangGraph project the command stops with what to do."""
    require_server()
    answer = subprocess.run(
        [sys.executable, "-m", "threadloom", "agent-server"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert answer.returncode == 1
    assert "error: no langgraph.json in" in answer.stderr
    assert "hint: run threadloom agent-server in your LangGraph project" in answer.stderr


def test_agent_server_refuses_a_file_in_a_missing_folder(tmp_path: Path) -> None:
    """`--db` in a folder that does not exist stops before the server starts, saying so."""
    require_server()
    project = tmp_path / "project"
    shutil.copytree(Path(__file__).parent / "project", project)
    answer = subprocess.run(
        [sys.executable, "-m", "threadloom", "agent-server", "--db", "nowhere/memory.db"],
        cwd=project,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert answer.returncode == 1, answer.stderr
    assert f"error: {project / 'nowhere'} (the folder of the file memory.db)" in answer.stderr
    assert "hint: create it, or give --db a path in an existing folder" in answer.stderr


def test_agent_server_refuses_another_checkpointer(tmp_path: Path) -> None:
    """A langgraph.json naming another checkpointer is refused, not silently replaced;
    threadloom's own entries keep their settings."""
    require_server()
    from threadloom.langgraph.server import ServerConfigError
    from threadloom.langgraph.server_run import CHECKPOINTER, project_config

    config: dict[str, Any] = {
        "dependencies": ["."],
        "graphs": {"agent": "./graph.py:graph"},
        "checkpointer": {"ttl": {"x": 1}},
    }
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    (tmp_path / "graph.py").write_text("graph = None\n")
    got = project_config(tmp_path)
    assert got["checkpointer"] == {"path": CHECKPOINTER, "ttl": {"x": 1}}
    config["checkpointer"] = {"path": "./mine.py:saver"}
    (tmp_path / "langgraph.json").write_text(json.dumps(config))
    with pytest.raises(ServerConfigError, match="names the checkpointer"):
        project_config(tmp_path)


def test_agent_server_refuses_an_untested_langgraph_api(tmp_path: Path) -> None:
    """A langgraph-api outside the tested range is refused before anything starts, with
    the range to install (a fake 0.99.0 distribution found first on the path)."""
    require_server()
    fake = tmp_path / "fake"
    (fake / "langgraph_api-0.99.0.dist-info").mkdir(parents=True)
    (fake / "langgraph_api-0.99.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: langgraph-api\nVersion: 0.99.0\n"
    )
    project = tmp_path / "project"
    shutil.copytree(Path(__file__).parent / "project", project)
    answer = subprocess.run(
        [sys.executable, "-m", "threadloom", "agent-server"],
        cwd=project,
        capture_output=True,
        text=True,
        env={"PYTHONPATH": f"{SRC}:{fake}", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert answer.returncode == 1, answer.stderr
    assert "error: langgraph-api 0.99.0 is outside the range" in answer.stderr
    assert "hint: install langgraph-api>=0.16.7,<0.17" in answer.stderr
    assert not (project / "threadloom.db").exists()
