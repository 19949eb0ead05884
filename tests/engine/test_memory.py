"""What the engine remembers between puts stays true when other savers delete values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver


def _checkpoint(n: int, messages: list[str], version: int | None = None) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["id"] = f"1f0b0000-0000-6000-8000-{n:012d}"
    checkpoint["channel_values"] = {"messages": messages}
    checkpoint["channel_versions"] = {"messages": n if version is None else version}
    return checkpoint


def _put(
    saver: Saver, config: dict[str, Any], n: int, messages: list[str], version: int | None = None
) -> dict[str, Any]:
    checkpoint = _checkpoint(n, messages, version)
    return saver.put(config, checkpoint, {"step": n}, {})  # type: ignore[arg-type]


def test_a_put_after_another_saver_deleted_the_thread_writes_every_value(db_path: Path) -> None:
    """Refs remembered before another saver deleted them are written again, never assumed."""
    messages = [f"message {i} " * 40 for i in range(40)]
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with (
        Saver.from_conn_string(str(db_path)) as first,
        Saver.from_conn_string(str(db_path)) as other,
    ):
        parent = _put(first, root, 1, messages)
        other.delete_thread("t")
        child = _put(first, parent, 2, [*messages, "one more"])
        loaded = first.get_tuple(child)
        assert loaded is not None
        assert loaded.checkpoint["channel_values"]["messages"] == [*messages, "one more"]
    with Saver.from_conn_string(str(db_path)) as fresh:
        again = fresh.get_tuple(child)
        assert again is not None
        assert again.checkpoint["channel_values"]["messages"][-1] == "one more"


def test_a_put_after_another_saver_pruned_reuses_only_live_values(db_path: Path) -> None:
    """A saver that remembers a parent pruned elsewhere does not reuse its collected values."""
    root = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    with (
        Saver.from_conn_string(str(db_path)) as first,
        Saver.from_conn_string(str(db_path)) as other,
    ):
        config = root
        history = []
        for n in range(1, 6):
            history = [*history, f"turn {n} " * 200]
            config = _put(first, config, n, list(history))
        old = {
            "configurable": {
                **config["configurable"],
                "checkpoint_id": _checkpoint(2, []).get("id"),
            }
        }
        other.checkpoints.grace = 0.0  # collect at once instead of after 60 s
        other.prune(["t"], strategy="keep_latest")
        # same channel version as the pruned parent: memory alone would reuse its list blob
        same = ["turn 1 " * 200, "turn 2 " * 200]
        child = _put(first, old, 9, same, version=2)
    with Saver.from_conn_string(str(db_path)) as fresh:  # no cache to hide a missing value
        loaded = fresh.get_tuple(child)
        assert loaded is not None
        assert loaded.checkpoint["channel_values"]["messages"] == same
