"""The test project's agent: a fake chat model that echoes, an interrupt on request, and
a store write per turn (the Agent Server loads this file from langgraph.json)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.store.base import BaseStore
from langgraph.types import interrupt


class EchoModel(BaseChatModel):
    """A chat model that answers `echo: <the last message>` (no network)."""

    @property
    def _llm_type(self) -> str:
        return "echo"

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> ChatResult:
        reply = AIMessage(content=f"echo: {messages[-1].content}")
        return ChatResult(generations=[ChatGeneration(message=reply)])


model = EchoModel()


class State(MessagesState):
    """The messages, and a value msgpack cannot encode (only the server's serializer,
    which pickles what msgpack cannot, stores it)."""

    odd: complex


def chat(state: State, *, store: BaseStore) -> dict[str, Any]:
    """Answer the last message; "approve" waits on an interrupt first; "odd" stores a
    complex number."""
    last = state["messages"][-1]
    if "odd" in str(last.content):
        return {"messages": [AIMessage(content="odd kept")], "odd": complex(1, 2)}
    if "approve" in str(last.content):
        answer = interrupt({"question": "approve?"})
        return {"messages": [AIMessage(content=f"approved: {answer}")]}
    store.put(("turns",), str(last.id), {"text": str(last.content)})
    return {"messages": [model.invoke(state["messages"])]}


graph = StateGraph(State).add_node(chat).add_edge(START, "chat").compile()
