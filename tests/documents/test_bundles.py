"""Thread bundles: `threadloom bundle` / `unbundle` and `threadloom.documents.bundles`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import zstandard
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.engine.test_graphs import LONG, agent_graph, history, subgraph_graph, thread
from threadloom import Saver
from threadloom.cli import main
from threadloom.documents import bundles
from threadloom.errors import EngineError, ProtocolError
from threadloom.protocol.constants import PART_SIZE

THREADS = ("agent-1", "agent-2", "sub", "parts")


def source(path: Path) -> None:
    """A file with two agent conversations, a subgraph thread paused at an interrupt
    (pending writes, a child namespace) and a thread whose value is split into parts."""
    with Saver.from_conn_string(str(path)) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        for name in THREADS[:2]:
            graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h1")]}, thread(name))
            graph.invoke({"messages": [HumanMessage(LONG, id="h2")]}, thread(name))
        inner = subgraph_graph().compile(checkpointer=saver)
        inner.invoke({"messages": ["hi"], "notes": [], "done": False}, thread("sub"))
        made = empty_checkpoint()
        made["channel_values"] = {"big": os.urandom(PART_SIZE * 2 + 10)}
        made["channel_versions"] = {"big": 1}
        saver.put(
            {"configurable": {"thread_id": "parts", "checkpoint_ns": ""}},
            made,
            {"step": 1},
            made["channel_versions"],
        )


def histories(path: Path) -> dict[str, Any]:
    """Every thread's get_state_history, and the raw tuples of every namespace."""
    with Saver.from_conn_string(str(path)) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        found: dict[str, Any] = {name: history(graph, thread(name)) for name in THREADS[:2]}
        for name in THREADS[2:]:
            found[name] = [
                (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
                for t in saver.list({"configurable": {"thread_id": name}})
            ]
    return found


def test_a_bundle_round_trips_into_an_empty_file_byte_for_byte(tmp_path: Path) -> None:
    """Threads bundled from A and imported into an empty B have the same history in B, and
    bundling B again gives the same bytes."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    source(a)
    assert main(["bundle", str(a), "--to-file", str(tmp_path / "a.tlb")]) == 0
    assert main(["unbundle", str(b), "--from-file", str(tmp_path / "a.tlb"), "--apply"]) == 0
    assert histories(b) == histories(a)
    assert histories(a)["parts"] and histories(a)["sub"]
    assert main(["bundle", str(b), "--to-file", str(tmp_path / "b.tlb")]) == 0
    assert (tmp_path / "b.tlb").read_bytes() == (tmp_path / "a.tlb").read_bytes()


def test_a_bundle_describes_itself_and_holds_the_export_documents(tmp_path: Path) -> None:
    """The first line says what the file holds; the content is the scope's schema-2
    documents as export sends them, each under its own key."""
    from threadloom.engine import CheckpointStore, File
    from threadloom.protocol import DEFAULT_AGENT_ID, DEFAULT_NAMESPACE

    a = tmp_path / "a.db"
    source(a)
    out = tmp_path / "one.tlb"
    assert main(["bundle", "--db", str(a), "agent-1", "--to-file", str(out)]) == 0
    header = json.loads(out.read_bytes().partition(b"\n")[0])
    assert header["format"] == "threadloom-bundle" and header["threads"] == ["agent-1"]
    read = bundles.read(out)
    file = File.open(str(a), readonly=True)
    try:
        store = CheckpointStore(file, namespace=DEFAULT_NAMESPACE, agent_id=DEFAULT_AGENT_ID)
        exported = {(c, k): d for c, k, d in store.view.documents("agent-1")}
        store.close()
    finally:
        file.close()
    assert {(c, k): d for c, k, d in read.records} == exported
    assert header["documents"] == len(exported)


def test_a_damaged_bundle_imports_nothing(tmp_path: Path) -> None:
    """A changed byte in the content, or a value whose payload no longer hashes to its
    ref (even with the content digest redone), is refused before anything is stored."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    source(a)
    good = tmp_path / "a.tlb"
    assert main(["bundle", str(a), "parts", "--to-file", str(good)]) == 0
    raw = bytearray(good.read_bytes())
    raw[-20] ^= 0xFF
    flipped = tmp_path / "flipped.tlb"
    flipped.write_bytes(bytes(raw))
    with pytest.raises(ProtocolError, match="damaged thread bundle"):
        bundles.read(flipped)

    read = bundles.read(good)
    for _, _, data in read.records:
        if str(data.get("ref", "")).startswith("p-"):
            payload = bytes(data["payload"])
            data["payload"] = bytes([payload[0] ^ 0xFF]) + payload[1:]
            break
    import blake3
    import ormsgpack

    content = ormsgpack.packb([list(r) for r in read.records])
    header = {**read.header, "content_bytes": len(content)}
    header["content_blake3"] = blake3.blake3(content).hexdigest()
    forged = tmp_path / "forged.tlb"
    forged.write_bytes(
        json.dumps(header, sort_keys=True).encode() + b"\n" + zstandard.compress(content)
    )
    with pytest.raises(ProtocolError, match="do not verify"):
        bundles.read(forged)
    assert main(["unbundle", str(b), "--from-file", str(forged), "--apply"]) == 1
    assert not b.exists()


def test_unbundle_is_a_dry_run_unless_apply_and_a_rerun_copies_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --apply nothing is written (not even a new file); with it, the threads are
    copied once and a second import finds them present."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    source(a)
    out = tmp_path / "a.tlb"
    assert main(["bundle", str(a), "agent-1", "--to-file", str(out), "--json"]) == 0
    capsys.readouterr()
    assert main(["unbundle", str(b), "--from-file", str(out), "--json"]) == 0
    dry = json.loads(capsys.readouterr().out)
    assert dry["mode"] == "dry-run" and dry["missing"] == dry["checkpoints"] > 0
    assert not b.exists()
    assert main(["unbundle", str(b), "--from-file", str(out), "--apply", "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)
    assert applied["copied"] == dry["missing"] and applied["documents_copied"] > 0
    assert main(["unbundle", str(b), "--from-file", str(out), "--apply", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["present"] == again["checkpoints"] and again["documents_copied"] == 0


def test_bundles_import_into_another_agent_id(tmp_path: Path) -> None:
    """A bundle imported into another scope's agent id is re-keyed and reads back."""
    a, b = tmp_path / "a.db", tmp_path / "b.db"
    source(a)
    out = tmp_path / "a.tlb"
    assert main(["bundle", str(a), "agent-2", "--to-file", str(out)]) == 0
    assert (
        main(["unbundle", str(b), "--from-file", str(out), "--agent-id", "other", "--apply"]) == 0
    )
    assert main(["bundle", str(b), "--agent-id", "other", "--to-file", str(tmp_path / "b")]) == 0
    theirs = bundles.read(tmp_path / "b")
    assert theirs.header["agent_id"] == "other" and theirs.header["threads"] == ["agent-2"]
    ours = bundles.read(out)
    assert [d["checkpoint_id"] for c, _, d in theirs.records if c.endswith("checkpoints_v2")] == [
        d["checkpoint_id"] for c, _, d in ours.records if c.endswith("checkpoints_v2")
    ]


def test_bundle_refuses_a_missing_thread_and_a_file_that_is_not_a_bundle(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unknown thread and an existing OUT that is not a bundle are errors with a hint;
    OUT stays byte for byte; a file that is not a bundle is not imported."""
    a = tmp_path / "a.db"
    source(a)
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    assert main(["bundle", str(a), "nope", "--to-file", str(tmp_path / "x.tlb")]) == 1
    err = capsys.readouterr().err
    assert "error: no thread 'nope'" in err and "hint:" in err
    assert main(["bundle", str(a), "--to-file", str(notes)]) == 1
    assert "not a thread bundle" in capsys.readouterr().err
    assert notes.read_text() == "mine"
    assert main(["unbundle", str(tmp_path / "b.db"), "--from-file", str(notes)]) == 1
    assert "not a thread bundle" in capsys.readouterr().err
    with pytest.raises(EngineError):
        bundles.write(tmp_path / "missing" / "x.tlb", b"")


def test_store_items_under_a_prefix_travel_with_their_times(tmp_path: Path) -> None:
    """With --store-prefix the Store items under it are carried (others are not), keep
    their times in the importing file, and the file bundles to the same bytes again."""
    import time

    from threadloom import Store

    a, b = tmp_path / "a.db", tmp_path / "b.db"
    source(a)
    with Store(a) as store:
        store.put(("acme", "user", "u1"), "profile", {"name": "Ada", "langs": ["fr", "en"]})
        time.sleep(0.01)
        store.put(("acme", "user", "u1", "notes"), "n1", {"text": "likes trains"})
        store.put(("other",), "x", {"secret": True})
    out = tmp_path / "a.tlb"
    args = ["bundle", str(a), "agent-1", "--store-prefix", "acme.user", "--to-file", str(out)]
    assert main(args) == 0
    assert bundles.read(out).header["store_items"] == 2
    assert main(["unbundle", str(b), "--from-file", str(out), "--apply"]) == 0

    def items(path: Path, prefix: tuple[str, ...]) -> list[Any]:
        with Store(path, readonly=True) as store:
            return sorted(
                (i.namespace, i.key, i.value, i.created_at, i.updated_at)
                for i in store.search(prefix, limit=100)
            )

    assert items(b, ("acme",)) == items(a, ("acme",)) and len(items(b, ("acme",))) == 2
    assert items(b, ("other",)) == []
    again = tmp_path / "b.tlb"
    args = ["bundle", str(b), "--store-prefix", "acme.user", "--to-file", str(again)]
    assert main(args) == 0
    assert again.read_bytes() == out.read_bytes()
