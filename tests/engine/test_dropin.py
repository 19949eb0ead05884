"""The savers as drop-ins for LangGraph's: `setup()`, `":memory:"`, `serde` assigned after
construction, `with_allowlist()`, and arguments checked before a file is created."""

from __future__ import annotations

import asyncio
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pydantic
import pytest
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from tests.engine.test_durability import checkpoint, config, put
from threadloom import AsyncSaver, Saver
from threadloom.errors import InvalidArgumentError

ROOT = Path(__file__).resolve().parents[2]
KEY = b"0123456789abcdef"


class Profile(pydantic.BaseModel):
    """A pydantic value a graph's state may hold (strict msgpack needs it allowlisted)."""

    name: str
    age: int


def test_setup_and_asetup_are_no_ops(db_path: Path) -> None:
    """`setup()` and `asetup()` exist, as SqliteSaver's do, and change nothing."""
    with Saver.from_conn_string(str(db_path)) as saver:
        put(saver, {"a": 1})
        assert saver.setup() is None
        assert asyncio.run(saver.asetup()) is None
        assert saver.get_tuple(config()) is not None
    opened = AsyncSaver(db_path)
    try:
        assert asyncio.run(opened.asetup()) is None
        opened.setup()
    finally:
        opened.close()


def test_memory_saver_is_private_and_shared_by_its_threads() -> None:
    """`":memory:"` is one database per saver, seen by every thread using it, gone when it
    closes; nothing is written to disk."""
    before = set(os.listdir("."))
    with Saver.from_conn_string(":memory:") as saver, Saver.from_conn_string(":memory:") as other:
        put(saver, {"a": "x" * 5000})
        seen: list[Any] = []
        reader = threading.Thread(target=lambda: seen.append(saver.get_tuple(config())))
        reader.start()
        reader.join()
        assert seen[0] is not None and seen[0].checkpoint["channel_values"]["a"] == "x" * 5000
        assert other.get_tuple(config()) is None
        writers = [
            threading.Thread(target=put, args=(saver, {"n": i}), kwargs={"thread_id": f"w{i}"})
            for i in range(4)
        ]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join()
        assert len(list(saver.list(None))) == 5
    assert set(os.listdir(".")) == before


def test_async_memory_saver_from_conn_string() -> None:
    """`AsyncSaver.from_conn_string(":memory:")` works from the event loop's worker threads."""

    async def run() -> Any:
        async with AsyncSaver.from_conn_string(":memory:") as saver:
            made = checkpoint({"a": 1})
            stored = await saver.aput(config(), made, {}, made["channel_versions"])
            return await saver.aget_tuple(stored)

    found = asyncio.run(run())
    assert found is not None and found.checkpoint["channel_values"] == {"a": 1}


@pytest.mark.parametrize("namespace", ["", "a\0b"])
def test_bad_namespace_creates_no_file(tmp_path: Path, namespace: str) -> None:
    """A namespace the engine refuses is refused before the file is created."""
    path = tmp_path / "n.db"
    with pytest.raises(InvalidArgumentError, match="namespace"):
        Saver(path, namespace=namespace)
    with pytest.raises(InvalidArgumentError, match="agent_id"):
        Saver(path, agent_id="")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("serde", ["json", object(), 5], ids=["str", "object", "int"])
def test_a_serde_that_is_not_a_serializer_is_refused(tmp_path: Path, serde: Any) -> None:
    """A serde without dumps_typed/loads_typed (or dumps/loads) is refused when the saver
    is made, before its file, and when assigned later (the saver keeps its serializer);
    before, a put failed with "'str' object has no attribute 'dumps'"."""
    path = tmp_path / "s.db"
    with pytest.raises(InvalidArgumentError, match="serde must be a LangGraph serializer"):
        Saver(path, serde=serde)
    assert list(tmp_path.iterdir()) == []
    with Saver.from_conn_string(path) as saver:
        kept = saver.serde
        with pytest.raises(InvalidArgumentError, match="serde"):
            saver.serde = serde
        assert saver.serde is kept
        put(saver, {"k": "v"})
    # An untyped serializer (dumps/loads) is fine.
    with Saver.from_conn_string(tmp_path / "untyped.db", serde=pickle) as saver:
        put(saver, {"k": "w"})


def _secret_round(saver: Saver) -> tuple[Any, str]:
    stored = put(saver, {"small": "SECRET-SMALL-ab12", "list": ["SECRET-ITEM-ef56"] * 3})
    saver.put_writes(stored, [("small", "SECRET-WRITE-kl12")], "task-1")
    got = saver.get_tuple(stored)
    return got, repr(saver.documents("t"))


def test_serde_assigned_after_construction_encrypts(db_path: Path) -> None:
    """`saver.serde = EncryptedSerializer(...)` (LangGraph's sqlite_aes set-up) encrypts
    every later value and pending write, and they read back."""
    with Saver.from_conn_string(str(db_path)) as saver:
        saver.serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
        got, documents = _secret_round(saver)
    assert got.checkpoint["channel_values"]["small"] == "SECRET-SMALL-ab12"
    assert got.pending_writes[0][2] == "SECRET-WRITE-kl12"
    raw = b"".join(p.read_bytes() for p in db_path.parent.glob(db_path.name + "*"))
    for marker in ("SECRET-SMALL", "SECRET-ITEM", "SECRET-WRITE"):
        assert marker not in documents, marker
        assert marker.encode() not in raw, marker
    assert "msgpack+aes" in documents
    with (
        Saver.from_conn_string(str(db_path)) as keyless,
        pytest.raises(NotImplementedError, match=r"msgpack\+aes"),
    ):
        keyless.get_tuple(config())  # without the key the values are unreadable
    # Without the assignment the same round is readable in the documents: the check can fail.
    with Saver.from_conn_string(str(db_path.parent / "plain.db")) as plain:
        _, documents = _secret_round(plain)
    assert "SECRET-SMALL" in documents and "SECRET-WRITE" in documents


def test_with_allowlist_clone_decodes_allowlisted_classes(db_path: Path) -> None:
    """Under strict msgpack, `with_allowlist` gives a clone that restores an allowlisted
    pydantic class as that class, while the original still refuses it; closing the clone
    leaves the original open."""
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    with Saver.from_conn_string(str(db_path), serde=strict) as saver:
        put(saver, {"profile": Profile(name="ada", age=36)})
        clone = saver.with_allowlist([(__name__, "Profile")])
        assert clone is not saver and clone.serde is not saver.serde
        restored = clone.get_tuple(config())
        assert restored is not None
        assert restored.checkpoint["channel_values"]["profile"] == Profile(name="ada", age=36)
        original = saver.get_tuple(config())
        assert original is not None
        assert not isinstance(original.checkpoint["channel_values"]["profile"], Profile)
        clone.close()  # type: ignore[attr-defined]
        assert saver.get_tuple(config()) is not None


_GRAPH = """
import pydantic, sys
from typing import Optional
from langgraph.graph import StateGraph, START
from threadloom import Saver

class Profile(pydantic.BaseModel):
    name: str

class State(pydantic.BaseModel):
    profile: Optional[Profile] = None

def node(state: State) -> dict:
    return {"profile": Profile(name="ada")}

builder = StateGraph(State)
builder.add_node("node", node)
builder.add_edge(START, "node")
with Saver.from_conn_string(sys.argv[1]) as saver:
    graph = builder.compile(checkpointer=saver)
    graph.invoke({}, {"configurable": {"thread_id": "t"}})
with Saver.from_conn_string(sys.argv[1]) as saver:
    graph = builder.compile(checkpointer=saver)
    got = graph.get_state({"configurable": {"thread_id": "t"}}).values["profile"]
    print(type(got).__name__)
"""


def test_strict_msgpack_graph_gets_its_pydantic_state_back(db_path: Path) -> None:
    """With LANGGRAPH_STRICT_MSGPACK=true a graph's pydantic state value comes back as its
    class (the graph's allowlist reaches the saver), in a fresh process's saver too."""
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    done = subprocess.run(
        [sys.executable, "-c", _GRAPH, str(db_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Profile", done.stderr[-2000:]
