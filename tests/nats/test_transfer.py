"""Export and import of threads against the real peers: naas-abi-core's document service
and the naas-abi-sdk saver (each in the naas venv), on a real nats-server.

Oracles: the documents the service holds (read with our client, compared with
`Saver.documents()`), and the state and history the SDK saver reads (compared, in the
`plain` form both sides compute, with what threadloom.Saver reads).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from pathlib import Path
from typing import Any

import ormsgpack
import pytest
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage

from tests.engine.test_durability import checkpoint, config, put
from tests.engine.test_graphs import agent_graph, subgraph_graph
from tests.nats._peers import NaasScriptRunner, RunningDocumentService
from threadloom import Saver
from threadloom.cli import main as cli
from threadloom.nats import Credentials, DocumentClient
from threadloom.nats.transfer import export_threads, fetch_thread, import_threads
from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS, PARTS, WRITES
from threadloom.protocol.refs import key_of

ALL = [PARTS, ITEMS, BLOBS, CHECKPOINTS, WRITES]


def plain(value: Any) -> Any:
    """The comparison form of tests/nats/naas_sdk_checkpoints.py, computed here (a
    dataclass, such as langgraph's Interrupt, as the dict of its fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseMessage):
        return {"message": plain(value.model_dump())}
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"repr": repr(value)}


def canonical(value: Any) -> bytes:
    """msgpack with every map's keys sorted: equal bytes iff equal documents (field order
    is the service's own: it stores canonical JSON)."""

    def sort(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: sort(v[k]) for k in sorted(v)}
        if isinstance(v, list):
            return [sort(i) for i in v]
        return v

    return ormsgpack.packb(sort(value))


def snapshot(item: Any) -> dict[str, Any]:
    return {
        "config": plain(item.config),
        "parent": plain(item.parent_config),
        "values": plain(item.checkpoint["channel_values"]),
        "versions": plain(item.checkpoint["channel_versions"]),
        "metadata": plain(item.metadata),
        "writes": plain(sorted(item.pending_writes or [], key=lambda w: (w[0], w[1]))),
    }


def read(saver: Saver, thread_id: str) -> dict[str, Any]:
    history = [snapshot(i) for i in saver.list({"configurable": {"thread_id": thread_id}})]
    latest = saver.get_tuple(config(thread_id))
    # JSON round trip: the SDK side's output went through JSON (tuples become lists).
    return json.loads(
        json.dumps({"history": history, "latest": snapshot(latest) if latest else None})
    )


def client_of(service: RunningDocumentService, namespace: str) -> Any:
    return DocumentClient.connect(service.url, namespace, Credentials(secret=service.jwt_secret))


def remote(
    service: RunningDocumentService, namespace: str, agent: str, thread: str
) -> dict[str, Any]:
    """key -> data of every document of a thread on the service."""

    async def body() -> dict[str, Any]:
        async with await client_of(service, namespace) as client:
            found = await fetch_thread(client, agent, thread, ALL)
        return {key_of(c, d): d for c, d in found}

    return asyncio.run(body())


def transfer(
    move: Any, saver: Saver, service: RunningDocumentService, namespace: str, **options: Any
) -> dict[str, Any]:
    async def body() -> dict[str, Any]:
        async with await client_of(service, namespace) as client:
            return (await move(saver.checkpoints, client, **options)).as_dict()

    return asyncio.run(body())


def export(saver: Saver, service: RunningDocumentService, ns: str, **options: Any) -> Any:
    return transfer(export_threads, saver, service, ns, **options)


def import_(saver: Saver, service: RunningDocumentService, ns: str, **options: Any) -> Any:
    return transfer(import_threads, saver, service, ns, **options)


def local(saver: Saver, thread: str) -> dict[str, Any]:
    return {key: data for _, key, data in saver.documents(thread)}


def agent_thread(saver: Saver, thread: str) -> None:
    """A tool agent over several turns, one tool result above 256 KiB, and a subgraph."""
    graph = agent_graph().compile(checkpointer=saver)
    conf = {"configurable": {"thread_id": thread}}
    for turn in range(3):
        graph.invoke({"messages": [HumanMessage(f"what is {turn} x 2?", id=f"h{turn}")]}, conf)
    big = ToolMessage(content="z" * 300_000, tool_call_id="big", id="big-result")
    graph.update_state(conf, {"messages": [big]})
    sub = subgraph_graph().compile(checkpointer=saver)
    sub.invoke(
        {"messages": [], "notes": [], "done": False},
        {"configurable": {"thread_id": thread + "-sub"}},
    )


def test_export_is_read_by_the_sdk_saver_and_reruns_copy_nothing(
    tmp_path: Path,
    document_service: RunningDocumentService,
    sdk_runner: NaasScriptRunner,
    document_namespace: str,
) -> None:
    """A threadloom thread (turns, a big value, pending writes, a subgraph interrupt)
    exported to the real service: the documents there equal ours, the SDK saver reads
    the same state and history, and a second export writes nothing."""
    with Saver.from_conn_string(str(tmp_path / "a.db"), namespace=document_namespace) as saver:
        agent_thread(saver, "t")
        dry = export(saver, document_service, document_namespace)
        assert dry["mode"] == "dry-run" and dry["present"] == 0
        assert dry["missing"] == dry["checkpoints"] > 10 and dry["documents_copied"] == 0
        assert remote(document_service, document_namespace, saver.agent_id, "t") == {}
        done = export(saver, document_service, document_namespace, apply=True)
        assert done["copied"] == done["checkpoints"] and done["conflicts"] == []
        for thread in ("t", "t-sub"):
            ours = local(saver, thread)
            theirs = remote(document_service, document_namespace, saver.agent_id, thread)
            assert canonical(theirs) == canonical(ours)
            seen = sdk_runner(
                "naas_sdk_checkpoints.py",
                "read",
                document_namespace,
                saver.agent_id,
                thread,
                env=document_service.env,
            ).json()
            assert seen == read(saver, thread)
        again = export(saver, document_service, document_namespace, apply=True)
        assert again["documents_copied"] == 0 and again["present"] == again["checkpoints"]


def test_an_sdk_thread_imports_continues_and_round_trips(
    tmp_path: Path,
    document_service: RunningDocumentService,
    sdk_runner: NaasScriptRunner,
    document_namespace: str,
) -> None:
    """A thread the SDK saver wrote through the service imports into our file with the
    same state and history, continues with threadloom.Saver, and exports back unchanged."""
    agent = "module.agent.v1"
    written = sdk_runner(
        "naas_sdk_checkpoints.py",
        "write",
        document_namespace,
        agent,
        "s",
        "4",
        env=document_service.env,
    ).json()
    with Saver.from_conn_string(
        str(tmp_path / "b.db"), namespace=document_namespace, agent_id=agent
    ) as saver:
        dry = import_(saver, document_service, document_namespace)
        assert dry["threads"] == 1 and dry["missing"] == 5 and saver.documents("s") == []
        done = import_(saver, document_service, document_namespace, apply=True)
        assert done["documents_copied"] > 0
        assert read(saver, "s") == written
        assert canonical(local(saver, "s")) == canonical(
            remote(document_service, document_namespace, agent, "s")
        )
        again = import_(saver, document_service, document_namespace, apply=True)
        assert again["documents_copied"] == 0
        # The thread goes on here, then back to the service: the SDK sees the new head.
        head = saver.get_tuple(config("s"))
        assert head is not None
        grown = checkpoint({"turn": 99}, 99)
        grown["id"] = "1f0e0000-0000-6000-8000-000000000500"
        saver.put(head.config, grown, {"source": "loop", "step": 99, "parents": {}}, {})
        out = export(saver, document_service, document_namespace, apply=True)
        assert out["copied"] == 1 and out["diverged"] == []
        seen = sdk_runner(
            "naas_sdk_checkpoints.py",
            "read",
            document_namespace,
            agent,
            "s",
            env=document_service.env,
        ).json()
        assert seen["latest"]["config"]["configurable"]["checkpoint_id"] == grown["id"]
        assert seen == read(saver, "s")


def test_a_diverged_thread_is_reported_and_left_alone(
    tmp_path: Path, document_service: RunningDocumentService, document_namespace: str
) -> None:
    """Both sides grew past a common checkpoint: the dry run says `diverged`, apply skips
    the thread, and --include-diverged writes it (create-only: nothing there is lost)."""
    with (
        Saver.from_conn_string(str(tmp_path / "one.db"), namespace=document_namespace) as one,
        Saver.from_conn_string(str(tmp_path / "two.db"), namespace=document_namespace) as two,
    ):
        first = put(one, {"n": 1}, thread_id="d", number=1)
        export(one, document_service, document_namespace, apply=True)
        import_(two, document_service, document_namespace, apply=True, threads=["d"])
        put(two, {"n": 2}, thread_id="d", number=3, parent=first["configurable"]["checkpoint_id"])
        export(two, document_service, document_namespace, apply=True)
        put(one, {"n": 3}, thread_id="d", number=2, parent=first["configurable"]["checkpoint_id"])
        dry = export(one, document_service, document_namespace)
        assert dry["diverged"] == ["d"]
        skipped = export(one, document_service, document_namespace, apply=True)
        assert skipped["skipped"] == ["d"] and skipped["documents_copied"] == 0
        forced = export(
            one, document_service, document_namespace, apply=True, include_diverged=True
        )
        assert forced["copied"] == 1
        assert len(remote(document_service, document_namespace, one.agent_id, "d")) >= 3


def test_export_to_another_agent_id_and_back_through_the_command_line(
    tmp_path: Path,
    document_service: RunningDocumentService,
    document_namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`threadloom export --agent-id` re-keys every document; `threadloom import` with the
    same agent id brings them back to the original scope identical; a 20 MiB value passes
    within the broker's limit both ways."""
    source = tmp_path / "src.db"
    with Saver.from_conn_string(str(source), namespace=document_namespace) as saver:
        put(saver, {"huge": "q" * (20 * 1024 * 1024), "small": 1}, thread_id="r")
        original = local(saver, "r")
    common = [
        "--namespace",
        document_namespace,
        "--local-namespace",
        document_namespace,
        "--jwt-secret",
        document_service.jwt_secret,
        "--json",
    ]
    assert (
        cli(
            [
                "export",
                "--db",
                str(source),
                "--to",
                document_service.url,
                "--agent-id",
                "other.v1",
                "--apply",
                *common,
            ]
        )
        == 0
    )
    report = json.loads(capsys.readouterr().out)
    assert report["target"]["agent_id"] == "other.v1" and report["copied"] == 1
    there = remote(document_service, document_namespace, "other.v1", "r")
    assert len(there) == len(original)
    assert all(d["agent_id"] == "other.v1" for d in there.values())
    copy = tmp_path / "copy.db"
    assert (
        cli(
            [
                "import",
                "--db",
                str(copy),
                "--from",
                document_service.url,
                "--agent-id",
                "other.v1",
                "--thread",
                "r",
                "--apply",
                *common,
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["documents_copied"] == len(original)
    with Saver.from_conn_string(str(copy), namespace=document_namespace) as back:
        assert canonical(local(back, "r")) == canonical(original)
    assert (
        cli(
            [
                "export",
                "--db",
                str(source),
                "--to",
                document_service.url,
                "--namespace",
                document_namespace,
                "--json",
            ]
        )
        == 1
    )
    assert "--jwt-secret" in capsys.readouterr().err


class _Interrupted(Exception):
    pass


def test_an_interrupted_export_leaves_no_checkpoint_without_its_documents(
    tmp_path: Path, document_service: RunningDocumentService, document_namespace: str
) -> None:
    """Stopped between two windows of checkpoints, the target holds only checkpoints whose
    every referenced document is there; the rerun completes the thread."""
    from threadloom.protocol import references

    with Saver.from_conn_string(str(tmp_path / "i.db"), namespace=document_namespace) as saver:
        agent_thread(saver, "i")
        from threadloom.nats.transfer import CONCURRENCY
        from threadloom.protocol import BLOBS, ITEMS, PARTS

        # Stop after the window of anchors (checkpoints and pending writes, in put order)
        # that holds the first checkpoint: with async durability a step's pending writes
        # can be put before its checkpoint, so the first window may hold none.
        anchors = [c for c, _, _ in saver.documents("i") if c not in (BLOBS, ITEMS, PARTS)]
        stop_at = 2 + anchors.index(CHECKPOINTS) // CONCURRENCY
        calls = []

        def stop(done: int, total: int) -> None:
            calls.append(done)
            if len(calls) == stop_at:  # the values and the windows up to it are in
                raise _Interrupted

        with pytest.raises(_Interrupted):
            export(saver, document_service, document_namespace, apply=True, progress=stop)
        there = remote(document_service, document_namespace, saver.agent_id, "i")
        by_ref = {d["ref"]: d for d in there.values() if "ref" in d}
        checkpoints = [d for d in there.values() if "channels" in d]
        assert (
            0 < len(checkpoints) < len([1 for c, _, _ in saver.documents("i") if c == CHECKPOINTS])
        )
        for doc in checkpoints:
            todo = [ref for ref, _ in references(doc)]
            while todo:
                ref = todo.pop()
                assert ref in by_ref, f"checkpoint {doc['checkpoint_id']} lacks {ref}"
                todo.extend(r for r, _ in references(by_ref[ref]))
        rest = export(saver, document_service, document_namespace, apply=True)
        assert rest["present"] + rest["copied"] == rest["checkpoints"] and rest["copied"] > 0
        assert canonical(remote(document_service, document_namespace, saver.agent_id, "i")) == (
            canonical(local(saver, "i"))
        )


def test_an_imported_thread_keeps_its_checkpoints_times(
    tmp_path: Path, document_service: RunningDocumentService, document_namespace: str
) -> None:
    """`import` dates a thread by its checkpoints' `ts` (created: the oldest, last
    activity: the newest), not by the import, as the exporting file's writes do not travel."""
    from datetime import datetime

    from tests.migration._graphs import dated_thread

    with (
        Saver.from_conn_string(str(tmp_path / "one.db"), namespace=document_namespace) as one,
        Saver.from_conn_string(str(tmp_path / "two.db"), namespace=document_namespace) as two,
    ):
        stamps = dated_thread(one, "aged", [3, 7, 8])
        export(one, document_service, document_namespace, apply=True, threads=["aged"])
        done = import_(two, document_service, document_namespace, apply=True, threads=["aged"])
        assert done["copied"] == 3
        info = two.checkpoints.thread("aged")
        assert info is not None
        assert info.created_at == datetime.fromisoformat(stamps[0])
        assert info.updated_at == datetime.fromisoformat(stamps[-1])


def test_export_tries_a_put_again_when_the_services_backend_is_busy(
    tmp_path: Path, naas_env: Any, document_namespace: str
) -> None:
    """naas's SQLite backend answers STORAGE_ERROR when its lock stays taken past its
    timeout (5 s by default; many puts in flight under load reach it). Export tries such a
    put again, so a backend locked for a second (here: its file held by another writer,
    the service's timeout cut to 50 ms) delays the export instead of failing it, and every
    document arrives."""
    import sqlite3
    import threading

    from tests.nats._peers import nats_server_binary, require, run_document_service, run_nats_server

    # A broker of its own: the session's document service answers on the session's broker
    # too, and the first answer to a request wins.
    with (
        run_nats_server(require(nats_server_binary), tmp_path / "nats") as broker,
        run_document_service(
            naas_env, broker.url, tmp_path / "busy-service", sqlite_timeout=0.05
        ) as service,
    ):
        with Saver.from_conn_string(
            str(tmp_path / "src.db"), namespace=document_namespace
        ) as saver:
            put(saver, {"n": 0}, thread_id="warm", number=1)
            export(saver, service, document_namespace, apply=True)  # the collections exist
            for number in range(1, 4):
                put(saver, {"n": number, "text": "x" * 5000}, thread_id="b", number=number)
            original = local(saver, "b")
            holder = sqlite3.connect(service.sqlite_path, timeout=30, check_same_thread=False)
            holder.execute("BEGIN IMMEDIATE")  # the backend's writes now find its lock taken
            threading.Timer(1.0, holder.rollback).start()
            report = export(saver, service, document_namespace, apply=True, threads=["b"])
            holder.close()
        assert report["copied"] == 3, report
        assert remote(service, document_namespace, saver.agent_id, "b") == original
