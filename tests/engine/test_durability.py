"""Durability and integrity: processes, crashes, concurrency, payloads, damage, bad input.

Child processes run `tests/engine/_children.py` with this interpreter. Oracles are
LangGraph's InMemorySaver (values), the deterministic child workloads (crash and
concurrency) and the protocol Planner (logical documents).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime as dt
import enum
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import apsw
import pydantic
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import BaseCheckpointSaver, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.types import Command

from tests.engine import _children
from tests.engine.test_graphs import agent_graph, send_graph, subgraph_graph
from tests.helpers import inputs, jsonl
from threadloom import AsyncSaver, Saver
from threadloom.engine.format import idkeys, refkeys
from threadloom.errors import (
    CheckpointConflictError,
    CorruptionError,
    MissingDocumentsError,
    ThreadloomError,
)
from threadloom.langgraph.tuples import serialization
from threadloom.protocol import KnownReferences, Planner

ROOT = Path(__file__).resolve().parents[2]
TABLES = ("meta", "scopes", "threads", "checkpoints", "writes", "vals")
LONG = _children.LONG


def child(*args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """Start `python -m tests.engine._children ARGS` from the repository root."""
    return subprocess.Popen(
        [sys.executable, "-m", "tests.engine._children", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 60) -> str:
    """Wait for a child; fail with its stderr unless it exited 0; return its stdout."""
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"child exited {proc.returncode}:\n{err}"
    return out


def counts(path: Path) -> dict[str, int]:
    """Row count of every table, read through a separate connection."""
    conn = apsw.Connection(str(path))
    try:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0] for t in TABLES}
    finally:
        conn.close()


def config(thread_id: str = "t", checkpoint_id: str | None = None, ns: str = "") -> dict[str, Any]:
    """A config for a thread (and optionally a checkpoint)."""
    conf: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if checkpoint_id:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def checkpoint(values: dict[str, Any], number: int = 1) -> dict[str, Any]:
    """A checkpoint holding `values`, every channel at version `number`."""
    made = empty_checkpoint()
    made["id"] = f"1f0d0000-0000-6000-8000-{number:012d}"
    made["channel_values"] = dict(values)
    made["channel_versions"] = {k: number for k in values}
    return made


def put(
    saver: BaseCheckpointSaver[Any],
    values: dict[str, Any],
    *,
    thread_id: str = "t",
    number: int = 1,
    parent: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Put a checkpoint with `values`; return the stored config."""
    made = checkpoint(values, number)
    return saver.put(
        config(thread_id, parent),
        made,
        metadata if metadata is not None else {"source": "loop", "step": number, "parents": {}},
        made["channel_versions"],
    )


# -- processes ----------------------------------------------------------------------------


def test_resume_in_other_processes(db_path: Path) -> None:
    """A graph interrupted in one process resumes in a second and ends in a third as in memory."""
    first = json.loads(finish(child("interrupt", str(db_path))))
    second = json.loads(finish(child("resume", str(db_path), json.dumps("ok"))))
    graph = _children.review_graph()
    with Saver.from_conn_string(str(db_path)) as saver:
        ours = graph.compile(checkpointer=saver)
        final = ours.invoke(Command(resume={"score": 5}), {"configurable": {"thread_id": "t"}})
        rows = [(s.values, s.next) for s in ours.get_state_history(config())]
    memory = graph.compile(checkpointer=InMemorySaver())
    want_first = memory.invoke({"draft": "v1", "verdicts": [], "published": False}, config())
    want_second = memory.invoke(Command(resume="ok"), config())
    want_final = memory.invoke(Command(resume={"score": 5}), config())
    assert first == [i.value for i in want_first["__interrupt__"]]
    assert second == [i.value for i in want_second["__interrupt__"]]
    assert final == want_final
    assert final["verdicts"] == ["ok", {"score": 5}]
    assert rows == [(s.values, s.next) for s in memory.get_state_history(config())]


def test_restart_reuses_the_parents_values(db_path: Path) -> None:
    """After reopening, an unchanged large channel is not stored again (taken from the parent)."""
    big = os.urandom(200_000)
    with Saver.from_conn_string(str(db_path)) as saver:
        stored = put(saver, {"big": big, "n": 1})
    before = counts(db_path)
    with Saver.from_conn_string(str(db_path)) as saver:
        made = checkpoint({"big": big, "n": 2}, 2)
        made["channel_versions"] = {"big": 1, "n": 2}
        saver.put(stored, made, {"source": "loop", "step": 2, "parents": {}}, {"n": 2})
        assert saver.get_tuple(config()).checkpoint["channel_values"] == {"big": big, "n": 2}
    after = counts(db_path)
    assert after["checkpoints"] == before["checkpoints"] + 1
    assert after["vals"] == before["vals"]


@pytest.mark.parametrize("kill_after", ["40 commits", "0.9 seconds"])
def test_sigkill_mid_puts_leaves_every_listed_checkpoint_loadable(
    db_path: Path, kill_after: str
) -> None:
    """SIGKILL during a stream of puts leaves a file whose every listed checkpoint loads intact."""
    size = 300_000
    proc = child("write", str(db_path), "k", "100000", str(size))
    assert proc.stdout is not None
    committed = -1
    if kill_after == "40 commits":
        for line in proc.stdout:
            committed = int(line)
            if committed >= 40:
                break
    else:
        time.sleep(0.9)  # lands anywhere: in a put, a put_writes or between them
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    with Saver.from_conn_string(str(db_path)) as saver:
        listed = list(saver.list(config("k")))
        steps = sorted(t.checkpoint["channel_values"]["step"] for t in listed)
        assert steps == list(range(len(steps)))
        assert len(steps) >= committed + 1  # nothing reported as committed was lost
        for tup in listed:
            step = tup.checkpoint["channel_values"]["step"]
            want = _children.checkpoint_at("k", step, size)["channel_values"]
            assert tup.checkpoint["channel_values"] == want
            assert tup.pending_writes in ([], [(f"task-{step}", "step", step + 1)])
            again = saver.get_tuple(tup.config)
            assert again is not None and again.checkpoint == tup.checkpoint
        saver.documents("k")  # every stored body, referenced or not, decodes
        latest = saver.get_tuple(config("k"))
        parent = latest.config["configurable"]["checkpoint_id"] if latest else None
        put(saver, {"after": "restart"}, thread_id="k", number=10**6, parent=parent)
    conn = apsw.Connection(str(db_path))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def _verify_written(saver: Saver, thread_id: str, steps: int, size: int) -> None:
    listed = list(saver.list(config(thread_id)))
    assert len(listed) == steps
    for tup in listed:
        step = tup.checkpoint["channel_values"]["step"]
        assert (
            tup.checkpoint["channel_values"]
            == _children.checkpoint_at(thread_id, step, size)["channel_values"]
        )
        assert tup.pending_writes == [(f"task-{step}", "step", step + 1)]


def test_two_processes_write_one_file(db_path: Path, tmp_path: Path) -> None:
    """Two processes writing other threads into one file at once lose nothing, hit no lock error."""
    steps, size = 150, 20_000
    go = tmp_path / "go"
    Saver(db_path).close()  # create the file first, so neither child races the migration
    procs = [child("write", str(db_path), f"p{i}", str(steps), str(size), str(go)) for i in (0, 1)]
    go.touch()
    outputs = [finish(p, timeout=120) for p in procs]
    for out in outputs:
        assert out.split() == [str(i) for i in range(steps)]
    with Saver.from_conn_string(str(db_path)) as saver:
        for i in (0, 1):
            _verify_written(saver, f"p{i}", steps, size)


def test_eight_threads_share_one_saver(saver: Saver) -> None:
    """Eight OS threads writing (and listing) through one Saver lose nothing and raise nothing."""
    steps, size = 40, 5_000
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def work(index: int) -> None:
        try:
            start.wait()
            thread_id = f"w{index}"
            stored: dict[str, Any] = config(thread_id)
            for step in range(steps):
                made = _children.checkpoint_at(thread_id, step, size)
                made["id"] = f"1f0c0000-0000-6000-8000-{step:012d}"
                stored = saver.put(
                    stored,
                    made,
                    {"source": "loop", "step": step, "parents": {}},
                    made["channel_versions"],
                )
                saver.put_writes(stored, [("step", step + 1)], f"task-{step}")
                if step % 10 == 0:
                    assert len(list(saver.list(config(thread_id)))) == step + 1
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=120)
    assert errors == []
    for index in range(8):
        _verify_written(saver, f"w{index}", steps, size)


def test_forked_child_writes_through_an_inherited_saver(saver: Saver) -> None:
    """A child forked after the Saver was used writes through it on its own connection."""
    put(saver, {"n": 0})
    pid = os.fork()
    if pid == 0:  # child: must not reuse the parent's connection
        code = 1
        try:
            put(saver, {"n": 1}, thread_id="forked", number=2)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    got = saver.get_tuple(config("forked"))
    assert got is not None and got.checkpoint["channel_values"] == {"n": 1}
    put(saver, {"n": 2}, number=3, parent=checkpoint({}, 1)["id"])
    assert saver.get_tuple(config()).checkpoint["channel_values"] == {"n": 2}  # type: ignore[union-attr]


def test_many_coroutines_share_one_async_saver(async_saver: AsyncSaver) -> None:
    """Sixteen coroutines chaining aput/aput_writes through one AsyncSaver lose nothing."""
    steps = 15

    async def chain(index: int) -> None:
        thread_id = f"c{index}"
        stored: dict[str, Any] = config(thread_id)
        for step in range(steps):
            made = _children.checkpoint_at(thread_id, step, 2_000)
            made["id"] = f"1f0c0000-0000-6000-8000-{step:012d}"
            stored = await async_saver.aput(
                stored,
                made,
                {"source": "loop", "step": step, "parents": {}},
                made["channel_versions"],
            )
            await async_saver.aput_writes(stored, [("step", step + 1)], f"task-{step}")

    async def run() -> list[Any]:
        await asyncio.gather(*(chain(i) for i in range(16)))
        return [t async for t in async_saver.alist(None)]

    listed = asyncio.run(run())
    assert len(listed) == 16 * steps
    for index in range(16):
        _verify_written(async_saver, f"c{index}", steps, 2_000)  # type: ignore[arg-type]


def _stored_bytes(path: Path) -> int:
    conn = apsw.Connection(str(path))
    try:
        return sum(
            conn.execute(f"SELECT coalesce(sum(length(body)), 0) FROM {t}").fetchall()[0][0]
            for t in ("checkpoints", "writes", "vals")
        )
    finally:
        conn.close()


def test_bytes_per_step_do_not_grow_with_history(db_path: Path) -> None:
    """Appending one message per step stores about as many bytes at step 300 as at step 20."""
    grown: list[int] = []
    with Saver.from_conn_string(str(db_path)) as saver:
        messages: list[Any] = []
        stored: dict[str, Any] = config()
        for step in range(300):
            messages.append(HumanMessage(os.urandom(600).hex(), id=f"m{step}"))
            made = checkpoint({"messages": list(messages), "fixed": LONG * 20}, step + 1)
            made["channel_versions"]["fixed"] = 1
            before = _stored_bytes(db_path) if step in (20, 299) else 0
            stored = saver.put(
                stored,
                made,
                {"source": "loop", "step": step, "parents": {}},
                {"messages": step + 1},
            )
            if step in (20, 299):
                grown.append(_stored_bytes(db_path) - before)
        assert saver.get_tuple(config()).checkpoint["channel_values"]["messages"] == messages  # type: ignore[union-attr]
    early, late = grown
    assert late < 1.5 * early, f"step 20 stored {early} bytes, step 299 stored {late}"
    assert late < 10 * 1200  # one message is 1.2 KB of text; a full copy would be 360 KB


# -- payloads -----------------------------------------------------------------------------


def test_twenty_mib_tool_result_round_trips(saver: Saver) -> None:
    """A 20 MiB ToolMessage and a 300 KiB plain channel value come back exactly."""
    result = os.urandom(10 * 1024 * 1024).hex()  # 20 MiB of text
    plain = os.urandom(150 * 1024).hex()  # 300 KiB
    messages = [
        HumanMessage("fetch it", id="h1"),
        AIMessage("", tool_calls=[{"name": "fetch", "args": {}, "id": "call-1"}], id="a1"),
        ToolMessage(result, tool_call_id="call-1", id="t1"),
    ]
    stored = put(saver, {"messages": messages, "plain": plain})
    saver.put_writes(
        stored, [("messages", ToolMessage(result, tool_call_id="call-2", id="t2"))], "task-1"
    )
    got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"]["messages"] == messages
    assert got.checkpoint["channel_values"]["messages"][2].content == result
    assert got.checkpoint["channel_values"]["plain"] == plain
    assert got.pending_writes[0][2].content == result


class Point(pydantic.BaseModel):
    x: int
    label: str
    tags: list[str] = []


@dataclasses.dataclass
class Box:
    name: str
    weight: float
    items: list[int] = dataclasses.field(default_factory=list)


class Color(enum.Enum):
    RED = "red"


VALUES: dict[str, Any] = {
    "unicode": "héllo wörld ✓ 🧵 中文 \u200b\U0010ffff",
    "nul": "a\x00b\x00\x00c",
    "bytes": bytes(range(256)) * 3,
    "empty_bytes": b"",
    "pydantic": Point(x=3, label="p\x00", tags=["a", "ü"]),
    "dataclass": Box("box", 1.5, [1, 2, 3]),
    "datetime_utc": dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=dt.timezone.utc),
    "datetime_naive": dt.datetime(1999, 12, 31, 1, 2, 3),
    "datetime_offset": dt.datetime(
        2020, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))
    ),
    "date": dt.date(2000, 1, 1),
    "timedelta": dt.timedelta(days=2, microseconds=7),
    "empty_list": [],
    "empty_dict": {},
    "nested_empties": [[], {}, [[]], ""],
    "tuple": (1, "two", None),
    "set": {1, 2, 3},
    "uuid": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "decimal": Decimal("3.14159265358979323846"),
    "enum": Color.RED,
    "big_int": 2**63 - 1,
    "negative_zero": -0.0,
    "none": None,
}


def _round_trip(saver: BaseCheckpointSaver[Any], value: Any) -> Any:
    """Store `value` inline, in a blob-sized list, as a write and in metadata; read it back."""
    values = {"small": value, "big": [value, LONG, value]}
    stored = put(saver, values, metadata={"source": "loop", "step": 1, "parents": {}, "v": value})
    saver.put_writes(stored, [("small", value), ("big", [value, LONG])], "task-1")
    got = saver.get_tuple(stored)
    assert got is not None
    return (got.checkpoint["channel_values"], got.pending_writes, got.metadata.get("v"))


@pytest.mark.parametrize("name", list(VALUES))
def test_value_round_trips_as_in_memory(saver: Saver, name: str) -> None:
    """Each value comes back from a channel, a list, a write and metadata as from InMemorySaver."""
    value = VALUES[name]
    ours = _round_trip(saver, value)
    theirs = _round_trip(InMemorySaver(), copy.deepcopy(value))
    assert ours == theirs
    assert type(ours[0]["small"]) is type(theirs[0]["small"])
    assert [type(v) for v in ours[0]["big"]] == [type(v) for v in theirs[0]["big"]]


# -- damage -------------------------------------------------------------------------------


def _flip(path: Path, table: str) -> str:
    """Flip one byte in the middle of the largest body of `table`; return the row's name."""
    name_column = {"vals": "ref_key", "checkpoints": "checkpoint_id", "writes": "task_key"}[table]
    conn = apsw.Connection(str(path))
    try:
        name, body = conn.execute(
            f"SELECT {name_column}, body FROM {table} ORDER BY length(body) DESC LIMIT 1"
        ).fetchall()[0]
        damaged = bytearray(body)
        damaged[len(damaged) // 2] ^= 0x01
        conn.execute(f"UPDATE {table} SET body = ? WHERE body = ?", (bytes(damaged), body))
        assert conn.changes() == 1
    finally:
        conn.close()
    if table == "vals":
        return refkeys.text(name)
    return idkeys.text(name) if table == "writes" else str(name)


@pytest.mark.parametrize("table", ["vals", "checkpoints", "writes"])
def test_flipped_byte_is_detected_and_named(db_path: Path, table: str) -> None:
    """One flipped bit in a stored body raises CorruptionError naming the damaged document."""
    with Saver.from_conn_string(str(db_path)) as saver:
        stored = put(saver, {"messages": [LONG, "x" * 5000], "note": LONG + "note"})
        saver.put_writes(stored, [("note", LONG * 3)], "task-1")
    name = _flip(db_path, table)
    with Saver.from_conn_string(str(db_path)) as saver:
        reads: list[Callable[[], Any]] = [
            lambda: saver.get_tuple(config()),
            lambda: list(saver.list(config())),
            lambda: saver.documents("t"),
        ]
        for read in reads:
            with pytest.raises(CorruptionError) as raised:
                read()
            assert name in str(raised.value)


def test_missing_value_document_is_named(db_path: Path) -> None:
    """A value row deleted behind the saver's back raises MissingDocumentsError naming its ref."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, {"messages": [LONG, "x" * 5000], "note": LONG + "note"})
    conn = apsw.Connection(str(db_path))
    stored = conn.execute("SELECT ref_key FROM vals ORDER BY length(body) DESC LIMIT 1").fetchall()
    conn.execute("DELETE FROM vals WHERE ref_key = ?", stored[0])
    conn.close()
    ref = refkeys.text(stored[0][0])
    with Saver.from_conn_string(str(db_path)) as saver:
        for read in (lambda: saver.get_tuple(config()), lambda: list(saver.list(config()))):
            with pytest.raises(MissingDocumentsError) as raised:
                read()
            assert ref in raised.value.refs
            assert ref[:20] in str(raised.value)


# -- bad input ----------------------------------------------------------------------------


BAD_INPUT: dict[str, Callable[[Saver, dict[str, Any]], Any]] = {
    "put_without_configurable": lambda s, c: s.put({}, checkpoint({"a": 1}, 9), {}, {}),
    "put_without_thread_id": lambda s, c: s.put(
        {"configurable": {"checkpoint_ns": ""}}, checkpoint({"a": 1}, 9), {}, {}
    ),
    "put_int_thread_id": lambda s, c: s.put(
        {"configurable": {"thread_id": 7}}, checkpoint({"a": 1}, 9), {}, {}
    ),
    "put_int_namespace": lambda s, c: s.put(
        {"configurable": {"thread_id": "t", "checkpoint_ns": 5}}, checkpoint({"a": 1}, 9), {}, {}
    ),
    "put_checkpoint_without_id": lambda s, c: s.put(
        c, {**checkpoint({"a": LONG}, 9), "id": None}, {}, {}
    ),
    "put_values_not_a_mapping": lambda s, c: s.put(
        c, {**checkpoint({}, 9), "channel_values": ["a", 1]}, {}, {}
    ),
    "put_metadata_not_a_mapping": lambda s, c: s.put(c, checkpoint({"a": LONG}, 9), ["x"], {}),
    "put_unserializable_value": lambda s, c: s.put(
        c, checkpoint({"big": LONG * 2, "lock": threading.Lock()}, 9), {}, {}
    ),
    "put_unserializable_metadata": lambda s, c: s.put(
        c, checkpoint({"big": LONG * 3}, 9), {"step": 1, "bad": object()}, {}
    ),
    "put_conflicting_checkpoint_id": lambda s, c: s.put(
        config("t"), checkpoint({"a": "different " + LONG}, 1), {}, {}
    ),
    "put_writes_without_checkpoint_id": lambda s, c: s.put_writes(
        config("t"), [("a", LONG * 2)], "task-1"
    ),
    "put_writes_unserializable": lambda s, c: s.put_writes(
        c, [("a", LONG * 2), ("b", object())], "task-1"
    ),
    "put_writes_not_pairs": lambda s, c: s.put_writes(c, [("a", LONG * 2), ("b",)], "task-1"),
    "put_writes_int_channel": lambda s, c: s.put_writes(c, [(3, "x")], "task-1"),
    "put_writes_task_id_none": lambda s, c: s.put_writes(c, [("a", 1)], None),
    "get_tuple_without_thread_id": lambda s, c: s.get_tuple({"configurable": {}}),
}


@pytest.mark.parametrize("case", list(BAD_INPUT))
def test_bad_input_raises_and_writes_nothing(saver: Saver, db_path: Path, case: str) -> None:
    """Malformed input raises a ThreadloomError that says what is wrong, and changes no row."""
    stored = put(saver, {"a": LONG, "n": 1})
    saver.put_writes(stored, [("n", 2)], "task-0")
    before = counts(db_path)
    with pytest.raises(ThreadloomError) as raised:
        BAD_INPUT[case](saver, stored)
    assert str(raised.value)
    if case == "put_conflicting_checkpoint_id":
        assert isinstance(raised.value, CheckpointConflictError)
    assert counts(db_path) == before
    assert saver.get_tuple(config()).checkpoint["channel_values"] == {"a": LONG, "n": 1}  # type: ignore[union-attr]


@pytest.mark.parametrize("method", ["prune", "delete_for_runs"])
def test_a_single_string_is_not_taken_as_a_list_of_ids(
    saver: Saver, db_path: Path, method: str
) -> None:
    """prune("ab") / delete_for_runs("ab") raise instead of acting on ids "a" and "b"."""
    for thread_id in ("a", "b", "ab"):
        stored = put(
            saver,
            {"n": 1},
            thread_id=thread_id,
            metadata={"source": "loop", "step": 1, "parents": {}, "run_id": "a"},
        )
        put(
            saver,
            {"n": 2},
            thread_id=thread_id,
            number=2,
            parent=stored["configurable"]["checkpoint_id"],
            metadata={"source": "loop", "step": 2, "parents": {}, "run_id": "b"},
        )
    before = counts(db_path)
    with pytest.raises(ThreadloomError):
        getattr(saver, method)("ab")
    assert counts(db_path) == before


# -- encryption ---------------------------------------------------------------------------


def _file_bytes(path: Path) -> bytes:
    """Every byte of the database, its WAL and its shared-memory file."""
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


def _encrypted_round(serde: Any, path: Path) -> tuple[Any, list[Any]]:
    secret_small = "SECRET-SMALL-ab12"
    secret_big = "SECRET-BIG-cd34 " * 200
    with Saver.from_conn_string(str(path), serde=serde) as saver:
        stored = put(
            saver,
            {
                "small": secret_small,
                "big": secret_big,
                "list": ["SECRET-ITEM-ef56 " * 100] * 3,
                "huge": "SECRET-PART-gh78 " * 40_000,
            },
            metadata={"source": "loop", "step": 1, "parents": {}, "who": "SECRET-META-ij90"},
        )
        saver.put_writes(
            stored,
            [("small", "SECRET-WRITE-kl12"), ("big", "SECRET-WBIG-mn34 " * 20_000)],
            "task-1",
        )
        got = saver.get_tuple(stored)
        documents = saver.documents("t")
    return got, documents


MARKERS = [
    b"SECRET-SMALL",
    b"SECRET-BIG",
    b"SECRET-ITEM",
    b"SECRET-PART",
    b"SECRET-META",
    b"SECRET-WRITE",
    b"SECRET-WBIG",
]


def test_encrypted_serializer_leaves_no_plaintext(tmp_path: Path) -> None:
    """With EncryptedSerializer no value, write or metadata appears in the file or the documents."""
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    got, documents = _encrypted_round(serde, tmp_path / "enc.db")
    assert got is not None
    assert got.checkpoint["channel_values"]["small"] == "SECRET-SMALL-ab12"
    assert got.metadata["who"] == "SECRET-META-ij90"
    assert got.pending_writes[0][2] == "SECRET-WRITE-kl12"
    raw = _file_bytes(tmp_path / "enc.db")
    logical = repr(documents).encode()
    for marker in MARKERS:
        assert marker not in raw, marker
        assert marker not in logical, marker
    # the same round without encryption exposes every marker in the documents (the check can fail)
    _, plain_documents = _encrypted_round(None, tmp_path / "plain.db")
    plain_logical = repr(plain_documents).encode()
    assert all(marker in plain_logical for marker in MARKERS)


def test_secrets_are_never_written(db_path: Path) -> None:
    """A SecretStr in a channel is stored redacted: its value is neither in the file nor read."""
    with Saver.from_conn_string(str(db_path)) as saver:
        stored = put(saver, {"key": pydantic.SecretStr("sk-TOPSECRET-42"), "pad": LONG})
        got = saver.get_tuple(stored)
    assert got is not None
    assert got.checkpoint["channel_values"]["key"].get_secret_value() != "sk-TOPSECRET-42"
    assert b"TOPSECRET" not in _file_bytes(db_path)


# -- logical documents --------------------------------------------------------------------


def test_documents_of_the_vectors_equal_the_released_plan(saver: Saver) -> None:
    """Putting the vectors' inputs yields documents() equal, in order, to puts.jsonl."""
    for step in inputs():
        if "checkpoint" in step:
            returned = saver.put(step["config"], step["checkpoint"], step["metadata"], {})
            assert returned == step["returned_config"]
        else:
            saver.put_writes(step["config"], step["writes"], step["task_id"], step["task_path"])
    rows = jsonl("puts.jsonl")
    got = saver.documents("thread-1")
    assert [(c, k) for c, k, _ in got] == [(r["collection"], r["key"]) for r in rows]
    for (_, key, data), row in zip(got, rows, strict=True):
        assert data == row["data"], key


class Recorder(InMemorySaver):
    """InMemorySaver that also records every put and put_writes call, to replay them elsewhere."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        self.calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        self.calls.append(("put_writes", copy.deepcopy((config, list(writes), task_id, task_path))))
        super().put_writes(config, writes, task_id, task_path)


def _recorded_calls() -> list[tuple[str, tuple[Any, ...]]]:
    """The put/put_writes calls of an agent, a Send fan-out and a subgraph run on one thread."""
    recorder = Recorder()
    run = {"configurable": {"thread_id": "t"}}
    agent = agent_graph().compile(checkpointer=recorder)
    agent.invoke({"messages": [HumanMessage("6 x 2?", id="h1")]}, run)
    agent.invoke({"messages": [HumanMessage(LONG * 200, id="h2")]}, run)  # > one part
    sends = send_graph().compile(checkpointer=recorder)
    sends.invoke(
        {"topics": ["a", "b"], "results": [], "summary": ""}, {"configurable": {"thread_id": "s"}}
    )
    sub = subgraph_graph().compile(checkpointer=recorder)
    sub.invoke(
        {"messages": ["hi"], "notes": [], "done": False}, {"configurable": {"thread_id": "u"}}
    )
    return recorder.calls


def test_documents_equal_the_planner_for_real_graph_puts(saver: Saver) -> None:
    """documents() of each thread equals, in order, what the Planner creates for the same puts."""
    planner = Planner(saver.agent_id, serialization())
    memory = KnownReferences()
    expected: dict[str, dict[tuple[str, str], dict[str, Any]]] = {}
    for kind, args in _recorded_calls():
        conf = args[0]["configurable"]
        docs = expected.setdefault(conf["thread_id"], {})
        if kind == "put":
            saver.put(*copy.deepcopy(args))
            cfg, made, metadata, _ = args
            parent = (
                (conf.get("checkpoint_ns", ""), conf["checkpoint_id"])
                if conf.get("checkpoint_id")
                else None
            )
            known = memory.recall(
                conf["thread_id"], parent, (metadata.get("parents") or {}).items()
            )
            plan = planner.plan_checkpoint(cfg, made, metadata, known)
            new = plan.config["configurable"]
            memory.remember(
                (new["thread_id"], new["checkpoint_ns"], new["checkpoint_id"]),
                set(known.refs) | plan.refs,
                plan.entries,
            )
            puts = plan.puts
        else:
            saver.put_writes(*copy.deepcopy(args))
            puts = planner.plan_writes(*args).puts
        for p in puts:
            if (p.collection, p.key) in docs:
                assert p.if_version == 0, f"the run replaced {p.key}; pick one that does not"
                continue
            docs[(p.collection, p.key)] = p.data
    assert set(expected) == {"t", "s", "u"}
    for thread_id, docs in expected.items():
        got = saver.documents(thread_id)
        assert [(c, k) for c, k, _ in got] == list(docs), thread_id
        for collection, key, data in got:
            assert data == docs[(collection, key)], key
    collections = {c for docs in expected.values() for c, _ in docs}
    assert {
        "langgraph_parts_v2",
        "langgraph_items_v2",
        "langgraph_blobs_v2",
        "langgraph_writes_v2",
        "langgraph_checkpoints_v2",
    } <= collections


def test_copied_thread_documents_equal_a_replay_on_the_target(tmp_path: Path) -> None:
    """copy_thread(src, dst) yields the documents that putting src's checkpoints to dst would."""
    calls = [c for c in _recorded_calls() if c[1][0]["configurable"]["thread_id"] == "t"]

    def replay(saver: Saver, thread_id: str) -> None:
        for kind, args in copy.deepcopy(calls):
            args[0]["configurable"]["thread_id"] = thread_id
            getattr(saver, kind)(*args)

    with Saver.from_conn_string(str(tmp_path / "copy.db")) as saver:
        replay(saver, "src")
        saver.copy_thread("src", "dst")
        copied = saver.documents("dst")
        source = saver.documents("src")
    with Saver.from_conn_string(str(tmp_path / "replay.db")) as saver:
        replay(saver, "dst")
        replayed = saver.documents("dst")
    assert copied == replayed
    assert len(source) == len(copied) > 20
