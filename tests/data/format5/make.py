"""Write `format5.db` and `documents.msgpack.zst`: a file of on-disk format 5 and its documents.

The threads of `tests/data/format3/make.py` (chat threads, a replaced special write, an
interrupt, a subgraph), one more thread whose runs carry `user_id` in their
`configurable` (an owner the format-6 thread index takes from its metadata), and Store
items under that user's namespaces. Written by threadloom at commit 6569c67 (the last
commit writing format 5), from a checkout of that commit: `THREADLOOM_BACKEND=python
PYTHONPATH=src python tests/data/format5/make.py OUTDIR`. The upgrade test opens the file
with the current threadloom, compares its documents with the dump and checks the thread
index the migration builds.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import ormsgpack
import zstandard
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver, Store

_SPEC = importlib.util.spec_from_file_location(
    "format3_make", Path(__file__).resolve().parents[1] / "format3" / "make.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_THREADS = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_THREADS)


def write(path: Path) -> None:
    _THREADS.write(path)
    with Saver.from_conn_string(str(path)) as saver:
        parent: dict[str, Any] = {
            "configurable": {"thread_id": "gamma", "checkpoint_ns": "", "user_id": "grace"}
        }
        messages: list[Any] = []
        for step in range(1, 41):
            messages = [
                *messages,
                HumanMessage(
                    content=f"question {step}: " + _THREADS.prose(f"g{step}", 200),
                    id=f"gamma-{step}-h",
                ),
                AIMessage(content=_THREADS.prose(f"g{step}a", 300), id=f"gamma-{step}-a"),
            ]
            made = empty_checkpoint()
            made["id"] = f"1f0d0000-0000-6000-8000-1{step:011d}"
            made["channel_values"] = {"messages": list(messages)}
            made["channel_versions"] = {"messages": step}
            metadata = {"source": "loop", "step": step, "parents": {}}
            config = {"configurable": {**parent["configurable"]}}
            stored = saver.put(config, made, metadata, {"messages": step})
            parent = {"configurable": {**stored["configurable"], "user_id": "grace"}}
        documents = saver.documents()
    with Store.from_conn_string(path) as store:
        store.put(("grace", "facts"), "tea", {"text": "likes green tea"})
        store.put(("grace", "profile"), "profile", {"name": "Grace"})
        store.put(("ada", "facts"), "chess", {"text": "plays chess"})
    (path.parent / "documents.msgpack.zst").write_bytes(
        zstandard.ZstdCompressor(level=19).compress(ormsgpack.packb(documents))
    )


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "format5.db")
