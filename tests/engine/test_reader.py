"""The read path: list pages read only what they return; metadata filters decided in SQL."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

from threadloom import Saver
from threadloom.errors import CorruptionError


def checkpoint(step: int) -> dict[str, Any]:
    made = empty_checkpoint()
    made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
    made["channel_values"] = {"step": step}
    made["channel_versions"] = {"step": step}
    return made


def chain(saver: Any, thread_id: str, metadatas: list[dict[str, Any]], start: int = 1) -> None:
    parent: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for offset, metadata in enumerate(metadatas):
        step = start + offset
        parent = saver.put(parent, checkpoint(step), metadata, {"step": step})


def counting_loads(saver: Saver) -> list[int]:
    """Record how many checkpoint rows each `Reader.load` call restores."""
    seen: list[int] = []
    reader = saver.checkpoints.reader
    original = reader.load

    def load(conn: apsw.Connection, rows: Any, **options: Any) -> Any:
        seen.append(len(rows))
        return original(conn, rows, **options)

    reader.load = load  # type: ignore[method-assign]
    return seen


def test_list_with_a_limit_restores_only_what_it_returns(saver: Saver) -> None:
    """list(limit=1) restores one checkpoint, list(limit=10) ten, of a 40-checkpoint thread."""
    chain(saver, "t", [{"source": "loop", "step": i} for i in range(40)])
    seen = counting_loads(saver)
    config = {"configurable": {"thread_id": "t"}}
    assert len(list(saver.list(config, limit=1))) == 1
    assert seen == [1]
    seen.clear()
    assert len(list(saver.list(config, limit=10))) == 10
    assert sum(seen) == 10


def test_list_yields_the_first_checkpoint_after_restoring_only_it(saver: Saver) -> None:
    """Without a limit the first page holds one checkpoint; pages then grow, up to 64."""
    chain(saver, "t", [{"source": "loop", "step": i} for i in range(200)])
    seen = counting_loads(saver)
    listed = saver.list({"configurable": {"thread_id": "t"}})
    first = next(listed)
    assert first.checkpoint["channel_values"] == {"step": 200} and seen == [1]
    rest = list(listed)
    assert len(rest) == 199 and max(seen) == 64 and sum(seen) == 200
    ids = [first.config["configurable"]["checkpoint_id"]]
    ids += [c.config["configurable"]["checkpoint_id"] for c in rest]
    assert ids == sorted(ids, reverse=True)


def test_list_pages_across_threads_and_namespaces_keep_the_order(saver: Saver) -> None:
    """Keyset pages over equal checkpoint ids in several threads and namespaces list each
    checkpoint once, in the order of (id desc, thread, namespace)."""
    for thread in ("a", "b", "c"):
        for ns in ("", "sub:1"):
            parent: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
            for step in range(1, 6):
                parent = saver.put(parent, checkpoint(step), {"step": step}, {"step": step})
    listed = [
        (
            c.config["configurable"]["checkpoint_id"],
            c.config["configurable"]["thread_id"],
            c.config["configurable"]["checkpoint_ns"],
        )
        for c in saver.list(None)
    ]
    assert len(listed) == len(set(listed)) == 30
    assert listed == sorted(listed, key=lambda k: (tuple(-ord(ch) for ch in k[0]), k[1], k[2]))


def test_metadata_keys_are_stored_for_plain_metadata_only(db_path: Path) -> None:
    """Plain metadata gets its keys in checkpoint_keys; encrypted metadata gets none (no
    plain text of it is written), and filters on it still work by decoding."""
    with Saver.from_conn_string(str(db_path)) as plain:
        chain(plain, "t", [{"source": "loop", "step": 1, "user": "ada"}])
    encrypted = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    with Saver.from_conn_string(str(db_path), serde=encrypted, agent_id="secret") as hidden:
        chain(hidden, "s", [{"source": "loop", "step": 1, "user": "eve"}])
        assert len(list(hidden.list(None, filter={"user": "eve"}))) == 1
        assert list(hidden.list(None, filter={"user": "ada"})) == []
    conn = apsw.Connection(str(db_path))
    rows = conn.execute("SELECT key, value FROM checkpoint_keys ORDER BY key").fetchall()
    assert ("user", "ada") in rows and not any(v == "eve" for _, v in rows)
    assert b"eve" not in db_path.read_bytes()


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.integers(2**63 - 2, 2**64 - 1),  # msgpack holds up to 2**64 - 1
    st.sampled_from([0.0, 1.0, 2.5, float("nan"), float("inf")]),
    st.sampled_from(["", "a", "b", "1", "ada"]),
    st.sampled_from([b"a", b""]),
)
values = st.one_of(
    scalars,
    st.lists(scalars, max_size=2),
    st.dictionaries(st.sampled_from(["x"]), scalars, max_size=1),
)
metadata = st.dictionaries(st.sampled_from(["source", "step", "user", "n"]), values, max_size=4)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(metadatas=st.lists(metadata, min_size=1, max_size=6), wanted=metadata)
def test_filters_agree_with_langgraphs_in_memory_saver(
    tmp_path_factory: pytest.TempPathFactory,
    metadatas: list[dict[str, Any]],
    wanted: dict[str, Any],
) -> None:
    """list(filter=...) returns the checkpoints InMemorySaver returns, whatever the metadata
    values (ints past 64 bits, NaN, bools against ints, None against absent keys, lists)."""
    path = tmp_path_factory.mktemp("filters") / "f.db"
    oracle = InMemorySaver()
    with Saver.from_conn_string(str(path)) as saver:
        chain(saver, "t", metadatas)
        chain(oracle, "t", metadatas)
        config = {"configurable": {"thread_id": "t"}}
        ours = [c.metadata for c in saver.list(config, filter=wanted)]
        theirs = [c.metadata for c in oracle.list(config, filter=wanted)]
        assert [repr(m) for m in ours] == [repr(m) for m in theirs]


def test_every_read_hands_out_fresh_objects(saver: Saver) -> None:
    """Two reads of a checkpoint (the second from the reader's cache) never share an
    object: a node mutating what one read returned leaves the next read untouched."""
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    messages: list[Any] = []
    for step in range(1, 6):
        messages = [*messages, {"role": "user", "text": f"message {step} " + "x" * 300}]
        made = empty_checkpoint()
        made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
        made["channel_values"] = {"messages": messages, "step": step}
        made["channel_versions"] = {"messages": step, "step": step}
        config = saver.put(config, made, {"step": step}, {"messages": step, "step": step})
    latest = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    reads = [saver.get_tuple(latest), saver.get_tuple(latest), *saver.list(latest, limit=1)]
    listed = [*saver.list(latest), *saver.list(latest)]
    for first, second in [(reads[0], reads[1]), (reads[1], reads[2]), (listed[0], listed[5])]:
        assert first is not None and second is not None
        one, two = first.checkpoint["channel_values"], second.checkpoint["channel_values"]
        assert one == two and one["messages"] is not two["messages"]
        assert all(a is not b for a, b in zip(one["messages"], two["messages"], strict=True))
        assert first.checkpoint is not second.checkpoint and first.metadata is not second.metadata
        one["messages"][0]["text"] = "changed"
        one["messages"].append({"role": "node", "text": "added"})
        assert two["messages"] == messages
    again = saver.get_tuple(latest)
    assert again is not None and again.checkpoint["channel_values"]["messages"] == messages


def test_pending_writes_read_again_are_not_decoded_again(saver: Saver) -> None:
    """A checkpoint read a second time decodes nothing: its document and its pending
    writes (rows unchanged, same stored digests) come from the scope's caches."""
    chain(saver, "t", [{"step": 1}])
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = saver.get_tuple(config)
    assert stored is not None
    saver.put_writes(stored.config, [("step", 7), ("note", "x" * 500)], "task-1")
    content = saver.checkpoints.scope.content
    decoded: list[int] = []
    original = content.unpack_many

    def unpack_many(conn: apsw.Connection, items: Any) -> Any:
        decoded.append(len(items))
        return original(conn, items)

    content.unpack_many = unpack_many  # type: ignore[method-assign]
    first, second = saver.get_tuple(config), saver.get_tuple(config)
    assert first is not None and second is not None
    assert (
        first.pending_writes
        == second.pending_writes
        == [
            ("task-1", "step", 7),
            ("task-1", "note", "x" * 500),
        ]
    )
    assert decoded == [2]  # the writes once; the document was cached by the put's read


def test_a_cached_pending_write_whose_row_changed_is_checked_again(
    saver: Saver, db_path: Path
) -> None:
    """A write row changed after it was read and cached misses the cache, so its seal is
    checked again and the damage is reported, not hidden behind the cached body."""
    chain(saver, "t", [{"step": 1}])
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    stored = saver.get_tuple(config)
    assert stored is not None
    saver.put_writes(stored.config, [("step", 7)], "task-1")
    assert saver.get_tuple(config) is not None
    conn = apsw.Connection(str(db_path))
    conn.execute("UPDATE writes SET task_path = 'elsewhere'")
    conn.close()
    with pytest.raises(CorruptionError, match="pending write task-1/0"):
        saver.get_tuple(config)


def test_a_listing_leaves_the_writers_memory_alone_and_a_get_fills_it(saver: Saver) -> None:
    """Listing a thread walks no checkpoint's values for the writer's memory (its cost
    grew with every value of every listed checkpoint); a get_tuple still remembers."""
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    messages: list[str] = []
    for step in range(1, 6):
        messages = [*messages, f"message {step} " + "y" * 400]
        made = empty_checkpoint()
        made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
        made["channel_values"] = {"messages": messages}
        made["channel_versions"] = {"messages": step}
        config = saver.put(config, made, {"step": step}, {"messages": step})
    memory = saver.checkpoints.scope.memory
    memory.clear()
    latest: Any = {"configurable": {"thread_id": "t"}}
    assert len(list(saver.list(latest))) == 5
    assert memory.refs == 0
    assert saver.get_tuple(latest) is not None
    assert memory.refs > 0
    # a put after the listing alone (its parent not remembered) still stores a whole thread
    memory.clear()
    assert len(list(saver.list(latest))) == 5
    made = empty_checkpoint()
    made["id"] = "1f0d0000-0000-6000-8000-000000000006"
    made["channel_values"] = {"messages": [*messages, "six"]}
    made["channel_versions"] = {"messages": 6}
    saver.put(config, made, {"step": 6}, {"messages": 6})
    memory.clear()
    saver.checkpoints.scope.closures.clear()
    saver.checkpoints.scope.cache.clear()
    found = saver.get_tuple(latest)
    assert found is not None and found.checkpoint["channel_values"]["messages"] == [
        *messages,
        "six",
    ]


def test_list_chunks_read_again_skip_the_serializer_and_stay_fresh(saver: Saver) -> None:
    """A conversation's messages read a third time come from the decoded chunks (no
    serializer call for them), equal to what was put, of the same classes, and fresh: a
    node mutating one read's messages leaves every later read, and the listing, intact."""
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    config: Any = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
    messages: list[Any] = []
    for step in range(1, 9):
        messages = [
            *messages,
            HumanMessage(f"question {step} " + "q" * 200, id=f"h{step}"),
            AIMessage("", id=f"a{step}", tool_calls=[{"name": "f", "args": {}, "id": f"c{step}"}]),
            ToolMessage(f"result {step} " + "r" * 300, tool_call_id=f"c{step}", id=f"t{step}"),
        ]
        made = empty_checkpoint()
        made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
        made["channel_values"] = {"messages": messages}
        made["channel_versions"] = {"messages": step}
        config = saver.put(config, made, {"step": step}, {"messages": step})
    latest = {"configurable": {"thread_id": "chat", "checkpoint_ns": ""}}
    decoded = saver.checkpoints.scope.planner.decoded
    reads = [saver.get_tuple(latest) for _ in range(4)]
    assert decoded.hits > 0
    for read in reads:
        assert read is not None
        got = read.checkpoint["channel_values"]["messages"]
        assert got == messages and [type(m) for m in got] == [type(m) for m in messages]
    first = reads[2]
    assert first is not None
    first.checkpoint["channel_values"]["messages"][1].tool_calls[0]["args"]["x"] = 1
    first.checkpoint["channel_values"]["messages"].clear()
    listed = [*saver.list(latest), *saver.list(latest)]
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in listed[:8]] == [
        3 * step for step in range(8, 0, -1)
    ]
    assert all(
        t.checkpoint["channel_values"]["messages"] == messages[: 3 * (8 - i)]
        for i, t in enumerate(listed[8:])
    )
    last = saver.get_tuple(latest)
    assert last is not None and last.checkpoint["channel_values"]["messages"] == messages


class CollectorWatch:
    """LangGraph's serializer, noting whether the cyclic collector ran while it decoded."""

    def __init__(self) -> None:
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

        self.serde = JsonPlusSerializer()
        self.states: list[bool] = []

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.serde.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self.states.append(gc.isenabled())
        return self.serde.loads_typed(data)


def test_a_read_of_long_lists_decodes_with_the_collector_paused(db_path: Path) -> None:
    """Decoding a page whose lists hold PAUSE_FROM elements or more runs with the cyclic
    collector off and leaves it on; a short list leaves it alone throughout."""
    from threadloom.core.collector import PAUSE_FROM

    watch = CollectorWatch()
    with Saver.from_conn_string(str(db_path), serde=watch) as saver:
        for thread, length in (("short", 3), ("long", PAUSE_FROM + 6)):
            made = empty_checkpoint()
            made["id"] = "1f0d0000-0000-6000-8000-000000000001"
            made["channel_values"] = {"items": [{"n": n, "text": "x" * 200} for n in range(length)]}
            made["channel_versions"] = {"items": 1}
            config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            saver.put(config, made, {}, {"items": 1})
        assert gc.isenabled()
        for thread, paused in (("short", False), ("long", True)):
            watch.states.clear()
            got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
            assert got is not None and got.checkpoint["channel_values"]["items"][-1]["n"] > 1
            assert watch.states and any(watch.states) is not paused
            assert gc.isenabled()


def test_a_whole_value_read_again_skips_the_serializer_and_stays_fresh(saver: Saver) -> None:
    """A channel holding one big value (a dict stored in a blob of its own) is decoded
    by the serializer on its first two reads only, and every read gets its own copy."""
    value = {"documents": {f"doc-{n}": "text " * 40 for n in range(20)}, "count": 20}
    config: Any = {"configurable": {"thread_id": "big", "checkpoint_ns": ""}}
    made = empty_checkpoint()
    made["id"] = "1f0d0000-0000-6000-8000-000000000001"
    made["channel_values"] = {"context": value}
    made["channel_versions"] = {"context": 1}
    saver.put(config, made, {}, {"context": 1})
    decoded = saver.checkpoints.scope.planner.decoded
    reads = []
    for _ in range(4):
        got = saver.get_tuple(config)
        assert got is not None
        reads.append(got.checkpoint["channel_values"]["context"])
    assert (decoded.misses, decoded.hits) == (2, 2)
    assert all(read == value for read in reads)
    reads[3]["documents"].clear()
    again = saver.get_tuple(config)
    assert again is not None and again.checkpoint["channel_values"]["context"] == value


def _serializer(kind: str) -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    if kind == "custom":
        return CollectorWatch()
    if kind == "custom hook":
        plain = JsonPlusSerializer()
        return JsonPlusSerializer(__unpack_ext_hook__=plain._unpack_ext_hook)
    return EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")


@pytest.mark.parametrize("kind", ["custom", "custom hook", "encrypting"])
def test_serializers_not_known_pure_decode_on_every_read(db_path: Path, kind: str) -> None:
    """Only LangGraph's JsonPlusSerializer as it comes has what it decodes kept: a
    serializer of the application's own (or JsonPlus with a hook of its own) may do more
    than decode, and an encrypting one's plaintext is not kept past a read. Their reads
    decode every time and stay right."""
    serde = _serializer(kind)
    value = {"documents": {f"doc-{n}": "text " * 40 for n in range(20)}}
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    made = empty_checkpoint()
    made["id"] = "1f0d0000-0000-6000-8000-000000000001"
    made["channel_values"] = {"context": value, "messages": [{"text": "m" * 300}] * 40}
    made["channel_versions"] = {"context": 1, "messages": 1}
    with Saver.from_conn_string(str(db_path), serde=serde) as saver:
        saver.put(config, made, {}, {"context": 1, "messages": 1})
        for _ in range(4):
            got = saver.get_tuple(config)
            assert got is not None and got.checkpoint["channel_values"]["context"] == value
        decoded = saver.checkpoints.scope.planner.decoded
        assert decoded.hits == 0 and decoded.weight == 0


def test_a_thread_back_after_others_ran_reads_its_decoded_chunks(saver: Saver) -> None:
    """More threads than a scope keeps active (ACTIVE_THREADS) interleave: a thread coming
    back still finds its decoded chunks, so it pays no new pickling and decodes nothing."""
    from threadloom.engine.checkpoints.scope import ACTIVE_THREADS

    threads = [f"t{n}" for n in range(ACTIVE_THREADS + 4)]
    for thread in threads:
        made = empty_checkpoint()
        made["id"] = "1f0d0000-0000-6000-8000-000000000001"
        made["channel_values"] = {"items": [{"n": n, "text": "x" * 300} for n in range(40)]}
        made["channel_versions"] = {"items": 1}
        config: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        saver.put(config, made, {}, {"items": 1})
    decoded = saver.checkpoints.scope.planner.decoded
    for _ in range(2):  # met once, then kept
        for thread in threads:
            saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
    misses, hits = decoded.misses, decoded.hits
    for thread in threads:
        got = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        assert got is not None and len(got.checkpoint["channel_values"]["items"]) == 40
    assert decoded.misses == misses and decoded.hits > hits
