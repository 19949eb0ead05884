"""The naas venv runs a real naas Engine from a project's config.yaml, its Agent and `abi`.

The baseline of the adapter tests: naas-abi-core 3.1.0's own SQLite document adapter
(`document_adapter: {adapter: sqlite}`) behind the engine, an Agent built with
`memory=None` (so on the engine's `DocumentCheckpointSaver`) chatting in two processes on
one thread, then naas-abi-cli's `abi agent prune-memory` on the project. The custom
adapter's tests run the same scripts with threadloom's adapter named in config.yaml.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import threadloom
from tests.naas._project import NAAS_SQLITE, NAAS_SQLITE_AS_CUSTOM, PROBE_MODULE, write_project
from tests.nats._peers import NaasEnv, ScriptFailed, run_document_service

HERE = Path(__file__).resolve().parent
CHAT = HERE / "naas_engine_chat.py"
ENGINE_SAVER = "naas_abi_core.services.agent.DocumentCheckpointSaver.DocumentCheckpointSaver"
IN_MEMORY = "langgraph.checkpoint.memory.InMemorySaver"
MEMORY = {"namespace": "naas_abi_core.services.agent", "agent_id": "engine.v1"}
# `abi` re-runs itself under `uv run` in a directory with an ABI pyproject.toml; a project
# here has none, and this says so in case some parent directory has one.
ABI_ENV = {"LOCAL_UV_RAN": "true"}


def chat(
    naas_env: NaasEnv,
    project: Path,
    thread: str,
    *messages: str,
    activity_log: bool = False,
    bind: Path | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One process: the engine loaded from `project`, its agent sent `messages` on `thread`
    (with `bind`, after `threadloom.naas.bind(bind)`)."""
    options = ["--activity-log"] if activity_log else []
    options += ["--bind", str(bind)] if bind is not None else []
    result: dict[str, Any] = naas_env.run(
        CHAT, *options, str(project), thread, *messages, env=env, cwd=project, threadloom=True
    ).json()
    return result


def prune(naas_env: NaasEnv, project: Path, *options: str) -> dict[str, Any]:
    """`abi agent prune-memory --keep-last 2 --min-age 0 [options]` in `project`."""
    run = naas_env.run(
        naas_env.abi,
        "agent",
        "prune-memory",
        "--keep-last",
        "2",
        "--min-age",
        "0",
        *options,
        env=ABI_ENV,
        cwd=project,
        threadloom=True,  # a project may name threadloom's adapter in config.yaml
    )
    result: dict[str, Any] = json.loads(run.stdout)
    return result


def collections(path: Path) -> dict[tuple[str, str], int]:
    """(namespace, collection) -> documents, in naas's SQLite document file."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        rows = db.execute(
            "SELECT namespace, collection, count(*) FROM abi_documents GROUP BY 1, 2"
        ).fetchall()
    return {(namespace, collection): count for namespace, collection, count in rows}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A naas project on naas's own SQLite document adapter."""
    return write_project(tmp_path / "project", document_adapter=NAAS_SQLITE)


def test_write_project_lists_the_default_modules_disabled(project: Path) -> None:
    """The project enables only its probe module, which declares the document service."""
    config = (project / "config.yaml").read_text()
    assert "module: threadloom_naas_probe\n  enabled: true" in config
    assert config.count("enabled: false") == 3
    assert "services=[DocumentService]" in (project / PROBE_MODULE / "__init__.py").read_text()
    assert (project / "storage").is_dir()
    assert not (project / "pyproject.toml").exists()


def test_the_naas_venv_imports_this_threadloom_under_both_backends(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """With threadloom=True the naas venv imports this threadloom, on either backend."""
    script = tmp_path / "probe.py"
    script.write_text(
        "import json, threadloom, threadloom.core, threadloom.nats\n"
        "print(json.dumps([threadloom.__file__, threadloom.core._impl.__name__]))\n"
    )
    for backend in ("native", "python"):
        path, impl = naas_env.run(
            script, env={"THREADLOOM_BACKEND": backend}, threadloom=True
        ).json()
        assert Path(path).resolve() == Path(threadloom.__file__).resolve()
        assert impl == f"threadloom.core._{backend}"
    with pytest.raises(ScriptFailed, match="No module named 'threadloom'"):
        naas_env.run(script)


def test_a_thread_continues_in_a_second_engine_process(naas_env: NaasEnv, project: Path) -> None:
    """The second process's agent reads the first one's turn from the document service."""
    first = chat(naas_env, project, "thread-1", "hello")
    assert first["checkpointer"] == ENGINE_SAVER
    assert first["replies"] == ["echo: hello (turn 1)"]
    assert first["activity"] is None

    second = chat(naas_env, project, "thread-1", "again")
    assert second["checkpointer"] == ENGINE_SAVER
    assert second["replies"] == ["echo: again (turn 2)"]
    assert second["messages"] == [
        {"type": "human", "content": "hello"},
        {"type": "ai", "content": "echo: hello (turn 1)"},
        {"type": "human", "content": "again"},
        {"type": "ai", "content": "echo: again (turn 2)"},
    ]
    assert second["checkpoints"] == 2 * first["checkpoints"] > 0
    stored = collections(project / "storage" / "documents.sqlite")
    assert {namespace for namespace, _ in stored} == {MEMORY["namespace"]}
    assert stored[(MEMORY["namespace"], "langgraph_checkpoints_v2")] == second["checkpoints"]


def test_prune_memory_reports_then_deletes_and_the_thread_goes_on(
    naas_env: NaasEnv, project: Path
) -> None:
    """`abi agent prune-memory` keeps 2 checkpoints; the thread then continues from them."""
    before = chat(naas_env, project, "thread-1", "hello", "again")
    dry = prune(naas_env, project)
    assert dry.keys() == {
        "mode", "target", "keep_last", "threads", "kept", "checkpoints", "writes", "values",
        "pruned",
    }  # fmt: skip
    pruned = before["checkpoints"] - 2
    assert dry["mode"] == "dry-run"
    assert dry["target"] == MEMORY
    assert (dry["keep_last"], dry["threads"], dry["kept"], dry["checkpoints"]) == (2, 1, 2, pruned)
    assert [report["thread_id"] for report in dry["pruned"]] == ["thread-1"]
    assert dry["pruned"][0]["applied"] is False
    stored = collections(project / "storage" / "documents.sqlite")
    assert stored[(MEMORY["namespace"], "langgraph_checkpoints_v2")] == before["checkpoints"]

    applied = prune(naas_env, project, "--apply")
    assert applied["mode"] == "applied"
    assert {key: applied[key] for key in ("kept", "checkpoints", "writes", "values")} == {
        key: dry[key] for key in ("kept", "checkpoints", "writes", "values")
    }
    assert applied["pruned"][0]["applied"] is True
    after = chat(naas_env, project, "thread-1", "third")
    assert after["replies"] == ["echo: third (turn 3)"]
    assert len(after["messages"]) == 6
    # The kept 2, then one turn's (before held two turns).
    assert after["checkpoints"] == 2 + before["checkpoints"] // 2


def test_a_custom_document_adapter_is_loaded_from_its_module(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """`adapter: custom` (how threadloom's adapter is named) serves the engine and `abi`."""
    project = write_project(tmp_path / "project", document_adapter=NAAS_SQLITE_AS_CUSTOM)
    assert "adapter: custom" in (project / "config.yaml").read_text()
    chat(naas_env, project, "thread-1", "hello")
    second = chat(naas_env, project, "thread-1", "again")
    assert second["checkpointer"] == ENGINE_SAVER
    assert second["replies"] == ["echo: again (turn 2)"]
    report = prune(naas_env, project)
    assert (report["threads"], report["checkpoints"]) == (1, second["checkpoints"] - 2)


def test_the_activity_log_goes_to_the_document_service(naas_env: NaasEnv, tmp_path: Path) -> None:
    """With `activity_log_adapter: document` naas writes events and actors there too."""
    project = write_project(tmp_path / "project", document_adapter=NAAS_SQLITE, activity_log=True)
    first = chat(naas_env, project, "thread-1", "hello", activity_log=True)
    second = chat(naas_env, project, "thread-1", "again", "more", activity_log=True)
    assert [event["seq"] for event in first["activity"]] == [1]
    assert [event["seq"] for event in second["activity"]] == [2, 3]
    assert second["activity"][1] == {
        "seq": 3,
        "event_type": "chat.message",
        "attributes": {"message": 1},
    }
    stored = collections(project / "storage" / "documents.sqlite")
    log = "naas_abi_core.services.activity_log"
    assert (stored[(log, "events")], stored[(log, "actors")]) == (3, 1)
    assert not (project / "storage" / "activity_log").exists()


def test_without_a_document_service_agents_forget_between_processes(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """No module declares the document service: agents keep naas's in-memory fallback."""
    project = write_project(tmp_path / "project", document_adapter=None)
    first = chat(naas_env, project, "thread-1", "hello")
    second = chat(naas_env, project, "thread-1", "again")
    assert first["checkpointer"] == second["checkpointer"] == IN_MEMORY
    assert second["replies"] == ["echo: again (turn 1)"]
    assert not (project / "storage" / "documents.sqlite").exists()


def test_a_client_engine_checkpoints_into_the_document_service_over_nats(
    naas_env: NaasEnv, nats_server: str, tmp_path: Path
) -> None:
    """With `nats:` and `role: client` the engine's agent memory is the service's, over NATS."""
    project = write_project(tmp_path / "project", document_adapter=None, nats=True)
    with run_document_service(naas_env, nats_server, tmp_path / "service") as service:
        first = chat(naas_env, project, "thread-1", "hello", env=service.env)
        second = chat(naas_env, project, "thread-1", "again", env=service.env)
        stored = collections(service.sqlite_path)
    assert first["checkpointer"] == second["checkpointer"] == ENGINE_SAVER
    assert second["replies"] == ["echo: again (turn 2)"]
    assert len(second["messages"]) == 4
    assert stored[(MEMORY["namespace"], "langgraph_checkpoints_v2")] == second["checkpoints"]
    assert not (project / "storage" / "documents.sqlite").exists()
