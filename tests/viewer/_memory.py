"""The memory file the viewer tests read: made by real LangGraph graphs and a Store.

A tool-calling agent with a long conversation (more messages than a transcript page), a
graph paused on an interrupt, a subgraph paused inside its child namespace, a thread
forked by `update_state`, a big tool result, and Store items (a profile, facts, one with
a TTL). Titles, messages and Store values carry markup that must never run in a browser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from langchain_core.messages import HumanMessage
from langgraph.types import Command

from tests.engine.test_graphs import agent_graph, counter_graph, review_graph, subgraph_graph
from threadloom import Saver, Store

#: Markup a viewer must show as text: a script element and an attribute breakout.
SCRIPT: Final = "<script>window.__pwned = 1; alert(1)</script>"
BREAKOUT: Final = '"><img src=x onerror="window.__pwned = 2; alert(2)">'
HOSTILE: Final = f"{SCRIPT} and {BREAKOUT}"
#: Turns of the long chat (each turn adds 4 messages: question, tool call, result, answer).
TURNS: Final = 16
#: A tool result big enough to be shown shortened (characters).
BIG: Final = 60_000
TENANT: Final = "acme"
#: A thread id with what a URL path cannot hold raw (`/`, `.`, `~`, `?`, non-ASCII).
ODD: Final = "team/a.b ~?ü.json"


def make_memory(path: Path) -> dict[str, Any]:
    """Write the file at `path`; return what the tests look for in it."""
    with Saver.from_conn_string(str(path)) as saver:
        agent = agent_graph().compile(checkpointer=saver)
        chat = {"configurable": {"thread_id": "chat-1", "user_id": "ada"}}
        for turn in range(TURNS):
            question = f"What is 6 times {turn + 2}?"
            if turn == 3:
                question = f"Look at this: {HOSTILE}"
            agent.invoke({"messages": [HumanMessage(content=question)]}, chat)
        saver.set_thread("chat-1", title="Ada's sums", tags=["maths"])
        saver.set_thread(ODD, title="An id that needs encoding", owner="ada")

        big = {"configurable": {"thread_id": "big-result", "user_id": "bob"}}
        agent.invoke({"messages": [HumanMessage(content="x" * BIG)]}, big)

        review = review_graph().compile(checkpointer=saver)
        paused = {"configurable": {"thread_id": "review-1", "user_id": "ada"}}
        review.invoke({"draft": "v1", "verdicts": [], "published": False}, paused)

        sub = subgraph_graph().compile(checkpointer=saver)
        child = {"configurable": {"thread_id": "subgraph-1", "user_id": "bob"}}
        sub.invoke({"messages": ["hi"], "notes": [], "done": False}, child)

        counter = counter_graph().compile(checkpointer=saver)
        forked = {"configurable": {"thread_id": "forked-1"}}
        counter.invoke({"count": 0, "log": []}, forked)
        past = next(s for s in counter.get_state_history(forked) if s.next == ("step2",))
        fork = counter.update_state(past.config, {"count": 100, "log": ["forked"]})
        counter.invoke(None, fork)

        resumed = {"configurable": {"thread_id": "review-2", "user_id": "carol"}}
        review.invoke({"draft": "v2", "verdicts": [], "published": False}, resumed)
        review.invoke(Command(resume="ok"), resumed)
        review.invoke(Command(resume={"score": 5}), resumed)
        saver.set_thread("review-2", title=f"Review {HOSTILE}", summary=HOSTILE)

    with Store.from_conn_string(str(path)) as store:
        ada = (TENANT, "user", "ada")
        store.put((*ada, "profile"), "profile", {"name": "Ada", "langs": ["en", "fr"]})
        store.put((*ada, "facts"), "f-tea", {"text": "Ada prefers tea"})
        store.put((*ada, "facts"), "f-city", {"text": "Ada lives in Lisbon"})
        store.put((*ada, "facts"), "f-hostile", {"text": f"Ada wrote {HOSTILE}"})
        store.put((*ada, "facts"), "f-ttl", {"text": "Ada is travelling this week"}, ttl=60)
        store.put((TENANT, "user", "bob", "facts"), "f-1", {"text": "Bob prefers coffee"})
    return {"threads": 7, "chat": "chat-1", "messages": TURNS * 4}
