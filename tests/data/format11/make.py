"""Write `format11.db` and `documents.msgpack.zst`: a file of on-disk format 11 and its documents.

Pending writes with the task ids LangGraph gives (canonical UUIDs), which format 12
stores as 17-byte keys: a thread run by a LangGraph graph (three invocations, so its
pending writes carry the tasks' UUIDs and paths), one checkpoint holding writes of a
UUID task and of text tasks together (their order is the text's), and a thread whose
head holds a failed task's error under a UUID task id (its status: 'error'). Written by
threadloom at commit 3b15625 (the last commit writing format 11), from a checkout of that
commit: `PYTHONPATH=src python tests/data/format11/make.py OUTDIR`. The upgrade test
(tests/engine/test_taskkeys.py) opens the file with the current threadloom, compares
its documents with the dump, reads every thread, verifies the file and writes again.
"""

from __future__ import annotations

import operator
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import apsw
import ormsgpack
import zstandard
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.graph import END, START, StateGraph

from threadloom import Saver

UUID_TASK = "7f1c2a4e-9b3d-4c5e-8f60-0a1b2c3d4e5f"


class State(TypedDict):
    notes: Annotated[list[str], operator.add]


def _graph(saver: Saver) -> Any:
    graph = StateGraph(State)
    graph.add_node("draft", lambda state: {"notes": [f"draft {len(state['notes'])}"]})
    graph.add_node("review", lambda state: {"notes": [f"review {len(state['notes'])}"]})
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "review")
    graph.add_edge("review", END)
    return graph.compile(checkpointer=saver)


def _put(saver: Saver, thread_id: str, step: int, values: dict[str, Any]) -> Any:
    made = empty_checkpoint()
    made["id"] = f"1f0d1100-0000-6000-8000-1{step:011d}"
    made["channel_values"] = values
    made["channel_versions"] = {name: step for name in values}
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    return saver.put(config, made, {"source": "loop", "step": step, "parents": {}}, {})


def write(path: Path) -> None:
    saver = Saver(str(path))
    try:
        graph = _graph(saver)
        for turn in range(3):
            graph.invoke({"notes": [f"turn {turn}"]}, {"configurable": {"thread_id": "graph"}})
        mixed = _put(saver, "mixed", 1, {"n": 1})
        saver.put_writes(mixed, [("n", 2), ("log", "text task")], "zz-text-task")
        saver.put_writes(mixed, [("n", 3)], UUID_TASK)
        saver.put_writes(mixed, [("log", "another")], "Task-Upper")
        failed = _put(saver, "failed", 1, {"n": 1})
        saver.put_writes(failed, [("__error__", "ValueError('boom')")], UUID_TASK)
        documents = list(saver.documents())
    finally:
        saver.close()
    (path.parent / "documents.msgpack.zst").write_bytes(
        zstandard.ZstdCompressor(level=19).compress(ormsgpack.packb(documents))
    )


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "format11.db")
    conn = apsw.Connection(str(out / "format11.db"))
    conn.execute("VACUUM")
    conn.close()
