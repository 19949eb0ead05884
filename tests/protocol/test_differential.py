"""Differential tests against the released naas planner (naas-abi-sdk 0.2.0, SPEC §4–§6).

`naas_abi_sdk.langgraph_documents.CheckpointDocuments` is the reference: on
generated threads (root and subgraph checkpoints, growing message lists,
secrets, values around INLINE_LIMIT and PART_SIZE, pending writes with special
channels) both planners must send the same puts, in the same order, with the
same data, and read back the same checkpoints through the same batches. The
released module is installed for tests only (the `test` extra); nothing of it is
copied into threadloom.
"""

from __future__ import annotations

import os
from importlib import metadata as importlib_metadata
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import SecretBytes, SecretStr

from tests.helpers import DictStore
from tests.protocol._resolution import batches
from threadloom.langgraph.tuples import serialization
from threadloom.protocol import (
    PART_SIZE,
    WRITES,
    WRITES_IDX_MAP,
    KnownReferences,
    Planner,
    Put,
    Retained,
    kept_checkpoints,
    next_version,
    read_entries,
    redact_secrets,
    references,
    restore,
)

try:
    from naas_abi_sdk import langgraph_documents as released
except ImportError as error:  # pragma: no cover - depends on the environment
    if os.environ.get("CI"):
        raise ImportError(
            "CI is set but naas-abi-sdk 0.2.0 is not installed: run `pip install -e '.[test]'`"
        ) from error
    pytest.skip(
        f"naas-abi-sdk 0.2.0 is not installed ({error}); install it with "
        "`pip install -e '.[test]'`",
        allow_module_level=True,
    )

pytestmark = pytest.mark.differential

AGENT = "engine.v1"
THREAD = "thread-d"
SPECIAL = tuple(WRITES_IDX_MAP)


# --------------------------------------------------------------------------- comparison


def reference_planner() -> Any:
    """The released planner as both released savers build it (untyped: it is the oracle)."""
    return released.CheckpointDocuments(AGENT, JsonPlusSerializer())


def strict(value: Any) -> Any:
    """A comparable form that keeps types apart (True/1, bytes/bytearray) and ignores map order."""
    if isinstance(value, dict):
        return ("map", sorted((key, strict(item)) for key, item in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, [strict(item) for item in value])
    return (type(value).__name__, value)


def put_row(put: Any) -> tuple[Any, ...]:
    return (put.collection, put.key, strict(put.if_version), put.on_conflict, strict(put.data))


def assert_same_puts(ours: list[Put], theirs: list[Any], what: str) -> None:
    """Same collection, key, if_version, on_conflict and data (as maps), in the same order."""
    for seq, (mine, reference) in enumerate(zip(ours, theirs, strict=False)):
        assert put_row(mine) == put_row(reference), (
            f"{what}: put {seq} differs\n"
            f" ours:     {summary(mine)}\n released: {summary(reference)}"
        )
    assert len(ours) == len(theirs), (
        f"{what}: {len(ours)} puts planned by threadloom, {len(theirs)} by the released planner; "
        f"extra: {[summary(p) for p in (ours[len(theirs) :] or theirs[len(ours) :])]}"
    )


def summary(put: Any) -> str:
    data = {
        k: (v if not isinstance(v, (bytes, bytearray)) else f"<{len(v)} bytes>")
        for k, v in put.data.items()
    }
    text = repr(data)
    head = f"{put.collection} {put.key[:12]} if_version={put.if_version!r} {put.on_conflict}"
    return f"{head} {text[:300]}"


# ------------------------------------------------------------------ two savers side by side


class Sides:
    """Threadloom's planner with its KnownReferences; the released planner with its own memory."""

    def __init__(self, capacity: int = 200_000, events: bool = False) -> None:
        self.capacity = capacity
        self.events = events  # hypothesis statistics, only inside a hypothesis test
        self.store = DictStore()
        self.restart()

    def restart(self) -> None:
        """A new process on both sides: planners that remember nothing."""
        self.ours = Planner(AGENT, serialization())
        self.memory = KnownReferences(self.capacity)
        self.theirs = reference_planner()
        self.theirs.known = released.KnownReferences(self.capacity)

    def put(
        self,
        config: dict[str, Any],
        checkpoint: dict[str, Any],
        metadata: dict[str, Any],
        what: str,
    ) -> dict[str, Any]:
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns") or ""
        parent = (ns, conf["checkpoint_id"]) if conf.get("checkpoint_id") else None
        known = self.memory.recall(
            conf["thread_id"], parent, (metadata.get("parents") or {}).items()
        )
        plan = self.ours.plan_checkpoint(config, checkpoint, metadata, known)
        reference = self.theirs.checkpoint_plan(config, checkpoint, metadata)
        assert_same_puts(plan.puts, reference.puts, what)
        assert plan.config == reference.config
        if self.events:
            for put in plan.puts[:-1]:
                event(f"planned {put.data['ref'][0]}- document")
            if len(plan.puts) == 1 and plan.checkpoint.data["channels"]:
                event("checkpoint reusing every value document")
        self.store.apply(plan.puts)
        # SPEC §4.1 step 7: both savers remember once the puts succeeded
        new = plan.config["configurable"]
        self.memory.remember(
            (new["thread_id"], new["checkpoint_ns"], new["checkpoint_id"]),
            set(known.refs) | plan.refs,
            plan.entries,
        )
        self.theirs.known.remember(*reference.remember)
        returned: dict[str, Any] = plan.config
        return returned

    def put_writes(
        self,
        config: dict[str, Any],
        writes: list[tuple[str, Any]],
        task_id: str,
        task_path: str,
        what: str,
    ) -> None:
        ours = self.ours.plan_writes(config, writes, task_id, task_path).puts
        theirs = self.theirs.write_plan(config, writes, task_id, task_path)
        assert_same_puts(ours, theirs, what)
        self.store.apply(ours)


def released_resolution(
    store: DictStore, roots: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[tuple[str, list[str]]]]:
    """Drive the released resolution generator against `store`, answering each find in id order."""
    generator = released.resolution(roots)
    read: list[tuple[str, list[str]]] = []
    try:
        request = next(generator)
        while True:
            collection, refs = request
            read.append((collection, list(refs)))
            wanted = set(refs)
            found = sorted(
                (key, data)
                for (coll, key), data in store.docs.items()
                if coll == collection and data.get("ref") in wanted
            )
            request = generator.send([data for _, data in found])
    except StopIteration as stop:
        return stop.value, read


# --------------------------------------------------------------------------- strategies


class Big(NamedTuple):
    """A value of `size` payload bytes, materialized in the test so failures print short."""

    kind: str
    size: int
    char: str


class Long(NamedTuple):
    """`char * length`, materialized in the test so failures print short."""

    char: str
    length: int


def materialize(value: Any) -> Any:
    if isinstance(value, Long):
        return value.char * value.length
    if isinstance(value, Big):
        if value.kind == "bytes":
            return value.char.encode() * value.size
        return value.char * (value.size - 5)  # str32 header: 5 bytes for >= 65536 chars
    if isinstance(value, list):
        return [materialize(item) for item in value]
    if type(value) is tuple:
        return tuple(materialize(item) for item in value)
    if isinstance(value, dict):
        return {key: materialize(item) for key, item in value.items()}
    return value


TEXT = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=10),
    st.sampled_from(["", "\x00", "naïve ✓", "𝄞", "\u007f"]),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    TEXT,
    st.binary(max_size=12),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(TEXT, inner, max_size=3),
        st.lists(inner, max_size=3).map(tuple),
    ),
    max_leaves=8,
)
BIG = st.builds(
    Big,
    st.sampled_from(["str", "bytes"]),
    st.sampled_from([PART_SIZE - 1, PART_SIZE, PART_SIZE + 1, 2 * PART_SIZE + 1]),
    st.sampled_from("XYZ"),
)

LONG = st.builds(Long, st.sampled_from("LMN"), st.integers(900, 3000))
SECRETS = st.one_of(
    st.builds(
        lambda s: {"api_key": SecretStr(s), "user": "u"}, st.sampled_from(["hunter2", "sk-123"])
    ),
    st.builds(
        lambda s: [SecretBytes(s), ("tuple", SecretStr("nested"))], st.sampled_from([b"k1", b"k2"])
    ),
)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["human", "ai"]), "content": TEXT},
        optional={"id": st.integers(0, 10**6).map(str), "extra": VALUES},
    ),
    st.builds(lambda n, tail: "msg " + "w" * n + tail, st.integers(0, 120), TEXT),
)


class Op(NamedTuple):
    kind: str  # "root", "sub", "writes" or "restart"
    config: dict[str, Any]
    checkpoint: dict[str, Any] | None
    metadata: dict[str, Any] | None
    calls: list[tuple[str, Any, list[tuple[str, Any]]]]


class Session(NamedTuple):
    thread_id: str
    capacity: int
    ops: list[Op]


def checkpoint_id(n: int) -> str:
    return f"1f0b0000-0000-6000-8000-{n:012d}"


def make_checkpoint(n: int, values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    return {
        "v": 4,
        "ts": f"2026-10-01T00:00:{n % 60:02d}.000000+00:00",
        "id": checkpoint_id(n),
        "channel_values": values,
        "channel_versions": dict(versions),
        "versions_seen": {"__input__": {}},
        "updated_channels": sorted(values),
    }


THREAD_IDS = st.one_of(
    st.just(THREAD),
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=8),
    st.sampled_from(["thr\u00e9ad \u2713", 'q"u\\o/te', "tab\tnl\n", "\U0001d11e"]),
)
NAMESPACES = st.sampled_from(
    ["agent:6b3c9f1e-0000-5000-8000-000000000001", "tools:2", "n\u00e9st|ed"]
)


@st.composite
def write_calls(draw: st.DrawFn) -> list[tuple[str, Any, list[tuple[str, Any]]]]:
    value = st.one_of(VALUES, SECRETS, LONG, BIG if draw(st.integers(0, 4)) == 0 else VALUES)
    write = st.tuples(st.sampled_from(["messages", "note", *SPECIAL]), value)
    call = st.tuples(
        st.sampled_from(["task-1", "task-2"]),
        st.sampled_from(["", "~0:x"]),
        st.lists(write, min_size=1, max_size=4),
    )
    return draw(st.lists(call, min_size=1, max_size=2))


def changed_version(draw: st.DrawFn, current: Any) -> Any:
    """Mostly LangGraph's next version; sometimes an equal one of another type, or None."""
    choice = draw(st.integers(0, 19))
    if choice == 0:
        return None
    if choice == 1 and isinstance(current, int) and not isinstance(current, bool):
        return float(current)  # == the old version, another type
    return next_version(current)


@st.composite
def sessions(draw: st.DrawFn) -> Session:
    """Root and subgraph checkpoints of one thread (forks, restarts) and pending writes."""
    thread_id = draw(THREAD_IDS)
    capacity = draw(st.sampled_from([200_000, 200_000, 40, 8, 1]))
    ops: list[Op] = []
    counter = 0
    # per namespace: snapshots (checkpoint id, values, versions) in order
    history: dict[str, list[tuple[str, dict[str, Any], dict[str, Any]]]] = {}
    last_config: dict[str, Any] | None = None
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["root", "root", "root", "sub", "sub", "writes", "restart"]))
        if kind != "root" and not history.get(""):
            kind = "root"
        if kind == "restart":
            ops.append(Op("restart", {}, None, None, []))
            continue
        if kind == "writes":
            assert last_config is not None
            ops.append(Op("writes", last_config, None, None, draw(write_calls())))
            continue
        counter += 1
        ns = "" if kind == "root" else draw(NAMESPACES)
        snapshots = history.setdefault(ns, [])
        if snapshots:
            # usually the latest checkpoint of the namespace, sometimes an older one (a fork)
            index = (
                len(snapshots) - 1
                if draw(st.integers(0, 3))
                else draw(st.integers(0, len(snapshots) - 1))
            )
            parent_id, base_values, base_versions = snapshots[index]
            values, versions = dict(base_values), dict(base_versions)
        else:
            parent_id, values, versions = None, {}, {}
        root_messages = history[""][-1][1].get("messages", []) if history.get("") else []
        channels: tuple[str, ...] = ("messages", "scratch")
        if kind == "root":
            channels = ("messages", "summary", "auth", "note", "big", "items")
        for channel in channels:
            if channel in values and draw(st.integers(0, 2)) > 0:
                continue  # unchanged: same value, same version
            if channel == "messages":
                base = values.get("messages", root_messages)
                new = draw(
                    st.lists(
                        st.one_of(MESSAGE, st.sampled_from(base or ["first"]), LONG), max_size=24
                    )
                )
                if draw(st.integers(0, 11)) == 0:
                    new.append(draw(BIG))
                value: Any = [*base, *new]
            elif channel == "summary":
                value = draw(st.one_of(LONG, TEXT))
            elif channel == "auth":
                value = draw(SECRETS)
            elif channel in ("note", "scratch"):
                value = draw(st.one_of(VALUES, LONG))
            elif channel == "items":
                if draw(st.integers(0, 2)) > 0:
                    continue
                value = draw(
                    st.one_of(
                        st.lists(VALUES, max_size=3).map(tuple),
                        st.just([]),
                        st.lists(LONG, max_size=3),
                    )
                )
            else:
                if draw(st.integers(0, 4)) > 0:
                    continue
                value = draw(BIG)
            values[channel] = value
            versions[channel] = changed_version(draw, versions.get(channel))
        if ns:
            parents = {"": history[""][-1][0]}
            if draw(st.integers(0, 3)) == 0:
                parents[draw(NAMESPACES)] = draw(
                    st.sampled_from([s[0] for s in snapshots] or ["unknown"])
                )
            metadata: dict[str, Any] = {"source": "loop", "step": counter, "parents": parents}
        else:
            metadata = {"source": "loop", "step": counter, "parents": {}}
        metadata.update(
            draw(st.dictionaries(st.sampled_from(["writes", "tag", "score"]), VALUES, max_size=1))
        )
        configurable: dict[str, Any] = {"thread_id": thread_id}
        if ns or draw(st.booleans()):
            configurable["checkpoint_ns"] = ns  # a root config may leave the namespace out
        if parent_id is not None:
            configurable["checkpoint_id"] = parent_id
        configurable.update(
            draw(st.fixed_dictionaries({}, optional={"user_id": TEXT, "__hidden": TEXT}))
        )
        checkpoint = make_checkpoint(counter, dict(values), versions)
        ops.append(Op(kind, {"configurable": configurable}, checkpoint, metadata, []))
        snapshots.append((checkpoint["id"], values, versions))
        last_config = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }
    return Session(thread_id, capacity, ops)


def run(session: Session) -> Sides:
    sides = Sides(session.capacity, events=True)
    for number, op in enumerate(session.ops):
        event(f"op {op.kind}")
        if op.kind == "restart":
            sides.restart()
        elif op.kind == "writes":
            for task_id, task_path, writes in op.calls:
                sides.put_writes(
                    op.config,
                    materialize(writes),
                    task_id,
                    task_path,
                    f"op {number} writes {task_id}",
                )
        else:
            assert op.checkpoint is not None and op.metadata is not None
            sides.put(
                op.config,
                materialize(op.checkpoint),
                op.metadata,
                f"op {number} {op.kind} checkpoint",
            )
    return sides


# --------------------------------------------------------------------------- tests


def test_reference_is_release_0_2_0() -> None:
    """The reference planner is naas-abi-sdk 0.2.0, the release the SPEC and vectors describe."""
    assert importlib_metadata.version("naas-abi-sdk") == "0.2.0"


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sessions())
def test_same_puts_as_the_released_planner(session: Session) -> None:
    """Both planners, each remembering after its puts, send identical puts at every step."""
    run(session)


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(sessions(), st.data())
def test_same_reads_and_same_puts_after_a_read(session: Session, data: st.DataObject) -> None:
    """A fresh reader resolves and restores like the released one, then plans the same child."""
    sides = run(session)
    thread_id = session.thread_id
    checkpoints = [op for op in session.ops if op.checkpoint is not None]
    written = {
        (op.config["configurable"]["checkpoint_ns"], op.config["configurable"]["checkpoint_id"])
        for op in session.ops
        if op.kind == "writes"
    }
    with_writes = [
        op
        for op in checkpoints
        if (
            op.config["configurable"].get("checkpoint_ns") or "",
            op.checkpoint and op.checkpoint["id"],
        )
        in written
    ]
    # reading a checkpoint that has pending writes is the richer case: prefer it
    prefer_writes = bool(with_writes) and data.draw(st.integers(0, 3)) > 0
    op = data.draw(st.sampled_from(with_writes if prefer_writes else checkpoints))
    assert op.checkpoint is not None
    ns = op.config["configurable"].get("checkpoint_ns") or ""
    cid = op.checkpoint["id"]
    store = sides.store
    doc = store.checkpoint(Planner(AGENT, serialization()).key(thread_id, ns, cid))
    writes = store.find(WRITES, thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=cid)

    fetched, read = store.resolve([doc, *writes])
    reference_fetched, reference_read = released_resolution(store, [doc, *writes])
    assert [(b.collection, b.refs) for b in read] == reference_read
    assert sorted(fetched) == sorted(reference_fetched)

    ours_planner, memory = Planner(AGENT, serialization()), KnownReferences()
    theirs = reference_planner()
    mine = restore(doc, writes, fetched, ours_planner.loads)
    reference = theirs.restore(doc, writes, reference_fetched)
    assert mine.checkpoint == reference.checkpoint
    assert list(mine.checkpoint["channel_values"]) == list(reference.checkpoint["channel_values"])
    assert mine.metadata == reference.metadata
    assert mine.config == reference.config
    assert mine.parent_config == reference.parent_config
    assert mine.pending_writes == reference.pending_writes
    # a read remembers what it fetched (checkpoint and writes) and the versioned channel entries
    memory.remember(
        (thread_id, ns, cid),
        fetched,
        read_entries(doc["channels"], mine.checkpoint["channel_versions"]),
    )

    # the child applies the pending writes' values to channels, as LangGraph does
    values = dict(mine.checkpoint["channel_values"])
    versions = dict(mine.checkpoint["channel_versions"])
    for _task, channel, value in mine.pending_writes:
        if channel not in SPECIAL:
            values[channel] = value
            versions[channel] = next_version(versions.get(channel))
    if data.draw(st.booleans()):
        history = values.get("messages")
        values["messages"] = [*(history if isinstance(history, list) else []), data.draw(MESSAGE)]
        versions["messages"] = next_version(versions.get("messages"))
    child = make_checkpoint(999, values, versions)
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}}
    parents: dict[str, str] = dict((op.metadata or {}).get("parents") or {})
    metadata = {"source": "loop", "step": 999, "parents": parents}
    known = memory.recall(thread_id, (ns, cid), parents.items())
    plan = ours_planner.plan_checkpoint(config, child, metadata, known)
    assert_same_puts(
        plan.puts, theirs.checkpoint_plan(config, child, metadata).puts, "child after a read"
    )


def test_read_memory_covers_pending_write_parts() -> None:
    """After a read, a child holding a pending write's split value plans like the released saver."""
    big = "W" * (PART_SIZE + 10)
    sides = Sides()
    config = sides.put(
        {"configurable": {"thread_id": THREAD}},
        make_checkpoint(1, {"messages": ["hi"]}, {"messages": 1}),
        {"source": "input", "step": -1, "parents": {}},
        "c1",
    )
    sides.put_writes(config, [("note", big), ("__error__", "boom")], "task-1", "", "c1 writes")
    store, cid = sides.store, checkpoint_id(1)
    doc = store.checkpoint(Planner(AGENT, serialization()).key(THREAD, "", cid))
    writes = store.find(WRITES, thread_id=THREAD, checkpoint_ns="", checkpoint_id=cid)
    fetched, _ = store.resolve([doc, *writes])
    ours, memory = Planner(AGENT, serialization()), KnownReferences()
    theirs = reference_planner()
    restored = restore(doc, writes, fetched, ours.loads)
    theirs.restore(doc, writes, fetched)
    memory.remember(
        (THREAD, "", cid),
        fetched,
        read_entries(doc["channels"], restored.checkpoint["channel_versions"]),
    )
    child = make_checkpoint(2, {"messages": ["hi"], "note": big}, {"messages": 1, "note": 2})
    metadata = {"source": "loop", "step": 0, "parents": {}}
    plan = ours.plan_checkpoint(config, child, metadata, memory.recall(THREAD, ("", cid)))
    reference = theirs.checkpoint_plan(config, child, metadata)
    assert_same_puts(plan.puts, reference.puts, "child after a read")
    assert [p.collection for p in plan.puts] == ["langgraph_blobs_v2", "langgraph_checkpoints_v2"]


def test_restore_orders_pending_writes_like_released() -> None:
    """Pending writes of several tasks restore in the released order, whatever the read order."""
    sides = Sides()
    config = sides.put(
        {"configurable": {"thread_id": THREAD}},
        make_checkpoint(1, {"a": 0}, {"a": 1}),
        {"source": "input", "step": -1, "parents": {}},
        "c1",
    )
    sides.put_writes(config, [("a", 1), ("__error__", "e2"), ("b", 2)], "task-2", "", "task-2")
    sides.put_writes(config, [("__interrupt__", "i1"), ("a", 3)], "task-1", "", "task-1")
    sides.put_writes(
        config, [("__resume__", "r1"), ("__scheduled__", "s1")], "task-1", "", "task-1 again"
    )
    store, cid = sides.store, checkpoint_id(1)
    doc = store.checkpoint(Planner(AGENT, serialization()).key(THREAD, "", cid))
    writes = store.find(WRITES, thread_id=THREAD, checkpoint_ns="", checkpoint_id=cid)
    fetched, _ = store.resolve([doc, *writes])
    theirs = reference_planner()
    for order in (writes, writes[::-1], sorted(writes, key=lambda w: w["channel"])):
        mine = restore(doc, order, fetched, Planner(AGENT, serialization()).loads).pending_writes
        assert mine == theirs.restore(doc, order, fetched).pending_writes
        assert [(t, c) for t, c, _ in mine][:3] == [
            ("task-1", "__resume__"),
            ("task-1", "__interrupt__"),
            ("task-1", "__scheduled__"),
        ]


def test_task_path_none_matches_released() -> None:
    """A write planned with task_path=None stores the same task_path as the released planner."""
    config = {"configurable": {"thread_id": THREAD, "checkpoint_id": checkpoint_id(1)}}
    ours = Planner(AGENT, serialization()).plan_writes(config, [("a", 1)], "task-1", None).puts
    theirs = reference_planner().write_plan(config, [("a", 1)], "task-1", None)
    assert_same_puts(ours, theirs, "task_path None")


@pytest.mark.parametrize("kind", ["checkpoint", "writes"])
def test_checkpoint_ns_none_matches_released(kind: str) -> None:
    """A config whose checkpoint_ns is None is planned as the released planner plans it."""
    config = {
        "configurable": {
            "thread_id": THREAD,
            "checkpoint_ns": None,
            "checkpoint_id": checkpoint_id(1),
        }
    }
    ours, theirs = Planner(AGENT, serialization()), reference_planner()
    if kind == "writes":
        mine, reference = (
            ours.plan_writes(config, [("a", 1)], "task-1").puts,
            theirs.write_plan(config, [("a", 1)], "task-1"),
        )
    else:
        checkpoint = make_checkpoint(2, {"a": 1}, {"a": 1})
        mine, reference = (
            ours.plan_checkpoint(config, checkpoint, {}).puts,
            theirs.checkpoint_plan(config, checkpoint, {}).puts,
        )
    assert_same_puts(mine, reference, f"{kind} with checkpoint_ns None")


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.none(),
        st.integers(-5, 10**12),
        st.builds(
            lambda n, r: f"{n:032}.{r}",
            st.integers(0, 10**6),
            st.sampled_from(["0.5234", "x", "", "00000000000000.0"]),
        ),
        st.builds(lambda n, r: f"{n}.{r}", st.integers(0, 99), st.floats(0, 1)),
    )
)
def test_next_version_matches_released(current: Any) -> None:
    """next_version gives the released value and type for None, ints and "<n>.<suffix>" strings."""
    assert strict(next_version(current)) == strict(released.next_version(current))


RETAINED = st.lists(
    st.builds(
        Retained,
        st.sampled_from(["", "", "sub:a", "sub:b"]),
        st.sampled_from([f"id{i}" for i in range(12)]),
        st.one_of(st.none(), st.sampled_from(["id1", "id3", "id5", "id8", "gone"])),
    ),
    max_size=14,
    unique_by=lambda item: (item.checkpoint_ns, item.checkpoint_id),
)


@settings(max_examples=300, deadline=None)
@given(RETAINED, st.integers(1, 5))
def test_kept_checkpoints_matches_released(stored: list[Retained], keep_last: int) -> None:
    """Retention keeps the same (namespace, id) pairs as the released rules, ids stored once."""
    reference = released.kept_checkpoints([released.Retained(*item) for item in stored], keep_last)
    assert set(kept_checkpoints(stored, keep_last)) == set(reference)


@pytest.mark.parametrize("ns", ["", "sub:a"])
def test_kept_checkpoints_of_a_migrated_thread_match_released(ns: str) -> None:
    """A checkpoint listed twice (schema 1 and 2) counts once toward keep_last, as released."""
    stored = [Retained(ns, "a", None), Retained(ns, "b", None), Retained(ns, "b", None)]
    reference = released.kept_checkpoints([released.Retained(*item) for item in stored], 2)
    assert set(reference) == {(ns, "a"), (ns, "b")}
    assert set(kept_checkpoints(stored, 2)) == set(reference)


def test_kept_checkpoints_rejects_like_released() -> None:
    """Both reject keep_last 0 with ValueError."""
    with pytest.raises(ValueError):
        released.kept_checkpoints([], 0)
    with pytest.raises(ValueError):
        kept_checkpoints([], 0)


REF = st.builds(
    lambda prefix, n: f"{prefix}-{n:064x}" + (".0" if prefix == "p" else ""),
    st.sampled_from("bcep"),
    st.integers(0, 40),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(REF, st.sampled_from([1, 4196, 7296, 266240, 2097152, 2097153])), max_size=1200
    )
)
def test_batches_match_released(refs: list[tuple[str, int]]) -> None:
    """Batches group, de-duplicate and cut refs exactly as the released reader does."""
    assert [(b.collection, b.refs) for b in batches(refs)] == [
        (collection, list(group)) for collection, group in released.batches(refs)
    ]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sessions())
def test_references_match_released(session: Session) -> None:
    """Every stored document references the same (ref, estimate) list in both readers."""
    store = run(session).store
    for data in store.docs.values():
        assert references(data) == [tuple(item) for item in released.references(data)]


@settings(max_examples=100, deadline=None)
@given(st.one_of(VALUES, SECRETS, st.lists(st.one_of(VALUES, SECRETS), max_size=3).map(tuple)))
def test_redact_secrets_matches_released(value: Any) -> None:
    """Redaction serializes to the same bytes and keeps identity exactly when released does."""
    serde = JsonPlusSerializer()
    mine, reference = redact_secrets(value), released.redact_secrets(value)
    assert serde.dumps_typed(mine) == serde.dumps_typed(reference)
    assert (mine is value) == (reference is value)
