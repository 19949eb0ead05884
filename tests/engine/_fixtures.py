"""What the format tests share: the files older threadloom versions wrote
(tests/data/formatN), copied and compared by their documents, and a put of channel values."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import ormsgpack
import zstandard
from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver

DATA = Path(__file__).resolve().parents[1] / "data"


def dumped(folder: Path) -> bytes:
    """The documents the fixture's make.py dumped beside its file, as msgpack."""
    found = zstandard.ZstdDecompressor().decompress((folder / "documents.msgpack.zst").read_bytes())
    return ormsgpack.packb(ormsgpack.unpackb(found))


def documents(saver: Saver) -> bytes:
    """Every document `saver` holds, as msgpack in the form `dumped` compares."""
    return ormsgpack.packb([list(d) for d in saver.documents()])


def copied(folder: Path, to: Path) -> Path:
    """A copy of the fixture file in `folder` (`formatN/formatN.db`) at `to`/old.db."""
    path = to / "old.db"
    shutil.copy(folder / f"{folder.name}.db", path)
    return path


def put_values(saver: Saver, thread_id: str, values: dict[str, Any], step: int = 1) -> Any:
    """Put a root checkpoint of `thread_id` holding `values`; return its config."""
    config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    made = empty_checkpoint()
    made["channel_values"] = values
    made["channel_versions"] = {name: step for name in values}
    return saver.put(config, made, {"source": "loop", "step": step}, {})  # type: ignore[arg-type]
