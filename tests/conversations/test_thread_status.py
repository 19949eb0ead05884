"""A thread's status in the index: idle, interrupted, running (a live lease) or error.

Real graphs make each state (`interrupt()` in a node, a node that raises, a lease held by
another thread or process); every test also checks the stored status against the rows
(`threadfacts.head_status`, what `verify` checks), so a path that forgets it fails here.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import apsw
import pytest
from langgraph.types import Command

from tests.conversations.test_leases import holder, slow_graph
from tests.engine.test_graphs import failing_fan_graph, review_graph
from threadloom import Saver
from threadloom.engine.checks import verify
from threadloom.engine.file import File
from threadloom.engine.format import features
from threadloom.engine.threads import threadfacts, threadindex
from threadloom.errors import InvalidArgumentError

DRAFT = {"draft": "v1", "verdicts": [], "published": False}


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def status(saver: Saver, thread_id: str) -> str:
    """The thread's status as the index says, after checking the stored one is the rows'."""
    info = saver.thread(thread_id)
    assert info is not None
    with saver.file.read() as conn:
        row = saver.checkpoints.scope.thread(conn, thread_id)
        assert row is not None
        stored = conn.execute("SELECT status FROM threads WHERE id = ?", (row,)).fetchall()
        assert stored[0][0] == threadfacts.head_status(conn, row), thread_id
    return info.status


def fail(saver: Saver, thread_id: str) -> Any:
    """Run the fan graph whose branch `b` fails once; return the compiled graph."""
    graph = failing_fan_graph({"a": 0, "b": 0}, {"b"}).compile(checkpointer=saver)
    with pytest.raises(RuntimeError, match="b failed"):
        graph.invoke({"log": []}, config(thread_id))
    return graph


def test_a_graph_waiting_on_interrupt_is_interrupted_until_resumed_to_its_end(
    tmp_path: Path,
) -> None:
    """`interrupt()` makes the thread interrupted; each resume that interrupts again keeps
    it so, and the resume that finishes the graph makes it idle."""
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph = review_graph().compile(checkpointer=saver)
        graph.invoke(DRAFT, config("r"))
        assert status(saver, "r") == "interrupted"
        graph.invoke(Command(resume="ok"), config("r"))
        assert status(saver, "r") == "interrupted"
        graph.invoke(Command(resume="fine"), config("r"))
        assert status(saver, "r") == "idle"
        assert graph.get_state(config("r")).interrupts == ()


def test_a_node_that_raises_leaves_the_thread_in_error_until_a_run_gets_past_it(
    tmp_path: Path,
) -> None:
    """A failed task's `__error__` write makes the thread error; retrying from there
    (`invoke(None)`) makes it idle."""
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph = fail(saver, "f")
        assert status(saver, "f") == "error"
        assert saver.thread("f").as_json()["status"] == "error"  # type: ignore[union-attr]
        graph.invoke(None, config("f"))
        assert status(saver, "f") == "idle"


def test_an_error_or_interrupt_inside_a_subgraph_shows_on_the_parent_thread(
    tmp_path: Path,
) -> None:
    """A subgraph's failing node and a subgraph's `interrupt()` reach the root checkpoint
    through the parent's task: the thread is error, and interrupted."""
    from typing import TypedDict

    from langgraph.graph import START, StateGraph

    from tests.engine.test_graphs import subgraph_graph

    class Count(TypedDict):
        x: int

    def boom(state: Count) -> dict[str, Any]:
        raise ValueError("inner boom")

    inner = StateGraph(Count)
    inner.add_node("inner", boom)
    inner.add_edge(START, "inner")
    outer = StateGraph(Count)
    outer.add_node("child", inner.compile())
    outer.add_edge(START, "child")
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        with pytest.raises(ValueError, match="inner boom"):
            outer.compile(checkpointer=saver).invoke({"x": 0}, config("s"))
        assert status(saver, "s") == "error"
        assert len(saver.thread("s").namespaces) == 2  # type: ignore[union-attr]
        sub = subgraph_graph().compile(checkpointer=saver)
        sub.invoke({"messages": ["hi"], "notes": [], "done": False}, config("p"))
        assert status(saver, "p") == "interrupted"


def test_a_lease_held_by_another_process_shows_running_until_it_is_killed(
    tmp_path: Path,
) -> None:
    """Another process's live lease makes the thread running (over its stored status);
    once that process dies the stored status shows again."""
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        review_graph().compile(checkpointer=saver).invoke(DRAFT, config("r"))
    child = holder(path, "r")
    try:
        with Saver.from_conn_string(str(path)) as saver:
            assert status(saver, "r") == "running"
            assert [t.thread_id for t in saver.threads(status="running")] == ["r"]
            assert saver.threads(status="interrupted") == []
            os.kill(child.pid, signal.SIGKILL)
            child.wait()
            assert status(saver, "r") == "interrupted"
            assert saver.threads(status="running") == []
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_run_under_a_lease_in_another_thread_is_running_while_in_flight(
    tmp_path: Path,
) -> None:
    """`saver.run` on a worker thread shows the thread running until the run ends."""
    started, go = threading.Event(), threading.Event()
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        graph = slow_graph(started, go).compile(checkpointer=saver)
        worker = threading.Thread(
            target=saver.run, args=(graph, {"messages": []}, config("s")), daemon=True
        )
        worker.start()
        assert started.wait(10)
        try:
            # LangGraph puts the run's first checkpoint in the background (durability
            # "async"): the node may start before the thread has its index row.
            deadline = time.monotonic() + 10
            while saver.thread("s") is None and time.monotonic() < deadline:
                time.sleep(0.01)
            assert saver.thread("s").status == "running"  # type: ignore[union-attr]
        finally:
            go.set()
            worker.join(10)
        assert status(saver, "s") == "idle"


def test_a_page_of_one_status_leaves_the_others_out_and_pages_by_cursor(
    tmp_path: Path,
) -> None:
    """`threads(status=...)` gives exactly the threads of that status, newest first, paged
    by cursor; a running thread is only in the running page; a bad status is refused."""
    with Saver.from_conn_string(str(tmp_path / "m.db")) as saver:
        review = review_graph().compile(checkpointer=saver)
        for name in ("i1", "i2", "i3"):
            review.invoke(DRAFT, config(name))
        fail(saver, "e1")
        review.invoke(DRAFT, config("done"))
        review.invoke(Command(resume="a"), config("done"))
        review.invoke(Command(resume="b"), config("done"))
        assert [t.thread_id for t in saver.threads(status="interrupted")] == ["i3", "i2", "i1"]
        first = saver.threads(status="interrupted", limit=2)
        rest = saver.threads(status="interrupted", limit=2, before=first[-1].cursor)
        assert [t.thread_id for t in first + rest] == ["i3", "i2", "i1"]
        assert [t.thread_id for t in saver.threads(status="error")] == ["e1"]
        assert [t.thread_id for t in saver.threads(status="idle")] == ["done"]
        assert saver.threads(status="running") == []
        with saver.lease("i2"):
            assert [t.thread_id for t in saver.threads(status="running")] == ["i2"]
            assert [t.thread_id for t in saver.threads(status="interrupted")] == ["i3", "i1"]
            assert {t.thread_id: t.status for t in saver.threads()}["i2"] == "running"
        assert [t.status for t in saver.threads(status="interrupted", order="created")] == [
            "interrupted"
        ] * 3
        with pytest.raises(InvalidArgumentError, match="status must be one of"):
            saver.threads(status="paused")


def test_a_page_of_one_status_reads_an_index_not_a_scan(tmp_path: Path) -> None:
    """The page query of "interrupted" or "error" reads `threads_by_status` in order (no
    sort), also after a cursor and with running threads to leave out; one of "running"
    looks its threads up by id (the unique index), for pages and text searches."""
    from threadloom.engine.threads.threadindex import BY_ID, page_query

    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        review_graph().compile(checkpointer=saver).invoke(DRAFT, config("seed"))
    conn = apsw.Connection(str(path))

    def plan(sql: str, args: Sequence[Any]) -> str:
        found = conn.execute("EXPLAIN QUERY PLAN " + sql, (*args, 20)).fetchall()
        return " ".join(str(row[-1]) for row in found)

    for state in ("interrupted", "error"):
        for after in (None, (1e12, 5)):
            for running in (frozenset(), frozenset({"x"})):
                sql, args = page_query(1, None, "updated", after, status=state, running=running)
                text = plan(sql, args)
                assert "INDEX threads_by_status (scope=? AND status=?" in text, text
                assert "TEMP B-TREE" not in text, text
    for owner in (None, "ada"):
        for order in ("updated", "created"):
            sql, args = page_query(1, owner, order, None, status="running", running={"x"})
            assert f"INDEX {BY_ID} (scope=? AND thread_id=?)" in plan(sql, args)
    with Saver.from_conn_string(str(path)) as saver:
        review_graph().compile(checkpointer=saver).invoke(DRAFT, config("r"))
        with saver.lease("r"), saver.file.read() as read:
            scope = saver.checkpoints.scope.id
            assert scope is not None
            found = threadindex.matching(read, scope, "r", status="running")
            assert [(t.thread_id, t.status) for t in found] == [("r", "running")]
            assert threadindex.matching(read, scope, "r", status="interrupted") == []


def test_delete_prune_copy_and_import_keep_the_status(tmp_path: Path) -> None:
    """Copying, pruning, deleting the run whose head holds the interrupt (the head moves
    back to a finished run's) and importing the documents into another file each leave
    the status the rows say."""

    def run(input: Any, run_id: str) -> None:
        graph.invoke(input, {"configurable": {"thread_id": "r", "run_id": run_id}})

    with Saver.from_conn_string(str(tmp_path / "a.db")) as saver:
        saver.checkpoints.grace = 0
        graph = review_graph().compile(checkpointer=saver)
        run(DRAFT, "run-0")
        run(Command(resume="a"), "run-0")
        run(Command(resume="b"), "run-0")
        assert status(saver, "r") == "idle"
        run(DRAFT, "run-1")
        assert status(saver, "r") == "interrupted"
        saver.copy_thread("r", "r-copy")
        assert status(saver, "r-copy") == "interrupted"
        saver.prune(["r-copy"])
        assert status(saver, "r-copy") == "interrupted"
        saver.delete_for_runs(["run-1"])
        assert status(saver, "r") == "idle"
        fail(saver, "f")
        documents = [(c, d) for c, _, d in saver.documents("f")]
    with Saver.from_conn_string(str(tmp_path / "b.db")) as target:
        target.checkpoints.view.import_documents(documents)
        assert status(target, "f") == "error"


def test_an_older_file_gets_every_threads_status_at_the_upgrade(tmp_path: Path) -> None:
    """A format-6 file (no status) is upgraded on open: interrupted, failed and finished
    threads get their status from their rows, and later writes keep it."""
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        graph = review_graph().compile(checkpointer=saver)
        graph.invoke(DRAFT, config("r"))
        fail(saver, "f")
        graph.invoke(DRAFT, config("done"))
        graph.invoke(Command(resume="a"), config("done"))
        graph.invoke(Command(resume="b"), config("done"))
    file = File.open(str(path))  # a format-6 file has every table: make them all first
    with file.write() as conn:
        for feature in features.ALL:
            file.ensure(conn, feature)
    file.close()
    raw = apsw.Connection(str(path))
    for trigger in ("checkpoint_insert", "checkpoint_delete", "write_insert", "write_update"):
        raw.execute(f"DROP TRIGGER status_{trigger}")
    raw.execute("DROP TRIGGER status_write_delete; DROP INDEX threads_by_status")
    # What format 8 added goes too.
    raw.execute(
        "DROP TRIGGER server_records_thread_delete; DROP TABLE server_records; "
        "DROP TABLE sync_peers; DROP TABLE sync_threads; DROP TABLE store_embedded; "
        "DROP TRIGGER store_embedded_delete; "
        "DELETE FROM meta WHERE key = 'file_kind'"
    )
    raw.execute("DROP TABLE store_codes")  # and what FORMAT_9 added
    raw.execute("ALTER TABLE threads DROP COLUMN status; PRAGMA user_version = 6")
    raw.close()
    with Saver.from_conn_string(str(path)) as saver:
        assert {t.thread_id: t.status for t in saver.threads()} == {
            "r": "interrupted",
            "f": "error",
            "done": "idle",
        }
        review_graph().compile(checkpointer=saver).invoke(Command(resume="x"), config("r"))
        assert status(saver, "r") == "interrupted"


def test_verify_reports_a_status_the_index_got_wrong(tmp_path: Path) -> None:
    """A stored status that is not what the head's writes say is a problem of `verify`."""
    path = tmp_path / "m.db"
    with Saver.from_conn_string(str(path)) as saver:
        fail(saver, "f")
        assert verify(saver.file).sound
        with saver.file.write() as conn:
            conn.execute("UPDATE threads SET status = 'idle' WHERE thread_id = 'f'")
        found = verify(saver.file)
    assert not found.sound
    assert any("the index says the thread is idle" in str(p) for p in found.problems)
    assert any("says error" in str(p) for p in found.problems)


def test_the_async_saver_pages_by_status_too(tmp_path: Path) -> None:
    """`athreads(status=...)` gives what `threads(status=...)` gives."""
    import asyncio

    from threadloom import AsyncSaver

    async def main() -> None:
        async with AsyncSaver.from_conn_string(str(tmp_path / "m.db")) as saver:
            graph = review_graph().compile(checkpointer=saver)
            await graph.ainvoke(DRAFT, config("r"))
            found = await saver.athreads(status="interrupted")
            assert [(t.thread_id, t.status) for t in found] == [("r", "interrupted")]
            assert await saver.athreads(status="error") == []

    asyncio.run(main())
