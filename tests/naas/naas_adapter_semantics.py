"""Run in the naas venv (threadloom on PYTHONPATH): one battery of document calls, answered
by naas's own SQLite adapter and by threadloom's DocumentAdapter over the same documents.

Usage: naas_adapter_semantics.py WORKDIR

A LangGraph graph runs on naas's DocumentCheckpointSaver over the SQLite adapter; every
document it stored is copied into a threadloom file through the threadloom adapter (put
order: values, checkpoints by id, writes). Then both answer the same calls through naas's
DocumentService (the path every naas caller takes), and the script prints one JSON line:
`{"calls": [name, ...], "sqlite": [outcome, ...], "threadloom": [outcome, ...],
"file": PATH}`, an outcome being `["ok", value]` or `["raised", exception class]`.
"""

from __future__ import annotations

import functools
import json
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage
from langgraph.graph import START, MessagesState, StateGraph
from naas_abi_core.services.agent.DocumentCheckpointSaver import DocumentCheckpointSaver
from naas_abi_core.services.document.DocumentFactory import DocumentFactory
from naas_abi_core.services.document.DocumentPort import CollectionSpec, Document, FieldSpec, Page
from naas_abi_core.services.document.DocumentService import DocumentService

from threadloom.naas import DocumentAdapter
from threadloom.protocol import BLOBS, CHECKPOINTS, CHECKPOINTS_V1, ITEMS, PARTS, WRITES
from threadloom.protocol.refs import key_of

NS = "naas_abi_core.services.agent"
VALUES = (BLOBS, ITEMS, PARTS)


def plain(value: Any) -> Any:
    """A JSON-able form of what a call returned."""
    if isinstance(value, Document):
        return {"id": value.id, "data": plain(value.data), "version": value.version}
    if isinstance(value, Page):
        return {"items": [plain(d) for d in value.items], "more": value.cursor is not None}
    if isinstance(value, CollectionSpec):
        return [(f.name, f.type, f.indexed, f.unique) for f in value.fields]
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def outcome(call: Callable[[], Any]) -> list[Any]:
    try:
        return ["ok", plain(call())]
    except Exception as exc:  # noqa: BLE001 - the outcome is what is compared
        return ["raised", type(exc).__name__]


def every(documents: DocumentService, collection: str, **options: Any) -> list[str]:
    """The ids of every page of a query, followed by cursor (each page non-empty)."""
    return [i for page in pages(documents, collection, **options) for i in page]


def pages(documents: DocumentService, collection: str, **options: Any) -> list[list[str]]:
    """The ids of each page of a query, followed by cursor (each page non-empty)."""
    found: list[list[str]] = []
    cursor = None
    while True:
        page = documents.find(collection, cursor=cursor, **options)
        assert page.items, "an empty page"
        found.append([d.id for d in page.items])
        cursor = page.cursor
        if cursor is None:
            return found


def remember(workdir: Path) -> DocumentService:
    """Agent memory written by naas's saver on naas's SQLite adapter."""
    adapter = DocumentFactory.DocumentAdapterSQLite(path=str(workdir / "documents.sqlite"))
    root = DocumentService._for_engine(adapter)
    saver = DocumentCheckpointSaver.for_engine(root)

    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"reply {len(state['messages'])} " + "words " * 40)]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_edge(START, "reply")
    app = graph.compile(checkpointer=saver)
    for thread in ("t1", "t2"):
        for turn in range(6):
            app.invoke({"messages": [("user", f"{thread} turn {turn}")]}, _config(thread))
    return root.for_namespace(NS)


def _config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def copy(source: DocumentService, target_root: DocumentService) -> DocumentService:
    """Every LangGraph document of `source` into the threadloom adapter, in put order."""
    DocumentCheckpointSaver.for_engine(target_root)  # ensures the collections
    target = target_root.for_namespace(NS)
    for collection in (*VALUES, CHECKPOINTS, WRITES):
        found = list(source.iterate(collection))
        if collection == CHECKPOINTS:
            found.sort(key=lambda d: d.data["checkpoint_id"])
        for document in found:
            target.put(collection, document.id, document.data, if_version=0)
    return target


def battery(docs: DocumentService, root: DocumentService) -> list[tuple[str, Callable[[], Any]]]:
    """The calls, as (name, call) pairs over `docs` (the memory namespace) and `root`."""
    checkpoints = sorted(docs.iterate(CHECKPOINTS), key=lambda d: d.data["checkpoint_id"])
    middle = checkpoints[len(checkpoints) // 2].data["checkpoint_id"]
    a_write = next(docs.iterate(WRITES, where=[("thread_id", "eq", "t1")]))
    a_value = next(docs.iterate(BLOBS))
    three = [d.data["checkpoint_id"] for d in checkpoints[:3]]
    newest = ("checkpoint_id", "desc")
    scope = [("agent_id", "eq", "engine.v1"), ("thread_id", "eq", "t1")]
    calls: list[tuple[str, Callable[[], Any]]] = [
        ("collections", lambda: docs.collections()),
        ("namespaces", lambda: [n for n in root.namespaces() if n in (NS, "jobs")]),
        ("spec checkpoints", lambda: docs.collection_spec(CHECKPOINTS)),
        ("spec v1", lambda: docs.collection_spec(CHECKPOINTS_V1)),
        ("find v1", lambda: docs.find(CHECKPOINTS_V1, where=scope)),
        ("find in an empty namespace", lambda: root.for_namespace("nobody").find(CHECKPOINTS)),
        ("latest", lambda: docs.find(CHECKPOINTS, where=scope, order_by=newest, limit=1)),
        (
            "latest of a namespace",
            lambda: docs.find(
                CHECKPOINTS, where=[*scope, ("checkpoint_ns", "eq", "")], order_by=newest, limit=1
            ),
        ),
        (
            "history pages of 4",
            lambda: every(docs, CHECKPOINTS, where=scope, order_by=newest, limit=4),
        ),
        (
            "before",
            lambda: every(docs, CHECKPOINTS, where=[*scope, ("checkpoint_id", "lt", middle)]),
        ),
        (
            "gte asc",
            lambda: every(
                docs,
                CHECKPOINTS,
                where=[("checkpoint_id", "gte", middle)],
                order_by=("checkpoint_id", "asc"),
            ),
        ),
        ("in", lambda: every(docs, CHECKPOINTS, where=[("checkpoint_id", "in", three)])),
        ("nin", lambda: every(docs, CHECKPOINTS, where=[("checkpoint_id", "nin", three)])),
        ("ne thread", lambda: every(docs, WRITES, where=[("thread_id", "ne", "t1")])),
        ("exists parent", lambda: every(docs, CHECKPOINTS, where=[("parent_id", "exists", True)])),
        ("parent eq none", lambda: every(docs, CHECKPOINTS, where=[("parent_id", "eq", None)])),
        ("order by channel", lambda: every(docs, WRITES, order_by=("channel", "desc"), limit=3)),
        (
            "values by ref",
            lambda: every(
                docs, BLOBS, where=[("thread_id", "eq", "t1"), ("ref", "in", [a_value.data["ref"]])]
            ),
        ),
        ("byte budget pages", lambda: every(docs, BLOBS, max_bytes=600, limit=50)),
        ("byte budget cuts", lambda: len(pages(docs, BLOBS, max_bytes=600, limit=50)) > 2),
        ("count all", lambda: [docs.count(c) for c in (*VALUES, CHECKPOINTS, WRITES)]),
        ("count scope", lambda: docs.count(CHECKPOINTS, where=scope)),
        ("count v1", lambda: docs.count(CHECKPOINTS_V1)),
        ("in 501", lambda: docs.find(CHECKPOINTS, where=[("checkpoint_id", "in", ["x"] * 501)])),
        ("bad operator", lambda: docs.find(CHECKPOINTS, where=[("checkpoint_id", "like", "x")])),  # type: ignore[list-item]
        ("page 1001", lambda: docs.find(CHECKPOINTS, limit=1001)),
        ("garbled cursor", lambda: docs.find(CHECKPOINTS, cursor="garbled")),
        ("get", lambda: docs.get(CHECKPOINTS, checkpoints[0].id)),
        ("get value", lambda: docs.get(BLOBS, a_value.id)),
        ("get missing", lambda: docs.get(CHECKPOINTS, "0" * 64)),
        ("get in another collection", lambda: docs.get(WRITES, checkpoints[0].id)),
        ("create-only again", lambda: docs.put(BLOBS, a_value.id, a_value.data, if_version=0)),
        ("compare-and-swap on a missing one", lambda: put_new(docs, a_value.data, if_version=3)),
        ("write replaced", lambda: docs.put(WRITES, a_write.id, {**a_write.data, "channel": "x"})),
        ("write swapped", lambda: docs.put(WRITES, a_write.id, a_write.data, if_version=2)),
        ("write swapped stale", lambda: docs.put(WRITES, a_write.id, a_write.data, if_version=2)),
        ("write read back", lambda: docs.get(WRITES, a_write.id)),
        ("delete stale", lambda: docs.delete(WRITES, a_write.id, if_version=1)),
        ("delete", lambda: docs.delete(WRITES, a_write.id, if_version=3)),
        ("deleted", lambda: docs.get(WRITES, a_write.id)),
        ("delete missing", lambda: docs.delete(WRITES, a_write.id)),
        ("delete missing with a version", lambda: docs.delete(WRITES, a_write.id, if_version=1)),
        ("other collection", lambda: other_collection(root)),
        ("worker threads", lambda: from_threads(docs)),
        ("count after", lambda: [docs.count(c) for c in (*VALUES, CHECKPOINTS, WRITES)]),
        # Where a threadloom file differs on purpose (docs/naas.md): ids are the keys
        # their fields define, values and checkpoints are create-only.
        ("bad id", lambda: docs.put(BLOBS, "not-the-key", a_value.data)),
        ("value upserted unchanged", lambda: docs.put(BLOBS, a_value.id, a_value.data)),
        (
            "value upserted changed",
            lambda: docs.put(BLOBS, a_value.id, {**a_value.data, "length": 0}),
        ),
    ]
    return calls


def put_new(docs: DocumentService, template: dict[str, Any], **options: Any) -> Document:
    """Put a value document no one stored yet."""
    data = {**template, "ref": "b-" + "ab" * 32}
    return docs.put(BLOBS, key_of(BLOBS, data), data, **options)


def other_collection(root: DocumentService) -> Any:
    """A collection that is not LangGraph's: ensured, written, read, counted, dropped."""
    jobs = root.for_namespace("jobs")
    jobs.ensure_collection(
        CollectionSpec(name="runs", fields=(FieldSpec(name="state", type="string", indexed=True),))
    )
    first = jobs.put("runs", "r1", {"state": "done", "n": 1})
    again = jobs.put("runs", "r1", {"state": "done", "n": 2}, if_version=1)
    return [
        first.version,
        again.version,
        jobs.get("runs", "r1").data,
        jobs.count("runs"),
        jobs.collections(),
    ]


def from_threads(docs: DocumentService) -> int:
    """200 value documents (of a new thread) put from 8 threads at once; how many are
    stored."""
    errors: list[BaseException] = []

    def put(worker: int) -> None:
        try:
            for n in range(25):
                data = {
                    "agent_id": "engine.v1",
                    "thread_id": "t3",
                    "ref": f"b-{worker:032x}{n:032x}",
                    "_schema": 2,
                    "value": {"kind": "msgpack", "payload": bytes([worker, n])},
                }
                docs.put(BLOBS, key_of(BLOBS, data), data, if_version=0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    workers = [threading.Thread(target=put, args=(w,)) for w in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    if errors:
        raise errors[0]
    return docs.count(BLOBS, where=[("thread_id", "eq", "t3")])


def main() -> None:
    workdir = Path(sys.argv[1])
    sqlite = remember(workdir)
    sqlite_root = DocumentService._for_engine(sqlite.adapter)
    file = workdir / "memory.db"
    adapter = DocumentAdapter(
        path=file,
        fallback={"adapter": "sqlite", "config": {"path": str(workdir / "fallback.sqlite")}},
    )
    threadloom_root = DocumentService._for_engine(adapter)
    threadloom = copy(sqlite, threadloom_root)
    names, results = [], {}
    subjects = (("sqlite", sqlite, sqlite_root), ("threadloom", threadloom, threadloom_root))
    for label, docs, root in subjects:
        calls = battery(docs, root)
        names = [name for name, _ in calls] + ["after close"]
        results[label] = [outcome(call) for _, call in calls]
        some = next(docs.iterate(CHECKPOINTS))
        docs.adapter.close()
        docs.adapter.close()  # idempotent
        results[label].append(outcome(functools.partial(docs.get, CHECKPOINTS, some.id)))
    print(json.dumps({"calls": names, **results, "file": str(file)}))


if __name__ == "__main__":
    main()
