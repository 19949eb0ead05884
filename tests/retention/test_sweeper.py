"""The background sweeper: a policy applied on a schedule, stopped on request or on close,
whose failures are logged and do not stop it."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage

from tests.engine.test_graphs import agent_graph, thread
from threadloom import Saver
from threadloom.errors import InvalidArgumentError, InvalidValueError
from threadloom.langgraph.retention import RetentionPolicy


def wait_for(condition: Any, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_the_sweeper_applies_the_policy_until_stopped(tmp_path: Path) -> None:
    """Started with a short period, it prunes the thread and records its report; stopped,
    its thread ends and a new checkpoint is left alone."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        assert len(list(saver.list(thread()))) > 2
        sweeper = saver.start_retention(RetentionPolicy(keep_last=2), every=0.05)
        assert sweeper.daemon and sweeper.is_alive()
        assert saver.start_retention(RetentionPolicy(keep_last=2), every=0.05) is sweeper
        assert wait_for(lambda: len(list(saver.list(thread()))) == 2)
        assert wait_for(lambda: saver.last_retention is not None)
        assert saver.last_retention is not None and saver.last_retention.applied
        assert saver.stop_retention(timeout=5)
        assert not sweeper.is_alive()
        graph.invoke({"messages": [HumanMessage("and 6 x 3?", id="h2")]}, thread())
        time.sleep(0.2)
        assert len(list(saver.list(thread()))) > 2


def test_close_stops_the_sweeper(tmp_path: Path) -> None:
    """Closing the saver stops its sweeper thread."""
    saver = Saver(str(tmp_path / "memory.db"))
    sweeper = saver.start_retention(RetentionPolicy(keep_last=1), every=3600)
    saver.close()
    assert not sweeper.is_alive()


def test_a_failed_run_is_logged_and_the_next_one_runs(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that raises is logged on threadloom.langgraph.retention; the sweeper goes on and its
    next run prunes."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        graph = agent_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
        real = saver.checkpoints.retention.run
        calls = []

        def flaky(**options: Any) -> Any:
            calls.append(options)
            if len(calls) == 1:
                raise OSError("disk on fire")
            return real(**options)

        monkeypatch.setattr(saver.checkpoints.retention, "run", flaky)
        with caplog.at_level(logging.ERROR, logger="threadloom.langgraph.retention"):
            saver.start_retention(RetentionPolicy(keep_last=1), every=0.05)
            assert wait_for(lambda: len(list(saver.list(thread()))) == 1)
        saver.stop_retention(timeout=5)
        assert len(calls) >= 2
        assert any("retention run failed" in r.getMessage() for r in caplog.records)


def test_bad_schedules_are_refused(tmp_path: Path) -> None:
    """A period that is not a positive number, or a second sweeper with another policy,
    is refused."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        with pytest.raises(InvalidValueError, match="more than 0"):
            saver.start_retention(every=0)
        with pytest.raises(InvalidArgumentError, match="seconds"):
            saver.start_retention(every="1h")
        saver.start_retention(RetentionPolicy(keep_last=5), every=3600)
        with pytest.raises(InvalidValueError, match="stop_retention"):
            saver.start_retention(RetentionPolicy(keep_last=6), every=3600)
        assert saver.stop_retention(timeout=5)
