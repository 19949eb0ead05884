"""The demo agent of `threadloom demo`: a small tool-using graph on the embedded file.

Adapter layer (LangGraph); `cli/commands/demo.py` registers the command. No network.

The model is deterministic (it answers from the conversation it remembers), so
running the demo twice shows the memory surviving a restart.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from threadloom.errors import ThreadloomError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

QUESTIONS = [
    "Hi! My name is Ada and I'm planning a trip to Lisbon.",
    "How many words were in my first message?",
    "What city am I going to, and what is my name?",
    "Please count the words in: pastel de nata is a custard tart",
    "Summarise what we talked about so far.",
]


def run_demo(db: str, thread_id: str, turns: int) -> int:
    """Run `turns` turns of the demo conversation on `db`; return the exit code."""
    try:
        from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
        from langchain_core.tools import tool
        from langgraph.graph import START, MessagesState, StateGraph
        from langgraph.prebuilt import ToolNode, tools_condition
    except ImportError as exc:
        raise ThreadloomError(
            f"the demo needs LangGraph ({exc.name} is missing); install it with "
            "`pip install '.[demo]'` in threadloom's clone"
        ) from None
    from threadloom import Saver

    @tool
    def count_words(text: str) -> str:
        """Count the words in a text."""
        return f"{len(text.split())} words"

    def model(state: MessagesState) -> dict[str, Any]:
        messages = state["messages"]
        last = messages[-1]
        humans = [m for m in messages if isinstance(m, HumanMessage)]
        if isinstance(last, ToolMessage):
            return {"messages": [AIMessage(content=f"The tool says: {last.content}.")]}
        question = str(last.content)
        lowered = question.lower()
        if "count the words in:" in lowered or "how many words" in lowered:
            text = question.split(":", 1)[1] if ":" in question else str(humans[0].content)
            call = {
                "name": "count_words",
                "args": {"text": text.strip()},
                "id": f"call-{len(messages)}",
            }
            return {"messages": [AIMessage(content="", tool_calls=[call])]}
        if lowered.startswith("what") and ("name" in lowered or "city" in lowered):
            first = str(humans[0].content)
            name = first.split("name is ", 1)[1].split()[0] if "name is " in first else "unknown"
            city = first.rstrip(".!").split()[-1] if "trip to" in first else "unknown"
            answer = f"You are {name} and you are going to {city}."
        elif "summarise" in lowered:
            answer = f"We have exchanged {len(messages) - 1} messages over {len(humans)} turns."
        else:
            answer = f"Nice to meet you! (I remember {len(messages) - 1} earlier messages.)"
        return {"messages": [AIMessage(content=answer)]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("tools", ToolNode([count_words]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
    with Saver.from_conn_string(db) as saver:
        app = graph.compile(checkpointer=saver)
        state = app.get_state(config)
        done = sum(isinstance(m, HumanMessage) for m in state.values.get("messages", []))
        print(f"threadloom demo: {db}, thread {thread_id!r}, {done} earlier turns remembered")
        for turn in range(done, done + turns):
            question = QUESTIONS[turn % len(QUESTIONS)]
            result = app.invoke({"messages": [HumanMessage(content=question)]}, config)
            print(f"> {question}")
            print(f"  {result['messages'][-1].content}")
        checkpoints = sum(1 for _ in saver.list(config))
        print(f"{checkpoints} checkpoints stored; run the demo again to continue the conversation")
    sys.stdout.flush()
    return 0
