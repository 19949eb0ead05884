"""Processes racing to create the same file all succeed; `":memory:"` works or is refused clearly.

Every round starts N processes (multiprocessing 'fork') at a barrier, each opening a path
that does not exist yet and putting one checkpoint; the round holds when every process
reports no error and the file then holds every process's checkpoint.
"""

from __future__ import annotations

import multiprocessing
import threading
import traceback
from pathlib import Path
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from threadloom import Saver
from threadloom.errors import ThreadloomError

ROUNDS, PROCESSES = 50, 8


def _open_and_put(path: str, name: str, barrier: Any, errors: Any) -> None:
    try:
        barrier.wait(timeout=30)
        with Saver.from_conn_string(path) as saver:
            config = {"configurable": {"thread_id": name, "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": 0}, {})
    except BaseException:
        errors.put(f"{name}: {traceback.format_exc()}")


def _round(path: Path) -> list[str]:
    context = multiprocessing.get_context("fork")
    barrier, errors = context.Barrier(PROCESSES), context.Queue()
    names = [f"p{i}" for i in range(PROCESSES)]
    workers = [
        context.Process(target=_open_and_put, args=(str(path), name, barrier, errors))
        for name in names
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    found = [f"exit {w.exitcode}" for w in workers if w.exitcode != 0]
    while not errors.empty():
        found.append(errors.get())
    if not found:
        with Saver.from_conn_string(str(path)) as saver:
            stored = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
        found += [f"{name}: its checkpoint is missing" for name in names if name not in stored]
    return found


def test_racing_first_opens(tmp_path: Path) -> None:
    """400 processes (50 rounds of 8) creating the same new file at once all succeed."""
    failed = {}
    for i in range(ROUNDS):
        found = _round(tmp_path / f"race-{i}.db")
        if found:
            failed[i] = found
    detail = "\n".join(f"round {i}: {lines[0][-800:]}" for i, lines in list(failed.items())[:3])
    assert not failed, f"{len(failed)} of {ROUNDS} rounds failed:\n{detail}"


def test_memory_path() -> None:
    """`":memory:"` either serves every thread of the process or is refused with what to do."""
    try:
        saver = Saver(":memory:")
    except ThreadloomError as exc:
        message = str(exc)
        assert ":memory:" in message and "; " in message, message  # what, then what to do
        assert "path" in message, message
        return
    try:
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saver.put(config, empty_checkpoint(), {"source": "input", "step": 0}, {})
        seen: list[Any] = []
        other = threading.Thread(target=lambda: seen.append(saver.get_tuple(config)))
        other.start()
        other.join()
        assert seen and seen[0] is not None, "a second thread does not see the first's put"
    finally:
        saver.close()
