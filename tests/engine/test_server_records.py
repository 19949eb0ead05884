"""The Agent Server's registry records (`server_records`): batches, the started mark,
sizes, and the trigger that deletes a thread's records with its rows; and the adapter's
view of a record (values and per-attempt callables left out, bodies compressed)."""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.engine.conversations import ServerRecord, ServerRecords


def _records(saver: Saver) -> ServerRecords:
    return ServerRecords(saver.checkpoints.file, saver.checkpoints.scope)


def _put(saver: Saver, thread_id: str) -> None:
    saver.put(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}},
        empty_checkpoint(),
        {"source": "input", "step": -1, "parents": {}},
        {},
    )


def test_a_batch_replaces_and_deletes_records_and_marks_the_start(saver: Saver) -> None:
    """`apply` upserts and deletes in one transaction; `started` holds from the first
    batch that asks for it, even once every record is gone."""
    records = _records(saver)
    assert not records.started() and records.load() == []
    first = ServerRecord("thread", "t1", "t1", "msgpack", b"one")
    records.apply([first, ServerRecord("assistant", "a1", None, "msgpack", b"a")], [], start=True)
    records.apply([first._replace(body=b"two")], [("assistant", "a1")])
    assert records.started()
    assert records.load() == [first._replace(body=b"two")]
    records.apply([], [("thread", "t1")])
    assert records.load() == [] and records.started()


def test_deleting_a_threads_rows_deletes_its_records(saver: Saver) -> None:
    """The trigger: `delete_thread` (as `threadloom delete`, erase and the API do) takes
    the records naming the thread, and leaves other threads' and unnamed ones."""
    records = _records(saver)
    for thread in ("gone", "kept"):
        _put(saver, thread)
    records.apply(
        [
            ServerRecord("thread", "gone", "gone", "msgpack", b"t"),
            ServerRecord("run", "r1", "gone", "msgpack", b"run"),
            ServerRecord("thread", "kept", "kept", "msgpack", b"t"),
            ServerRecord("assistant", "a1", None, "msgpack", b"a"),
        ],
        [],
    )
    assert records.sizes() == {"gone": (2, 4), "kept": (1, 1)}
    saver.delete_thread("gone")
    assert {(r.kind, r.id) for r in records.load()} == {("thread", "kept"), ("assistant", "a1")}
    assert records.sizes(["gone", "kept"]) == {"kept": (1, 1)}


def test_the_stored_view_leaves_out_values_and_callables() -> None:
    """A thread is kept without its values, a run without the callables the server adds
    to its `configurable` per attempt; the runtime's record is not changed."""
    from threadloom.langgraph.server_registry import _stored

    thread: dict[str, Any] = {"thread_id": uuid.uuid4(), "status": "idle", "values": {"x": 1}}
    assert _stored("thread", thread) == {"thread_id": thread["thread_id"], "status": "idle"}
    configurable = {"thread_id": "t", "__pregel_node_finished": print}
    run: dict[str, Any] = {"run_id": "r", "kwargs": {"config": {"configurable": configurable}}}
    view = _stored("run", run)
    assert view["kwargs"]["config"]["configurable"] == {"thread_id": "t"}
    assert "__pregel_node_finished" in run["kwargs"]["config"]["configurable"]
    plain: dict[str, Any] = {"run_id": "r", "kwargs": {"config": {"configurable": {}}}}
    assert _stored("run", plain) is plain


def test_a_registry_restores_what_it_wrote(saver: Saver) -> None:
    """Records written from one runtime state come back into another as they were (ids,
    times, nested dicts; a large body compressed), a running run as pending."""
    from threadloom.langgraph.server_registry import Registry

    now = datetime.now(timezone.utc)
    thread_id = uuid.uuid4()
    state: dict[str, Any] = {
        "assistants": [
            {"assistant_id": uuid.uuid4(), "metadata": {"created_by": "user"}, "created_at": now}
        ],
        "assistant_versions": [],
        "threads": [{"thread_id": thread_id, "created_at": now, "metadata": {"k": "v" * 400}}],
        "runs": [{"run_id": uuid.uuid4(), "thread_id": thread_id, "status": "running"}],
        "crons": [],
    }
    Registry(saver, state).restore()  # type: ignore[arg-type]
    assert any(r.codec.endswith("+zstd") for r in _records(saver).load())
    again: dict[str, Any] = {name: [] for name in state}
    Registry(saver, again).restore()  # type: ignore[arg-type]
    assert again["assistants"] == state["assistants"]
    assert again["threads"] == [{**state["threads"][0], "values": None}]
    assert again["runs"][0]["status"] == "pending"
    assert again["runs"][0]["run_id"] == state["runs"][0]["run_id"]


def test_expire_deletes_idle_threads_and_keeps_busy_and_fresh_ones(saver: Saver) -> None:
    """`expire` (a delete TTL) deletes an idle thread's checkpoints, records, runs and
    crons; a thread with a pending run, one whose record is fresh and one whose
    checkpoints are newer than its record stay."""
    from threadloom.langgraph.server_registry import Registry

    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    ids = {name: str(uuid.uuid4()) for name in ("idle", "busy", "fresh", "written")}
    state: dict[str, Any] = {
        "assistants": [],
        "assistant_versions": [],
        "threads": [
            {"thread_id": uuid.UUID(t), "updated_at": datetime.now(timezone.utc) + timedelta(1)}
            if name == "fresh"
            else {"thread_id": uuid.UUID(t), "updated_at": old}
            for name, t in ids.items()
        ],
        "runs": [
            {"run_id": uuid.uuid4(), "thread_id": uuid.UUID(ids["busy"]), "status": "pending"},
            {"run_id": uuid.uuid4(), "thread_id": uuid.UUID(ids["idle"]), "status": "success"},
        ],
        "crons": [{"cron_id": uuid.uuid4(), "thread_id": uuid.UUID(ids["idle"])}],
    }
    _put(saver, ids["idle"])
    time.sleep(0.6)
    _put(saver, ids["written"])
    registry = Registry(saver, state)  # type: ignore[arg-type]
    registry.restore()
    assert registry.expire(0.5) == [ids["idle"]]
    left = {str(t["thread_id"]) for t in state["threads"]}
    assert left == {ids["busy"], ids["fresh"], ids["written"]}
    assert [str(r["thread_id"]) for r in state["runs"]] == [ids["busy"]] and not state["crons"]
    assert saver.thread(ids["idle"]) is None and saver.thread(ids["written"]) is not None
    assert {r.thread_id for r in _records(saver).load()} == left
    registry.close()
