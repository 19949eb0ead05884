"""The naas SDK saver on a thread of the real document service, inside the naas venv.

Usage (NAAS_NATS_URL and NAAS_JWT_SECRET in the environment; prints one JSON object):

- `read NAMESPACE AGENT_ID THREAD_ID`: every checkpoint of the thread as
  `naas_abi_sdk.langgraph.DocumentCheckpointSaver.alist` returns it (newest first, all
  namespaces), each as `plain(...)` of its config, parent, channel values, metadata and
  pending writes; and the latest root checkpoint by `aget_tuple`.
- `graph NAMESPACE AGENT_ID THREAD_ID TURNS`: a LangGraph tool-calling agent graph
  (deterministic model) compiled with the SDK saver runs TURNS turns; prints `read`'s.
- `write NAMESPACE AGENT_ID THREAD_ID TURNS [BIG]`: the SDK saver writes a chat thread of
  TURNS turns (messages growing, a BIG-byte tool result on turn 2, default 300 KB, one
  pending write per turn,
  and a child namespace checkpoint), then prints `read`'s output for it.

`plain` is the comparison form the tests use on both sides (tests/nats/test_transfer.py
has the same function): messages as their `model_dump()`, dataclasses as the dict of
their fields, bytes as {"hex": ...}.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import sys
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, MessagesState, StateGraph
from naas_abi_core.engine.nats_auth import issue_service_token
from naas_abi_sdk.document import DocumentClient
from naas_abi_sdk.langgraph import DocumentCheckpointSaver
from naas_abi_sdk.transport import Transport


def plain(value: Any) -> Any:
    """A JSON-able form of a checkpoint value, the same in both virtual environments
    (a dataclass, such as langgraph's Interrupt, as the dict of its fields)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, BaseMessage):
        return {"message": plain(value.model_dump())}
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return {"repr": repr(value)}


def snapshot(item: Any) -> dict[str, Any]:
    return {
        "config": plain(item.config),
        "parent": plain(item.parent_config),
        "values": plain(item.checkpoint["channel_values"]),
        "versions": plain(item.checkpoint["channel_versions"]),
        "metadata": plain(item.metadata),
        "writes": plain(sorted(item.pending_writes or [], key=lambda w: (w[0], w[1]))),
    }


async def read(saver: DocumentCheckpointSaver, thread_id: str) -> dict[str, Any]:
    history = [snapshot(i) async for i in saver.alist({"configurable": {"thread_id": thread_id}})]
    latest = await saver.aget_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
    return {"history": history, "latest": snapshot(latest) if latest else None}


async def write(
    saver: DocumentCheckpointSaver, thread_id: str, turns: int, big: int = 300_000
) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    messages: list[Any] = []
    for turn in range(1, turns + 1):
        size = big if turn == 2 else 200
        messages = [
            *messages,
            HumanMessage(content=f"question {turn}", id=f"{thread_id}-{turn}-h"),
            ToolMessage(
                content=("r" * size) + str(turn),
                tool_call_id=f"c{turn}",
                id=f"{thread_id}-{turn}-t",
            ),
            AIMessage(content=f"answer {turn}", id=f"{thread_id}-{turn}-a"),
        ]
        checkpoint = empty_checkpoint()
        checkpoint["id"] = f"1f0e0000-0000-6000-8000-{turn:012d}"
        version = turn
        checkpoint["channel_values"] = {"messages": list(messages), "turn": turn}
        checkpoint["channel_versions"] = {"messages": version, "turn": version}
        config = await saver.aput(
            config,
            checkpoint,
            {"source": "loop", "step": turn, "parents": {}},
            checkpoint["channel_versions"],
        )
        await saver.aput_writes(
            config, [("turn", turn + 1), ("messages", [messages[-1]])], f"task-{turn}"
        )
    child = empty_checkpoint()
    child["id"] = "1f0e0000-0000-6000-8000-000000000999"
    child["channel_values"] = {"notes": ["in the child"]}
    child["channel_versions"] = {"notes": 1}
    await saver.aput(
        {"configurable": {"thread_id": thread_id, "checkpoint_ns": "child:1"}},
        child,
        {"source": "loop", "step": 1, "parents": {"": config["configurable"]["checkpoint_id"]}},
        child["channel_versions"],
    )


async def graph(saver: DocumentCheckpointSaver, thread_id: str, turns: int) -> None:
    """A tool-calling agent graph (deterministic model, no network) run for TURNS turns."""

    def model(state: MessagesState) -> dict[str, Any]:
        last = state["messages"][-1]
        turn = sum(1 for m in state["messages"] if isinstance(m, HumanMessage))
        if isinstance(last, HumanMessage):
            call = {"name": "lookup", "args": {"turn": turn}, "id": f"call-{turn}"}
            return {
                "messages": [AIMessage(content="", tool_calls=[call], id=f"{thread_id}-{turn}-c")]
            }
        return {"messages": [AIMessage(content=f"answer {turn}", id=f"{thread_id}-{turn}-a")]}

    def tools(state: MessagesState) -> dict[str, Any]:
        call = state["messages"][-1].tool_calls[0]
        text = "result " * (50 * call["args"]["turn"])
        return {
            "messages": [
                ToolMessage(
                    content=text,
                    tool_call_id=call["id"],
                    id=f"{thread_id}-{call['args']['turn']}-t",
                )
            ]
        }

    def route(state: MessagesState) -> str:
        return "tools" if state["messages"][-1].tool_calls else END

    builder = StateGraph(MessagesState)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    compiled = builder.compile(checkpointer=saver)
    config = {"configurable": {"thread_id": thread_id}}
    for turn in range(1, turns + 1):
        await compiled.ainvoke(
            {"messages": [HumanMessage(content=f"question {turn}", id=f"{thread_id}-{turn}-h")]},
            config,
        )


async def main(argv: list[str]) -> dict[str, Any]:
    url, secret = os.environ["NAAS_NATS_URL"], os.environ["NAAS_JWT_SECRET"]
    command, namespace, agent_id, thread_id, *rest = argv
    transport = Transport(url, issue_service_token("api", secret))
    try:
        client = DocumentClient(transport).for_namespace(namespace)
        saver = DocumentCheckpointSaver(client, agent_id=agent_id)
        await saver.setup()
        if command == "graph":
            await graph(saver, thread_id, int(rest[0]))
        elif command == "write":
            await write(saver, thread_id, int(rest[0]), *(int(r) for r in rest[1:2]))
        elif command != "read":
            raise SystemExit(f"unknown command {command!r}")
        return await read(saver, thread_id)
    finally:
        await transport.close()


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1:]))))
