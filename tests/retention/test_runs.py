"""Retention runs: the dry run, the report, idle threads deleted whole, the thread list,
and the async twin."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.conversations._index import check_all
from tests.conversations.test_leases import holder
from tests.engine.test_graphs import agent_graph, thread
from tests.retention._helpers import age, assert_no_orphans, counts, file_state
from threadloom import AsyncSaver, Saver
from threadloom.engine.checks.verify import verify
from threadloom.langgraph.retention import RetentionPolicy

REPORT_KEYS = [
    "mode",
    "target",
    "keep_last",
    "min_age",
    "max_age",
    "threads",
    "kept",
    "checkpoints",
    "writes",
    "values",
    "bytes",
    "blocks",
    "waiting",
    "expired_threads",
    "expired_omitted",
    "pruned",
    "pruned_omitted",
    "damaged",
    "unreadable",
]
#: naas's per-thread RetentionReport (SPEC §6.2, §8.2), then threadloom's `bytes`.
PRUNED_KEYS = [
    "thread_id",
    "keep_last",
    "applied",
    "kept",
    "checkpoints",
    "writes",
    "values",
    "bytes",
]


def chat(saver: Saver, *names: str, turns: int = 2) -> None:
    graph = agent_graph().compile(checkpointer=saver)
    for name in names:
        for turn in range(turns):
            graph.invoke(
                {"messages": [HumanMessage(f"what is {turn}?", id=f"h{turn}")]}, thread(name)
            )


def test_a_dry_run_decides_the_same_and_changes_nothing(tmp_path: Path) -> None:
    """The dry run's report equals the applied run's but for its mode, and the file (and
    its WAL) keep every byte."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        chat(saver, "a", "b")
        age(saver)
        before = file_state(path)
        dry = saver.apply_retention(RetentionPolicy(keep_last=3), apply=False)
        assert file_state(path) == before
        applied = saver.apply_retention(RetentionPolicy(keep_last=3))
    dry_json, applied_json = dry.as_json(), applied.as_json()
    assert (dry_json.pop("mode"), applied_json.pop("mode")) == ("dry-run", "applied")
    assert {p.pop("applied") for p in dry_json["pruned"]} == {False}
    assert {p.pop("applied") for p in applied_json["pruned"]} == {True}
    assert dry_json == applied_json
    assert applied.checkpoints > 0 and applied.values > 0 and applied.bytes > 0


def test_the_report_has_naas_shape_and_adds_up(tmp_path: Path) -> None:
    """The JSON has naas's prune-memory fields (plus bytes, blocks, waiting, expiry,
    damaged) in order; totals are the sums of the per-thread entries and of the rows
    that went; bytes is what the thread index lost."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", "b", "c")
        age(saver)
        rows = counts(saver)
        size = sum(saver.thread(t).bytes for t in "abc")
        report = saver.apply_retention(RetentionPolicy(keep_last=2)).as_json()
        assert list(report) == REPORT_KEYS
        assert report["target"] == {
            "namespace": "naas_abi_core.services.agent",
            "agent_id": "engine.v1",
        }
        assert (report["keep_last"], report["min_age"], report["max_age"]) == (2, 60.0, None)
        assert report["threads"] == 3 and report["kept"] == 6
        assert [p["thread_id"] for p in report["pruned"]] == ["a", "b", "c"]
        assert list(report["pruned"][0]) == PRUNED_KEYS  # SPEC §6.2 RetentionReport, + bytes
        assert {(p["keep_last"], p["applied"]) for p in report["pruned"]} == {(2, True)}
        for key in ("kept", "checkpoints", "writes", "values", "bytes"):
            assert report[key] == sum(p[key] for p in report["pruned"])
        after = counts(saver)
        assert report["checkpoints"] == rows["checkpoints"] - after["checkpoints"]
        assert report["writes"] == rows["writes"] - after["writes"]
        assert report["values"] == rows["vals"] - after["vals"]
        assert report["bytes"] == size - sum(saver.thread(t).bytes for t in "abc")
        check_all(saver)


def test_a_second_run_finds_nothing_more(tmp_path: Path) -> None:
    """Retention is idempotent: a second run with the same policy deletes nothing."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a")
        age(saver)
        saver.apply_retention(RetentionPolicy(keep_last=2))
        again = saver.apply_retention(RetentionPolicy(keep_last=2))
        assert (again.checkpoints, again.writes, again.values, again.pruned) == (0, 0, 0, [])
        assert again.kept == 2


def test_idle_threads_are_deleted_whole(tmp_path: Path) -> None:
    """With max_age, a thread whose last write is older goes whole (rows, index row,
    blocks), the others are pruned as usual; the file stays sound."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "old", "new")
        idle_since = time.time() - 40 * 86400
        with saver.file.write() as conn:  # the thread's last write, 40 days ago
            conn.execute("UPDATE threads SET updated_at = ? WHERE thread_id = 'old'", (idle_since,))
        rows = counts(saver)
        size = saver.thread("old").bytes
        report = saver.apply_retention(RetentionPolicy(keep_last=3, max_age=30 * 86400))
        assert [e.thread_id for e in report.expired] == ["old"]
        assert report.expired[0].updated_at == datetime.fromtimestamp(idle_since, timezone.utc)
        expired = report.as_json()["expired_threads"][0]
        assert expired["bytes"] == size and expired["updated_at"].startswith(
            time.strftime("%Y-%m-%d", time.gmtime(idle_since))
        )
        assert saver.thread("old") is None and list(saver.list(thread("old"))) == []
        assert saver.documents("old") == []
        assert [p.thread_id for p in report.pruned] == ["new"]
        assert report.checkpoints == rows["checkpoints"] - counts(saver)["checkpoints"]
        assert report.values == rows["vals"] - counts(saver)["vals"]
        assert verify(saver.file).sound
        check_all(saver)


def test_a_thread_a_run_holds_is_not_idle(tmp_path: Path) -> None:
    """A thread whose lease a run holds is not deleted for being idle (it is pruned as
    usual); once the lease is given back, it is."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", turns=1)
        age(saver)  # written an hour ago: past the grace, idle a week from now
        policy = RetentionPolicy(keep_last=2, max_age=86400)
        week = time.time() + 7 * 86400
        with saver.lease("a", ttl=3600, renew=False):  # live in real time
            held = saver.apply_retention(policy, now=week)
            assert held.expired == [] and [p.thread_id for p in held.pruned] == ["a"]
        assert [e.thread_id for e in saver.apply_retention(policy, now=week).expired] == ["a"]


def test_a_lease_whose_holder_is_gone_does_not_keep_a_thread(tmp_path: Path) -> None:
    """A lease held by another live process keeps the thread from expiring; once that
    process is killed (its lease not run out yet) the thread is idle again, as it is free
    for a new lease (`engine/conversations/leases.py`)."""
    path = tmp_path / "memory.db"
    with Saver.from_conn_string(str(path)) as saver:
        chat(saver, "a", turns=1)
        age(saver)
    policy = RetentionPolicy(keep_last=2, max_age=86400)
    week = time.time() + 7 * 86400
    child = holder(path, "a", ttl=3600)
    try:
        with Saver.from_conn_string(str(path)) as saver:
            assert saver.apply_retention(policy, apply=False, now=week).expired == []
            child.kill()
            child.wait()
            assert [e.thread_id for e in saver.apply_retention(policy, now=week).expired] == ["a"]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_the_clock_can_be_given(tmp_path: Path) -> None:
    """`now` moves max_age: two threads written an hour ago are idle past max_age (a day)
    a week from now, and a dry run at that time says so without deleting them."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", "b", turns=1)
        age(saver)
        week = time.time() + 7 * 86400
        policy = RetentionPolicy(keep_last=None, max_age=86400)
        assert saver.apply_retention(policy).expired == []
        dry = saver.apply_retention(policy, apply=False, now=week)
        assert [e.thread_id for e in dry.expired] == ["a", "b"]
        assert saver.thread("a") is not None
        assert len(saver.apply_retention(policy, now=week).expired) == 2
        assert saver.threads() == []


def test_a_thread_written_within_the_grace_is_never_idle(tmp_path: Path) -> None:
    """On the real clock, a thread whose last write is younger than the grace is not
    deleted, however short max_age is and however far ahead `now` is (a value written a
    moment ago may be about to be referenced); once past the grace (here 0.5 s) it goes."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", turns=1)
        documents = len(saver.documents("a"))
        time.sleep(1.2)  # older than max_age, younger than the grace (60 s)
        short = RetentionPolicy(keep_last=None, max_age=1, min_age=0)
        assert saver.apply_retention(short).expired == []
        day = RetentionPolicy(keep_last=None, max_age=86400)
        assert saver.apply_retention(day, now=time.time() + 7 * 86400).expired == []
        assert saver.thread("a") is not None and len(saver.documents("a")) == documents
        saver.checkpoints.grace = 0.5
        assert [e.thread_id for e in saver.apply_retention(short).expired] == ["a"]
        assert saver.thread("a") is None and saver.documents("a") == []


def test_a_prune_is_not_activity(tmp_path: Path) -> None:
    """Retention leaves each kept thread's last activity and message count as they were,
    so a thread pruned every day still expires."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a")
        age(saver)
        info = saver.thread("a")
        saver.apply_retention(RetentionPolicy(keep_last=1))
        after = saver.thread("a")
        assert after is not None and info is not None
        assert (after.updated_at, after.messages, after.title) == (
            info.updated_at,
            info.messages,
            info.title,
        )
        assert after.checkpoints == 1 and after.bytes < info.bytes


def test_threads_narrow_the_run(tmp_path: Path) -> None:
    """`threads` prunes only the named threads; an unknown id is no error."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", "b")
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1), ["b", "nope"])
        assert report.threads == 1 and [p.thread_id for p in report.pruned] == ["b"]
        assert len(list(saver.list(thread("a")))) > 1
        assert len(list(saver.list(thread("b")))) == 1


def test_the_report_lists_at_most_200_threads(tmp_path: Path) -> None:
    """Past 200 pruned threads, the rest are counted in pruned_omitted (naas's job does
    the same); the totals still count them all."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        for n in range(203):
            parent: dict[str, Any] = {"thread_id": f"t{n:03d}", "checkpoint_ns": ""}
            for step in range(2):
                checkpoint = empty_checkpoint()
                checkpoint["id"] = f"1ef{step:029d}"
                config = saver.put({"configurable": parent}, checkpoint, {"step": step}, {})
                parent = dict(config["configurable"])
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=1)).as_json()
    assert len(report["pruned"]) == 200 and report["pruned_omitted"] == 3
    assert report["checkpoints"] == 203 and report["threads"] == 203


def test_the_async_twin_runs_on_a_worker_thread(tmp_path: Path) -> None:
    """aapply_retention on an AsyncSaver prunes as apply_retention does."""

    async def scenario() -> Any:
        async with AsyncSaver.from_conn_string(str(tmp_path / "async.db")) as saver:
            graph = agent_graph().compile(checkpointer=saver)
            await graph.ainvoke({"messages": [HumanMessage("what is 6 x 2?", id="h")]}, thread())
            age(saver)
            report = await saver.aapply_retention(RetentionPolicy(keep_last=2))
            left = [t async for t in saver.alist(thread())]
            return report, len(left)

    report, left = asyncio.run(scenario())
    assert left == 2 and report.kept == 2 and report.checkpoints > 0


def test_threads_holding_only_values_lose_them(tmp_path: Path) -> None:
    """A thread holding value documents that no checkpoint references (a document-service
    client that stopped halfway) keeps none past the grace."""
    with Saver.from_conn_string(str(tmp_path / "memory.db")) as saver:
        chat(saver, "a", turns=1)
        documents = [(c, d) for c, _, d in saver.documents("a") if "ref" in d]
        saver.checkpoints.view.import_documents(
            (c, {**d, "thread_id": "halfway"}) for c, d in documents
        )
        assert saver.documents("halfway")
        age(saver)
        report = saver.apply_retention(RetentionPolicy(keep_last=5))
        assert saver.documents("halfway") == []
        assert report.values == len(documents)
        assert_no_orphans(saver, "a")
