"""Many chat threads written by LangGraph's SqliteSaver itself (its own put and put_writes).

A turn appends a human and an AI message, so the state grows each step as a chat's does;
each checkpoint also gets one pending write of the next task. Ids sort in write order.
Fast enough for thousands of checkpoints, so a migration of them takes seconds.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.sqlite import SqliteSaver


def write_chats(path: Path, threads: int, checkpoints: int) -> int:
    """Write `threads` threads of `checkpoints` checkpoints; return the pending writes."""
    writes = 0
    conn = sqlite3.connect(str(path), check_same_thread=False)
    # Durability is not what these files test: without a sync per commit they are written
    # in seconds. The rows are SqliteSaver's own all the same.
    conn.execute("PRAGMA synchronous = OFF")
    saver = SqliteSaver(conn)
    try:
        for t in range(threads):
            thread_id = f"chat-{t:05d}"
            config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
            messages: list[Any] = []
            for step in range(checkpoints):
                messages = [
                    *messages,
                    HumanMessage(f"question {step} of {thread_id} " * 4, id=f"{t}-{step}-h"),
                    AIMessage(f"answer {step}: " + "words " * 40, id=f"{t}-{step}-a"),
                ]
                checkpoint = empty_checkpoint()
                checkpoint["id"] = f"1f0e{t:04x}-0000-6000-8000-{step:012d}"
                checkpoint["channel_values"] = {"messages": messages, "step": step}
                checkpoint["channel_versions"] = {"messages": step + 1, "step": step + 1}
                config = saver.put(
                    config,
                    checkpoint,
                    {"source": "loop", "step": step, "parents": {}},
                    checkpoint["channel_versions"],
                )
                saver.put_writes(config, [("step", step + 1)], f"task-{step}", "~__pregel_pull, m")
                writes += 1
    finally:
        conn.close()
    return writes
