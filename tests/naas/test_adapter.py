"""threadloom as a naas project's memory: the document adapter and `bind`, in a real engine.

Everything naas runs in the naas venv (tests/nats/README.md) with this working tree's
threadloom on its path: naas-abi-core 3.1.0's `Engine` loaded from a project's
`config.yaml` (`tests/naas/_project.py`), its `Agent` with a deterministic chat model
(`naas_engine_chat.py`), naas-abi-cli's `abi agent prune-memory`. What the tests read
back (the file through `threadloom.Saver`, `threadloom verify`, naas's SQLite file) runs
here.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.naas._project import NAAS_SQLITE, THREADLOOM, write_project
from tests.naas.test_naas_env import ENGINE_SAVER, MEMORY, chat, collections, prune
from tests.nats._peers import NaasEnv, ScriptFailed
from threadloom import Saver

HERE = Path(__file__).resolve().parent
BOUND_SAVER = "threadloom.langgraph.saver.Saver"
LANGGRAPH = {
    "langgraph_checkpoints_v2",
    "langgraph_writes_v2",
    "langgraph_blobs_v2",
    "langgraph_items_v2",
    "langgraph_parts_v2",
}
#: Where a threadloom file answers otherwise than naas's SQLite adapter, on purpose
#: (docs/naas.md): (call, naas's outcome kind, threadloom's outcome).
DIFFERENCES = {
    "bad id": ("ok", ["raised", "ValueError"]),
    "value upserted changed": ("ok", ["raised", "ValueError"]),
}


def verify(path: Path) -> dict[str, Any]:
    """`threadloom verify --json` on the file (run here, in threadloom's venv)."""
    done = subprocess.run(
        [sys.executable, "-m", "threadloom", "verify", "--db", str(path), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def state(path: Path, thread: str) -> tuple[list[dict[str, str]], int]:
    """The thread's messages and checkpoint count, read by threadloom.Saver (engine scope)."""
    with Saver.from_conn_string(str(path), readonly=True) as saver:
        config = {"configurable": {"thread_id": thread}}
        found = saver.get_tuple(config)
        assert found is not None
        messages = [
            {"type": m.type, "content": m.content}
            for m in found.checkpoint["channel_values"]["messages"]
        ]
        return messages, len(list(saver.list(config)))


def test_the_adapter_answers_every_call_as_naas_own_sqlite_adapter(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """One battery of document calls (finds with every operator, orders, pages, byte
    budgets, counts, versions, deletes, refusals, a non-LangGraph collection, 8 threads
    at once) over the same documents: the same outcomes but for the documented ones, and
    the file verifies."""
    run = naas_env.run(
        HERE / "naas_adapter_semantics.py", str(tmp_path), threadloom=True, timeout=300
    )
    found = run.json()
    assert len(found["calls"]) > 40
    for name, naas, ours in zip(found["calls"], found["sqlite"], found["threadloom"], strict=True):
        if name in DIFFERENCES:
            assert (naas[0], ours) == DIFFERENCES[name], name
        elif name == "value upserted unchanged":  # create-only: the stored one, version 1
            assert naas[1]["version"] == 2 and ours[1]["version"] == 1, name
            assert naas[1]["data"] == ours[1]["data"], name
        else:
            assert ours == naas, name
    outcomes = dict(zip(found["calls"], found["threadloom"], strict=True))
    assert outcomes["find v1"] == ["raised", "CollectionNotFound"]
    assert outcomes["in 501"] == ["raised", "ValueError"]
    assert outcomes["worker threads"] == ["ok", 200]
    assert outcomes["other collection"][1][:2] == [1, 2]
    assert outcomes["after close"] == ["raised", "DocumentStorageError"]
    assert verify(Path(found["file"]))["sound"] is True


def test_a_naas_engine_keeps_agent_memory_in_the_file_across_processes(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """`adapter: custom` naming threadloom's adapter: a second engine process continues
    the thread; threadloom.Saver reads the same state from the file; naas's activity log
    (another collection) is in the fallback, which holds no LangGraph document."""
    project = write_project(tmp_path / "project", document_adapter=THREADLOOM, activity_log=True)
    first = chat(naas_env, project, "thread-1", "hello", activity_log=True)
    assert first["checkpointer"] == ENGINE_SAVER
    second = chat(naas_env, project, "thread-1", "again", activity_log=True)
    assert second["replies"] == ["echo: again (turn 2)"]
    assert [m["content"] for m in second["messages"]] == [
        "hello",
        "echo: hello (turn 1)",
        "again",
        "echo: again (turn 2)",
    ]
    assert [event["seq"] for event in second["activity"]] == [2]

    memory = project / "storage" / "memory.db"
    messages, checkpoints = state(memory, "thread-1")
    assert messages == second["messages"]
    assert checkpoints == second["checkpoints"] == 2 * first["checkpoints"]
    fallback = collections(project / "storage" / "documents.sqlite")
    log = "naas_abi_core.services.activity_log"
    assert (fallback[(log, "events")], fallback[(log, "actors")]) == (2, 1)
    assert not {collection for _, collection in fallback} & LANGGRAPH
    assert verify(memory)["sound"] is True


def test_prune_memory_reports_the_same_on_the_file_as_on_naas_sqlite(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """`abi agent prune-memory`, dry run then --apply, on two projects that held the same
    conversation, one per adapter: the same JSON; both threads then go on alike."""
    reports: dict[str, list[dict[str, Any]]] = {}
    for name, adapter in (("naas", NAAS_SQLITE), ("threadloom", THREADLOOM)):
        project = write_project(tmp_path / name, document_adapter=adapter)
        chat(naas_env, project, "thread-1", "hello", "again", "more")
        chat(naas_env, project, "thread-2", "other")
        dry = prune(naas_env, project)
        applied = prune(naas_env, project, "--apply")
        after = chat(naas_env, project, "thread-1", "fourth")
        reports[name] = [dry, applied, after["replies"], after["messages"], after["checkpoints"]]
    assert reports["threadloom"] == reports["naas"]
    dry = reports["threadloom"][0]
    assert dry["mode"] == "dry-run" and dry["target"] == MEMORY and dry["checkpoints"] > 0
    assert reports["threadloom"][2] == ["echo: fourth (turn 4)"]
    assert verify(tmp_path / "threadloom" / "storage" / "memory.db")["sound"] is True


def test_bind_keeps_memory_of_an_engine_without_a_document_service(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """No module loads the document service (agents would forget): after
    `threadloom.naas.bind(FILE)` the agents checkpoint into the file, a second process
    continues, and `engine.shutdown()` closes the bound saver."""
    project = write_project(tmp_path / "project", document_adapter=None)
    memory = project / "storage" / "memory.db"
    first = chat(naas_env, project, "thread-1", "hello", bind=memory)
    second = chat(naas_env, project, "thread-1", "again", bind=memory)
    for run in (first, second):
        assert run["checkpointer"] == BOUND_SAVER
        assert run["bound"] == {"used": True, "closed": True}
    assert second["replies"] == ["echo: again (turn 2)"]
    messages, checkpoints = state(memory, "thread-1")
    assert messages == second["messages"] and len(messages) == 4
    assert checkpoints == second["checkpoints"]
    assert not (project / "storage" / "documents.sqlite").exists()


def test_bind_beside_the_engine_own_document_memory_warns(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """An engine whose document service holds agent memory: bind still binds the file,
    and warns that two stores of one memory would diverge."""
    project = write_project(tmp_path / "project", document_adapter=NAAS_SQLITE)
    memory = project / "storage" / "memory.db"
    run = naas_env.run(
        HERE / "naas_engine_chat.py",
        "--bind",
        str(memory),
        str(project),
        "thread-1",
        "hello",
        cwd=project,
        threadloom=True,
    )
    assert run.json()["checkpointer"] == BOUND_SAVER
    assert "NaasMemoryWarning" in run.stderr and "would diverge" in run.stderr


def test_a_file_that_is_not_threadloom_is_refused_and_left_untouched(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """custom_config.path naming naas's own documents.sqlite: the engine does not load,
    the error says what the file is, not one byte of it changes; the adapter's warning
    names memory left in a fallback."""
    reference = write_project(tmp_path / "reference", document_adapter=NAAS_SQLITE)
    chat(naas_env, reference, "thread-1", "hello")
    documents = reference / "storage" / "documents.sqlite"
    before = hashlib.sha256(documents.read_bytes()).hexdigest()
    wrong = {**THREADLOOM, "custom_config": {"path": str(documents), "fallback": None}}
    project = write_project(tmp_path / "project", document_adapter=wrong)
    with pytest.raises(ScriptFailed, match="naas") as refused:
        chat(naas_env, project, "thread-1", "hello")
    assert "NotOurFileError" in str(refused.value) or "not a threadloom" in str(refused.value)
    assert hashlib.sha256(documents.read_bytes()).hexdigest() == before

    moved = {
        **THREADLOOM,
        "custom_config": {
            "path": "storage/memory.db",
            "fallback": {"adapter": "sqlite", "config": {"path": str(documents)}},
        },
    }
    project = write_project(tmp_path / "moved", document_adapter=moved)
    run = naas_env.run(
        HERE / "naas_engine_chat.py", str(project), "thread-1", cwd=project, threadloom=True
    )
    assert "NaasMemoryWarning" in run.stderr and "threadloom migrate" in run.stderr
    assert run.json()["messages"] == []
    moved_in = subprocess.run(
        [sys.executable, "-m", "threadloom", "migrate", str(documents), "--db",
         str(project / "storage" / "memory.db"), "--apply", "--json"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert moved_in.returncode == 0, moved_in.stdout + moved_in.stderr
    run = naas_env.run(
        HERE / "naas_engine_chat.py", str(project), "thread-1", cwd=project, threadloom=True
    )
    assert "NaasMemoryWarning" not in run.stderr
    assert [m["content"] for m in run.json()["messages"]] == ["hello", "echo: hello (turn 1)"]


def _yaml_blocks(path: Path) -> list[dict[str, Any]]:
    """The ```yaml blocks of a Markdown file, parsed."""
    text = path.read_text()
    blocks = text.split("```yaml\n")[1:]
    return [yaml.safe_load(block.split("```")[0]) for block in blocks]


@pytest.mark.parametrize("doc", ["README.md", "docs/naas.md"])
def test_the_documented_config_yaml_loads_and_keeps_memory(
    naas_env: NaasEnv, tmp_path: Path, doc: str
) -> None:
    """The `document_adapter` block the README and docs/naas.md show, as written, in a
    real engine: the thread continues in a second process, in storage/memory.db."""
    root = Path(__file__).resolve().parents[2]
    (block,) = [b for b in _yaml_blocks(root / doc) if "services" in b]
    adapter = block["services"]["document"]["document_adapter"]
    project = write_project(tmp_path / "project", document_adapter=adapter)
    chat(naas_env, project, "thread-1", "hello")
    second = chat(naas_env, project, "thread-1", "again")
    assert second["replies"] == ["echo: again (turn 2)"]
    messages, _ = state(project / "storage" / "memory.db", "thread-1")
    assert messages == second["messages"]


def test_bind_ends_with_the_last_engine_that_loaded_and_gives_the_memory_back(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """In one process: an engine that never loaded does not end the binding, the last one
    that loaded does (the saver closed, nothing stale left as the default); binding
    again with other options, or the same relative path after a chdir, is refused; bound
    beside an engine's own document memory, `unbind()` gives that memory back, also when
    the warning was raised as an error."""
    project = write_project(tmp_path / "project", document_adapter=NAAS_SQLITE)
    seen = naas_env.run(
        HERE / "naas_bind_lifecycle.py", str(project), cwd=project, threadloom=True
    ).json()
    assert seen == {
        "default after load": "Saver",
        "warned at load": [seen["warned at load"][0]],
        "closed by an engine that never loaded": False,
        "same path, same options": True,
        "other options": "naas agent memory is bound to storage/bo",
        "closed by the last loaded engine": True,
        "default after the last shutdown": None,
        "warned at bind": ["NaasMemoryWarning"],
        "default while bound": "Saver",
        "given back": True,
        "closed by unbind": True,
        "warning as error": "Saver",
        "unwrapped after unbind": True,
        "default at the end": None,
        "after chdir": "refused",
    }
    assert seen["warned at load"][0].startswith("this naas engine keeps agent memory")


def test_without_naas_the_extra_says_what_to_install() -> None:
    """threadloom's own venv has no naas: importing threadloom.naas says what it needs."""
    with pytest.raises(ImportError, match=r"threadloom\[naas\]"):
        import threadloom.naas  # noqa: F401


def test_a_fallback_given_as_a_path_is_refused_with_the_block_to_write(
    naas_env: NaasEnv, tmp_path: Path
) -> None:
    """DocumentAdapter(fallback="x.sqlite") raises a TypeError showing the block to give
    (not pydantic's "dictionary update sequence"), and creates no file."""
    script = tmp_path / "fallback_path.py"
    script.write_text(
        "import sys\n"
        "from threadloom.naas import DocumentAdapter\n"
        "try:\n"
        "    DocumentAdapter(sys.argv[1], fallback=sys.argv[2])\n"
        "except TypeError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    memory = tmp_path / "memory.db"
    run = naas_env.run(script, str(memory), "x.sqlite", threadloom=True)
    assert run.stdout.startswith("InvalidArgumentError fallback must be a naas document")
    assert "{'adapter': 'sqlite', 'config': {'path': 'x.sqlite'}}" in run.stdout
    assert not memory.exists() and not (tmp_path / "x.sqlite").exists()
