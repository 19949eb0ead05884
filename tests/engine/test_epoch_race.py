"""A put planned from remembered refs while values are deleted never commits references to
them: the write transaction checks the GC epoch the plan was made at
(engine/checkpoints/scope.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from threadloom import Saver
from threadloom.engine.checks.verify import verify
from threadloom.langgraph.retention import RetentionPolicy


class Value(TypedDict):
    x: str


def echo(state: Value) -> dict[str, Any]:
    return {"x": state["x"]}


@pytest.mark.parametrize("who", ["the same saver", "another saver, then a write of this one"])
def test_values_deleted_between_a_plan_and_its_write(tmp_path: Path, who: str) -> None:
    graph = StateGraph(Value)
    graph.add_node("n", echo)
    graph.add_edge(START, "n")
    graph.add_edge("n", END)
    first, second = "A" * 3000, "B" * 3000  # > 1 KiB: value blobs, remembered by ref
    path = str(tmp_path / "m.db")
    config = {"configurable": {"thread_id": "t"}}
    with Saver.from_conn_string(path) as saver, Saver.from_conn_string(path) as other:
        saver.checkpoints.grace = other.checkpoints.grace = 0.0
        app = graph.compile(checkpointer=saver)
        app.invoke({"x": first}, config, durability="sync")
        app.invoke({"x": second}, config, durability="sync")
        planner = saver.checkpoints.scope.planner
        plan = planner.plan_checkpoint
        deleted: list[int] = []

        def plan_then_prune(*args: Any, **kwargs: Any) -> Any:
            made = plan(*args, **kwargs)  # the plan reuses the remembered blob of `first`
            if not deleted:
                pruner = saver if who == "the same saver" else other
                time.sleep(0.01)
                report = pruner.apply_retention(RetentionPolicy(keep_last=1, min_age=0))
                deleted.append(report.values)
                if pruner is other:  # another write of this saver sees the deletion first
                    saver.put_writes(
                        {
                            "configurable": {
                                "thread_id": "u",
                                "checkpoint_ns": "",
                                "checkpoint_id": "1",
                            }
                        },
                        [("x", "y")],
                        "task",
                    )
            return made

        planner.plan_checkpoint = plan_then_prune  # type: ignore[method-assign]
        app.invoke({"x": first}, config, durability="sync")
        assert deleted and deleted[0] > 0  # the blob of `first` went
        report = verify(saver.file)
        assert report.sound, [p.detail for p in report.problems]
        assert app.get_state(config).values == {"x": first}
        assert all(s.values for s in app.get_state_history(config))  # every one loads
