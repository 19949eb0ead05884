"""Write `format4.db` and `documents.msgpack.zst`: a file of on-disk format 4 and its documents.

Run once with threadloom at commit 1e1a305 (the last commit writing format 4), from a
checkout of that commit: `THREADLOOM_BACKEND=python PYTHONPATH=src python
tests/data/format4/make.py OUTDIR`. The upgrade tests open the file with the current
threadloom, compare its documents with the dump, and filter and delete by metadata on
rows whose seals the upgrade adds. Deterministic: fixed ids and text.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import ormsgpack
import zstandard
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver

WORDS = ["agent", "thread", "value", "chunk", "block", "prompt", "tool", "answer", "reason"]


def prose(seed: str, size: int) -> str:
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(size // 5))[:size]


def write(path: Path) -> None:
    with Saver.from_conn_string(str(path)) as saver:
        for thread, user in (("alpha", "ada"), ("beta", "bob")):
            messages: list[Any] = [SystemMessage(content=prose("system", 5000), id="system")]
            parent: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            for step in range(1, 13):
                messages = [
                    *messages,
                    HumanMessage(content=prose(f"{thread}{step}q", 300), id=f"{thread}-{step}-h"),
                    AIMessage(content=prose(f"{thread}{step}a", 400), id=f"{thread}-{step}-a"),
                ]
                made = empty_checkpoint()
                made["id"] = f"1f0d0000-0000-6000-8000-{step:012d}"
                made["channel_values"] = {"messages": list(messages), "step": step}
                made["channel_versions"] = {"messages": step, "step": step}
                metadata = {
                    "source": "loop" if step > 1 else "input",
                    "step": step,
                    "parents": {},
                    "run_id": f"run-{thread}-{(step - 1) // 4}",
                    "user": user,
                }
                stored = saver.put(parent, made, metadata, {"messages": step, "step": step})
                saver.put_writes(stored, [("messages", [messages[-1]])], f"task-{step}")
                if step == 12:  # a special write (replaced in place) and an interrupt
                    saver.put_writes(stored, [("__error__", "boom")], "task-err")
                    saver.put_writes(stored, [("__error__", "boom again")], "task-err")
                    saver.put_writes(stored, [("__interrupt__", [{"value": "ask"}])], "task-int")
                parent = stored
        child = {"configurable": {"thread_id": "alpha", "checkpoint_ns": "sub:1"}}
        made = empty_checkpoint()
        made["id"] = "1f0d0000-0000-6000-8000-000000000099"
        made["channel_values"] = {"note": prose("sub", 6000)}
        made["channel_versions"] = {"note": 1}
        saver.put(child, made, {"source": "loop", "step": 1, "parents": {}}, {"note": 1})
        documents = saver.documents()
    (path.parent / "documents.msgpack.zst").write_bytes(
        zstandard.ZstdCompressor(level=19).compress(ormsgpack.packb(documents))
    )


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "format4.db")
