"""Write `format10.db` and `documents.msgpack.zst`: a file of on-disk format 10 and its documents.

The threads and Store items of `tests/data/format7/make.py` (chat threads, a replaced
special write, an interrupt, a subgraph, a user's thread, Store items, a lease never
released), one thread whose message list grew a step at a time (its tail chunks stored
as deltas, format 10) and one whose value is split in parts (`p-` refs with their
`.N` suffix). Written by threadloom at commit db0ca6e (the last commit writing format
10), from a checkout of that commit: `PYTHONPATH=src python tests/data/format10/make.py
OUTDIR`. The upgrade test (tests/engine/test_refkeys.py) opens the file with the
current threadloom, compares its documents with the dump, reads every thread, the Store
and the lease, verifies the file and writes again.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import apsw
import ormsgpack
import zstandard
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver

_SPEC = importlib.util.spec_from_file_location(
    "format7_make", Path(__file__).resolve().parents[1] / "format7" / "make.py"
)
assert _SPEC is not None and _SPEC.loader is not None
_FORMAT7 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(_FORMAT7)


def _put(saver: Saver, config: dict[str, Any], step: int, values: dict[str, Any]) -> Any:
    made = empty_checkpoint()
    made["id"] = f"1f0d1000-0000-6000-8000-1{step:011d}"
    made["channel_values"] = values
    made["channel_versions"] = {name: step for name in values}
    return saver.put(config, made, {"source": "loop", "step": step, "parents": {}}, {})


def write(path: Path) -> None:
    _FORMAT7.write(path)
    saver = Saver(str(path))
    try:
        config: Any = {"configurable": {"thread_id": "delta", "checkpoint_ns": ""}}
        messages: list[str] = []
        for step in range(1, 41):
            messages = [*messages, f"message {step} of delta: " + "words " * 20]
            config = _put(saver, config, step, {"messages": list(messages)})
        config = {"configurable": {"thread_id": "parts", "checkpoint_ns": ""}}
        big = "".join(f"line {i}: {i * 7919 % 100003}\n" for i in range(16_000))
        _put(saver, config, 1, {"report": big})
        documents = list(saver.documents())
    finally:
        saver.close()
    (path.parent / "documents.msgpack.zst").write_bytes(
        zstandard.ZstdCompressor(level=19).compress(ormsgpack.packb(documents))
    )


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    write(out / "format10.db")
    conn = apsw.Connection(str(out / "format10.db"))
    conn.execute("VACUUM")  # the pages the writes freed: a smaller fixture, same rows
    conn.close()
