"""An encrypting serializer leaves no text of the application's in the clear: not in the
checkpoints, values, pending writes and metadata (the serializer's job), and not in the
thread index (titles, summaries, tags), unless the application allows a field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.types import interrupt

from threadloom import Saver
from threadloom.errors import InvalidArgumentError
from threadloom.langgraph.tuples import encrypts

KEY = b"0123456789abcdef"

#: Words the application puts, each where it may leak: the first message (the title), a
#: reply, a tool-like pending write (an interrupt's value), run metadata.
WORDS = ("Quillontitle", "Brambleanswer", "Marzipending", "Vellumetadata")


def _graph(saver: Saver) -> Any:
    def reply(state: MessagesState) -> dict[str, Any]:
        return {"messages": [AIMessage(f"{WORDS[1]} to {state['messages'][-1].content}")]}

    def ask(state: MessagesState) -> dict[str, Any]:
        answer = interrupt({"question": f"confirm {WORDS[2]}?"})
        return {"messages": [AIMessage(str(answer))]}

    graph = StateGraph(MessagesState)
    graph.add_node("reply", reply)
    graph.add_node("ask", ask)
    graph.add_edge(START, "reply")
    graph.add_edge("reply", "ask")
    return graph.compile(checkpointer=saver)


def _run(saver: Saver, thread_id: str) -> None:
    _graph(saver).invoke(
        {"messages": [HumanMessage(f"{WORDS[0]} is my question")]},
        {
            "configurable": {"thread_id": thread_id, "user_id": "u-1"},
            "metadata": {"note": WORDS[3]},
        },
    )


def _in_file(path: Path) -> set[str]:
    data = b"".join(
        p.read_bytes() for p in (path, path.with_name(path.name + "-wal")) if p.exists()
    )
    return {w for w in WORDS + ("Sorrelsummary", "Tansytag") if w.encode() in data}


def test_an_encrypting_saver_writes_no_text_of_the_application(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    with Saver.from_conn_string(str(path), serde=serde) as saver:
        _run(saver, "t-1")
        state = _graph(saver).get_state({"configurable": {"thread_id": "t-1"}})
        assert state.values["messages"][0].content.startswith(WORDS[0])  # reads back
        assert state.tasks and state.tasks[0].interrupts  # the pending write is there
        info = saver.thread("t-1")
        assert info is not None and info.title is None and info.owner == "u-1"
        for field, value in (("title", "x"), ("summary", "Sorrelsummary"), ("tags", ["Tansytag"])):
            with pytest.raises(InvalidArgumentError, match=f"plaintext=\\['{field}'\\]"):
                saver.set_thread("t-1", **{field: value})
        with pytest.raises(InvalidArgumentError):
            saver.set_thread("t-new", summary="Sorrelsummary")
        assert saver.thread("t-new") is None  # refused before anything was written
        saver.set_thread("t-1", owner="u-2")  # an id, not text: allowed
    assert _in_file(path) == set()


def test_plaintext_names_the_fields_an_encrypting_saver_may_keep(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    serde = EncryptedSerializer.from_pycryptodome_aes(key=KEY)
    with Saver.from_conn_string(str(path), serde=serde, plaintext=["title", "summary"]) as saver:
        _run(saver, "t-1")
        saver.set_thread("t-1", summary="Sorrelsummary")
        info = saver.thread("t-1")
        assert info is not None and info.title is not None and info.title.startswith(WORDS[0])
        with pytest.raises(InvalidArgumentError, match="plaintext"):
            saver.set_thread("t-1", tags=["Tansytag"])
    assert _in_file(path) == {WORDS[0], "Sorrelsummary"}
    with pytest.raises(InvalidArgumentError, match="thread index fields"):
        Saver(str(path), plaintext="title")


def test_a_saver_that_does_not_encrypt_titles_as_before(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        _run(saver, "t-1")
        saver.set_thread("t-1", summary="Sorrelsummary", tags=["Tansytag"])
        info = saver.thread("t-1")
        assert info is not None and info.title is not None and info.title.startswith(WORDS[0])


def test_a_serializer_naming_a_cipher_counts_as_encrypting() -> None:
    class Shifted:
        """A serializer of another library that names its cipher as LangGraph does."""

        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return "json+rot", repr(obj).encode()

        def loads_typed(self, data: tuple[str, bytes]) -> Any:
            raise NotImplementedError

    assert encrypts(Shifted())  # type: ignore[arg-type]
    assert encrypts(EncryptedSerializer.from_pycryptodome_aes(key=KEY))
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    assert not encrypts(JsonPlusSerializer())
