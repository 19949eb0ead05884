"""Run leases: one holder per thread across threads and processes; refused at once."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.graph import START, MessagesState, StateGraph

from threadloom import AsyncSaver, LeaseLostError, Saver, ThreadBusyError
from threadloom.errors import InvalidArgumentError, ReadOnlyError

ROOT = Path(__file__).resolve().parents[2]


def holder(path: Path, thread_id: str, ttl: float = 30.0) -> subprocess.Popen[bytes]:
    """Another process that takes the thread's lease, says so, and sleeps holding it."""
    code = (
        "import sys, time\n"
        "from threadloom import Saver\n"
        "saver = Saver(sys.argv[1])\n"
        "lease = saver.lease(sys.argv[2], ttl=float(sys.argv[3])).acquire()\n"
        "print('held', flush=True)\n"
        "time.sleep(600)\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code, str(path), thread_id, str(ttl)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert child.stdout is not None and child.stdout.readline().strip() == b"held"
    return child


def test_a_second_holder_is_refused_at_once_and_the_first_release_frees_it(
    tmp_path: Path,
) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        with saver.lease("t") as lease:
            assert lease.expires_at is not None and lease.expires_at.tzinfo is timezone.utc
            assert lease.expires_at.timestamp() > time.time() + 50
            started = time.monotonic()
            with pytest.raises(ThreadBusyError, match="busy") as caught:
                saver.lease("t").acquire()
            assert time.monotonic() - started < 2  # not a wait for the lease to run out
            assert caught.value.thread_id == "t" and caught.value.pid == os.getpid()
            assert caught.value.expires_at == lease.expires_at
            with saver.lease("other"):  # another thread is free
                pass
        with saver.lease("t"):  # released on exit
            pass


def test_threads_of_one_process_race_and_exactly_one_wins(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        barrier = threading.Barrier(8)
        won: list[Any] = []
        refused: list[Exception] = []

        def take() -> None:
            barrier.wait()
            try:
                won.append(saver.lease("t", renew=False).acquire())
            except ThreadBusyError as exc:
                refused.append(exc)

        workers = [threading.Thread(target=take) for _ in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert (len(won), len(refused)) == (1, 7)
        won[0].release()


def test_another_process_holding_the_lease_is_respected_until_it_is_killed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "m.db"
    Saver(str(path)).close()
    child = holder(path, "t")
    try:
        with Saver.from_conn_string(str(path)) as saver:
            with pytest.raises(ThreadBusyError) as caught:
                saver.lease("t").acquire()
            assert caught.value.pid == child.pid
            child.send_signal(signal.SIGKILL)
            child.wait()
            # The holder's process is gone: its lease no longer counts, well before the ttl.
            with saver.lease("t") as lease:
                assert lease.held is not None and lease.held.pid == os.getpid()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_killed_holder_not_yet_collected_is_gone_too(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    Saver(str(path)).close()
    child = holder(path, "t")
    child.send_signal(signal.SIGKILL)
    deadline = time.monotonic() + 5
    while (
        Path(f"/proc/{child.pid}/stat").exists()
        and b") Z" not in Path(f"/proc/{child.pid}/stat").read_bytes()
    ):
        assert time.monotonic() < deadline
        time.sleep(0.01)
    try:
        with Saver.from_conn_string(str(path)) as saver, saver.lease("t"):
            pass
    finally:
        child.wait()


def test_a_lease_runs_out_without_renewal_and_renewal_keeps_it(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        stale = saver.lease("t", ttl=1, renew=False).acquire()
        kept = saver.lease("k", ttl=1).acquire()
        time.sleep(1.5)
        with saver.lease("t", ttl=5):  # the first one ran out: taken over
            pass
        with pytest.raises(ThreadBusyError):  # renewed in the background
            saver.lease("k").acquire()
        kept.release()
        with pytest.raises(LeaseLostError):
            stale.renew()
        assert stale.lost


def test_leaving_the_block_after_losing_the_lease_raises(tmp_path: Path) -> None:
    with (
        Saver.from_conn_string(str(tmp_path / "m.db")) as saver,
        pytest.raises(LeaseLostError, match="lost"),
        saver.lease("t", ttl=0.2, renew=False),
    ):
        time.sleep(0.4)
        saver.lease("t").acquire()  # another run takes the expired lease


def slow_graph(started: threading.Event, go: threading.Event) -> Any:
    def node(state: MessagesState) -> dict[str, Any]:
        started.set()
        assert go.wait(10)
        return {"messages": [("ai", "done")]}

    graph = StateGraph(MessagesState)
    graph.add_node("n", node)
    graph.add_edge(START, "n")
    return graph


def test_run_refuses_a_second_run_while_the_first_is_in_flight(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        started, go = threading.Event(), threading.Event()
        graph = slow_graph(started, go).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "t"}}
        first: list[Any] = []
        runner = threading.Thread(
            target=lambda: first.append(saver.run(graph, {"messages": [HumanMessage("a")]}, config))
        )
        runner.start()
        assert started.wait(10)
        with pytest.raises(ThreadBusyError):
            saver.run(graph, {"messages": [HumanMessage("b")]}, config)
        go.set()
        runner.join()
        assert first[0]["messages"][-1].content == "done"
        assert saver.messages("t").total == 2  # the refused run wrote nothing
        with pytest.raises(InvalidArgumentError, match="thread_id"):
            saver.run(graph, {}, {"configurable": {}})


def test_async_leases_and_arun(tmp_path: Path) -> None:
    async def main() -> None:
        async with AsyncSaver.from_conn_string(str(tmp_path / "m.db")) as saver:
            async with saver.lease("t"):
                with pytest.raises(ThreadBusyError):
                    async with saver.lease("t"):
                        pass
            started, go = threading.Event(), threading.Event()
            go.set()
            graph = slow_graph(started, go).compile(checkpointer=saver)
            out = await saver.arun(graph, {"messages": []}, {"configurable": {"thread_id": "t"}})
            assert out["messages"][-1].content == "done"

    asyncio.run(main())


def test_a_read_only_file_takes_no_lease_and_bad_ttls_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    Saver(str(path)).close()
    with Saver.from_conn_string(str(path), readonly=True) as saver, pytest.raises(ReadOnlyError):
        saver.lease("t").acquire()
    with Saver.from_conn_string(str(path)) as saver:
        for ttl in (0, -1, True, 10**9):
            with pytest.raises(InvalidArgumentError, match="ttl"):
                saver.lease("t", ttl=ttl).acquire()
        with pytest.raises(InvalidArgumentError, match="thread_id"):
            saver.lease("").acquire()


def test_a_request_cancelled_while_taking_the_lease_gives_it_back(tmp_path: Path) -> None:
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        gate = threading.Event()

        def hold_the_write_lock() -> None:
            with saver.file.write():
                gate.set()
                time.sleep(0.5)

        blocker = threading.Thread(target=hold_the_write_lock)
        blocker.start()
        assert gate.wait(5)

        async def handler() -> None:
            async with saver.lease("t", ttl=30):
                await asyncio.sleep(0)

        async def main() -> None:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(handler(), timeout=0.1)  # the client went away
            await asyncio.sleep(1.0)  # the take finished meanwhile, and was given back
            async with saver.lease("t", ttl=5):
                pass

        asyncio.run(main())
        blocker.join()


def test_a_lease_dropped_without_release_stops_renewing_and_runs_out(tmp_path: Path) -> None:
    import gc

    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        saver.lease("t", ttl=0.3).acquire()  # never released, never referenced again
        gc.collect()
        time.sleep(0.7)
        with saver.lease("t", renew=False):
            pass
        renewers = [t for t in threading.enumerate() if t.name.startswith("threadloom-lease-")]
        assert renewers == []


def test_a_renewer_stops_when_the_file_closes(tmp_path: Path) -> None:
    saver = Saver(str(tmp_path / "m.db"))
    lease = saver.lease("t", ttl=0.3).acquire()
    saver.close()
    time.sleep(0.4)
    assert not any(t.name == "threadloom-lease-t" for t in threading.enumerate())
    lease.release()  # the file is closed: the lease runs out by itself, no error
