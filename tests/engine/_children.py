"""Child-process workloads for the durability tests: `python -m tests.engine._children CMD ...`.

Each command writes to a threadloom file and reports progress on stdout, one line per
committed step, flushed, so the parent can follow (and kill) it.
"""

from __future__ import annotations

import json
import operator
import random
import sys
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from threadloom import Saver

LONG = "lorem ipsum dolor sit amet " * 80


class Review(TypedDict):
    draft: str
    verdicts: Annotated[list, operator.add]
    published: bool


def review_graph() -> StateGraph:
    """write -> review (two human verdicts via interrupt) -> publish."""

    def review(state: Review) -> dict[str, Any]:
        first = interrupt({"round": 1, "draft": state["draft"][:10]})
        second = interrupt({"round": 2, "first": first})
        return {"verdicts": [first, second]}

    graph = StateGraph(Review)
    graph.add_node("write", lambda s: {"draft": s["draft"] + " " + LONG})
    graph.add_node("review", review)
    graph.add_node("publish", lambda s: {"published": True})
    graph.add_edge(START, "write")
    graph.add_edge("write", "review")
    graph.add_edge("review", "publish")
    graph.add_edge("publish", END)
    return graph


def payload(thread_id: str, step: int, size: int) -> bytes:
    """The deterministic, incompressible value written at `step` of `thread_id`."""
    return random.Random(f"{thread_id}/{step}").randbytes(size)


def checkpoint_at(thread_id: str, step: int, size: int) -> dict[str, Any]:
    """The checkpoint `write_steps` puts at `step` (the parent rebuilds it to verify)."""
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {
        "step": step,
        "blob": payload(thread_id, step, size),
        "history": [f"{thread_id}:{i}" for i in range(step % 50)],
        "constant": LONG,
    }
    checkpoint["channel_versions"] = {
        "step": step + 1,
        "blob": step + 1,
        "history": step + 1,
        "constant": 1,
    }
    return checkpoint


def write_steps(path: str, thread_id: str, steps: int, size: int, go: str | None) -> None:
    """Put `steps` chained checkpoints (each with one pending write) to `thread_id`."""
    if go:
        while not Path(go).exists():
            time.sleep(0.005)
    with Saver.from_conn_string(path) as saver:
        config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        for step in range(steps):
            checkpoint = checkpoint_at(thread_id, step, size)
            checkpoint["id"] = f"1f0c0000-0000-6000-8000-{step:012d}"
            config = saver.put(
                config,
                checkpoint,
                {"source": "loop", "step": step, "parents": {}},
                checkpoint["channel_versions"],
            )
            saver.put_writes(config, [("step", step + 1)], f"task-{step}")
            print(step, flush=True)


def share_steps(path: str, prefix: str, steps: int, size: int, go: str | None) -> None:
    """Put large values shared with the other processes into four threads, and delete or
    prune a thread every ten steps (no grace: blocks are swept at once)."""
    if go:
        while not Path(go).exists():
            time.sleep(0.005)
    with Saver.from_conn_string(path) as saver:
        saver.checkpoints.grace = 0.0
        parents: dict[str, Any] = {}
        for step in range(steps):
            thread_id = f"{prefix}-{step % 4}"
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"1f0c0000-0000-6000-8000-{step:012d}"
            checkpoint["channel_values"] = {
                "blob": payload("shared", step % 7, size),
                "mine": payload(thread_id, step, size // 4),
            }
            checkpoint["channel_versions"] = {"blob": step + 1, "mine": step + 1}
            config = parents.get(thread_id) or {
                "configurable": {"thread_id": thread_id, "checkpoint_ns": ""}
            }
            parents[thread_id] = saver.put(
                config, checkpoint, {"source": "loop", "step": step, "parents": {}}, {}
            )
            saver.put_writes(parents[thread_id], [("blob", payload("shared", 9, size))], "t")
            if step % 10 == 9:
                victim = f"{prefix}-{(step // 10) % 4}"
                if step % 20 == 9:
                    saver.delete_thread(victim)
                    parents.pop(victim, None)
                else:
                    saver.prune([victim])
            print(step, flush=True)


def main(argv: list[str]) -> int:
    command, path, *rest = argv
    if command == "interrupt":
        with Saver.from_conn_string(path) as saver:
            graph = review_graph().compile(checkpointer=saver)
            out = graph.invoke(
                {"draft": "v1", "verdicts": [], "published": False},
                {"configurable": {"thread_id": "t"}},
            )
            print(json.dumps([i.value for i in out["__interrupt__"]]))
    elif command == "resume":
        with Saver.from_conn_string(path) as saver:
            graph = review_graph().compile(checkpointer=saver)
            out = graph.invoke(
                Command(resume=json.loads(rest[0])), {"configurable": {"thread_id": "t"}}
            )
            print(json.dumps([i.value for i in out.get("__interrupt__", [])]))
    elif command == "share":
        prefix, steps, size, *go = rest
        share_steps(path, prefix, int(steps), int(size), go[0] if go else None)
    elif command == "write":
        thread_id, steps, size, *go = rest
        write_steps(path, thread_id, int(steps), int(size), go[0] if go else None)
    else:
        print(f"unknown command {command!r}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
