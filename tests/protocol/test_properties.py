"""Property and unit tests of the schema-2 protocol layer (SPEC §3–§6).

The oracle for every round trip is LangGraph's own JsonPlusSerializer: a planned,
applied, resolved and restored checkpoint must equal
`serde.loads_typed(serde.dumps_typed(checkpoint))`. Structural facts (inline,
value blob, chunked list, parts) are checked against the SPEC's thresholds with
hashlib, not with the implementation's own helpers.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.base import CheckpointTuple, get_checkpoint_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from pydantic import BaseModel, ConfigDict, SecretBytes, SecretStr

from tests.helpers import DictStore, inputs
from tests.protocol._resolution import batches
from threadloom.errors import MissingDocumentsError, ProtocolError
from threadloom.langgraph.tuples import serialization
from threadloom.protocol import (
    BLOBS,
    CHECKPOINTS,
    ITEMS,
    PART_SIZE,
    PARTS,
    WRITES,
    WRITES_IDX_MAP,
    CheckpointPlan,
    KnownReferences,
    Planner,
    Put,
    RedactingSerializer,
    Retained,
    kept_checkpoints,
    next_version,
    raw_value,
    redact_secrets,
    references,
    restore,
    root_parent,
)
from threadloom.protocol.constants import (
    CHUNK_SIZE,
    INLINE_LIMIT,
    MAX_IN_VALUES,
    READ_BUDGET,
    REDACTED_SECRET,
)
from threadloom.protocol.refs import (
    chunk_ref,
    element_ref,
    json_text,
    list_blob_ref,
    value_blob_ref,
)
from threadloom.protocol.restore import raw_channels

AGENT = "engine.v1"
THREAD = "thread-p"
SERDE = JsonPlusSerializer()
SPECIAL = tuple(WRITES_IDX_MAP)


# --------------------------------------------------------------------------- helpers


def roundtrip(value: Any) -> Any:
    """LangGraph's own round trip: the oracle of every restore."""
    return SERDE.loads_typed(SERDE.dumps_typed(value))


def merged_metadata(config: Any, metadata: Any) -> Any:
    """The metadata LangGraph stores for a put: `get_checkpoint_metadata(config, metadata)`."""
    return get_checkpoint_metadata(config, metadata)


def payload_of(value: Any) -> bytes:
    return SERDE.dumps_typed(value)[1]


def checkpoint_id(n: int) -> str:
    return f"1f0b0000-0000-6000-8000-{n:012d}"


def make_checkpoint(n: int, values: dict[str, Any], versions: dict[str, Any]) -> dict[str, Any]:
    """A checkpoint shaped as LangGraph 1.2 builds it (key order matters for msgpack)."""
    return {
        "v": 4,
        "ts": f"2026-10-01T00:{n // 60 % 60:02d}:{n % 60:02d}.000000+00:00",
        "id": checkpoint_id(n),
        "channel_values": values,
        "channel_versions": dict(versions),
        "versions_seen": {"__input__": {}},
        "updated_channels": sorted(values),
    }


def text_of_payload(size: int, char: str = "x") -> str:
    """A one-character-repeated ASCII string whose msgpack payload is exactly `size` bytes."""
    if size <= 32:
        length = size - 1
    elif 34 <= size <= 257:
        length = size - 2
    elif 259 <= size <= 65538:
        length = size - 3
    elif size >= 65541:
        length = size - 5
    else:
        raise ValueError(f"no msgpack string has a payload of {size} bytes")
    value = char * length
    assert len(payload_of(value)) == size
    return value


def sized(kind: str, size: int, char: str = "B") -> Any:
    """A str or bytes value whose typed payload is exactly `size` bytes."""
    if kind == "bytes":
        return char.encode() * size
    return text_of_payload(size, char)


def by_ref(store: DictStore) -> dict[str, dict[str, Any]]:
    return {data["ref"]: data for data in store.docs.values() if "ref" in data}


def check_stored(
    stored: Mapping[str, Any], typed: tuple[str, bytes], docs: Mapping[str, Any]
) -> None:
    """Assert `stored` is the SPEC §2/§4.3 stored form of `typed`, parts included."""
    kind, payload = typed
    if len(payload) <= PART_SIZE:
        assert stored == {"kind": kind, "payload": payload}
        return
    count = -(-len(payload) // PART_SIZE)
    digest = hashlib.sha256(payload).hexdigest()
    assert stored == {
        "kind": kind,
        "size": len(payload),
        "parts": [f"p-{digest}.{i}" for i in range(count)],
    }
    slices = [payload[i * PART_SIZE : (i + 1) * PART_SIZE] for i in range(count)]
    assert [docs[ref]["payload"] for ref in stored["parts"]] == slices


def walk(value: Any) -> Iterable[Any]:
    """Every scalar inside a put's data (keys included)."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield key
            yield from walk(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from walk(item)
    else:
        yield value


def assert_plan_order(puts: list[Put]) -> None:
    """SPEC §4.1 step 5: parts, elements, chunks, blobs, then the checkpoint, no key twice."""
    rank = {"p": 0, "e": 1, "c": 2, "b": 3}
    ranks = [rank[p.data["ref"][0]] for p in puts[:-1]]
    assert ranks == sorted(ranks)
    assert puts[-1].collection == CHECKPOINTS
    assert all(p.collection != CHECKPOINTS for p in puts[:-1])
    assert len({(p.collection, p.key) for p in puts}) == len(puts)
    for put in puts[:-1]:
        assert (put.if_version, put.on_conflict) == (0, "keep")
    assert (puts[-1].if_version, puts[-1].on_conflict) == (0, "compare")


class Harness:
    """A saver-shaped driver: recall, plan, apply to a DictStore, remember (SPEC §4.1)."""

    def __init__(self) -> None:
        self.planner = Planner(AGENT, serialization())
        self.memory = KnownReferences()
        self.store = DictStore()
        self.write_part_keys: set[str] = set()

    def put(
        self, config: dict[str, Any], checkpoint: dict[str, Any], metadata: dict[str, Any]
    ) -> tuple[CheckpointPlan, list[str]]:
        conf = config["configurable"]
        ns = conf.get("checkpoint_ns") or ""
        parent = (ns, conf["checkpoint_id"]) if conf.get("checkpoint_id") else None
        ancestors = (metadata.get("parents") or {}).items()
        known = self.memory.recall(conf["thread_id"], parent, ancestors)
        plan = self.planner.plan_checkpoint(config, checkpoint, metadata, known)
        self._check_content_addressing(plan.puts)
        outcomes = self.store.apply(plan.puts)
        new = plan.config["configurable"]
        self.memory.remember(
            (new["thread_id"], new["checkpoint_ns"], new["checkpoint_id"]),
            set(known.refs) | plan.refs,
            plan.entries,
        )
        return plan, outcomes

    def put_writes(
        self, config: dict[str, Any], writes: list[tuple[str, Any]], task_id: str, task_path: str
    ) -> list[Put]:
        puts: list[Put] = self.planner.plan_writes(config, writes, task_id, task_path).puts
        self._check_content_addressing(puts)
        self.store.apply(puts)
        self.write_part_keys.update(p.key for p in puts if p.collection == PARTS)
        return puts

    def _check_content_addressing(self, puts: list[Put]) -> None:
        """A value document planned again must carry exactly the stored data."""
        for put in puts:
            slot = (put.collection, put.key)
            if put.collection in (BLOBS, ITEMS, PARTS) and slot in self.store.docs:
                assert self.store.docs[slot] == put.data

    def read(self, thread_id: str, ns: str, cid: str, shuffle: bool = True) -> CheckpointTuple:
        data = self.store.checkpoint(self.planner.key(thread_id, ns, cid))
        writes = self.store.find(WRITES, thread_id=thread_id, checkpoint_ns=ns, checkpoint_id=cid)
        fetched, _ = self.store.resolve([data, *writes])
        restored: CheckpointTuple = restore(
            data, writes[::-1] if shuffle else writes, fetched, self.planner.loads
        )
        return restored


# --------------------------------------------------------------------------- strategies

TEXT = st.one_of(
    st.text(st.characters(codec="utf-8"), max_size=12),
    st.sampled_from(["", "\x00", "a\x00b", "naïve ✓", "𝄞 clef", "thr\u00e9ad", "\u007f\n\t"]),
)
LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    TEXT,
    st.binary(max_size=16),
    st.binary(max_size=16).map(bytearray),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(TEXT, inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
    ),
    max_leaves=12,
)


class Big(NamedTuple):
    """A str/bytes value of `size` payload bytes, built in the test so failures print short."""

    kind: str
    size: int
    char: str


def materialize(value: Any) -> Any:
    """Replace every Big descriptor inside dicts, lists and tuples by its value."""
    if isinstance(value, Big):
        return sized(*value)
    if isinstance(value, list):
        return [materialize(item) for item in value]
    if type(value) is tuple:
        return tuple(materialize(item) for item in value)
    if isinstance(value, dict):
        return {key: materialize(item) for key, item in value.items()}
    return value


#: payloads around PART_SIZE, built cheaply from one repeated character
BIG = st.builds(
    Big,
    st.sampled_from(["str", "bytes"]),
    st.sampled_from([PART_SIZE - 1, PART_SIZE, PART_SIZE + 1, 2 * PART_SIZE + 1]),
    st.sampled_from("BQZ"),
)
#: strings whose payload straddles INLINE_LIMIT
MEDIUM = st.builds(
    text_of_payload, st.integers(INLINE_LIMIT - 3, INLINE_LIMIT + 1200), st.sampled_from("SMT")
)
MESSAGE = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["human", "ai", "tool"]), "content": TEXT}),
    st.builds(lambda n, tail: "m" * n + tail, st.integers(0, 200), TEXT),
    VALUES,
)


STEP_KEYS = ("source", "step", "parents")


class Step(NamedTuple):
    config: dict[str, Any]
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    writes: list[tuple[str, str, list[tuple[str, Any]]]]


@st.composite
def write_calls(
    draw: st.DrawFn, big_ok: bool = True
) -> list[tuple[str, str, list[tuple[str, Any]]]]:
    """Zero to three `put_writes` calls (task id, task path, writes) with special channels."""
    value = st.one_of(VALUES, BIG) if big_ok and draw(st.integers(0, 5)) == 0 else VALUES
    write = st.tuples(st.sampled_from(["messages", "a", *SPECIAL]), value)
    calls = st.tuples(
        st.sampled_from(["task-1", "task-2", "t\u00e2che"]),
        st.sampled_from(["", "~x"]),
        st.lists(write, max_size=4),
    )
    return draw(st.lists(calls, max_size=3))


@st.composite
def threads(draw: st.DrawFn) -> list[Step]:
    """A root thread of 1–4 checkpoints: growing messages, kept versions, dropped channels."""
    string_versions = draw(st.booleans())
    values: dict[str, Any] = {}
    versions: dict[str, Any] = {}
    messages: list[Any] = []
    steps = []
    for n in range(draw(st.integers(1, 4))):
        for channel in ("messages", "a", "b", "big"):
            if channel in values and draw(st.integers(0, 2)) > 0:
                continue  # unchanged: same value, same version
            if channel in values and draw(st.integers(0, 9)) == 0:
                del values[channel]  # emptied: gone from channel_values, version stays
                continue
            if channel == "messages":
                new = draw(
                    st.lists(st.one_of(MESSAGE, st.sampled_from(messages or [""])), max_size=40)
                )
                if messages and draw(st.integers(0, 4)) == 0:
                    cut = draw(st.integers(0, len(messages) - 1))
                    messages = messages[:cut] + messages[cut + 1 :]  # history edited mid-list
                if draw(st.integers(0, 9)) == 0:
                    new.append(draw(BIG))
                messages = [*messages, *new]
                value: Any = messages
            elif channel == "a":
                value = draw(VALUES)
            elif channel == "b":
                value = draw(st.one_of(VALUES, MEDIUM, st.lists(MEDIUM, max_size=2).map(tuple)))
            else:
                if draw(st.integers(0, 3)) > 0:
                    continue  # big values are rare: each costs a 256 KiB hash
                value = draw(BIG)
            values[channel] = value
            if string_versions and channel not in versions:
                versions[channel] = f"{1:032}.{draw(st.integers(0, 10**6)) / 10**6:016}"
            else:
                versions[channel] = next_version(versions.get(channel))
        checkpoint = make_checkpoint(n + 1, dict(values), versions)
        extra = draw(
            st.fixed_dictionaries(
                {},
                optional={"user_id": TEXT, "model": st.integers(-(2**63), 2**63 - 1), "__x": TEXT},
            )
        )
        config = {"configurable": {"thread_id": THREAD, "checkpoint_ns": "", **extra}}
        if n:
            config["configurable"]["checkpoint_id"] = checkpoint_id(n)
        metadata = {
            "source": "loop" if n else "input",
            "step": n - 1,
            "parents": {},
            **draw(st.dictionaries(TEXT.filter(lambda k: k not in STEP_KEYS), VALUES, max_size=2)),
        }
        steps.append(Step(config, checkpoint, metadata, draw(write_calls())))
    return steps


def expected_pending(
    calls: list[tuple[str, str, list[tuple[str, Any]]]],
) -> list[tuple[str, str, Any]]:
    """First write of a (task, index) wins; special (negative) ones are replaced; sorted."""
    kept: dict[tuple[str, int], tuple[str, Any]] = {}
    for task_id, _path, writes in calls:
        for position, (channel, value) in enumerate(writes):
            index = WRITES_IDX_MAP.get(channel, position)
            if index < 0 or (task_id, index) not in kept:
                kept[(task_id, index)] = (channel, value)
    return [(task, ch, roundtrip(v)) for (task, _i), (ch, v) in sorted(kept.items())]


# --------------------------------------------------------------------------- round trips


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(threads())
def test_thread_restores_what_langgraph_round_trips(thread: list[Step]) -> None:
    """Each checkpoint of a planned, applied thread restores as LangGraph's serde round trip."""
    thread = [
        step._replace(checkpoint=materialize(step.checkpoint), writes=materialize(step.writes))
        for step in thread
    ]
    harness = Harness()
    for step in thread:
        plan, outcomes = harness.put(step.config, step.checkpoint, step.metadata)
        assert_plan_order(plan.puts)
        # remembered refs are cumulative, so only parts a write plan stored may already exist
        for put, outcome in zip(plan.puts, outcomes, strict=True):
            assert outcome == "created" or put.key in harness.write_part_keys
        for task_id, task_path, writes in step.writes:
            puts = harness.put_writes(plan.config, writes, task_id, task_path)
            docs = [p for p in puts if p.collection == WRITES]
            assert all(p.collection == PARTS for p in puts[: len(puts) - len(docs)])
            assert [p.data["channel"] for p in docs] == [c for c, _ in writes]
            assert [p.if_version for p in docs] == [None if c in SPECIAL else 0 for c, _ in writes]
    chunks: dict[str, list[tuple[str, bytes]]] = {}  # shared by the thread's reads, as a page's
    for step in thread:
        restored = harness.read(THREAD, "", step.checkpoint["id"])
        assert restored.checkpoint == roundtrip(step.checkpoint)
        data = harness.store.checkpoint(harness.planner.key(THREAD, "", step.checkpoint["id"]))
        fetched, _ = harness.store.resolve([data])
        alone = raw_channels(data["channels"], fetched)
        assert raw_channels(data["channels"], fetched, chunks) == alone
        assert restored.metadata == roundtrip(merged_metadata(step.config, step.metadata))
        assert restored.pending_writes == expected_pending(step.writes)
        parent = step.config["configurable"].get("checkpoint_id")
        assert (restored.parent_config or {}).get("configurable", {}).get("checkpoint_id") == parent
        # a saver without memory plans the same documents: all identical to the stored ones
        cold = Planner(AGENT, serialization()).plan_checkpoint(
            step.config, step.checkpoint, step.metadata
        )
        assert all(harness.store.docs[(p.collection, p.key)] == p.data for p in cold.puts)


@st.composite
def boundary_lists(draw: st.DrawFn) -> tuple[list[Any], int]:
    """A list of 31/32/33/64/65 elements whose payloads sum to a target near INLINE_LIMIT."""
    count = draw(st.sampled_from([31, 32, 33, 64, 65]))
    target = draw(st.integers(INLINE_LIMIT - 14, INLINE_LIMIT + 14))
    base = target // count
    size = base - 1 if base in (33, 258) else base  # sizes no msgpack string has
    strings = [text_of_payload(size, chr(ord("a") + i % 26)) for i in range(count - 1)]
    rest = target - size * (count - 1)
    filler: Any = b"\x01" * rest  # a bytes element's payload is its raw length
    elements = list(strings)
    elements.insert(draw(st.integers(0, count - 1)), filler)
    return elements, target


@settings(max_examples=60, deadline=None)
@given(boundary_lists())
def test_list_boundaries_choose_inline_value_blob_or_chunks(case: tuple[list[Any], int]) -> None:
    """A list is chunked by 32 iff its element payloads sum above 1024, and restores whole."""
    elements, target = case
    assert sum(len(payload_of(e)) for e in elements) == target
    harness = Harness()
    checkpoint = make_checkpoint(1, {"messages": elements}, {"messages": 1})
    config = {"configurable": {"thread_id": THREAD}}
    plan, _ = harness.put(config, checkpoint, {})
    entry = plan.checkpoint.data["channels"]["messages"]
    docs = by_ref(harness.store)
    whole = SERDE.dumps_typed(elements)
    if target > INLINE_LIMIT:
        blob = docs[entry["blob"]]
        assert blob["length"] == len(elements)
        assert len(blob["chunks"]) == -(-len(elements) // CHUNK_SIZE)
        chunks = [docs[ref]["elements"] for ref in blob["chunks"]]
        assert [len(c) for c in chunks[:-1]] == [CHUNK_SIZE] * (len(chunks) - 1)
        flat = [item for chunk in chunks for item in chunk]
        assert [size for _, size in flat] == [len(payload_of(e)) for e in elements]
        for (ref, _), element in zip(flat, elements, strict=True):
            check_stored(docs[ref]["value"], SERDE.dumps_typed(element), docs)
    elif len(whole[1]) <= INLINE_LIMIT:
        assert entry == {"value": {"kind": whole[0], "payload": whole[1]}}
    else:
        blob = docs[entry["blob"]]
        assert "chunks" not in blob
        check_stored(blob["value"], whole, docs)
    restored = harness.read(THREAD, "", checkpoint["id"])
    assert restored.checkpoint["channel_values"]["messages"] == roundtrip(elements)


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["str", "bytes"]),
    offset=st.integers(-2, 2),
    place=st.sampled_from(["channel", "element", "write", "metadata"]),
)
def test_payloads_around_part_size_split_only_above_it(kind: str, offset: int, place: str) -> None:
    """A payload is split into PART_SIZE slices exactly when it is larger than PART_SIZE."""
    size = PART_SIZE + offset
    value = sized(kind, size, "P")
    assert len(payload_of(value)) == size
    harness = Harness()
    values: dict[str, Any] = {"note": "n"}
    metadata: dict[str, Any] = {"source": "input", "step": -1, "parents": {}}
    if place == "channel":
        values["big"] = value
    elif place == "element":
        values["messages"] = ["first", value]
    elif place == "metadata":
        metadata["blob"] = value
    checkpoint = make_checkpoint(1, values, {k: 1 for k in values})
    config = {"configurable": {"thread_id": THREAD}}
    plan, _ = harness.put(config, checkpoint, metadata)
    write_puts = harness.put_writes(plan.config, [("big", value), ("__error__", "e")], "task-1", "")
    docs = by_ref(harness.store)
    data = plan.checkpoint.data
    if place == "channel":
        blob = docs[data["channels"]["big"]["blob"]]
        check_stored(blob["value"], SERDE.dumps_typed(value), docs)
    elif place == "element":
        blob = docs[data["channels"]["messages"]["blob"]]
        (chunk,) = blob["chunks"]
        ref, length = docs[chunk]["elements"][1]
        assert length == size
        check_stored(docs[ref]["value"], SERDE.dumps_typed(value), docs)
    elif place == "metadata":
        merged = merged_metadata(config, metadata)
        check_stored(data["metadata"], SERDE.dumps_typed(merged), docs)
    write = next(p for p in write_puts if p.collection == WRITES and p.data["index"] == 0)
    check_stored(write.data["value"], SERDE.dumps_typed(value), docs)
    restored = harness.read(THREAD, "", checkpoint["id"])
    assert restored.checkpoint == roundtrip(checkpoint)
    assert restored.metadata == roundtrip(merged_metadata(config, metadata))
    assert restored.pending_writes == [("task-1", "__error__", "e"), ("task-1", "big", value)]


# --------------------------------------------------------------------------- secrets


class Pair(NamedTuple):
    first: Any
    second: Any


@dataclasses.dataclass
class Box:
    content: Any
    label: str = "box"


class Model(BaseModel):
    model_config = ConfigDict(extra="allow", arbitrary_types_allowed=True)
    content: Any = None


WRAPPERS = ["dict", "list", "tuple", "namedtuple", "dataclass", "model", "model_extra"]


def wrap(kind: str, inner: Any, sibling: Any) -> Any:
    if kind == "dict":
        return {"plain": sibling, "api_key": inner}
    if kind == "list":
        return [sibling, inner]
    if kind == "tuple":
        return (inner, sibling)
    if kind == "namedtuple":
        return Pair(sibling, inner)
    if kind == "dataclass":
        return Box(inner)
    if kind == "model":
        return Model(content=inner)
    return Model(content=sibling, **{"hidden": inner})  # an extra field


SMALL = st.recursive(LEAVES, lambda inner: st.lists(inner, max_size=3), max_leaves=4)
SECRET = st.text(
    st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=6, max_size=12
).map(lambda s: "zQ7-s3cr3t-" + s)


@st.composite
def nested(draw: st.DrawFn, leaf: st.SearchStrategy[Any]) -> Any:
    value = draw(leaf)
    for kind in draw(st.lists(st.sampled_from(WRAPPERS), max_size=5)):
        value = wrap(kind, value, draw(SMALL))
    return value


@settings(max_examples=60, deadline=None)
@given(
    secret=SECRET,
    as_bytes=st.booleans(),
    data=st.data(),
    place=st.sampled_from(["channel", "element", "metadata", "write"]),
)
def test_secrets_never_reach_any_put(
    secret: str, as_bytes: bool, data: st.DataObject, place: str
) -> None:
    """A SecretStr/SecretBytes anywhere in a value is stored as the REDACTED marker only."""
    leaf = SecretBytes(secret.encode()) if as_bytes else SecretStr(secret)
    value = data.draw(nested(st.just(leaf)))
    values: dict[str, Any] = {"note": "plain"}
    metadata: dict[str, Any] = {"source": "input", "step": -1, "parents": {}}
    writes: list[tuple[str, Any]] = [("note", "plain")]
    if place == "channel":
        values["value"] = value
    elif place == "element":
        values["messages"] = ["x" * 600, value, "y" * 600]  # chunked: element documents
    elif place == "metadata":
        metadata["settings"] = value
    else:
        writes.append(("value", value))
    harness = Harness()
    checkpoint = make_checkpoint(1, values, {k: 1 for k in values})
    plan, _ = harness.put({"configurable": {"thread_id": THREAD}}, checkpoint, metadata)
    puts = [*plan.puts, *harness.put_writes(plan.config, writes, "task-1", "")]
    scalars = [s for put in puts for s in walk(put.data)]
    blobs = [bytes(s) for s in scalars if isinstance(s, (bytes, bytearray))]
    assert not any(secret.encode() in b for b in blobs)
    assert not any(secret in s for s in scalars if isinstance(s, str))
    assert any(REDACTED_SECRET.encode() in b for b in blobs)
    # redaction copies: the caller's secret is untouched
    assert leaf.get_secret_value() == (secret.encode() if as_bytes else secret)


@settings(max_examples=60, deadline=None)
@given(nested(VALUES))
def test_redact_secrets_returns_secret_free_containers_unchanged(value: Any) -> None:
    """A value holding no secret is returned by redact_secrets as the very same object."""
    assert redact_secrets(value) is value


def test_redact_secrets_rebuilds_each_container_type() -> None:
    """Every container kind holding a secret is rebuilt with its own type and the marker."""
    secret = SecretStr("hunter2")
    for kind in WRAPPERS:
        original = wrap(kind, secret, 1)
        redacted = redact_secrets(original)
        assert redacted is not original
        assert type(redacted) is type(original)
        assert "hunter2" not in repr(SERDE.dumps_typed(redacted))
        assert REDACTED_SECRET.encode() in SERDE.dumps_typed(redacted)[1]
    assert redact_secrets(SecretBytes(b"k")).get_secret_value() == REDACTED_SECRET.encode()


def test_planner_wraps_its_serde_once() -> None:
    """Planner redacts through a RedactingSerializer and does not wrap one twice."""
    assert isinstance(Planner(AGENT, serialization()).serde, RedactingSerializer)
    wrapped = RedactingSerializer(JsonPlusSerializer())
    assert Planner(AGENT, serialization(wrapped)).serde is wrapped


# -------------------------------------------------------------------- SPEC §3.4 worked examples


def test_constants_are_the_spec_values() -> None:
    """The thresholds these tests build boundaries around are SPEC §1.1's values."""
    assert (PART_SIZE, INLINE_LIMIT, CHUNK_SIZE) == (262_144, 1024, 32)
    assert (READ_BUDGET, MAX_IN_VALUES) == (2_097_152, 500)
    assert REDACTED_SECRET == "[REDACTED: secrets are not stored in checkpoints]"
    assert WRITES_IDX_MAP == {
        "__error__": -1,
        "__scheduled__": -2,
        "__interrupt__": -3,
        "__resume__": -4,
    }


def test_spec_document_keys() -> None:
    """Checkpoint, write and non-ASCII keys match SPEC §3.4 example 1."""
    planner = Planner(AGENT, serialization())
    assert planner.key("thread-1", "", "1f0b0000-0000-6000-8000-000000000001") == (
        "671a9b0142fc3bea83f277c94f3ec5b5ab5e55bf9f1ef1c5aa654841be732d88"
    )
    assert planner.key("thread-1", "", "1f0b0000-0000-6000-8000-000000000003", "task-1", -1) == (
        "b30fd9178d22bbe44e54dbb12aed7f7000f5480b4ac2ae0feda2d51089eae462"
    )
    assert planner.key("thréad ✓", "") == (
        "d76e7e009ecfff37d8e36469e1ebf238c9be4feee14e3178a3e6f1186267be5e"
    )


_JSON_LEAVES = (
    st.text()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.none()
    | st.booleans()
    | st.floats(allow_nan=True)
)
_JSON_VALUES = st.recursive(
    _JSON_LEAVES,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


@given(_JSON_VALUES)
def test_hashed_json_text_is_json_dumps_exactly(value: Any) -> None:
    """The JSON text keys and refs hash is `json.dumps` with its defaults, for any value
    (the fast path for lists of strings, ints and None included)."""
    assert json_text(value) == json.dumps(value)


def test_a_chunks_entries_hash_as_their_json_dumps() -> None:
    """A chunk's `[ref, size]` entries (written a pair at once) give `json.dumps`'s text,
    and pairs that only look alike (a bool, a float, text to escape) do too."""
    entries: list[Any] = [[f"e-{i:064x}", 100 + i] for i in range(32)]
    odd: list[Any] = [
        ['e-\u00e9"\n', -(2**70)],
        ["e-x", True],
        ("e-y", 1.5),
        [1, "e-z"],
        ["a", 1, 2],
    ]
    for value in (entries, odd, [*entries, *odd], [entries]):
        assert json_text(value) == json.dumps(value)
    assert chunk_ref(entries) == "c-" + hashlib.sha256(json.dumps(entries).encode()).hexdigest()


def test_spec_hello_element_chunk_and_list_blob_refs() -> None:
    """The "hello" element, its chunk and the list blob over it match SPEC §3.4 example 2."""
    kind, payload = SERDE.dumps_typed("hello")
    assert (kind, payload) == ("msgpack", b"\xa5hello")
    element = element_ref(kind, payload)
    assert element == "e-7d83bb30fe25a2f0b6add075cbeb81d6ac3b9d1767709ddb776bafdad13b033d"
    chunk = chunk_ref([[element, 6]])
    assert chunk == "c-f45778e06febf5503b3770d1e2798ccd3879eca8ed5af00ea85d700ab20d9d43"
    assert list_blob_ref([chunk]) == (
        "b-478fcdf0f525b6398666005484c6509eb7eb8e8e5573c72b80a5c9edbb4e7be9"
    )


def test_spec_value_blob_of_2000_chars() -> None:
    """A 2000-character string becomes the value blob of SPEC §3.4 example 3, payload inline."""
    ref = "b-3b156ae3fe58b4772b90217d80bbc56d10ba999b89a20c7be0715e33e32131ea"
    payload = b"\xda\x07\xd0" + b"S" * 2000
    assert value_blob_ref("msgpack", payload) == ref
    plan = Planner(AGENT, serialization()).plan_checkpoint(
        {"configurable": {"thread_id": "thread-1"}},
        make_checkpoint(1, {"summary": "S" * 2000}, {"summary": 1}),
        {},
    )
    assert plan.checkpoint.data["channels"]["summary"] == {"blob": ref}
    (blob,) = plan.puts[:-1]
    assert (blob.collection, blob.key) == (
        BLOBS,
        Planner(AGENT, serialization()).key("thread-1", ref),
    )
    assert blob.data["value"] == {"kind": "msgpack", "payload": payload}


def test_spec_parts_of_262244_chars() -> None:
    """A 262,249-byte payload gives the two parts, keys and value blob of SPEC §3.4 example 4."""
    digest = "7cee303cdba1cbe246c1ff3e29e57247c1ae5f197a3206d2cd8f4f13335d1cf4"
    plan = Planner(AGENT, serialization()).plan_checkpoint(
        {"configurable": {"thread_id": "thread-1"}},
        make_checkpoint(1, {"big": "B" * 262244}, {"big": 1}),
        {},
    )
    part0, part1, blob, _ = plan.puts
    assert (part0.data["ref"], part1.data["ref"]) == (f"p-{digest}.0", f"p-{digest}.1")
    assert part0.key == "a634cf4fd35087802b097f2a47739b3de4f1b4b4cd5b33444de8bf64236f2bc8"
    assert (len(part0.data["payload"]), len(part1.data["payload"])) == (262144, 105)
    assert part0.data["payload"][:5] == b"\xdb\x00\x04\x00\x64"
    assert blob.data["ref"] == "b-8d7befbbe990d9a9ddb783b5a7bc422c28edc871dd4d08b03b28e0e67e58a7c8"
    assert blob.key == "96468e922b6b076bd7f9148b8086fd3073f4a5bc558f62462552dafd4faaa60b"
    assert blob.data["value"] == {
        "kind": "msgpack",
        "size": 262249,
        "parts": [f"p-{digest}.0", f"p-{digest}.1"],
    }


# --------------------------------------------------------------------------- reads: batches


def _refs(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:064x}" for i in range(count)]


def test_batches_of_blob_refs_measured_in_spec() -> None:
    """20 channel blob refs are read in batches of 7, 7 and 6 (SPEC §5.4)."""
    channels = {f"ch{i}": {"blob": ref} for i, ref in enumerate(_refs("b", 20))}
    found = batches(references({"channels": channels}))
    assert [(b.collection, len(b.refs)) for b in found] == [(BLOBS, 7), (BLOBS, 7), (BLOBS, 6)]
    assert [r for b in found for r in b.refs] == [e["blob"] for e in channels.values()]


def test_batches_of_chunk_refs_measured_in_spec() -> None:
    """600 chunk refs of a list blob are read in batches of 287, 287 and 26 (SPEC §5.4)."""
    found = batches(references({"chunks": _refs("c", 600)}))
    assert [(b.collection, len(b.refs)) for b in found] == [(ITEMS, 287), (ITEMS, 287), (ITEMS, 26)]


def test_batches_of_small_elements_measured_in_spec() -> None:
    """1200 elements of 100 bytes are read in batches of 499, 499 and 202 (SPEC §5.4)."""
    found = batches(references({"elements": [[ref, 100] for ref in _refs("e", 1200)]}))
    assert [len(b.refs) for b in found] == [499, 499, 202]


def test_batches_stop_at_max_in_values() -> None:
    """Tiny elements are cut at 500 refs per batch, whatever the byte estimate."""
    found = batches(references({"elements": [[ref, 1] for ref in _refs("e", 1200)]}))
    assert [len(b.refs) for b in found] == [MAX_IN_VALUES, MAX_IN_VALUES, 200]


def test_batches_group_by_first_appearance_and_keep_last_estimate() -> None:
    """Refs are grouped by collection in first-appearance order, de-duplicated, last estimate."""
    p1, p2 = _refs("p", 2)
    (b1,) = _refs("b", 1)
    (e1,) = _refs("e", 1)
    found = batches([(p1, 1), (b1, 1), (p2, 1), (e1, 1)])
    assert [(b.collection, b.refs) for b in found] == [
        (PARTS, [p1, p2]),
        (BLOBS, [b1]),
        (ITEMS, [e1]),
    ]
    b1, b2 = _refs("b", 2)
    found = batches([(b1, READ_BUDGET), (b2, 1), (b1, 1)])
    assert [b.refs for b in found] == [[b1, b2]]


# --------------------------------------------------------------------------- versions and retention


def test_next_version() -> None:
    """next_version maps None to 1, ints to +1 and strings to the zero-suffixed 32-digit form."""
    assert next_version(None) == 1
    assert next_version(1) == 2
    assert next_version(41) == 42
    six = "00000000000000000000000000000006.00000000000000.0"
    assert next_version("5.0.5234") == six
    assert next_version("00000000000000000000000000000005.0.5234") == six
    assert next_version(six) == "00000000000000000000000000000007.00000000000000.0"


def test_kept_checkpoints_rejects_keep_last_below_one() -> None:
    """keep_last below 1 raises ValueError."""
    for bad in (0, -1):
        with pytest.raises(ValueError, match="keep_last"):
            kept_checkpoints([Retained("", "a", None)], bad)


def test_kept_checkpoints_keeps_newest_roots_and_their_linked_children() -> None:
    """Roots keep their newest keep_last ids; a linked child is kept iff its root parent is kept."""
    stored = [
        Retained("", "r1", None),
        Retained("", "r3", None),
        Retained("", "r2", None),
        Retained("sub:a", "s1", "r1"),  # linked to a pruned root
        Retained("sub:a", "s9", "r1"),  # newest of its namespace, still pruned
        Retained("sub:b", "s2", "r3"),
        Retained("sub:b", "s3", "r2"),
    ]
    assert kept_checkpoints(stored, 2) == {("", "r3"), ("", "r2"), ("sub:b", "s2"), ("sub:b", "s3")}
    assert kept_checkpoints(stored, 1) == {("", "r3"), ("sub:b", "s2")}


def test_kept_checkpoints_unlinked_children_keep_their_own_newest() -> None:
    """Children without parents[""], or in a thread without roots, keep their namespace's newest."""
    unlinked = [Retained("sub:a", f"s{i}", None) for i in range(5)]
    with_root = [Retained("", "r1", None), *unlinked]
    assert kept_checkpoints(with_root, 2) == {("", "r1"), ("sub:a", "s4"), ("sub:a", "s3")}
    orphans = [Retained("sub:a", f"s{i}", "gone") for i in range(3)] + [Retained("sub:b", "t", "x")]
    assert kept_checkpoints(orphans, 1) == {("sub:a", "s2"), ("sub:b", "t")}


@pytest.mark.parametrize("ns", ["", "sub:a"])
def test_kept_checkpoints_count_each_id_once(ns: str) -> None:
    """keep_last counts distinct ids: a checkpoint in both v1 and v2 does not evict an older one."""
    stored = [Retained(ns, "a", None), Retained(ns, "b", None), Retained(ns, "b", None)]
    assert kept_checkpoints(stored, 2) == {(ns, "a"), (ns, "b")}


def test_kept_checkpoints_on_the_vector_thread() -> None:
    """keep_last=1 on the vector thread keeps c3 and sub1, as observed in SPEC §6.2."""
    steps = {s["name"]: s for s in inputs() if "checkpoint" in s}
    stored = [
        Retained(
            s["config"]["configurable"].get("checkpoint_ns", ""),
            s["checkpoint"]["id"],
            root_parent(merged_metadata(s["config"], s["metadata"])),
        )
        for s in steps.values()
    ]
    sub1 = steps["sub1"]
    assert kept_checkpoints(stored, 1) == {
        ("", steps["c3"]["checkpoint"]["id"]),
        (sub1["config"]["configurable"]["checkpoint_ns"], sub1["checkpoint"]["id"]),
    }
    assert len(kept_checkpoints(stored, 3)) == 4


# --------------------------------------------------------------------------- errors


def _stored_list_thread() -> tuple[Harness, dict[str, Any]]:
    harness = Harness()
    values = {"messages": [f"message {i} " + "m" * 60 for i in range(40)], "big": "B" * 262244}
    plan, _ = harness.put(
        {"configurable": {"thread_id": THREAD}},
        make_checkpoint(1, values, {"messages": 1, "big": 1}),
        {},
    )
    return harness, plan.checkpoint.data


def test_missing_referenced_document_is_named() -> None:
    """Resolving a checkpoint whose element document is gone raises MissingDocumentsError on it."""
    harness, data = _stored_list_thread()
    victim = next(
        k for k in harness.store.docs if k[0] == ITEMS and harness.store.docs[k]["ref"][0] == "e"
    )
    ref = harness.store.docs.pop(victim)["ref"]
    with pytest.raises(MissingDocumentsError) as caught:
        harness.store.resolve([data])
    assert caught.value.refs == [ref]
    assert ref in str(caught.value)


def test_restore_without_a_fetched_blob_names_it() -> None:
    """restore raises MissingDocumentsError naming a channel blob absent from `fetched`."""
    harness, data = _stored_list_thread()
    fetched, _ = harness.store.resolve([data])
    blob = data["channels"]["big"]["blob"]
    del fetched[blob]
    with pytest.raises(MissingDocumentsError, match=blob):
        restore(data, [], fetched, harness.planner.loads)


def test_split_value_with_wrong_size_is_a_protocol_error() -> None:
    """A split value whose joined parts differ from its recorded size raises ProtocolError."""
    harness, data = _stored_list_thread()
    fetched, _ = harness.store.resolve([data])
    blob = fetched[data["channels"]["big"]["blob"]]
    last = blob["value"]["parts"][-1]
    fetched[last] = {**fetched[last], "payload": fetched[last]["payload"][:-1]}
    with pytest.raises(ProtocolError, match="recorded size"):
        restore(data, [], fetched, harness.planner.loads)
    with pytest.raises(ProtocolError, match="recorded size"):
        raw_value(blob["value"], fetched)
    intact, _ = harness.store.resolve([data])
    assert raw_value(blob["value"], intact)[1] == payload_of("B" * 262244)


def test_unknown_schema_is_a_protocol_error() -> None:
    """restore refuses a checkpoint document whose _schema is neither 1 nor 2."""
    with pytest.raises(ProtocolError, match="schema"):
        restore({"_schema": 3}, [], {}, SERDE.loads_typed)


@pytest.mark.parametrize(
    "config",
    [
        {},
        {"configurable": {}},
        {"configurable": {"thread_id": ""}},
        {"configurable": {"thread_id": 7}},
    ],
)
def test_checkpoint_config_without_thread_id_is_refused(config: dict[str, Any]) -> None:
    """plan_checkpoint raises a ProtocolError naming thread_id when the config lacks one."""
    with pytest.raises(ProtocolError, match="thread_id|configurable"):
        Planner(AGENT, serialization()).plan_checkpoint(config, make_checkpoint(1, {}, {}), {})


def test_write_config_without_checkpoint_id_is_refused() -> None:
    """plan_writes raises a ProtocolError naming checkpoint_id when the config has none."""
    with pytest.raises(ProtocolError, match="checkpoint_id"):
        Planner(AGENT, serialization()).plan_writes(
            {"configurable": {"thread_id": THREAD}}, [("a", 1)], "task-1"
        )


@pytest.mark.parametrize("write", [("a",), ("a", 1, 2), 5, None, (1, "value")])
def test_malformed_writes_are_refused(write: Any) -> None:
    """plan_writes raises a ProtocolError for a write that is not a (str channel, value) pair."""
    config = {"configurable": {"thread_id": THREAD, "checkpoint_id": checkpoint_id(1)}}
    with pytest.raises(ProtocolError, match="pair|channel"):
        Planner(AGENT, serialization()).plan_writes(config, [("ok", 1), write], "task-1")


def test_checkpoint_without_id_is_refused() -> None:
    """plan_checkpoint raises a ProtocolError when the checkpoint has no id."""
    checkpoint = make_checkpoint(1, {}, {})
    del checkpoint["id"]
    with pytest.raises(ProtocolError, match="id"):
        Planner(AGENT, serialization()).plan_checkpoint(
            {"configurable": {"thread_id": THREAD}}, checkpoint, {}
        )


@pytest.mark.parametrize("value", [object(), [1, object()], {"k": lambda: None}])
def test_unserializable_values_raise_a_type_error_naming_the_type(value: Any) -> None:
    """A channel or write value LangGraph cannot serialize raises TypeError naming its type."""
    planner = Planner(AGENT, serialization())
    config = {"configurable": {"thread_id": THREAD, "checkpoint_id": checkpoint_id(1)}}
    with pytest.raises(TypeError, match="not msgpack serializable"):
        planner.plan_checkpoint(config, make_checkpoint(2, {"v": value}, {"v": 1}), {})
    with pytest.raises(TypeError, match="not msgpack serializable"):
        planner.plan_writes(config, [("v", value)], "task-1")
