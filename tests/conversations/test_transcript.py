"""`saver.messages`: the tail of a conversation, read from the last chunks of its list."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.engine.test_graphs import agent_graph
from threadloom import AsyncSaver, Saver
from threadloom.engine.checkpoints.values import Values
from threadloom.errors import InvalidArgumentError


def conversation(saver: Saver, thread_id: str, turns: int, *, every: int = 1) -> list[Any]:
    """Write a chat of `turns` question/answer pairs, one checkpoint per `every` turns."""
    messages: list[Any] = []
    parent: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    for turn in range(1, turns + 1):
        messages = [
            *messages,
            HumanMessage(content=f"question {turn}", id=f"h{turn}"),
            AIMessage(content=f"answer {turn} " + "words " * 20, id=f"a{turn}"),
        ]
        if turn % every and turn != turns:
            continue
        made = empty_checkpoint()
        made["id"] = f"1f0d0000-0000-6000-8000-{turn:012d}"
        made["channel_values"] = {"messages": list(messages)}
        made["channel_versions"] = {"messages": turn}
        parent = saver.put(parent, made, {"source": "loop", "step": turn, "parents": {}}, {})
    return messages


def ids(page: Any) -> list[str]:
    return [m.id for m in page]


def test_the_last_page_and_older_pages_cover_the_list(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        messages = conversation(saver, "t", 50)
        page = saver.messages("t")
        assert (page.total, page.start, len(page)) == (100, 80, 20)
        assert ids(page) == [m.id for m in messages[-20:]]
        assert page[0] == messages[80] and isinstance(page[-1], AIMessage)
        seen: list[str] = []
        while True:
            seen = ids(page) + seen
            if page.older is None:
                break
            page = saver.messages("t", before=page.older, limit=30)
        assert seen == [m.id for m in messages]
        by_id = saver.messages("t", before="h10", limit=3)
        assert ids(by_id) == ["a8", "h9", "a9"] and by_id.start == 15
        assert ids(saver.messages("t", before="h1")) == []
        assert (
            ids(saver.messages("t", before=0)) == [] and saver.messages("t", before=0).total == 100
        )


def test_a_given_checkpoint_and_a_small_inline_list(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        conversation(saver, "t", 30)
        old = saver.messages("t", checkpoint_id="1f0d0000-0000-6000-8000-000000000002", limit=50)
        assert ids(old) == ["h1", "a1", "h2", "a2"] and old.total == 4
        assert old.checkpoint_id == "1f0d0000-0000-6000-8000-000000000002"
        with pytest.raises(InvalidArgumentError, match="no root checkpoint"):
            saver.messages("t", checkpoint_id="nope")
        empty = saver.messages("missing")
        assert (empty.total, empty.checkpoint_id, list(empty)) == (0, None, [])
        assert saver.messages("t", channel="absent").total == 0


def test_the_json_form_is_plain_and_indexes_each_message(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke(
            {"messages": [HumanMessage(content="six times two?")]},
            {"configurable": {"thread_id": "g"}},
        )
        page = saver.messages("g")
        assert [type(m) for m in page] == [HumanMessage, AIMessage, ToolMessage, AIMessage]
        shown = page.as_json()
        assert shown["total"] == 4 and shown["older"] is None
        first, call, result, answer = shown["messages"]
        assert (
            first["index"] == 0
            and first["type"] == "human"
            and first["content"] == "six times two?"
        )
        assert call["tool_calls"] == [
            {"id": "call-1", "name": "multiply", "args": {"a": 6, "b": 2}}
        ]
        assert result["type"] == "tool" and result["tool_call_id"] == "call-1"
        assert answer["content"].startswith("The answer is 12.")
        import json

        json.dumps(shown)  # JSON-ready


def test_a_tail_reads_a_bounded_number_of_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reading 20 messages of a 2,000-message list fetches the list blob, the chunks of the
    page and the last one (which proves the cuts), and 20 elements."""
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        conversation(saver, "t", 1000, every=100)
        asked: list[int] = []
        original = Values.values

        def counting(self: Values, conn: Any, thread: int, refs: Any) -> Any:
            refs = list(refs)
            asked.append(len(refs))
            return original(self, conn, thread, refs)

        monkeypatch.setattr(Values, "values", counting)
        saver.checkpoints.scope.cache.clear()
        page = saver.messages("t", limit=20)
        assert ids(page)[-1] == "a1000" and page.total == 2000
        assert sum(asked) <= 1 + 2 + 20, asked  # the list blob, two chunks, 20 elements
        asked.clear()
        page = saver.messages("t", limit=20, before=1000)
        assert ids(page)[0] == "h491" and sum(asked) <= 1 + 3 + 20, asked  # and the last chunk


def test_bad_arguments_say_what_to_pass(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        conversation(saver, "t", 40)
        for bad in (
            {"limit": 0},
            {"limit": True},
            {"limit": 5000},
            {"before": ""},
            {"before": 1.5},
        ):
            with pytest.raises(InvalidArgumentError):
                saver.messages("t", **bad)
        with pytest.raises(InvalidArgumentError, match="names no message"):
            saver.messages("t", before="no-such-id")


def test_the_async_twin_reads_the_same_page(tmp_path: Path) -> None:
    path = str(tmp_path / "m.db")
    with Saver.from_conn_string(path) as saver:
        conversation(saver, "t", 40)

    async def main() -> list[str]:
        async with AsyncSaver.from_conn_string(path) as saver:
            return ids(await saver.amessages("t", limit=5))

    assert asyncio.run(main()) == ["a38", "h39", "a39", "h40", "a40"]


def test_a_list_cut_otherwise_by_another_writer_is_placed_by_counting(tmp_path: Path) -> None:
    """An imported list whose first chunk holds 10 elements, then 32, 32, 32."""
    from threadloom.protocol import BLOBS, CHECKPOINTS, ITEMS

    with Saver.from_conn_string(str(tmp_path / "a.db")) as source:
        messages = [
            HumanMessage(content=f"message {i} " + "w " * 10, id=f"m{i}") for i in range(106)
        ]
        made = empty_checkpoint()
        made["id"] = "1f0d0000-0000-6000-8000-000000000001"
        made["channel_values"] = {"messages": messages}
        made["channel_versions"] = {"messages": 1}
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        source.put(config, made, {"source": "loop", "step": 1, "parents": {}}, {})
        docs = [(c, dict(d)) for c, _, d in source.documents("t")]
    blob = next(d for c, d in docs if c == BLOBS and "chunks" in d)
    chunks = {d["ref"]: d for c, d in docs if c == ITEMS and "elements" in d}
    entries = [e for ref in blob["chunks"] for e in chunks[ref]["elements"]]
    cuts = [entries[:10], entries[10:42], entries[42:74], entries[74:]]
    template = next(iter(chunks.values()))
    moved = [
        (c, d) for c, d in docs if "elements" not in d and "chunks" not in d and c != CHECKPOINTS
    ]
    moved += [
        (ITEMS, {**template, "ref": f"c-cut{i}", "elements": cut}) for i, cut in enumerate(cuts)
    ]
    moved.append((BLOBS, {**blob, "chunks": [f"c-cut{i}" for i in range(4)]}))
    moved += [(c, d) for c, d in docs if c == CHECKPOINTS]
    with Saver.from_conn_string(str(tmp_path / "b.db")) as target:
        target.checkpoints.view.import_documents(moved)
        for before in (70, 60, 106, 40, 15, None):
            end = 106 if before is None else before
            page = target.messages("t", limit=20, before=before)
            assert ids(page) == [f"m{i}" for i in range(max(0, end - 20), end)], before


def test_an_encrypting_serializer_still_pages_and_finds_ids(tmp_path: Path) -> None:
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"k" * 16)
    with Saver.from_conn_string(str(tmp_path / "m.db"), serde=serde) as saver:
        for thread_id, messages in (
            ("small", [HumanMessage(content="hi", id="h1"), AIMessage(content="hello", id="a1")]),
            ("big", [HumanMessage(content=f"q{i} " * 40, id=f"h{i}") for i in range(50)]),
        ):
            made = empty_checkpoint()
            made["id"] = "1f0d0000-0000-6000-8000-000000000001"
            made["channel_values"] = {"messages": messages}
            made["channel_versions"] = {"messages": 1}
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            saver.put(config, made, {"source": "loop", "step": 1, "parents": {}}, {})
        small = saver.messages("small")
        assert ids(small) == ["h1", "a1"] and small.total == 2
        assert [m["content"] for m in small.as_json()["messages"]] == ["hi", "hello"]
        assert ids(saver.messages("small", before="a1")) == ["h1"]
        assert ids(saver.messages("big", limit=2, before="h10")) == ["h8", "h9"]
        assert saver.messages("big", limit=1).as_json()["messages"][0]["type"] == "human"


def test_a_negative_position_is_refused(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        conversation(saver, "t", 5)
        with pytest.raises(InvalidArgumentError, match="position"):
            saver.messages("t", before=-1)


def test_a_page_found_by_message_id_decodes_each_message_once(tmp_path: Path) -> None:
    """Paging to a message id decodes the elements it reads once, not again for the page."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class Counting(JsonPlusSerializer):
        loaded = 0

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            Counting.loaded += 1
            return super().loads_typed(data)

    with Saver.from_conn_string(str(tmp_path / "m.db"), serde=Counting()) as saver:
        conversation(saver, "t", 2)
        Counting.loaded = 0
        page = saver.messages("t", before="a2")
        assert ids(page) == ["h1", "a1", "h2"] and page.total == 4
        assert Counting.loaded <= page.total
