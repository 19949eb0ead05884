"""The benchmark workload: a deterministic ReAct-style chat agent (no model, no network).

Every turn is one `invoke` with one user message; the graph runs
model -> tools -> model, so a turn adds four messages (user, tool call, tool
result, answer) and LangGraph stores five checkpoints (input, start, model,
tools, model). All text is derived from fixed seeds, so two runs and two savers
see byte-identical states; message ids are fixed too (add_messages would
otherwise draw uuid4 ids).
"""

from __future__ import annotations

import base64
import random
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypedDict

from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

_VOCABULARY = (
    "checkpoint thread agent message channel version snapshot document planner engine "
    "sqlite page journal commit durable latency throughput schema migration index query "
    "result tool call answer context window prompt token budget retry backoff cache "
    "reference chunk digest blake3 zstd msgpack stream buffer batch parent child graph "
    "node edge state reducer append history retention policy vacuum wal reader writer"
)
_WORDS = _VOCABULARY.split()

SYSTEM_PROMPT_BYTES = 4096


def prose(seed: str, size: int) -> str:
    """Return `size` characters of deterministic word salad (compresses like English)."""
    rng = random.Random(seed)
    out: list[str] = []
    length = 0
    while length < size:
        sentence = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(6, 16)))
        sentence = sentence.capitalize() + ". "
        out.append(sentence)
        length += len(sentence)
    return "".join(out)[:size]


def noise(seed: str, size: int) -> str:
    """Return `size` characters of deterministic base64 noise (does not compress below ~75%)."""
    raw = random.Random(seed).randbytes(size * 3 // 4 + 3)
    return base64.b64encode(raw).decode("ascii")[:size]


SYSTEM_PROMPT = "You are a careful research assistant. " + prose("system", SYSTEM_PROMPT_BYTES - 38)


#: Mean size of a tool result; `--tool-kb` in the scripts changes it.
TOOL_RESULT_MEAN = 1000


def tool_result_size(turn: int, mean: int = TOOL_RESULT_MEAN) -> int:
    """The size of `turn`'s tool result: 0.6x to 1.4x `mean`, varying per turn."""
    return int(mean * (0.6 + 0.8 * ((turn * 337) % 1000) / 1000))


def tool_results(mean: int = TOOL_RESULT_MEAN) -> Callable[[str, int], str]:
    """Return `(thread, turn) -> text`: deterministic tool output of about `mean` bytes."""

    def result(thread: str, turn: int) -> str:
        return prose(f"tool:{thread}:{turn}", tool_result_size(turn, mean))

    return result


default_tool_result = tool_results()


class State(TypedDict):
    """The agent state: one message list with LangGraph's add_messages reducer."""

    messages: Annotated[list[AnyMessage], add_messages]


def _turn_of(messages: Sequence[BaseMessage]) -> int:
    return sum(1 for m in messages if isinstance(m, HumanMessage))


def build_graph(
    checkpointer: Any,
    tool_result: Callable[[str, int], str] = default_tool_result,
) -> Any:
    """Compile the agent graph with `checkpointer`.

    Args:
        checkpointer: any LangGraph checkpoint saver.
        tool_result: `(thread_id, turn) -> str`, the text the tool returns.
    """

    def model(state: State, config: RunnableConfig) -> dict[str, Any]:
        messages = state["messages"]
        thread = config["configurable"]["thread_id"]
        turn = _turn_of(messages)
        last = messages[-1]
        if isinstance(last, HumanMessage):
            call = {
                "name": "search_notes",
                "args": {"query": last.content[:60], "turn": turn},
                "id": f"call-{turn}",
                "type": "tool_call",
            }
            return {
                "messages": [AIMessage(content="", tool_calls=[call], id=f"{thread}-{turn}-call")]
            }
        answer = f"Turn {turn}: " + prose(f"answer:{thread}:{turn}", 160)
        return {"messages": [AIMessage(content=answer, id=f"{thread}-{turn}-answer")]}

    def tools(state: State, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        last = state["messages"][-1]
        assert isinstance(last, AIMessage) and last.tool_calls
        turn = last.tool_calls[0]["args"]["turn"]
        text = tool_result(thread, turn)
        reply = ToolMessage(
            content=text,
            tool_call_id=last.tool_calls[0]["id"],
            name="search_notes",
            id=f"{thread}-{turn}-tool",
        )
        return {"messages": [reply]}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if getattr(last, "tool_calls", None) else END

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", route, ["tools", END])
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=checkpointer)


def system_message() -> SystemMessage:
    """The shared ~4 KB system prompt (same id in every thread)."""
    return SystemMessage(content=SYSTEM_PROMPT, id="system")


def user_message(thread: str, turn: int) -> HumanMessage:
    """The user message that opens `turn` (1-based) of `thread`."""
    text = f"Question {turn}: " + prose(f"user:{thread}:{turn}", 100)
    return HumanMessage(content=text, id=f"{thread}-{turn}-user")


def turn_input(thread: str, turn: int) -> dict[str, Any]:
    """The `invoke` input of `turn`: the system prompt first on turn 1, then a user message."""
    messages: list[BaseMessage] = [user_message(thread, turn)]
    if turn == 1:
        messages.insert(0, system_message())
    return {"messages": messages}


def history(thread: str, turns: int) -> list[BaseMessage]:
    """The messages of `turns` finished turns (system prompt first): what the agent produces."""
    out: list[BaseMessage] = [system_message()]
    for turn in range(1, turns + 1):
        call = {
            "name": "search_notes",
            "args": {"query": f"q{turn}", "turn": turn},
            "id": f"call-{turn}",
            "type": "tool_call",
        }
        out.append(user_message(thread, turn))
        out.append(AIMessage(content="", tool_calls=[call], id=f"{thread}-{turn}-call"))
        out.append(
            ToolMessage(
                content=default_tool_result(thread, turn),
                tool_call_id=f"call-{turn}",
                name="search_notes",
                id=f"{thread}-{turn}-tool",
            )
        )
        out.append(
            AIMessage(
                content=f"Turn {turn}: " + prose(f"answer:{thread}:{turn}", 160),
                id=f"{thread}-{turn}-answer",
            )
        )
    return out


def seed_input(thread: str, messages: int) -> tuple[dict[str, Any], int]:
    """An `invoke` input that leaves a thread holding about `messages` messages.

    The input is a prefilled history plus the next user message, so one ordinary
    turn runs on it (five checkpoints). Returns the input and the next turn number.
    """
    done = max(0, (messages - 5) // 4)
    turn = done + 1
    return {"messages": [*history(thread, done), user_message(thread, turn)]}, turn + 1


def config_of(thread: str) -> dict[str, Any]:
    """The run config of `thread`."""
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
